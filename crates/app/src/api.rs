//! The registrar HTTP API: `PUT/GET/DELETE /v1/tenants/{tenant}/schedules/{id}`,
//! `POST /v1/tenants/{tenant}/schedules:batch` (many at once), a series' occurrences (`GET .../occurrences?from=&to=`, `PUT/DELETE
//! .../occurrences/{original}`, `PUT .../occurrences/{original}/following`),
//! `PUT/GET /v1/tenants/{tenant}/users/{id}`, JSON in and out, a bearer API
//! key per tenant. Served by `toki serve` and by the registrar Lambda.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Serialize;
use serde_json::json;
use toki_core::input::{
    OccurrenceInput, OccurrenceView, ScheduleInput, ScheduleView, UserInput, UserView,
};
use toki_core::registrar::{check_batch_len, Registrar, RegistrarError};
use toki_core::{ScheduleId, StoreError, TenantId, UserId, ValidationError};

use crate::toki::api_key_hash;

/// The header that may carry the tenant's API key instead of `Authorization`.
pub const API_KEY_HEADER: &str = "x-toki-api-key";

#[derive(Clone)]
pub struct ApiState {
    pub registrar: Arc<Registrar>,
}

/// The largest request body accepted (413 beyond): a schedule at every input
/// limit fits well inside.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// The largest batch body: [`toki_core::registrar::MAX_BATCH`] ordinary schedules fit many times over.
pub const MAX_BATCH_BODY_BYTES: usize = 8 * 1024 * 1024;

pub fn router(registrar: Arc<Registrar>) -> Router {
    Router::new()
        .route(
            "/v1/tenants/{tenant}/schedules/{id}",
            put(put_schedule).get(get_schedule).delete(delete_schedule),
        )
        .route(
            "/v1/tenants/{tenant}/schedules:batch",
            post(put_schedules).layer(axum::extract::DefaultBodyLimit::max(MAX_BATCH_BODY_BYTES)),
        )
        .route(
            "/v1/tenants/{tenant}/schedules/{id}/occurrences",
            get(list_occurrences),
        )
        .route(
            "/v1/tenants/{tenant}/schedules/{id}/occurrences/{original}",
            put(put_occurrence).delete(cancel_occurrence),
        )
        .route(
            "/v1/tenants/{tenant}/schedules/{id}/occurrences/{original}/following",
            put(split_series),
        )
        .route(
            "/v1/tenants/{tenant}/users/{id}",
            put(put_user).get(get_user),
        )
        .route("/healthz", get(|| async { "ok" }))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(ApiState { registrar })
}

/// An error as the API returns it: `{"error": {"code", "message", "field"?}}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    field: Option<String>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
        }
    }
}

impl ApiError {
    /// The `error` object of the response body.
    fn body(&self) -> serde_json::Value {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(f) = &self.field {
            error["field"] = json!(f);
        }
        error
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.body() }))).into_response()
    }
}

impl From<RegistrarError> for ApiError {
    fn from(e: RegistrarError) -> Self {
        match e {
            RegistrarError::Invalid(v) => ApiError {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                code: "invalid",
                message: v.to_string(),
                field: Some(v.field),
            },
            RegistrarError::UnknownTenant(_) => unauthorized(),
            RegistrarError::NotFound(what) => ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("{what} not found"),
            ),
            RegistrarError::Store(e @ StoreError::Unavailable { .. }) => {
                tracing::warn!(error = %toki_core::error::chain(&e), "registrar backend unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "a backend is unavailable; try again",
                )
            }
            RegistrarError::Store(e) => {
                tracing::error!(error = %toki_core::error::chain(&e), "registrar store error");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error",
                )
            }
        }
    }
}

/// Unknown tenant and wrong key look the same, so tenant ids cannot be probed.
fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "unknown tenant or wrong API key",
    )
}

