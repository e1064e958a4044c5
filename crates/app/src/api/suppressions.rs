//! The tenant's suppression list and mail settings:
//! `GET /v1/tenants/{tenant}/suppressions`, `PUT/GET/DELETE …/suppressions/{address}`,
//! `GET/PUT /v1/tenants/{tenant}/mail` (docs/suppression.md).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use toki_model::suppression::{ListedAddress, MailSettings, SuppressionInput, SuppressionView};
use toki_model::ValidationError;
use toki_ports::suppression::MAX_LISTED;
use utoipa::{IntoParams, ToSchema};

use super::shared::{
    bad_query, parse_body, ApiError, ApiState, AuthedTenant, BodyErrors, ErrorBody, JsonBody,
    TenantErrors, TenantPath,
};

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct AddressPath {
    /// The tenant (lowercase letters, digits, `_` and `-`, starting with a letter).
    #[param(pattern = "^[a-z][a-z0-9_-]{0,39}$", example = "acme")]
    #[allow(dead_code)]
    tenant: String,
    /// A mail address (compared with its ASCII letters lower-cased).
    #[param(example = "ana@example.com", max_length = 254)]
    address: String,
}

fn address(path: &AddressPath) -> Result<ListedAddress, ApiError> {
    Ok(ListedAddress::parse("address", &path.address)?)
}

/// An entry of the list.
#[derive(Serialize, ToSchema)]
#[schema(as = Suppression)]
pub(crate) struct SuppressionDoc {
    address: String,
    /// `bounce`, `complaint` (SES), `refused` (an SMTP server refused the mailbox) or `manual`.
    #[schema(pattern = "^(bounce|complaint|refused|manual)$")]
    reason: String,
    /// What the bounce or the server said, or the tenant's note.
    detail: Option<String>,
    /// RFC 3339: when it was listed.
    since: String,
}

/// What to send to list an address by hand.
#[derive(Deserialize, ToSchema)]
#[schema(as = SuppressionInput)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct SuppressionInputDoc {
    /// At most 1,000 bytes; null or absent: none.
    #[serde(default)]
    #[schema(max_length = 1000)]
    note: Option<String>,
}

/// The tenant's `List-Unsubscribe`.
#[derive(Default, Serialize, Deserialize, ToSchema)]
#[schema(as = ListUnsubscribe)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct ListUnsubscribeDoc {
    /// An https URL that takes a one-click POST; `{user}` becomes the
    /// recipient's id. Null or absent: none.
    #[serde(default)]
    #[schema(max_length = 2048)]
    url: Option<String>,
    /// A mail address unsubscribe requests go to. Null or absent: none.
    #[serde(default)]
    #[schema(max_length = 254)]
    mailto: Option<String>,
}

/// The tenant's mail settings.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = MailSettings)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct MailSettingsDoc {
    /// Absent: none.
    #[serde(default)]
    list_unsubscribe: ListUnsubscribeDoc,
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct SuppressionsQuery {
    /// Entries after this address (in address order).
    after: Option<String>,
    /// At most this many (1 to 1,000; 100 by default).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct SuppressionList {
    #[schema(value_type = Vec<SuppressionDoc>)]
    suppressions: Vec<SuppressionView>,
    /// Pass as `after` for the next page (absent at the end).
    #[serde(skip_serializing_if = "Option::is_none")]
    next_after: Option<String>,
}

