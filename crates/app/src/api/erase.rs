//! Erasure of a person: `DELETE /v1/tenants/{tenant}/users/{id}?erase=true`
//! (docs/erasure.md).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use toki_model::erasure::ErasureReport;
use toki_model::{UserId, ValidationError};
use utoipa::{IntoParams, ToSchema};

use super::shared::{
    bad_query, path_id, ApiError, ApiState, AuthedTenant, ErrorBody, IdParam, TenantErrors,
    UserPath,
};

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct EraseQuery {
    /// Must be `true`: erasure cannot be undone, so it is never a plain DELETE.
    #[param(required = true, example = "true")]
    erase: Option<String>,
}

impl EraseQuery {
    /// Whether the request asks for an erasure: `erase=true` as the query
    /// decodes it (`erase=%74rue` too).
    fn erases(&self) -> bool {
        self.erase.as_deref() == Some("true")
    }
}

/// Whether a request's query asks for an erasure, decoded as the handler
/// decodes it: the audit log takes its decision from here, so that an
/// erasure's entry never names the person whatever the spelling.
pub(crate) fn erase_requested(uri: &axum::http::Uri) -> bool {
    Query::<EraseQuery>::try_from_uri(uri).is_ok_and(|Query(q)| q.erases())
}

/// What an erasure removed or rewrote. Nothing in it names the person: the
/// answer may be kept (logs, proxies) where they must not reappear.
#[derive(Serialize, ToSchema)]
pub(crate) struct ErasedView {
    /// Rows removed or rewritten, per place.
    #[schema(value_type = ErasureReportDoc)]
    erased: ErasureReport,
    /// Whether the schedules they left are mirrored at their new versions
    /// (false: the repair pass finishes it within a minute; nothing is sent to them meanwhile).
    mirrored: bool,
}

/// The schema of [`ErasureReport`] (`toki_model` has no OpenAPI types): a
/// place added there is added here, or the OpenAPI test fails.
#[derive(ToSchema)]
#[schema(as = ErasureReport)]
#[allow(dead_code)]
pub(crate) struct ErasureReportDoc {
    /// The user row (name, addresses, Slack id, webhook endpoint): 0 or 1.
    users: u64,
    /// Schedules they took part in, now without them.
    participations: u64,
    /// Schedules whose version moved (their reminders mirrored again).
    schedules_changed: u64,
    /// Deliveries not finished: removed, never sent.
    deliveries_cancelled: u64,
    /// Finished deliveries kept under a random pseudonym, detail scrubbed.
    deliveries_pseudonymised: u64,
    /// Their in-app chat messages, removed.
    chat_messages: u64,
    /// Delivery events naming them, kept under the pseudonym, reason scrubbed.
    delivery_events: u64,
    /// Change-notice baselines that listed them.
    change_baselines: u64,
    /// Frozen change notices that listed them.
    change_notices: u64,
    /// Kept answers of idempotent requests that quoted them, removed.
    idempotency_keys: u64,
    /// Their mail address on the tenant's suppression list, replaced by a
    /// keyed hash (it stays suppressed, and is listed again if the address
    /// is given back): 0 or 1.
    suppressions: u64,
    /// Audit-log entries about their user row, kept under the pseudonym.
    audit_entries: u64,
}

/// Erases a user: removes them from every schedule (reminders already
/// queued are not sent to them), deletes their user row, pending
/// deliveries and chat messages, and keeps their past deliveries and
/// delivery events only under a random pseudonym.
#[utoipa::path(
    delete,
    path = "/v1/tenants/{tenant}/users/{id}",
    tag = "users",
    params(UserPath, EraseQuery),
    responses(
        (status = 200, description = "Erased: the rows removed or rewritten per place", body = ErasedView),
        (status = 400, description = "The query string is not this route's (`field` names the parameter)", body = ErrorBody),
        (status = 404, description = "Toki holds nothing of this user", body = ErrorBody),
        (status = 422, description = "`erase` is missing or not `true`, or the id is not a user id (`field` names it); nothing was done", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn erase_user(
    State(state): State<ApiState>,
    Path(IdParam { id }): Path<IdParam>,
    AuthedTenant(tenant): AuthedTenant,
    query: Result<Query<EraseQuery>, QueryRejection>,
) -> Result<Json<ErasedView>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    if !q.erases() {
        return Err(ValidationError::new(
            "erase",
            "must be `true`: erasing a user cannot be undone",
        )
        .into());
    }
    let id: UserId = path_id(&id)?;
    let erased = state.registrar.erase_user(&tenant, &id).await?;
    Ok(Json(ErasedView {
        erased: erased.report,
        mirrored: erased.mirrored,
    }))
}
