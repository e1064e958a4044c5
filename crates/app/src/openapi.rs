//! The registrar API's OpenAPI 3 document, served at `GET /openapi.json`:
//! derived by utoipa from the handlers' `#[utoipa::path]` attributes in
//! [`crate::api`]'s handler modules, and from the schema mirrors of
//! `toki_model::input`'s types in its leaf ([`crate::api::shared`]).
//!
//! It sits over the handlers: it imports them, and only the router (which
//! serves it) imports it.

use std::sync::LazyLock;

use axum::body::Bytes;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api::shared::API_KEY_HEADER;
use crate::api::{
    audit, batch, erase, events, health, occurrences, schedules, suppressions, templates, users,
    webhook,
};

/// The document as served, serialised once.
static JSON: LazyLock<Bytes> = LazyLock::new(|| {
    Bytes::from(
        ApiDoc::openapi()
            .to_pretty_json()
            .expect("an OpenAPI document serialises"),
    )
});

/// The OpenAPI document, as JSON.
pub fn json() -> Bytes {
    JSON.clone()
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Toki registrar API",
        description = "Registers the schedules, users and reminder rules whose reminders Toki delivers at the second they are due. \
            JSON in and out; every `/v1/tenants/{tenant}/...` call carries the tenant's API key as `Authorization: Bearer <key>` or as `x-toki-api-key: <key>`; \
            a wrong, expired or revoked key answers 401, a valid key of a suspended tenant 403 (`tenant_suspended`). \
            Errors answer `{\"error\": {\"code\", \"message\", \"field\"?}}` and write nothing."
    ),
    paths(
        schedules::put_schedule,
        schedules::get_schedule,
        schedules::delete_schedule,
        batch::put_schedules,
        occurrences::list_occurrences,
        occurrences::put_occurrence,
        occurrences::cancel_occurrence,
        occurrences::split_series,
        users::put_user,
        users::get_user,
        erase::erase_user,
        templates::list_templates,
        templates::put_template,
        templates::get_template,
        templates::get_default_template,
        templates::delete_template,
        events::put_endpoint,
        events::get_endpoint,
        events::delete_endpoint,
        events::list_endpoints,
        events::rotate_secret,
        events::enable_endpoint,
        events::replay,
        events::list_events,
        webhook::get_webhook,
        webhook::put_webhook,
        webhook::rotate_webhook_secret,
        suppressions::list_suppressions,
        suppressions::put_suppression,
        suppressions::delete_suppression,
        suppressions::get_mail_settings,
        suppressions::put_mail_settings,
        audit::list_audit,
        health::healthz,
        openapi_json,
    ),
    modifiers(&ApiKeys),
    tags(
        (name = "schedules", description = "Schedules (calendar events) and their reminder rules"),
        (name = "occurrences", description = "Single occurrences of a recurring schedule"),
        (name = "users", description = "The people reminders go to"),
        (name = "templates", description = "A tenant's reminder texts, per channel and locale"),
        (name = "events", description = "Delivery events posted to the tenant's endpoints, signed (Standard Webhooks), and their log"),
        (name = "webhooks", description = "The webhook channel: the tenant's default endpoint and signing secret"),
        (name = "mail", description = "The tenant's suppression list (addresses not mailed again) and its List-Unsubscribe"),
        (name = "audit", description = "The tenant's audit log: who changed what, and when (read-only)"),
        (name = "operations", description = "Health and this document"),
    )
)]
struct ApiDoc;

/// The two ways to present a tenant's API key.
struct ApiKeys;

impl Modify for ApiKeys {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "One of the tenant's API keys, as printed once by `toki tenant create` or `toki tenant key create`",
                    ))
                    .build(),
            ),
        );
        // For callers whose `Authorization` carries something else (behind
        // API Gateway's IAM authoriser it holds the SigV4 signature).
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                API_KEY_HEADER,
                "The tenant's API key, when `Authorization` carries something else",
            ))),
        );
    }
}

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses((status = 200, description = "The OpenAPI document of this API", body = Object, content_type = "application/json")),
)]
pub(crate) async fn openapi_json() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], json()).into_response()
}
