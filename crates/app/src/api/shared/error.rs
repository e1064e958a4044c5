//! An error as the API returns it: `{"error": {"code", "message", "field"?}}`,
//! and how the registrar's errors become one.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use toki_core::registrar::{OverBudget, RegistrarError};
use toki_model::ValidationError;
use toki_ports::StoreError;
use utoipa::ToSchema;

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
    /// 400: a header's value is not valid; `field` names the header.
    BadHeader,
    /// 413: the body is over the route's limit.
    TooLarge,
    /// 415: the body is not declared JSON.
    UnsupportedMediaType,
    /// 401: missing, wrong, expired or revoked key, unknown or malformed tenant.
    Unauthorized,
    /// 403: the key is valid but the tenant is suspended.
    TenantSuspended,
    /// 404.
    NotFound,
    /// 409: a request with this `Idempotency-Key` is still in progress;
    /// retry once it has finished.
    InProgress,
    /// 422: a value is not valid; `field` names it.
    Invalid,
    /// 422: this `Idempotency-Key` was used within 24 h for another request
    /// (another method, path or body); use a new key for a new request.
    IdempotencyKeyReused,
    /// 422: the write would add beyond one of the tenant's caps; `field`
    /// names it (`max_schedules`, `max_users`, `max_templates`,
    /// `max_suppressions`, `max_event_endpoints`, `max_idempotency_keys`).
    CapReached,
    /// 429: over the tenant's API rate or requests at once; `field` names
    /// the limit (`api_rate`, `api_concurrency`); retry after `Retry-After`.
    TooManyRequests,
    /// 503: a backend cannot be reached; retry.
    Unavailable,
    /// 500.
    Internal,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
        }
    }

    /// The error, naming the field at fault (if any).
    pub(crate) fn with_field(self, field: Option<String>) -> Self {
        Self { field, ..self }
    }

    /// The response's status.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    /// The `error` object of the response body.
    pub(crate) fn body(self) -> ErrorDetail {
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
            RegistrarError::Invalid(v) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::Invalid,
                v.to_string(),
            )
            .with_field(Some(v.field)),
            RegistrarError::UnknownTenant(_) => unauthorized(),
            e @ RegistrarError::CapReached { what, .. } => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::CapReached,
                e.to_string(),
            )
            .with_field(Some(what.cap_name().to_owned())),
            RegistrarError::OverBudget(e @ OverBudget::Rows { .. }) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::Invalid,
                e.to_string(),
            )
            .with_field(Some("schedules".into())),
            RegistrarError::OverBudget(e @ OverBudget::Time { .. }) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Unavailable,
                e.to_string(),
            )
            .with_field(Some("schedules".into())),
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

impl From<ValidationError> for ApiError {
    fn from(v: ValidationError) -> Self {
        RegistrarError::Invalid(v).into()
    }
}

/// Unknown tenant and wrong key look the same, so tenant ids cannot be probed.
pub(crate) fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        ErrorCode::Unauthorized,
        "unknown tenant or wrong API key",
    )
}

/// A valid key of a suspended tenant (`toki tenant set --active off`).
pub(crate) fn suspended() -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        ErrorCode::TenantSuspended,
        "the tenant is suspended",
    )
}
