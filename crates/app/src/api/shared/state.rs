//! What every handler is given ([`ApiState`]), and the header that may
//! carry a tenant's API key.

use std::sync::Arc;

use toki_core::registrar::Registrar;

use super::quota::ApiQuotas;
use super::throttle::AuthThrottle;

/// The header that may carry the tenant's API key instead of `Authorization`.
pub const API_KEY_HEADER: &str = "x-toki-api-key";

#[derive(Clone)]
pub struct ApiState {
    pub registrar: Arc<Registrar>,
    /// Each tenant's share of the API.
    pub quotas: Arc<ApiQuotas>,
    /// Failed authentications per source.
    pub failures: Arc<AuthThrottle>,
}