/// The field a serde error names (`unknown field `x``, `missing field `y``).
fn serde_field(text: &str) -> Option<&str> {
    text.split('`').nth(1).filter(|_| text.contains("field"))
}

/// A JSON body that does not parse: name the field serde complained about;
/// one over the size limit is 413 naming the limit.
fn bad_json(rejection: JsonRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "too_large",
            message: format!("the request body exceeds {MAX_BODY_BYTES} bytes"),
            field: None,
        };
    }
    let text = rejection.body_text();
    let field = serde_field(&text).map(str::to_owned);
    ApiError {
        status: StatusCode::BAD_REQUEST,
        code: "bad_json",
        message: text,
        field,
    }
}

impl From<ValidationError> for ApiError {
    fn from(v: ValidationError) -> Self {
        RegistrarError::Invalid(v).into()
    }
}

/// The `{id}` of a path, parsed into a domain id (422 naming `id` if it is not one).
fn path_id<T: std::str::FromStr<Err = ValidationError>>(id: &str) -> Result<T, ApiError> {
    id.parse::<T>()
        .map_err(|e| ValidationError::new("id", e.problem).into())
}

/// The token of `Bearer <token>`; the scheme is case-insensitive (RFC 9110).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Checks the tenant id and its bearer key.
async fn authorize(
    state: &ApiState,
    tenant: &str,
    headers: &HeaderMap,
) -> Result<TenantId, ApiError> {
    let tenant: TenantId = tenant.parse().map_err(|_| unauthorized())?;
    // `x-toki-api-key` for callers whose `Authorization` carries something else
    // (behind API Gateway's IAM authoriser it holds the SigV4 signature).
    let key = headers
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
                "unauthorized",
                "missing Authorization: Bearer <api key> (or x-toki-api-key)",
            )
        })?;
    let record = match state.registrar.tenant(&tenant).await {
        Ok(r) => r,
        Err(RegistrarError::UnknownTenant(_)) => return Err(unauthorized()),
        // The directory is down: say so, so clients retry (not "wrong key").
        Err(e) => return Err(e.into()),
    };
    if record.api_key_sha256 != api_key_hash(key.trim()) {
        return Err(unauthorized());
    }
    Ok(tenant)
}

#[derive(Serialize)]
struct ScheduleResponse {
    #[serde(flatten)]
    schedule: ScheduleView,
    mirrored: bool,
    enqueued_directly: usize,
}

async fn put_schedule(
    State(state): State<ApiState>,
    Path((tenant, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Json<ScheduleInput>, JsonRejection>,
) -> Result<(StatusCode, Json<ScheduleResponse>), ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let id: ScheduleId = path_id(&id)?;
    let Json(input) = body.map_err(bad_json)?;
    let r = state.registrar.put_schedule(&tenant, &id, &input).await?;
    Ok(schedule_response(r))
}

/// `POST .../schedules:batch`: `{"schedules": [{"id": ..., <schedule>}, ...]}`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchInput {
    schedules: Vec<serde_json::Value>,
}

/// The answer to a batch: for each item, `index`, `status` (what the
/// item's own PUT would have answered) and that answer's body (the schedule,
/// or `error`), with the item's `id` when it had one.
#[derive(Serialize)]
struct BatchResponse {
    written: usize,
    failed: usize,
    results: Vec<serde_json::Value>,
}

/// An item of a batch as a schedule input, or the error naming its field
/// (`schedules[i].<field>`).
fn batch_item(
    i: usize,
    item: serde_json::Value,
) -> Result<(ScheduleId, ScheduleInput), ValidationError> {
    let field = |f: &str| format!("schedules[{i}].{f}");
    let serde_json::Value::Object(mut item) = item else {
        return Err(ValidationError::new(
            format!("schedules[{i}]"),
            "must be an object",
        ));
    };
    let id = match item.remove("id") {
        Some(serde_json::Value::String(id)) => id
            .parse::<ScheduleId>()
            .map_err(|e| ValidationError::new(field("id"), e.problem))?,
        Some(_) => return Err(ValidationError::new(field("id"), "must be a string")),
        None => return Err(ValidationError::new(field("id"), "is required")),
    };
    let input =
        serde_json::from_value::<ScheduleInput>(serde_json::Value::Object(item)).map_err(|e| {
            let text = e.to_string();
            let name = field(serde_field(&text).unwrap_or(""));
            ValidationError::new(name.trim_end_matches('.'), text)
        })?;
    Ok((id, input))
}

