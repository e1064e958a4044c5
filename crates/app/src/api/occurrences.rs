//! A series' occurrences: `GET .../schedules/{id}/occurrences?from=&to=`,
//! `PUT/DELETE .../occurrences/{original}`, and "this and following"
//! (`PUT .../occurrences/{original}/following`).

use super::shared::{AuditTarget, Audited, ScheduleAnswer};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Serialize;
use toki_model::input::{OccurrenceInput, OccurrenceView, ScheduleInput, ScheduleView};
use toki_model::{ScheduleId, ValidationError};
use utoipa::{IntoParams, ToSchema};

use super::shared::{
    bad_query, parse_body, path_id, schedule_response, written, ApiError, ApiState, AuthedTenant,
    BodyErrors, ErrorBody, IdParam, JsonBody, OccurrenceInputDoc, OccurrenceParams, OccurrencePath,
    OccurrenceViewDoc, ScheduleInputDoc, SchedulePath, ScheduleResponse, ScheduleViewDoc,
    TenantErrors,
};

/// Moves or edits one occurrence of a series.
#[utoipa::path(
    put,
    path = "/v1/tenants/{tenant}/schedules/{id}/occurrences/{original}",
    tag = "occurrences",
    params(OccurrencePath),
    request_body = OccurrenceInputDoc,
    responses(
        (status = 200, description = "The series with the occurrence changed, mirrored", body = ScheduleResponse),
        (status = 202, description = "Written; the repair pass finishes the index mirror", body = ScheduleResponse),
        (status = 404, description = "No such schedule, or the rule has no occurrence at `original`", body = ErrorBody),
        (status = 422, description = "Not valid (`field` names it): the schedule does not repeat, `original` is not a time, a clash with another occurrence, nothing to change", body = ErrorBody),
        BodyErrors,
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn put_occurrence(
    State(state): State<ApiState>,
    Path(OccurrenceParams { id, original }): Path<OccurrenceParams>,
    AuthedTenant(tenant): AuthedTenant,
    body: JsonBody,
) -> Result<ScheduleAnswer, ApiError> {
    let id: ScheduleId = path_id(&id)?;
    let input: OccurrenceInput = parse_body(body)?;
    let r = state
        .registrar
        .put_occurrence(&tenant, &id, &original, &input)
        .await?;
    Ok(schedule_response(r))
}

/// Cancels one occurrence of a series.
#[utoipa::path(
    delete,
    path = "/v1/tenants/{tenant}/schedules/{id}/occurrences/{original}",
    tag = "occurrences",
    params(OccurrencePath),
    responses(
        (status = 200, description = "The series with the occurrence cancelled, mirrored", body = ScheduleResponse),
        (status = 202, description = "Written; the repair pass finishes the index mirror", body = ScheduleResponse),
        (status = 404, description = "No such schedule, or the rule has no occurrence at `original`", body = ErrorBody),
        (status = 422, description = "Not valid (`field` names it): the schedule does not repeat, or `original` is not a time", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn cancel_occurrence(
    State(state): State<ApiState>,
    Path(OccurrenceParams { id, original }): Path<OccurrenceParams>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<ScheduleAnswer, ApiError> {
    let id: ScheduleId = path_id(&id)?;
    let r = state
        .registrar
        .cancel_occurrence(&tenant, &id, &original)
        .await?;
    Ok(schedule_response(r))
}

/// "This and following": the series ends before `original`; `new_id` takes over from it.
#[derive(Debug, serde::Deserialize, ToSchema)]
#[schema(as = SplitInput)]
#[serde(deny_unknown_fields)]
struct SplitInput {
    /// The id of the series from `original` on; a new schedule.
    #[schema(pattern = "^[A-Za-z0-9_.:@-]{1,128}$", example = "standup-2")]
    new_id: String,
    #[schema(value_type = ScheduleInputDoc)]
    schedule: ScheduleInput,
}

/// The two series after a split.
#[derive(Serialize, ToSchema)]
#[schema(as = SplitResult)]
pub(crate) struct SplitResponse {
    /// The series before the split; absent if nothing was left of it (deleted).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<ScheduleViewDoc>)]
    ended: Option<ScheduleView>,
    #[schema(value_type = ScheduleViewDoc)]
    following: ScheduleView,
}

/// Splits a series at one of its occurrences ("this and following").
#[utoipa::path(
    put,
    path = "/v1/tenants/{tenant}/schedules/{id}/occurrences/{original}/following",
    tag = "occurrences",
    params(OccurrencePath),
    request_body = SplitInput,
    responses(
        (status = 200, description = "Both series written and mirrored", body = SplitResponse),
        (status = 202, description = "Written; the repair pass finishes the index mirror", body = SplitResponse),
        (status = 404, description = "No such schedule, or the rule has no occurrence at `original`", body = ErrorBody),
        (status = 422, description = "Not valid (`field` names it): `new_id` exists or is the schedule's own, the schedule does not repeat, the new series is not valid; nothing written", body = ErrorBody),
        BodyErrors,
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn split_series(
    State(state): State<ApiState>,
    Path(OccurrenceParams { id, original }): Path<OccurrenceParams>,
    AuthedTenant(tenant): AuthedTenant,
    body: JsonBody,
) -> Result<(StatusCode, Extension<Audited>, Json<SplitResponse>), ApiError> {
    let id: ScheduleId = path_id(&id)?;
    let input: SplitInput = parse_body(body)?;
    let new_id: ScheduleId = input
        .new_id
        .parse()
        .map_err(|e: ValidationError| ApiError::from(ValidationError::new("new_id", e.problem)))?;
    let (ended, following) = state
        .registrar
        .split_series(&tenant, &id, &original, &new_id, &input.schedule)
        .await?;
    let mirrored = following.mirrored && ended.as_ref().is_none_or(|e| e.mirrored);
    let old = match &ended {
        Some(e) => AuditTarget::schedule(id.as_str(), e.schedule.version),
        // Deleted (nothing left before the split): its version is not known here.
        None => AuditTarget {
            resource: Some(id.to_string()),
            version_before: None,
            version_after: None,
        },
    };
    let new = AuditTarget::schedule(new_id.as_str(), following.schedule.version);
    Ok((
        written(mirrored),
        Extension(Audited(vec![old, new])),
        Json(SplitResponse {
            ended: ended.map(|e| ScheduleView::from(&e.schedule)),
            following: ScheduleView::from(&following.schedule),
        }),
    ))
}

#[derive(Debug, serde::Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct Between {
    /// From (inclusive): an RFC 3339 instant or a local date-time in the
    /// schedule's zone; by default now.
    from: Option<String>,
    /// To (exclusive): after `from` and at most 400 days after it, the
    /// window holding at most 1000 occurrences; by default `from` + 90 days.
    to: Option<String>,
}

/// A schedule's occurrences in a window.
#[derive(Serialize, ToSchema)]
#[schema(as = Occurrences)]
pub(crate) struct OccurrencesResponse {
    schedule: String,
    time_zone: String,
    #[schema(value_type = Vec<OccurrenceViewDoc>)]
    occurrences: Vec<OccurrenceView>,
}

/// A schedule's occurrences in `[from, to)` (default: the next 90 days).
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/schedules/{id}/occurrences",
    tag = "occurrences",
    params(SchedulePath, Between),
    responses(
        (status = 200, description = "The occurrences in the window, exceptions applied (a one-off schedule has one)", body = OccurrencesResponse),
        (status = 400, description = "The query string is not `from` and `to` once each", body = ErrorBody),
        (status = 404, description = "No such schedule", body = ErrorBody),
        (status = 422, description = "`id`, `from` or `to` is not valid (`field` names it), or the window holds more than 1000 occurrences (`to`)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn list_occurrences(
    State(state): State<ApiState>,
    Path(IdParam { id }): Path<IdParam>,
    AuthedTenant(tenant): AuthedTenant,
    between: Result<Query<Between>, QueryRejection>,
) -> Result<Json<OccurrencesResponse>, ApiError> {
    let id: ScheduleId = path_id(&id)?;
    let Query(between) = between.map_err(bad_query)?;
    let (schedule, list) = state
        .registrar
        .occurrences(&tenant, &id, between.from.as_deref(), between.to.as_deref())
        .await?;
    Ok(Json(OccurrencesResponse {
        schedule: schedule.id.to_string(),
        time_zone: schedule.time_zone.name().to_owned(),
        occurrences: list
            .iter()
            .map(|o| OccurrenceView::new(o, schedule.time_zone))
            .collect(),
    }))
}
