//! The API's routes: each handler module's on its path, the body limits,
//! each tenant's quota on its routes, and a span per request.

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post, put};
use axum::Router;
use toki_core::registrar::Registrar;

use super::audit::list_audit;
use super::batch::put_schedules;
use super::events::{
    delete_endpoint, enable_endpoint, get_endpoint, list_endpoints, list_events, put_endpoint,
    replay, rotate_secret,
};
use super::health::healthz;
use super::occurrences::{cancel_occurrence, list_occurrences, put_occurrence, split_series};
use super::schedules::{delete_schedule, get_schedule, put_schedule};
use super::shared::{
    idempotent_write, refuse_idempotency_key, tenant_quota, ApiQuotas, ApiState, AuthThrottle,
    IdempotentWrite, MAX_BATCH_BODY_BYTES, MAX_BODY_BYTES,
};
use super::suppressions::{
    delete_suppression, get_mail_settings, list_suppressions, put_mail_settings, put_suppression,
};
use super::templates::{
    delete_template, get_default_template, get_template, list_templates, put_template,
};
use super::users::{get_user, put_user};
use super::webhook::{get_webhook, put_webhook, rotate_webhook_secret};
use crate::openapi::openapi_json;

/// The API with the default quotas ([`ApiQuotas::default`]).
pub fn router(registrar: Arc<Registrar>) -> Router {
    router_with_quotas(registrar, Arc::new(ApiQuotas::default()))
}

/// The API, each tenant's requests within `quotas`, failed
/// authentications throttled by the default [`AuthThrottle`].
pub fn router_with_quotas(registrar: Arc<Registrar>, quotas: Arc<ApiQuotas>) -> Router {
    router_with(registrar, quotas, Arc::new(AuthThrottle::default()))
}

/// The API, each tenant's requests within `quotas`, each source's failed
/// authentications within `failures`.
pub fn router_with(
    registrar: Arc<Registrar>,
    quotas: Arc<ApiQuotas>,
    failures: Arc<AuthThrottle>,
) -> Router {
    let state = ApiState {
        registrar,
        quotas,
        failures,
    };
    Router::new()
        .merge(tenant_routes(state.clone()))
        .route(
            "/v1/templates/{channel}/{locale}",
            get(get_default_template),
        )
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi_json))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(trace_request))
        .with_state(state)
}

/// The `/v1/tenants/{tenant}/...` routes: authenticated, then within the
/// tenant's quota, before the handler runs. Layered on each route's methods
/// (not `Router::route_layer`, which also wraps the 405 of a method a path
/// lacks, and would answer it 401). A non-idempotent write (a POST) also
/// takes `idempotent`, inside the quota: `Idempotency-Key` (see
/// [`super::shared::idempotent_write`]), its body read within the route's
/// limit; one whose answer is a secret refuses the header (`no_key`).
fn tenant_routes(state: ApiState) -> Router<ApiState> {
    let keyed = |body_limit| IdempotentWrite {
        api: state.clone(),
        body_limit,
    };
    let idempotent = axum::middleware::from_fn_with_state(keyed(MAX_BODY_BYTES), idempotent_write);
    let idempotent_batch =
        axum::middleware::from_fn_with_state(keyed(MAX_BATCH_BODY_BYTES), idempotent_write);
    let no_key = axum::middleware::from_fn(refuse_idempotency_key);
    let quota = axum::middleware::from_fn_with_state(state, tenant_quota);
    Router::new()
        .route(
            "/v1/tenants/{tenant}/schedules/{id}",
            put(put_schedule)
                .get(get_schedule)
                .delete(delete_schedule)
                .route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/schedules:batch",
            post(put_schedules)
                .layer(DefaultBodyLimit::max(MAX_BATCH_BODY_BYTES))
                .route_layer(idempotent_batch)
                .route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/schedules/{id}/occurrences",
            get(list_occurrences).route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/schedules/{id}/occurrences/{original}",
            put(put_occurrence)
                .delete(cancel_occurrence)
                .route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/schedules/{id}/occurrences/{original}/following",
            put(split_series).route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/users/{id}",
            put(put_user)
                .get(get_user)
                .delete(super::erase::erase_user)
                .route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/event-endpoints",
            get(list_endpoints).route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/event-endpoints/{id}",
            put(put_endpoint)
                .get(get_endpoint)
                .delete(delete_endpoint)
                .route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/event-endpoints/{id}/secret:rotate",
            post(rotate_secret)
                .route_layer(no_key.clone())
                .route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/event-endpoints/{id}/enable",
            post(enable_endpoint).route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/event-endpoints/{id}/replay",
            post(replay)
                .route_layer(idempotent)
                .route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/events",
            get(list_events).route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/webhook",
            put(put_webhook).get(get_webhook).route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/webhook/secret:rotate",
            post(rotate_webhook_secret)
                .route_layer(no_key)
                .route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/suppressions",
            get(list_suppressions).route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/suppressions/{address}",
            put(put_suppression)
                .delete(delete_suppression)
                .route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/mail",
            put(put_mail_settings)
                .get(get_mail_settings)
                .route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/audit",
            get(list_audit).route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/templates",
            get(list_templates).route_layer(quota.clone()),
        )
        .route(
            "/v1/tenants/{tenant}/templates/{channel}/{locale}",
            put(put_template)
                .get(get_template)
                .delete(delete_template)
                .route_layer(quota),
        )
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
