//! The tenant's webhook channel settings: `GET/PUT /v1/tenants/{tenant}/webhook`, `POST /v1/tenants/{tenant}/webhook/secret:rotate`.

use axum::extract::State;
use axum::Json;
use toki_model::webhook::{WebhookSettingsInput, WebhookSettingsView};

use super::shared::{
    parse_body, ApiError, ApiState, AuthedTenant, BodyErrors, ErrorBody, JsonBody, TenantErrors,
    TenantPath, WebhookSettingsInputDoc, WebhookSettingsViewDoc,
};

/// The tenant's webhook settings (never the secret).
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/webhook",
    tag = "webhooks",
    params(TenantPath),
    responses(
        (status = 200, description = "The settings", body = WebhookSettingsViewDoc),
        (status = 404, description = "The tenant has not set them (`PUT` first)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn get_webhook(
    State(state): State<ApiState>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<Json<WebhookSettingsView>, ApiError> {
    Ok(Json(state.registrar.webhook_settings(&tenant).await?))
}

/// Sets the default endpoint. The first call makes the signing secret and
/// answers it in `secret`, the only time Toki shows it.
#[utoipa::path(
    put,
    path = "/v1/tenants/{tenant}/webhook",
    tag = "webhooks",
    params(TenantPath),
    request_body = WebhookSettingsInputDoc,
    responses(
        (status = 200, description = "Written; `secret` present if this made it", body = WebhookSettingsViewDoc),
        (status = 422, description = "`default_url` is not an https URL, is too long, carries credentials, or names an address the egress policy refuses (`field`: `default_url`); nothing written", body = ErrorBody),
        BodyErrors,
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn put_webhook(
    State(state): State<ApiState>,
    AuthedTenant(tenant): AuthedTenant,
    body: JsonBody,
) -> Result<Json<WebhookSettingsView>, ApiError> {
    let input: WebhookSettingsInput = parse_body(body)?;
    Ok(Json(
        state
            .registrar
            .put_webhook_settings(&tenant, &input)
            .await?,
    ))
}

/// A new signing secret, answered once; the one it replaces signs beside
/// it for 24 hours (`previous_secret_until`), so receivers can switch.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/webhook/secret:rotate",
    tag = "webhooks",
    params(TenantPath),
    responses(
        (status = 200, description = "Rotated; `secret` is the new one", body = WebhookSettingsViewDoc),
        (status = 400, description = "An `Idempotency-Key` was sent (`bad_header`, `field`: `Idempotency-Key`): the answer is a secret, which is never kept, so this route takes no key; nothing was rotated", body = ErrorBody),
        (status = 404, description = "The tenant has not set its webhook settings", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn rotate_webhook_secret(
    State(state): State<ApiState>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<Json<WebhookSettingsView>, ApiError> {
    Ok(Json(state.registrar.rotate_webhook_secret(&tenant).await?))
}
