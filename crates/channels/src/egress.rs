//! Requests to endpoints tenants choose, under the operator's egress policy: checked where a URL names an address, and where a name resolves (DNS rebinding included).
//!
//! Use [`client_builder`] for every client that posts to a tenant's URL and
//! [`check_url`] before each request (an address in the URL is not resolved,
//! so the resolver never sees it); [`refusal`] tells a refused connection
//! from other failures.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use tracing::debug;

pub use toki_model::egress::{
    classify, Cidr, EgressPolicy, EndpointUrl, PortRange, Refused, Schemes,
};

/// What a tenant reads when its endpoint's host name led nowhere Toki may
/// send: the same whether the name did not resolve or resolved only to
/// refused addresses, and never which (that would tell how a name resolves
/// inside the operator's network).
pub const NO_ADDRESS: &str =
    "refused by the egress policy: the endpoint's host has no address Toki may send to (SSRF policy)";

/// Why a request to a tenant's endpoint was not made. The text is what the
/// tenant reads (a delivery's reason, an endpoint's `last_error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressRefused {
    /// An address written in the URL: the tenant's own, so its kind is said.
    #[error("the endpoint's address is {0}, which Toki does not send to (SSRF policy)")]
    Address(Refused),
    /// Where the host name resolved: the kind is for the operator's log only.
    #[error("{NO_ADDRESS}")]
    Resolved(Refused),
    #[error("the endpoint is http, and this deployment allows https only")]
    Scheme,
    #[error("refused by the egress policy: the endpoint's port {0} is not 443 or one the operator allows")]
    Port(u16),
}

/// A host name that did not resolve: worded as [`EgressRefused::Resolved`]
/// for the tenant, but not a refusal (DNS may answer later).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{NO_ADDRESS}")]
pub struct Unresolved;

/// The checks made on a URL before each request: its scheme, its port, and
/// the address it names if it names one.
pub fn check_url(policy: &EgressPolicy, url: &reqwest::Url) -> Result<(), EgressRefused> {
    if url.scheme() != "https" && policy.schemes == Schemes::HttpsOnly {
        return Err(EgressRefused::Scheme);
    }
    if let Err(port) = policy.port_of(url) {
        return Err(EgressRefused::Port(port.unwrap_or_default()));
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
/// A refusal of where a name resolved is logged here with its kind, for
/// the operator (never the name: it is the tenant's).
pub fn refusal(e: &reqwest::Error) -> Option<EgressRefused> {
    let refused = find::<EgressRefused>(e)?;
    if let EgressRefused::Resolved(kind) = &refused {
        debug!(%kind, "egress: a tenant's endpoint resolved only to refused addresses");
    }
    Some(refused)
}

/// Whether a request failed because its host name did not resolve.
pub fn unresolved(e: &reqwest::Error) -> bool {
    find::<Unresolved>(e).is_some()
}

fn find<E: std::error::Error + Clone + 'static>(e: &reqwest::Error) -> Option<E> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<E>() {
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
            // The resolver's own error (and the name) stay out of what the
            // tenant reads: it would tell which names exist inside.
            let found: Vec<SocketAddr> = match tokio::net::lookup_host((name.as_str(), 0)).await {
                Ok(found) => found.collect(),
                Err(e) => {
                    debug!(error = %e, "egress: a tenant's endpoint did not resolve");
                    return Err(Box::new(Unresolved) as _);
                }
            };
            let (admitted, refused) = admit(&policy, found);
            match (admitted.is_empty(), refused) {
                (false, _) => Ok(Box::new(admitted.into_iter()) as Addrs),
                (true, Some(kind)) => Err(Box::new(EgressRefused::Resolved(kind)) as _),
                (true, None) => Err(Box::new(Unresolved) as _),
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
