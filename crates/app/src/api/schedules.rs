//! Schedules: `PUT/GET/DELETE /v1/tenants/{tenant}/schedules/{id}` (many at
//! once: [`super::batch`]).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use toki_model::input::{ScheduleInput, ScheduleView};
use toki_model::ScheduleId;

use super::shared::{
    parse_body, path_id, schedule_response, ApiError, ApiState, AuthedTenant, BodyErrors,
    ErrorBody, IdParam, JsonBody, ScheduleInputDoc, SchedulePath, ScheduleResponse,
    ScheduleViewDoc, TenantErrors,
};
use super::shared::{AuditTarget, Audited, ScheduleAnswer};

/// Creates or replaces a schedule.
#[utoipa::path(
    put,
    path = "/v1/tenants/{tenant}/schedules/{id}",
    tag = "schedules",
    params(SchedulePath),
    request_body = ScheduleInputDoc,
    responses(
        (status = 200, description = "Written, and its reminders mirrored into the index", body = ScheduleResponse),
        (status = 202, description = "Written to the tenant database; the repair pass finishes the index mirror within a minute", body = ScheduleResponse),
        (status = 422, description = "A value is not valid (`field` names it: an unknown participant, a bad time zone, rule or id, a limit); nothing written", body = ErrorBody),
        BodyErrors,
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn put_schedule(
    State(state): State<ApiState>,
    Path(IdParam { id }): Path<IdParam>,
    AuthedTenant(tenant): AuthedTenant,
    body: JsonBody,
) -> Result<ScheduleAnswer, ApiError> {
    let id: ScheduleId = path_id(&id)?;
    let input: ScheduleInput = parse_body(body)?;
    let r = state.registrar.put_schedule(&tenant, &id, &input).await?;
    Ok(schedule_response(r))
}

/// A schedule.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/schedules/{id}",
    tag = "schedules",
    params(SchedulePath),
    responses(
        (status = 200, description = "The schedule", body = ScheduleViewDoc),
        (status = 404, description = "No such schedule", body = ErrorBody),
        (status = 422, description = "The id is not a schedule id (`field`: `id`)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn get_schedule(
    State(state): State<ApiState>,
    Path(IdParam { id }): Path<IdParam>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<Json<ScheduleView>, ApiError> {
    let s = state
        .registrar
        .get_schedule(&tenant, &path_id(&id)?)
        .await?;
    Ok(Json(ScheduleView::from(&s)))
}

/// Deletes a schedule; its reminders already queued deliver nothing.
#[utoipa::path(
    delete,
    path = "/v1/tenants/{tenant}/schedules/{id}",
    tag = "schedules",
    params(SchedulePath),
    responses(
        (status = 204, description = "Deleted, and its reminders withdrawn from the index"),
        (status = 202, description = "Deleted from the tenant database; the repair pass finishes the index within a minute"),
        (status = 404, description = "No such schedule", body = ErrorBody),
        (status = 422, description = "The id is not a schedule id (`field`: `id`)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn delete_schedule(
    State(state): State<ApiState>,
    Path(IdParam { id }): Path<IdParam>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<(StatusCode, Extension<Audited>), ApiError> {
    let id: ScheduleId = path_id(&id)?;
    let deleted = state.registrar.remove_schedule(&tenant, &id).await?;
    let status = if deleted.mirrored {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::ACCEPTED
    };
    let audited = Audited(vec![AuditTarget::deleted_schedule(
        id.as_str(),
        deleted.version,
    )]);
    Ok((status, Extension(audited)))
}
