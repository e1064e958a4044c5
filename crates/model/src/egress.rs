//! Where Toki may send requests a tenant points it at (SSRF policy): the addresses refused, the operator's exceptions, the URL checks.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::ValidationError;

/// The longest endpoint URL a tenant may store.
pub const MAX_URL_CHARS: usize = 2048;

/// Why an address is refused: what kind of address it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Loopback,
    Private,
    SharedAddressSpace,
    LinkLocal,
    Unspecified,
    Multicast,
    Broadcast,
    Documentation,
    /// Reserved ranges that are no host on the internet (0/8, 240/4, benchmarking, …).
    Reserved,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refused::Loopback => "a loopback address",
            Refused::Private => "a private address",
            Refused::SharedAddressSpace => "a carrier-grade NAT address (100.64.0.0/10)",
            Refused::LinkLocal => "a link-local address (such as cloud metadata)",
            Refused::Unspecified => "the unspecified address",
            Refused::Multicast => "a multicast address",
            Refused::Broadcast => "the broadcast address",
            Refused::Documentation => "a documentation address",
            Refused::Reserved => "a reserved address",
        })
    }
}

/// What kind of non-public address `ip` is, if it is one. IPv4-mapped and
/// NAT64-free IPv4-compatible IPv6 forms are judged as the IPv4 address.
pub fn classify(ip: IpAddr) -> Option<Refused> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => classify_v4(v4),
            None => classify_v6(v6),
        },
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Refused> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip.is_unspecified() => Refused::Unspecified,
        _ if ip.is_broadcast() => Refused::Broadcast,
        (127, _, _) => Refused::Loopback,
        (10, _, _) | (192, 168, _) => Refused::Private,
        (172, b, _) if (16..32).contains(&b) => Refused::Private,
        (100, b, _) if (64..128).contains(&b) => Refused::SharedAddressSpace,
        (169, 254, _) => Refused::LinkLocal,
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => Refused::Documentation,
        (224..=239, _, _) => Refused::Multicast,
        // 0/8 "this network", 192.0.0/24 protocol assignments, 198.18/15
        // benchmarking, 240/4 reserved.
        (0, _, _) | (192, 0, 0) | (240..=255, _, _) => Refused::Reserved,
        (198, 18 | 19, _) => Refused::Reserved,
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<Refused> {
    let s = ip.segments();
    Some(match s[0] {
        _ if ip.is_unspecified() => Refused::Unspecified,
        _ if ip.is_loopback() => Refused::Loopback,
        x if x & 0xfe00 == 0xfc00 => Refused::Private,
        x if x & 0xffc0 == 0xfe80 => Refused::LinkLocal,
        // Site-local (deprecated, fec0::/10): private in practice.
        x if x & 0xffc0 == 0xfec0 => Refused::Private,
        x if x & 0xff00 == 0xff00 => Refused::Multicast,
        0x2001 if s[1] == 0x0db8 => Refused::Documentation,
        0x3fff if s[1] & 0xf000 == 0 => Refused::Documentation,
        // IPv4-compatible (::a.b.c.d, deprecated) and NAT64 (64:ff9b::/96):
        // judged as the IPv4 address they carry.
        0 if s[1..6].iter().all(|x| *x == 0) => {
            return classify_v4(Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7])))
        }
        0x64 if s[1] == 0xff9b && s[2..6].iter().all(|x| *x == 0) => {
            return classify_v4(Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7])))
        }
        _ => return None,
    })
}

/// An address range the operator allows (`127.0.0.1/32`, `fd00::/8`); a bare address is its own /32 or /128.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match (self.network, ip) {
            (IpAddr::V4(_), IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            _ => ip,
        };
        match (self.network, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                masked(u128::from(u32::from(n)), 32, self.prefix)
                    == masked(u128::from(u32::from(a)), 32, self.prefix)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                masked(u128::from(n), 128, self.prefix) == masked(u128::from(a), 128, self.prefix)
            }
            _ => false,
        }
    }
}