/// Registers up to [`toki_core::registrar::MAX_BATCH`] schedules in one call: 200 with a result
/// per item (its own status, its schedule or its error), in order; items
/// that are invalid do not stop the others.
async fn put_schedules(
    State(state): State<ApiState>,
    Path(tenant): Path<String>,
    headers: HeaderMap,
    body: Result<Json<BatchInput>, JsonRejection>,
) -> Result<Json<BatchResponse>, ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let Json(batch) = body.map_err(bad_json)?;
    // The whole batch, before its items: the registrar sees only the valid ones.
    check_batch_len(batch.schedules.len())?;
    // What parsed goes to the registrar; each item keeps its id or its error.
    let mut items: Vec<(ScheduleId, ScheduleInput)> = Vec::with_capacity(batch.schedules.len());
    let parsed: Vec<Result<ScheduleId, ValidationError>> = batch
        .schedules
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            batch_item(i, item).map(|(id, input)| {
                items.push((id.clone(), input));
                id
            })
        })
        .collect();
    let mut registered = state
        .registrar
        .put_schedules(&tenant, &items)
        .await?
        .into_iter();
    let mut results = Vec::with_capacity(parsed.len());
    let mut written = 0;
    for (index, p) in parsed.into_iter().enumerate() {
        let (id, outcome) = match p {
            Err(e) => (None, Err(ApiError::from(e))),
            Ok(id) => (
                Some(id.to_string()),
                registered
                    .next()
                    .expect("a result per parsed item")
                    .map_err(|e| ApiError::from(in_item(index, e))),
            ),
        };
        let (status, body) = match outcome {
            Ok(r) => {
                let (status, Json(body)) = schedule_response(r);
                (status, serde_json::to_value(body).unwrap_or_default())
            }
            Err(e) => (e.status, json!({ "error": e.body() })),
        };
        let mut result = json!({ "index": index, "status": status.as_u16() });
        if let Some(id) = id {
            result["id"] = json!(id);
        }
        if let serde_json::Value::Object(fields) = body {
            result.as_object_mut().expect("an object").extend(fields);
        }
        if status.is_success() {
            written += 1;
        }
        results.push(result);
    }
    Ok(Json(BatchResponse {
        written,
        failed: results.len() - written,
        results,
    }))
}

/// An item's validation error names its place in the batch.
fn in_item(index: usize, e: RegistrarError) -> RegistrarError {
    match e {
        RegistrarError::Invalid(v) => RegistrarError::Invalid(ValidationError::new(
            format!("schedules[{index}].{}", v.field),
            v.problem,
        )),
        other => other,
    }
}

