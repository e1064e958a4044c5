//! The registrar HTTP API: `PUT/GET/DELETE /v1/tenants/{tenant}/schedules/{id}`,
//! `POST /v1/tenants/{tenant}/schedules:batch` (many at once), a series' occurrences (`GET .../occurrences?from=&to=`, `PUT/DELETE
//! .../occurrences/{original}`, `PUT .../occurrences/{original}/following`),
//! `PUT/GET /v1/tenants/{tenant}/users/{id}`, reminder templates
//! (`.../templates/{channel}/{locale}`, [`templates`]), JSON in and out, a bearer API
//! key per tenant; `GET /openapi.json` describes them all (see
//! [`crate::openapi`]). Served by `toki serve` and by the registrar Lambda.

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use toki_core::registrar::{check_batch_len, Registrar, RegistrarError};
use toki_model::input::{
    OccurrenceInput, OccurrenceView, ScheduleInput, ScheduleView, UserInput, UserView,
};
use toki_model::{ScheduleId, TenantId, UserId, ValidationError};
use toki_ports::StoreError;
use utoipa::{IntoParams, ToSchema};

use crate::openapi::{
    BatchItemDoc, BodyErrors, OccurrenceInputDoc, OccurrencePath, OccurrenceViewDoc,
    ScheduleInputDoc, SchedulePath, ScheduleViewDoc, TenantErrors, TenantPath, UserInputDoc,
    UserPath, UserViewDoc,
};
use crate::toki::api_key_hash;

pub(crate) mod templates;

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
        .route(
            "/v1/tenants/{tenant}/templates",
            get(templates::list_templates),
        )
        .route(
            "/v1/tenants/{tenant}/templates/{channel}/{locale}",
            put(templates::put_template)
                .get(templates::get_template)
                .delete(templates::delete_template),
        )
        .route(
            "/v1/templates/{channel}/{locale}",
            get(templates::get_default_template),
        )
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi_json))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(trace_request))
        .with_state(ApiState { registrar })
}

/// Each request in a span of its own when traces are on (a child of the
/// caller's `traceparent` header if it sent one): the reminders it enqueues
/// directly link to it.
async fn trace_request(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if !toki_core::trace::enabled() {
        return next.run(request).await;
    }
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let parent = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok());
    let span = toki_core::trace::request_span(request.method().as_str(), &route, parent);
    let response = tracing::Instrument::instrument(next.run(request), span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    response
}

/// An error as the API returns it: `{"error": {"code", "message", "field"?}}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: ErrorCode,
    message: String,
    field: Option<String>,
}

/// What every error answers.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Error)]
pub(crate) struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    code: ErrorCode,
    /// For people; may change.
    message: String,
    /// The field at fault, with its path (`reminders[0].channels[1]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<String>,
}

/// What went wrong, for programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ErrorCode {
    /// 400: the body is not JSON or not the route's shape.
    BadJson,
    /// 400: the query string is not the route's.
    BadQuery,
    /// 413: the body is over the route's limit.
    TooLarge,
    /// 415: the body is not declared JSON.
    UnsupportedMediaType,
    /// 401: missing or wrong key, unknown or malformed tenant.
    Unauthorized,
    /// 404.
    NotFound,
    /// 422: a value is not valid; `field` names it.
    Invalid,
    /// 503: a backend cannot be reached; retry.
    Unavailable,
    /// 500.
    Internal,
}

