//! Requests to endpoints tenants choose, under the operator's egress policy: checked where a URL names an address, and where a name resolves (DNS rebinding included).
//!
//! Use [`client_builder`] for every client that posts to a tenant's URL and
//! [`check_url`] before each request (an address in the URL is not resolved,
//! so the resolver never sees it); [`refusal`] tells a refused connection
//! from other failures.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

pub use toki_model::egress::{classify, Cidr, EgressPolicy, EndpointUrl, Refused, Schemes};

/// Why a request to a tenant's endpoint was not made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressRefused {
    #[error("the endpoint's address is {0}, which Toki does not send to (SSRF policy)")]
    Address(Refused),
    #[error(
        "the endpoint's host resolves only to addresses Toki does not send to ({0}; SSRF policy)"
    )]
    Resolved(Refused),
    #[error("the endpoint is http, and this deployment allows https only")]
    Scheme,
}

/// The checks made on a URL before each request: its scheme, and the
/// address it names if it names one.
pub fn check_url(policy: &EgressPolicy, url: &reqwest::Url) -> Result<(), EgressRefused> {
    if url.scheme() != "https" && policy.schemes == Schemes::HttpsOnly {
        return Err(EgressRefused::Scheme);
    }
    let ip = match url.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        _ => return Ok(()),
    };
    policy.admits(ip).map_err(EgressRefused::Address)
}

/// A client for tenants' endpoints: names resolve through the policy (a
/// refused address is dropped; none left, the connection fails with
/// [`EgressRefused::Resolved`]), no redirects are followed (a redirect is a
/// second, unchecked URL), no proxy from the environment (it would resolve
/// the name itself).
pub fn client_builder(
    builder: reqwest::ClientBuilder,
    policy: Arc<EgressPolicy>,
) -> reqwest::ClientBuilder {
    builder
        .dns_resolver(Arc::new(PolicyResolver { policy }))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
}

/// The refusal behind a failed request, if the policy is why it failed.
pub fn refusal(e: &reqwest::Error) -> Option<EgressRefused> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<EgressRefused>() {
            return Some(r.clone());
        }
        source = s.source();
    }
    None
}

/// The system resolver, then the policy on what it found.
struct PolicyResolver {
    policy: Arc<EgressPolicy>,
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let (admitted, refused) = admit(&policy, found);
            match (admitted.is_empty(), refused) {
                (false, _) => Ok(Box::new(admitted.into_iter()) as Addrs),
                (true, Some(kind)) => Err(Box::new(EgressRefused::Resolved(kind)) as _),
                (true, None) => Err(format!("{} resolves to no address", name.as_str()).into()),
            }
        })
    }
}

/// The addresses the policy admits, and the kind of the first it refused.
fn admit(policy: &EgressPolicy, found: Vec<SocketAddr>) -> (Vec<SocketAddr>, Option<Refused>) {
    let mut refused = None;
    let admitted = found
        .into_iter()
        .filter(|a| match policy.admits(a.ip()) {
            Ok(()) => true,
            Err(kind) => {
                refused.get_or_insert(kind);
                false
            }
        })
        .collect();
    (admitted, refused)
}
