//! The audit log, read-only: `GET /v1/tenants/{tenant}/audit?after=&limit=`.
//! Nothing writes it through the API but the tenant routes' own writes
//! ([`super::shared`]'s admission middleware).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use toki_core::registrar::RegistrarError;
use toki_model::audit::{StoredAuditEntry, MAX_LISTED};
use utoipa::{IntoParams, ToSchema};

use super::shared::{
    bad_query, ApiError, ApiState, AuthedTenant, ErrorBody, SeqPage, TenantErrors, TenantPath,
};

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct AuditQuery {
    /// Entries after this `seq` (0: from the oldest kept).
    #[serde(default)]
    #[param(maximum = 9223372036854775807_u64)]
    after: u64,
    /// At most this many (1 to 1,000; 100 by default).
    #[serde(default)]
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// One write, as the log holds it.
#[derive(Serialize, ToSchema)]
pub(crate) struct AuditEntryView {
    /// Its place in the log, from 1, in order of appending.
    seq: u64,
    #[schema(value_type = String, format = DateTime)]
    at: toki_model::Instant,
    /// `key:<name>` (an API key of the tenant) or `operator:<name>` (the CLI).
    #[schema(example = "key:default")]
    actor: String,
    /// What was done, e.g. `schedule.put`, `user.put`, `contract.set`.
    #[schema(example = "schedule.put")]
    action: String,
    /// The resource's id (absent for tenant-wide writes).
    #[serde(skip_serializing_if = "Option::is_none")]
    resource: Option<String>,
    /// A schedule's version before and after (absent where none).
    #[serde(skip_serializing_if = "Option::is_none")]
    version_before: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    version_after: Option<i64>,
}

impl From<StoredAuditEntry> for AuditEntryView {
    fn from(s: StoredAuditEntry) -> Self {
        let e = s.entry;
        AuditEntryView {
            seq: s.seq,
            at: e.at,
            actor: e.actor.to_string(),
            action: e.action.as_str().to_owned(),
            resource: e.resource,
            version_before: e.version_before,
            version_after: e.version_after,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub(crate) struct AuditPage {
    entries: Vec<AuditEntryView>,
    /// Pass as `after` for the next page (absent at the end).
    #[serde(skip_serializing_if = "Option::is_none")]
    next_after: Option<u64>,
}

/// The tenant's audit log, oldest first: every write made through this API
/// (by key name) or the CLI (by operator). Read-only.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/audit",
    tag = "audit",
    params(TenantPath, AuditQuery),
    responses(
        (status = 200, description = "A page of entries, oldest first", body = AuditPage),
        (status = 400, description = "The query string is not this route's (`field` names the parameter)", body = ErrorBody),
        (status = 422, description = "`limit` is not 1 to 1,000, or `after` is beyond the largest sequence number (`field` names it)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn list_audit(
    State(state): State<ApiState>,
    AuthedTenant(tenant): AuthedTenant,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Json<AuditPage>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let page = SeqPage::checked(q.after, q.limit, MAX_LISTED)?;
    let store = state
        .registrar
        .stores
        .open(&tenant)
        .await
        .map_err(RegistrarError::from)?;
    let entries = store
        .audit_after(page.after, page.limit)
        .await
        .map_err(RegistrarError::from)?;
    let next_after = page.next_after(entries.len(), entries.last().map(|e| e.seq));
    Ok(Json(AuditPage {
        entries: entries.into_iter().map(AuditEntryView::from).collect(),
        next_after,
    }))
}
