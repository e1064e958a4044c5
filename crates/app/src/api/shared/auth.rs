//! Tenant authentication as an extractor: a handler that takes an
//! [`AuthedTenant`] runs only for a request whose bearer key (or
//! `x-toki-api-key`) is its tenant's.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use toki_core::registrar::RegistrarError;
use toki_model::{KeyName, TenantId};

use super::error::{suspended, unauthorized, ApiError, ErrorCode};
use super::state::{ApiState, API_KEY_HEADER};
use super::throttle::Source;
use toki_model::api_key::authenticate;

/// The `{tenant}` of the path, its API key checked: a malformed or unknown
/// tenant and a missing, wrong, expired or revoked key answer 401 (the
/// same, so that tenant ids cannot be probed), a suspended tenant's valid
/// key 403, an unreachable tenant directory 503.
#[derive(Debug, Clone)]
pub(crate) struct AuthedTenant(pub(crate) TenantId);

/// The path's `{tenant}`; its other parameters are the handler's.
#[derive(serde::Deserialize)]
struct TenantParam {
    tenant: String,
}

impl FromRequestParts<ApiState> for AuthedTenant {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Response> {
        // Authenticated already by the quota middleware (the tenant routes').
        if let Some(tenant) = parts.extensions.get::<AuthedTenant>() {
            return Ok(tenant.clone());
        }
        authenticate_request(parts, state)
            .await
            .map(|(tenant, _)| tenant)
    }
}

/// The path's tenant and the name of the key that opened it (see
/// [`AuthedTenant`]). A source past its failures is answered 429 before
/// anything is read; a 401 counts against its source ([`super::throttle`]).
pub(crate) async fn authenticate_request(
    parts: &mut Parts,
    state: &ApiState,
) -> Result<(AuthedTenant, AuthedKey), Response> {
    let source = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| Source::of(*peer));
    if let Some(source) = source {
        state
            .failures
            .check(source)
            .map_err(IntoResponse::into_response)?;
    }
    let Path(TenantParam { tenant }) = Path::from_request_parts(parts, state)
        .await
        .map_err(IntoResponse::into_response)?;
    let authorized = authorize_key(state, &tenant, &parts.headers).await;
    if let (Err(e), Some(source)) = (&authorized, source) {
        if e.status() == StatusCode::UNAUTHORIZED {
            state.failures.failed(source);
        }
    }
    authorized
        .map(|(t, k)| (AuthedTenant(t), AuthedKey(k)))
        .map_err(IntoResponse::into_response)
}

/// The token of `Bearer <token>`; the scheme is case-insensitive (RFC 9110).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The key a request presents: `x-toki-api-key` for callers whose
/// `Authorization` carries something else (behind API Gateway's IAM
/// authoriser it holds the SigV4 signature), else the bearer token.
fn presented_key(headers: &HeaderMap) -> Result<&str, ApiError> {
    headers
        .get(API_KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .or_else(|| {
            headers
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(bearer_token)
        })
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                ErrorCode::Unauthorized,
                "missing Authorization: Bearer <api key> (or x-toki-api-key)",
            )
        })
}

/// Checks the tenant id and its key against the tenant's record, then that
/// the tenant is active (only a key holder learns it is suspended); the
/// name of the key that matched (the audit log's actor).
async fn authorize_key(
    state: &ApiState,
    tenant: &str,
    headers: &HeaderMap,
) -> Result<(TenantId, KeyName), ApiError> {
    let tenant: TenantId = tenant.parse().map_err(|_| unauthorized())?;
    let key = presented_key(headers)?;
    let record = match state.registrar.tenant(&tenant).await {
        Ok(r) => r,
        Err(RegistrarError::UnknownTenant(_)) => return Err(unauthorized()),
        // The directory is down: say so, so clients retry (not "wrong key").
        Err(e) => return Err(e.into()),
    };
    let now = state.registrar.clock.now();
    let Some(matched) = authenticate(&record.api_keys, key.trim(), now) else {
        return Err(unauthorized());
    };
    if !record.active {
        return Err(suspended());
    }
    Ok((tenant, matched.name.clone()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for v in ["Bearer k1", "bearer k1", "BEARER  k1 ", " bEaReR k1"] {
            assert_eq!(super::bearer_token(v), Some("k1"), "{v:?}");
        }
        assert_eq!(super::bearer_token("Basic k1"), None);
        assert_eq!(super::bearer_token("Bearer"), None);
    }
}

/// The name of the key a tenant request was authenticated with (the audit
/// log's actor).
#[derive(Debug, Clone)]
pub(crate) struct AuthedKey(pub(crate) toki_model::KeyName);
