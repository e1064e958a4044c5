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
    /// IPv6 transition addresses that lead to an IPv4 host through a relay
    /// or translator: 6to4 (`2002::/16`), Teredo (`2001::/32`), local-use
    /// NAT64 (`64:ff9b:1::/48`). The relay may be the operator's own, and
    /// the IPv4 host behind it any.
    Transition,
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
            Refused::Transition => "an IPv6 transition address (6to4, Teredo or local-use NAT64)",
        })
    }
}

/// What kind of non-public address `ip` is, if it is one. IPv4-mapped
/// (`::ffff:0:0/96`), IPv4-compatible and well-known NAT64 (`64:ff9b::/96`)
/// forms are judged as the IPv4 address they carry; an IPv6 address outside
/// global unicast (`2000::/3`) is refused.
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
        // The 6to4 relays' anycast (deprecated, RFC 7526): a relay, not a host.
        (192, 88, 99) => Refused::Reserved,
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<Refused> {
    let s = ip.segments();
    let last_32 = || Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    Some(match s[0] {
        _ if ip.is_unspecified() => Refused::Unspecified,
        _ if ip.is_loopback() => Refused::Loopback,
        x if x & 0xfe00 == 0xfc00 => Refused::Private,
        x if x & 0xffc0 == 0xfe80 => Refused::LinkLocal,
        // Site-local (deprecated, fec0::/10): private in practice.
        x if x & 0xffc0 == 0xfec0 => Refused::Private,
        x if x & 0xff00 == 0xff00 => Refused::Multicast,
        // IPv4-compatible (::a.b.c.d, deprecated) and NAT64 (64:ff9b::/96):
        // judged as the IPv4 address they carry.
        0 if s[1..6].iter().all(|x| *x == 0) => return classify_v4(last_32()),
        0x64 if s[1] == 0xff9b && s[2..6].iter().all(|x| *x == 0) => return classify_v4(last_32()),
        // Local-use NAT64 (RFC 8215): a translator of the operator's network.
        0x64 if s[1] == 0xff9b && s[2] == 1 => Refused::Transition,
        // Outside global unicast (2000::/3): ::/8's other forms (SIIT's
        // ::ffff:0:a.b.c.d among them), discard-only 100::/64, unassigned space.
        x if x & 0xe000 != 0x2000 => Refused::Reserved,
        0x2001 if s[1] == 0x0db8 => Refused::Documentation,
        // Teredo (2001::/32): the client's IPv4 address is in it, obfuscated.
        0x2001 if s[1] == 0 => Refused::Transition,
        // The rest of 2001::/23: IETF protocol assignments (benchmarking,
        // ORCHID, anycast services), no tenant's endpoint.
        0x2001 if s[1] < 0x0200 => Refused::Reserved,
        // 6to4 (2002::/16): a relay to the IPv4 address in bits 16–48.
        0x2002 => Refused::Transition,
        0x3fff if s[1] & 0xf000 == 0 => Refused::Documentation,
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

/// The port every tenant endpoint may use: https's.
pub const HTTPS_PORT: u16 = 443;

/// Ports the operator allows tenants' endpoints besides 443 (`8443`,
/// `8000-8999`): a tenant cannot aim requests at another service of a host
/// (SMTP on 25, a database, an admin port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    first: u16,
    last: u16,
}

impl PortRange {
    /// Every port (tests and stand-ins, whose receivers listen on any).
    pub const ALL: PortRange = PortRange {
        first: 1,
        last: u16::MAX,
    };

    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }
}

impl FromStr for PortRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let port = |p: &str| {
            p.trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{p:?} is not a port (1 to 65535)"))
        };
        let (first, last) = match s.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => (port(s)?, port(s)?),
        };
        if first > last {
            return Err(format!("{s:?} is not a range: {first} is above {last}"));
        }
        Ok(PortRange { first, last })
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.first == self.last {
            true => write!(f, "{}", self.first),
            false => write!(f, "{}-{}", self.first, self.last),
        }
    }
}

impl Serialize for PortRange {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PortRange {
    /// A number (`8443`) or a string (`"8443"`, `"8000-8999"`).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Number(u16),
            Text(String),
        }
        match Written::deserialize(d)? {
            Written::Number(p) => p.to_string().parse(),
            Written::Text(s) => s.parse(),
        }
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
    /// Ports allowed besides 443 (`TOKI_WEBHOOK_ALLOW_PORTS`).
    pub ports: Vec<PortRange>,
}

impl EgressPolicy {
    /// Whether a request may go to `ip`; why not if not.
    pub fn admits(&self, ip: IpAddr) -> Result<(), Refused> {
        match classify(ip) {
            Some(kind) if !self.allow.iter().any(|c| c.contains(ip)) => Err(kind),
            _ => Ok(()),
        }
    }

    /// Whether a request may go to `port` (443, or one the operator allows).
    pub fn admits_port(&self, port: u16) -> bool {
        port == HTTPS_PORT || self.ports.iter().any(|r| r.contains(port))
    }

    /// The port a URL's request goes to, if the policy admits it (a URL
    /// without one goes to its scheme's: 443, or 80 for http).
    pub fn port_of(&self, url: &url::Url) -> Result<u16, Option<u16>> {
        match url.port_or_known_default() {
            Some(port) if self.admits_port(port) => Ok(port),
            other => Err(other),
        }
    }

    /// The checks an endpoint can be given when it is set: its scheme, its
    /// port, and its address when the URL names one (a host name is checked
    /// where it resolves, when connecting). The error names `field`.
    pub fn check(&self, field: &str, url: &EndpointUrl) -> Result<(), ValidationError> {
        let parsed = url.parsed();
        if parsed.scheme() == "http" && self.schemes == Schemes::HttpsOnly {
            return Err(ValidationError::new(field, "must be an https URL"));
        }
        if let Err(port) = self.port_of(&parsed) {
            let port = port.map_or("its port".to_owned(), |p| format!("port {p}"));
            return Err(ValidationError::new(
                field,
                format!(
                    "uses {port}; Toki sends to port 443 only, and to ports the operator allows"
                ),
            ));
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