async fn get_schedule(
    State(state): State<ApiState>,
    Path((tenant, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<ScheduleView>, ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let s = state
        .registrar
        .get_schedule(&tenant, &path_id(&id)?)
        .await?;
    Ok(Json(ScheduleView::from(&s)))
}

async fn delete_schedule(
    State(state): State<ApiState>,
    Path((tenant, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let mirrored = state
        .registrar
        .delete_schedule(&tenant, &path_id(&id)?)
        .await?;
    Ok(if mirrored {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::ACCEPTED
    })
}

fn schedule_response(r: toki_core::registrar::Registered) -> (StatusCode, Json<ScheduleResponse>) {
    (
        written(r.mirrored),
        Json(ScheduleResponse {
            schedule: ScheduleView::from(&r.schedule),
            mirrored: r.mirrored,
            enqueued_directly: r.enqueued_directly,
        }),
    )
}

/// Moves or edits one occurrence of a series.
async fn put_occurrence(
    State(state): State<ApiState>,
    Path((tenant, id, original)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Result<Json<OccurrenceInput>, JsonRejection>,
) -> Result<(StatusCode, Json<ScheduleResponse>), ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let id: ScheduleId = path_id(&id)?;
    let Json(input) = body.map_err(bad_json)?;
    let r = state
        .registrar
        .put_occurrence(&tenant, &id, &original, &input)
        .await?;
    Ok(schedule_response(r))
}

/// Cancels one occurrence of a series.
async fn cancel_occurrence(
    State(state): State<ApiState>,
    Path((tenant, id, original)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<(StatusCode, Json<ScheduleResponse>), ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let id: ScheduleId = path_id(&id)?;
    let r = state
        .registrar
        .cancel_occurrence(&tenant, &id, &original)
        .await?;
    Ok(schedule_response(r))
}

/// "This and following": the series ends before `original`; `new_id` takes over from it.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SplitInput {
    new_id: String,
    schedule: ScheduleInput,
}

#[derive(Serialize)]
struct SplitResponse {
    /// The series before the split; absent if nothing was left of it (deleted).
    #[serde(skip_serializing_if = "Option::is_none")]
    ended: Option<ScheduleView>,
    following: ScheduleView,
}

async fn split_series(
    State(state): State<ApiState>,
    Path((tenant, id, original)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Result<Json<SplitInput>, JsonRejection>,
) -> Result<(StatusCode, Json<SplitResponse>), ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let id: ScheduleId = path_id(&id)?;
    let Json(input) = body.map_err(bad_json)?;
    let new_id: ScheduleId = input
        .new_id
        .parse()
        .map_err(|e: ValidationError| ApiError::from(ValidationError::new("new_id", e.problem)))?;
    let (ended, following) = state
        .registrar
        .split_series(&tenant, &id, &original, &new_id, &input.schedule)
        .await?;
    let mirrored = following.mirrored && ended.as_ref().is_none_or(|e| e.mirrored);
    Ok((
        written(mirrored),
        Json(SplitResponse {
            ended: ended.map(|e| ScheduleView::from(&e.schedule)),
            following: ScheduleView::from(&following.schedule),
        }),
    ))
}

#[derive(Debug, serde::Deserialize)]
struct Between {
    from: Option<String>,
    to: Option<String>,
}

#[derive(Serialize)]
struct OccurrencesResponse {
    schedule: String,
    time_zone: String,
    occurrences: Vec<OccurrenceView>,
}

/// A schedule's occurrences in `[from, to)` (default: the next 90 days).
async fn list_occurrences(
    State(state): State<ApiState>,
    Path((tenant, id)): Path<(String, String)>,
    Query(between): Query<Between>,
    headers: HeaderMap,
) -> Result<Json<OccurrencesResponse>, ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let id: ScheduleId = path_id(&id)?;
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

/// 200 when the write is in the tenant database and the index; 202 when it is
/// in the tenant database only: it is saved (its outbox row says the mirror is
/// due) and the repair pass finishes the mirror within a minute.
fn written(mirrored: bool) -> StatusCode {
    if mirrored {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    }
}

async fn put_user(
    State(state): State<ApiState>,
    Path((tenant, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Json<UserInput>, JsonRejection>,
) -> Result<Json<UserView>, ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let id: UserId = path_id(&id)?;
    let Json(input) = body.map_err(bad_json)?;
    let u = state.registrar.put_user(&tenant, &id, &input).await?;
    Ok(Json(UserView::from(&u)))
}

async fn get_user(
    State(state): State<ApiState>,
    Path((tenant, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<UserView>, ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let u = state.registrar.get_user(&tenant, &path_id(&id)?).await?;
    Ok(Json(UserView::from(&u)))
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