fn masked(bits: u128, width: u8, prefix: u8) -> u128 {
    if prefix == 0 {
        return 0;
    }
    bits >> (width - prefix)
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, prefix) = s.trim().split_once('/').unwrap_or((s.trim(), ""));
        let network: IpAddr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IP address"))?;
        let width = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            "" => width,
            p => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= width)
                .ok_or_else(|| format!("{p:?} is not a prefix length of 0 to {width}"))?,
        };
        Ok(Cidr { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// Whether plain http is allowed for tenants' endpoints (tests, stand-ins): https only by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schemes {
    #[default]
    HttpsOnly,
    HttpAllowed,
}

/// The operator's egress policy: public addresses only, but for the ranges allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EgressPolicy {
    /// Ranges allowed although not public (`TOKI_WEBHOOK_ALLOW_ADDRESSES`).
    pub allow: Vec<Cidr>,
    pub schemes: Schemes,
}

impl EgressPolicy {
    /// Whether a request may go to `ip`; why not if not.
    pub fn admits(&self, ip: IpAddr) -> Result<(), Refused> {
        match classify(ip) {
            Some(kind) if !self.allow.iter().any(|c| c.contains(ip)) => Err(kind),
            _ => Ok(()),
        }
    }

    /// The checks an endpoint can be given when it is set: its scheme, and
    /// its address when the URL names one (a host name is checked where it
    /// resolves, when connecting). The error names `field`.
    pub fn check(&self, field: &str, url: &EndpointUrl) -> Result<(), ValidationError> {
        let parsed = url.parsed();
        if parsed.scheme() == "http" && self.schemes == Schemes::HttpsOnly {
            return Err(ValidationError::new(field, "must be an https URL"));
        }
        let ip = match parsed.host() {
            Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
            Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
            _ => return Ok(()),
        };
        self.admits(ip).map_err(|kind| {
            ValidationError::new(
                field,
                format!("is {kind}, which Toki does not send to (SSRF policy)"),
            )
        })
    }
}

/// An endpoint's URL as stored: http(s), a host, no credentials, no fragment, bounded.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EndpointUrl(String);

impl EndpointUrl {
    /// Checks the URL's form; the error names `field`. The bound is on the
    /// value as sent, before the surrounding whitespace is trimmed: the
    /// API's schema states it so.
    pub fn parse(field: &str, s: &str) -> Result<Self, ValidationError> {
        let bad = |problem: &str| ValidationError::new(field, problem);
        if s.chars().count() > MAX_URL_CHARS {
            return Err(bad(&format!("must be at most {MAX_URL_CHARS} characters")));
        }
        let s = s.trim();
        let url = url::Url::parse(s).map_err(|e| bad(&format!("is not a URL ({e})")))?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err(bad("must be an https URL"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(bad("must name a host"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            // Credentials in a URL end up in logs and proxies; the signature authenticates.
            return Err(bad("must not carry a user name or password"));
        }
        if url.fragment().is_some() {
            return Err(bad("must not have a #fragment"));
        }
        Ok(Self(url.into()))
    }

    /// An optional URL: absent, null or blank is none; anything else must
    /// parse (the bound applies to a blank value too).
    pub fn parse_optional(field: &str, s: Option<&str>) -> Result<Option<Self>, ValidationError> {
        match s {
            Some(s) if !s.trim().is_empty() || s.chars().count() > MAX_URL_CHARS => {
                Self::parse(field, s).map(Some)
            }
            _ => Ok(None),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn parsed(&self) -> url::Url {
        url::Url::parse(&self.0).expect("checked when made")
    }

    /// The host (name or address), lowercase: what per-endpoint limits key on.
    pub fn host(&self) -> String {
        self.parsed()
            .host_str()
            .map(|h| {
                h.trim_matches(|c| c == '[' || c == ']')
                    .to_ascii_lowercase()
            })
            .unwrap_or_default()
    }
}

impl TryFrom<String> for EndpointUrl {
    type Error = ValidationError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse("url", &s)
    }
}

impl From<EndpointUrl> for String {
    fn from(u: EndpointUrl) -> String {
        u.0
    }
}

impl fmt::Display for EndpointUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests;
