//! The tenant routes' admission: the key checked, then the tenant's quota
//! taken, and after the handler a write recorded in the audit log
//! ([`super::audit`]). Apart from the quota's own state ([`super::quota`]),
//! which the API's state holds.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::audit::{record_write, write_entries, WriteRequest};
use super::auth::authenticate_request;
use super::state::ApiState;

/// The tenant routes' middleware: authenticates (401 before anything is
/// shared), then takes a token and a slot (429 if there is none), and
/// hands the authenticated tenant on to the handler; a write it answered
/// 2xx is then appended to the tenant's audit log.
pub(crate) async fn tenant_quota(
    State(state): State<ApiState>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let (tenant, key) = match authenticate_request(&mut parts, &state).await {
        Ok(t) => t,
        Err(refused) => return refused,
    };
    let write = WriteRequest::of(&mut parts).await;
    let slot = match state.quotas.admit(&state.registrar, &tenant.0).await {
        Ok(slot) => slot,
        Err(over) => return over.into_response(),
    };
    parts.extensions.insert(tenant.clone());
    let response = next.run(Request::from_parts(parts, body)).await;
    if let Some(write) = write {
        let entries = write_entries(&state, &tenant.0, &key, &write, &response);
        record_write(&state, &tenant.0, entries).await;
    }
    drop(slot);
    response
}
