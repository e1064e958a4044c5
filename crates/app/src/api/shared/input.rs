//! What a request brings in: its JSON body (read as the document describes
//! it, see [`super::strict`]), its query string and its path's ids, each
//! failing as a 400 or 422 [`ApiError`] naming what does not fit.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::Json;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use toki_model::ValidationError;

use super::error::{ApiError, ErrorCode};
use super::strict::Strict;

/// The largest request body accepted (413 beyond): a schedule at every input
/// limit fits well inside.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// The largest batch body: [`toki_core::registrar::MAX_BATCH`] ordinary schedules fit many times over.
pub const MAX_BATCH_BODY_BYTES: usize = 8 * 1024 * 1024;

/// A route's body as the handlers take it: JSON or why not, parsed into
/// the route's input by [`parse_body`].
pub(crate) type JsonBody = Result<Json<Value>, JsonRejection>;

/// The `{id}` of a schedule's or a user's path (the tenant is [`super::AuthedTenant`]'s).
#[derive(Deserialize)]
pub(crate) struct IdParam {
    pub(crate) id: String,
}

/// The `{id}` and `{original}` of an occurrence's path.
#[derive(Deserialize)]
pub(crate) struct OccurrenceParams {
    pub(crate) id: String,
    pub(crate) original: String,
}

/// The `{channel}` and `{locale}` of a tenant's template's path.
#[derive(Deserialize)]
pub(crate) struct TemplateParams {
    pub(crate) channel: String,
    pub(crate) locale: String,
}

/// The field a serde error names (`unknown field `x``, `missing field `y``).
pub(crate) fn serde_field(text: &str) -> Option<&str> {
    text.split('`').nth(1).filter(|_| text.contains("field"))
}

/// A JSON body that does not parse: name the field serde complained about;
/// one over the size limit is 413 naming the limit.
fn bad_json(rejection: JsonRejection) -> ApiError {
    bad_body(rejection, MAX_BODY_BYTES)
}

/// [`bad_json`] for a route whose body may be up to `limit` bytes.
pub(crate) fn bad_body(rejection: JsonRejection, limit: usize) -> ApiError {
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
            ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::BadJson, text).with_field(field)
        }
    }
}

/// A route's input from its JSON body: 400 naming what does not fit.
pub(crate) fn parse_body<T: DeserializeOwned>(body: JsonBody) -> Result<T, ApiError> {
    let Json(value) = body.map_err(bad_json)?;
    from_json(value).map_err(bad_input)
}

/// A body that is JSON but not the route's input type.
pub(crate) fn bad_input(e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let text = e.to_string();
    let field = serde_field(&text).map(str::to_owned);
    ApiError::new(
        StatusCode::BAD_REQUEST,
        ErrorCode::BadJson,
        format!("Failed to deserialize the JSON body into the target type: {text}"),
    )
    .with_field(field)
}

/// `value` as a `T`, as the document describes it: see [`super::strict`].
pub(crate) fn from_json<T: DeserializeOwned>(
    value: Value,
) -> Result<T, serde_path_to_error::Error<serde_json::Error>> {
    serde_path_to_error::deserialize(Strict(value))
}

/// A query string that does not deserialise (a parameter given twice):
/// 400 naming it, in the API's error shape (axum's own answer is plain text).
pub(crate) fn bad_query(rejection: QueryRejection) -> ApiError {
    let text = rejection.body_text();
    let field = serde_field(&text).map(str::to_owned);
    ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::BadQuery, text).with_field(field)
}

/// The `{id}` of a path, parsed into a domain id (422 naming `id` if it is not one).
pub(crate) fn path_id<T: std::str::FromStr<Err = ValidationError>>(
    id: &str,
) -> Result<T, ApiError> {
    id.parse::<T>()
        .map_err(|e| ValidationError::new("id", e.problem).into())
}
