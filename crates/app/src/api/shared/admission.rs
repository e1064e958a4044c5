//! The tenant routes' admission: the key checked, then the tenant's quota
//! taken. Apart from the quota's own state ([`super::quota`]), which the
//! API's state holds.

use axum::extract::{FromRequestParts, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::auth::AuthedTenant;
use super::state::ApiState;

/// The tenant routes' middleware: authenticates (401 before anything is
/// shared), then takes a token and a slot (429 if there is none), and
/// hands the authenticated tenant on to the handler.
pub(crate) async fn tenant_quota(
    State(state): State<ApiState>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let tenant = match AuthedTenant::from_request_parts(&mut parts, &state).await {
        Ok(t) => t,
        Err(refused) => return refused,
    };
    let slot = match state.quotas.admit(&state.registrar, &tenant.0).await {
        Ok(slot) => slot,
        Err(over) => return over.into_response(),
    };
    parts.extensions.insert(tenant);
    let response = next.run(Request::from_parts(parts, body)).await;
    drop(slot);
    response
}