/// The list, in address order.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/suppressions",
    tag = "mail",
    params(TenantPath, SuppressionsQuery),
    responses(
        (status = 200, description = "A page of entries", body = SuppressionList),
        (status = 400, description = "The query string is not this route's (`field` names the parameter)", body = ErrorBody),
        (status = 422, description = "`limit` is not 1 to 1,000, or `after` is not a mail address (`field` names it)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn list_suppressions(
    State(state): State<ApiState>,
    AuthedTenant(tenant): AuthedTenant,
    query: Result<Query<SuppressionsQuery>, QueryRejection>,
) -> Result<Json<SuppressionList>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=MAX_LISTED).contains(&limit) {
        let problem = format!("must be 1 to {MAX_LISTED}, got {limit}");
        return Err(ValidationError::new("limit", problem).into());
    }
    let after = q
        .after
        .as_deref()
        .map(|a| ListedAddress::parse("after", a))
        .transpose()?;
    let page = state
        .registrar
        .suppressions(&tenant, after.as_ref(), limit)
        .await?;
    let next_after = (page.len() == limit)
        .then(|| page.last().map(|s| s.address.to_string()))
        .flatten();
    Ok(Json(SuppressionList {
        suppressions: page.iter().map(SuppressionView::from).collect(),
        next_after,
    }))
}

/// Lists an address by hand (`reason`: `manual`): reminders to it are
/// recorded `undeliverable` instead of mailed. An address listed already
/// keeps its entry.
#[utoipa::path(
    put,
    path = "/v1/tenants/{tenant}/suppressions/{address}",
    tag = "mail",
    params(AddressPath),
    request_body = SuppressionInputDoc,
    responses(
        (status = 200, description = "Listed (the entry, the first one if it was listed already)", body = SuppressionDoc),
        (status = 422, description = "`address` is not a mail address, or `note` is longer than 1,000 bytes, or (`code: cap_reached`, `field: max_suppressions`) a new address would take the list past the tenant's cap; nothing written", body = ErrorBody),
        BodyErrors,
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn put_suppression(
    State(state): State<ApiState>,
    Path(path): Path<AddressPath>,
    AuthedTenant(tenant): AuthedTenant,
    body: JsonBody,
) -> Result<Json<SuppressionView>, ApiError> {
    let address = address(&path)?;
    let input: SuppressionInput = parse_body(body)?;
    let entry = state
        .registrar
        .suppress_address(&tenant, &address, &input)
        .await?;
    Ok(Json(SuppressionView::from(&entry)))
}

/// Takes an address off the list: it is mailed again.
#[utoipa::path(
    delete,
    path = "/v1/tenants/{tenant}/suppressions/{address}",
    tag = "mail",
    params(AddressPath),
    responses(
        (status = 204, description = "Removed"),
        (status = 404, description = "The address is not on the list", body = ErrorBody),
        (status = 422, description = "`address` is not a mail address", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn delete_suppression(
    State(state): State<ApiState>,
    Path(path): Path<AddressPath>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<StatusCode, ApiError> {
    let address = address(&path)?;
    state.registrar.unsuppress(&tenant, &address).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The tenant's mail settings.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/mail",
    tag = "mail",
    params(TenantPath),
    responses(
        (status = 200, description = "The settings (defaults if never set)", body = MailSettingsDoc),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn get_mail_settings(
    State(state): State<ApiState>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<Json<MailSettings>, ApiError> {
    Ok(Json(state.registrar.mail_settings(&tenant).await?))
}

/// Sets the `List-Unsubscribe` (and, with a URL, `List-Unsubscribe-Post:
/// List-Unsubscribe=One-Click`) put on the tenant's reminder mail; both
/// parts absent turn it off.
#[utoipa::path(
    put,
    path = "/v1/tenants/{tenant}/mail",
    tag = "mail",
    params(TenantPath),
    request_body = MailSettingsDoc,
    responses(
        (status = 200, description = "Written", body = MailSettingsDoc),
        (status = 422, description = "`list_unsubscribe.url` is not an https URL of at most 2,048 bytes, or `list_unsubscribe.mailto` is not a mail address; nothing written", body = ErrorBody),
        BodyErrors,
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn put_mail_settings(
    State(state): State<ApiState>,
    AuthedTenant(tenant): AuthedTenant,
    body: JsonBody,
) -> Result<Json<MailSettings>, ApiError> {
    let settings: MailSettings = parse_body(body)?;
    Ok(Json(
        state
            .registrar
            .put_mail_settings(&tenant, &settings)
            .await?,
    ))
}