impl ApiError {
    fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
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
    fn body(self) -> ErrorDetail {
        ErrorDetail {
            code: self.code,
            message: self.message,
            field: self.field,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        (status, Json(ErrorBody { error: self.body() })).into_response()
    }
}

impl From<RegistrarError> for ApiError {
    fn from(e: RegistrarError) -> Self {
        match e {
            RegistrarError::Invalid(v) => ApiError {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                code: ErrorCode::Invalid,
                message: v.to_string(),
                field: Some(v.field),
            },
            RegistrarError::UnknownTenant(_) => unauthorized(),
            RegistrarError::NotFound(what) => ApiError::new(
                StatusCode::NOT_FOUND,
                ErrorCode::NotFound,
                format!("{what} not found"),
            ),
            RegistrarError::Store(e @ StoreError::Unavailable { .. }) => {
                tracing::warn!(error = %toki_model::error::chain(&e), "registrar backend unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::Unavailable,
                    "a backend is unavailable; try again",
                )
            }
            RegistrarError::Store(e) => {
                tracing::error!(error = %toki_model::error::chain(&e), "registrar store error");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    ErrorCode::Internal,
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
        ErrorCode::Unauthorized,
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
    bad_body(rejection, MAX_BODY_BYTES)
}

/// [`bad_json`] for a route whose body may be up to `limit` bytes.
fn bad_body(rejection: JsonRejection, limit: usize) -> ApiError {
    match rejection {
        r if r.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::TooLarge,
            format!("the request body exceeds {limit} bytes"),
        ),
        JsonRejection::MissingJsonContentType(r) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::UnsupportedMediaType,
            r.body_text(),
        ),
        r => {
            let text = r.body_text();
            let field = serde_field(&text).map(str::to_owned);
            ApiError {
                status: StatusCode::BAD_REQUEST,
                code: ErrorCode::BadJson,
                message: text,
                field,
            }
        }
    }
}

/// A route's input from its JSON body: 400 naming what does not fit.
fn parse_body<T: DeserializeOwned>(
    body: Result<Json<Value>, JsonRejection>,
) -> Result<T, ApiError> {
    let Json(value) = body.map_err(bad_json)?;
    from_json(value).map_err(bad_input)
}

/// A body that is JSON but not the route's input type.
fn bad_input(e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let text = e.to_string();
    let field = serde_field(&text).map(str::to_owned);
    ApiError {
        status: StatusCode::BAD_REQUEST,
        code: ErrorCode::BadJson,
        message: format!("Failed to deserialize the JSON body into the target type: {text}"),
        field,
    }
}

/// `value` as a `T`, as the document describes it: see [`strict`].
fn from_json<T: DeserializeOwned>(
    value: Value,
) -> Result<T, serde_path_to_error::Error<serde_json::Error>> {
    serde_path_to_error::deserialize(strict::Strict(value))
}

/// A query string that does not deserialise (a parameter given twice):
/// 400 naming it, in the API's error shape (axum's own answer is plain text).
fn bad_query(rejection: QueryRejection) -> ApiError {
    let text = rejection.body_text();
    let field = serde_field(&text).map(str::to_owned);
    ApiError {
        status: StatusCode::BAD_REQUEST,
        code: ErrorCode::BadQuery,
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
                ErrorCode::Unauthorized,
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

/// A schedule as written.
#[derive(Serialize, ToSchema)]
#[schema(as = WrittenSchedule)]
struct ScheduleResponse {
    #[serde(flatten)]
    #[schema(value_type = ScheduleViewDoc)]
    schedule: ScheduleView,
    /// False (with 202) when the index mirror is left to the repair pass.
    mirrored: bool,
    /// Reminders due so soon that this write put them on the queue itself.
    enqueued_directly: usize,
}

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
async fn put_schedule(
    State(state): State<ApiState>,
    Path((tenant, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<(StatusCode, Json<ScheduleResponse>), ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let id: ScheduleId = path_id(&id)?;
    let input: ScheduleInput = parse_body(body)?;
    let r = state.registrar.put_schedule(&tenant, &id, &input).await?;
    Ok(schedule_response(r))
}

/// `POST .../schedules:batch`: `{"schedules": [{"id": ..., <schedule>}, ...]}`.
/// Items stay JSON values here: each is parsed on its own, so one bad item
/// does not fail the others.
#[derive(serde::Deserialize, ToSchema)]
#[schema(as = BatchInput)]
#[serde(deny_unknown_fields)]
struct BatchInput {
    /// At most 1,000.
    #[schema(value_type = Vec<BatchItemDoc>, max_items = 1000)]
    schedules: Vec<Value>,
}

/// The answer to a batch: a result per item, in order.
#[derive(Serialize, ToSchema)]
#[schema(as = BatchResult)]
struct BatchResponse {
    /// Items written (200 or 202).
    written: usize,
    failed: usize,
    results: Vec<BatchItemResult>,
}

/// One item's answer: `index`, `status` (what the item's own `PUT` would
/// have answered) and that answer's body.
#[derive(Serialize, ToSchema)]
struct BatchItemResult {
    index: usize,
    status: u16,
    #[serde(flatten)]
    outcome: BatchOutcome,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
enum BatchOutcome {
    /// Written: the schedule (its `id` among its fields).
    Written(Box<ScheduleResponse>),
    /// Not written: why, with the item's `id` when it had a valid one.
    Failed {
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        error: ErrorDetail,
    },
}

/// An item of a batch as a schedule input, or the error naming its field
/// (`schedules[i].<field>`).
fn batch_item(i: usize, item: Value) -> Result<(ScheduleId, ScheduleInput), ValidationError> {
    let field = |f: &str| format!("schedules[{i}].{f}");
    let Value::Object(mut item) = item else {
        return Err(ValidationError::new(
            format!("schedules[{i}]"),
            "must be an object",
        ));
    };
    let id = match item.remove("id") {
        Some(Value::String(id)) => id
            .parse::<ScheduleId>()
            .map_err(|e| ValidationError::new(field("id"), e.problem))?,
        Some(_) => return Err(ValidationError::new(field("id"), "must be a string")),
        None => return Err(ValidationError::new(field("id"), "is required")),
    };
    let input = from_json::<ScheduleInput>(Value::Object(item)).map_err(|e| {
        let text = e.to_string();
        let name = field(serde_field(&text).unwrap_or(""));
        ValidationError::new(name.trim_end_matches('.'), text)
    })?;
    Ok((id, input))
}

/// Registers up to [`toki_core::registrar::MAX_BATCH`] schedules in one call: 200 with a result
/// per item (its own status, its schedule or its error), in order; items
/// that are invalid do not stop the others.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/schedules:batch",
    tag = "schedules",
    params(TenantPath),
    request_body = BatchInput,
    responses(
        (status = 200, description = "Each item as its own `PUT` would have answered (`status`, the schedule or `error`, with `field` as `schedules[i].<field>`); the valid items are written, in one transaction, even when others are not", body = BatchResponse),
        (status = 422, description = "More than 1,000 items (`field`: `schedules`); nothing written", body = ErrorBody),
        BodyErrors,
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
async fn put_schedules(
    State(state): State<ApiState>,
    Path(tenant): Path<String>,
    headers: HeaderMap,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Json<BatchResponse>, ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let Json(batch) = body.map_err(|r| bad_body(r, MAX_BATCH_BODY_BYTES))?;
    let batch: BatchInput = from_json(batch).map_err(bad_input)?;
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
        let (status, outcome) = match outcome {
            Ok(r) => {
                let (status, Json(body)) = schedule_response(r);
                (status, BatchOutcome::Written(Box::new(body)))
            }
            Err(e) => (
                e.status,
                BatchOutcome::Failed {
                    id,
                    error: e.body(),
                },
            ),
        };
        if status.is_success() {
            written += 1;
        }
        results.push(BatchItemResult {
            index,
            status: status.as_u16(),
            outcome,
        });
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
async fn put_occurrence(
    State(state): State<ApiState>,
    Path((tenant, id, original)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<(StatusCode, Json<ScheduleResponse>), ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
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
struct SplitResponse {
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
async fn split_series(
    State(state): State<ApiState>,
    Path((tenant, id, original)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<(StatusCode, Json<SplitResponse>), ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
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
    Ok((
        written(mirrored),
        Json(SplitResponse {
            ended: ended.map(|e| ScheduleView::from(&e.schedule)),
            following: ScheduleView::from(&following.schedule),
        }),
    ))
}

#[derive(Debug, serde::Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct Between {
    /// From (inclusive): an RFC 3339 instant or a local date-time in the
    /// schedule's zone; by default now.
    from: Option<String>,
    /// To (exclusive): after `from` and at most 400 days after it; by default `from` + 90 days.
    to: Option<String>,
}

/// A schedule's occurrences in a window.
#[derive(Serialize, ToSchema)]
#[schema(as = Occurrences)]
struct OccurrencesResponse {
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
        (status = 422, description = "`id`, `from` or `to` is not valid (`field` names it)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
async fn list_occurrences(
    State(state): State<ApiState>,
    Path((tenant, id)): Path<(String, String)>,
    between: Result<Query<Between>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Json<OccurrencesResponse>, ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
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

/// Creates or replaces a user.
#[utoipa::path(
    put,
    path = "/v1/tenants/{tenant}/users/{id}",
    tag = "users",
    params(UserPath),
    request_body = UserInputDoc,
    responses(
        (status = 200, description = "Written", body = UserViewDoc),
        (status = 422, description = "A value is not valid (`field` names it: `id`, `name`, `email`, `slack_user_id`, `time_zone`, `locale`); nothing written", body = ErrorBody),
        BodyErrors,
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
async fn put_user(
    State(state): State<ApiState>,
    Path((tenant, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Json<UserView>, ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let id: UserId = path_id(&id)?;
    let input: UserInput = parse_body(body)?;
    let u = state.registrar.put_user(&tenant, &id, &input).await?;
    Ok(Json(UserView::from(&u)))
}

/// A user.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/users/{id}",
    tag = "users",
    params(UserPath),
    responses(
        (status = 200, description = "The user", body = UserViewDoc),
        (status = 404, description = "No such user", body = ErrorBody),
        (status = 422, description = "The id is not a user id (`field`: `id`)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
async fn get_user(
    State(state): State<ApiState>,
    Path((tenant, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<UserView>, ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let u = state.registrar.get_user(&tenant, &path_id(&id)?).await?;
    Ok(Json(UserView::from(&u)))
}

/// The process is up (it checks nothing else).
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "Up", body = String, content_type = "text/plain", example = "ok")),
)]
async fn healthz() -> &'static str {
    "ok"
}

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses((status = 200, description = "The OpenAPI document of this API", body = Object, content_type = "application/json")),
)]
async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::json(),
    )
        .into_response()
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

/// JSON read as the OpenAPI document says, where serde's defaults differ:
/// a type with fields takes a JSON object only (serde's derived structs also
/// take an array, their fields by position), and a whole number written
/// with a fraction (`5.0`) is the integer (JSON Schema's `integer` allows it).
mod strict {
    use serde::de::value::{MapDeserializer, SeqDeserializer};
    use serde::de::{self, IntoDeserializer, Unexpected, Visitor};
    use serde::forward_to_deserialize_any;
    use serde_json::{Number, Value};

    pub(super) struct Strict(pub(super) Value);

    impl<'de> IntoDeserializer<'de, serde_json::Error> for Strict {
        type Deserializer = Self;
        fn into_deserializer(self) -> Self {
            self
        }
    }

    /// `5.0` as 5; None for a number with a fraction or out of range.
    fn whole(n: &Number) -> Option<i64> {
        let f = n.as_f64().filter(|_| n.is_f64())?;
        // i64::MAX as f64 rounds up to 2^63, itself out of range.
        (f.fract() == 0.0 && f >= i64::MIN as f64 && f < i64::MAX as f64).then_some(f as i64)
    }

    fn unexpected(v: &Value) -> Unexpected<'_> {
        match v {
            Value::Null => Unexpected::Unit,
            Value::Bool(b) => Unexpected::Bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), ..) => Unexpected::Unsigned(u),
                (_, Some(i), _) => Unexpected::Signed(i),
                (.., f) => Unexpected::Float(f.unwrap_or(f64::NAN)),
            },
            Value::String(s) => Unexpected::Str(s),
            Value::Array(_) => Unexpected::Seq,
            Value::Object(_) => Unexpected::Map,
        }
    }

    impl<'de> de::Deserializer<'de> for Strict {
        type Error = serde_json::Error;

        fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
            match self.0 {
                Value::Array(items) => {
                    let mut seq = SeqDeserializer::new(items.into_iter().map(Strict));
                    let value = visitor.visit_seq(&mut seq)?;
                    seq.end()?;
                    Ok(value)
                }
                Value::Object(fields) => {
                    let mut map =
                        MapDeserializer::new(fields.into_iter().map(|(k, v)| (k, Strict(v))));
                    let value = visitor.visit_map(&mut map)?;
                    map.end()?;
                    Ok(value)
                }
                Value::Number(n) => match whole(&n) {
                    Some(i) => visitor.visit_i64(i),
                    None => Value::Number(n).deserialize_any(visitor),
                },
                other => other.deserialize_any(visitor),
            }
        }

        fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
            match self.0 {
                Value::Null => visitor.visit_none(),
                other => visitor.visit_some(Strict(other)),
            }
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            _fields: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, Self::Error> {
            match self.0 {
                Value::Object(_) => self.deserialize_any(visitor),
                other => Err(de::Error::invalid_type(unexpected(&other), &visitor)),
            }
        }

        fn deserialize_newtype_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            visitor: V,
        ) -> Result<V::Value, Self::Error> {
            visitor.visit_newtype_struct(self)
        }

        fn deserialize_enum<V: Visitor<'de>>(
            self,
            name: &'static str,
            variants: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, Self::Error> {
            self.0.deserialize_enum(name, variants, visitor)
        }

        forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf unit unit_struct seq tuple tuple_struct map identifier ignored_any
        }
    }
}
