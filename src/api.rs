//! The registrar HTTP API: `PUT/GET/DELETE /v1/tenants/{tenant}/schedules/{id}`,
//! `PUT/GET /v1/tenants/{tenant}/users/{id}`, JSON in and out, a bearer API
//! key per tenant. Served by `toki serve` and by the registrar Lambda.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use serde::Serialize;
use serde_json::json;
use toki_core::input::{ScheduleInput, ScheduleView, UserInput, UserView};
use toki_core::registrar::{Registrar, RegistrarError};
use toki_core::{StoreError, TenantId};

use crate::app::api_key_hash;

/// The header that may carry the tenant's API key instead of `Authorization`.
pub const API_KEY_HEADER: &str = "x-toki-api-key";

#[derive(Clone)]
pub struct ApiState {
    pub registrar: Arc<Registrar>,
}

pub fn router(registrar: Arc<Registrar>) -> Router {
    Router::new()
        .route(
            "/v1/tenants/{tenant}/schedules/{id}",
            put(put_schedule).get(get_schedule).delete(delete_schedule),
        )
        .route(
            "/v1/tenants/{tenant}/users/{id}",
            put(put_user).get(get_user),
        )
        .route("/healthz", get(|| async { "ok" }))
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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(f) = self.field {
            error["field"] = json!(f);
        }
        (self.status, Json(json!({ "error": error }))).into_response()
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
            RegistrarError::Store(StoreError::Unavailable(m)) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", m)
            }
            RegistrarError::Store(e) => {
                tracing::error!(error = %e, "registrar store error");
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

/// A JSON body that does not parse: name the field serde complained about.
fn bad_json(rejection: JsonRejection) -> ApiError {
    let text = rejection.body_text();
    let field = text
        .split('`')
        .nth(1)
        .filter(|_| text.contains("field"))
        .map(str::to_owned);
    ApiError {
        status: StatusCode::BAD_REQUEST,
        code: "bad_json",
        message: text,
        field,
    }
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
                .and_then(|v| v.strip_prefix("Bearer "))
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
) -> Result<Json<ScheduleResponse>, ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let Json(input) = body.map_err(bad_json)?;
    let r = state.registrar.put_schedule(&tenant, &id, &input).await?;
    Ok(Json(ScheduleResponse {
        schedule: ScheduleView::from(&r.schedule),
        mirrored: r.mirrored,
        enqueued_directly: r.enqueued_directly,
    }))
}

async fn get_schedule(
    State(state): State<ApiState>,
    Path((tenant, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<ScheduleView>, ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    let s = state.registrar.get_schedule(&tenant, &id).await?;
    Ok(Json(ScheduleView::from(&s)))
}

async fn delete_schedule(
    State(state): State<ApiState>,
    Path((tenant, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
    state.registrar.delete_schedule(&tenant, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn put_user(
    State(state): State<ApiState>,
    Path((tenant, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Json<UserInput>, JsonRejection>,
) -> Result<Json<UserView>, ApiError> {
    let tenant = authorize(&state, &tenant, &headers).await?;
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
    let u = state.registrar.get_user(&tenant, &id).await?;
    Ok(Json(UserView::from(&u)))
}
