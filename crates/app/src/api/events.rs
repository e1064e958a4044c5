//! Delivery events: `…/event-endpoints[/{id}[/secret:rotate|/enable|/replay]]`
//! and `…/events`.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use toki_core::events::{EventEndpoints, EventsError, Put, MAX_LISTED};
use toki_model::domain::{EndpointId, Instant};
use toki_model::event::{
    EndpointSpec, EndpointStatus, EndpointUrl, EventEndpoint, EventKind, EventKinds, EventOrdering,
    StoredEvent,
};
use toki_model::ValidationError;
use utoipa::{IntoParams, ToSchema};

use super::shared::{
    bad_query, parse_body, path_id, ApiError, ApiState, AuthedTenant, BodyErrors, ErrorBody,
    IdParam, IdempotencyKeyHeader, IdempotentBodyErrors, JsonBody, SeqPage, TenantErrors,
    TenantPath,
};

fn service(state: &ApiState) -> EventEndpoints {
    EventEndpoints::new(
        state.registrar.stores.clone(),
        state.registrar.marker.marks().clone(),
        state.registrar.clock.clone(),
    )
    .with_caps(toki_core::events::EndpointCaps {
        directory: state.registrar.directory.clone(),
        caps: state.registrar.settings.caps,
    })
}

impl From<EventsError> for ApiError {
    fn from(e: EventsError) -> Self {
        match e {
            EventsError::NotFound(id) => {
                toki_core::registrar::RegistrarError::NotFound(format!("event endpoint {id}"))
                    .into()
            }
            EventsError::CapReached { cap, have } => {
                toki_core::registrar::RegistrarError::CapReached {
                    what: toki_model::quota::Counted::EventEndpoints,
                    cap,
                    have,
                    adding: 1,
                }
                .into()
            }
            EventsError::Store(e) => toki_core::registrar::RegistrarError::Store(e).into(),
        }
    }
}

/// An endpoint as the tenant describes it.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EndpointInput {
    /// `https://…`, at most 2,048 bytes; its host must not resolve to a
    /// private, loopback or link-local address.
    #[schema(max_length = 2048)]
    url: String,
    /// The event types it receives (all six when absent).
    #[serde(default)]
    #[schema(value_type = Option<Vec<String>>, example = json!(["delivery.delivered", "delivery.failed"]))]
    types: Option<Vec<String>>,
    /// `in_order` (the default: one at a time, in order of occurrence; a
    /// failure holds back the rest) or `unordered` (several at once).
    #[serde(default)]
    #[schema(value_type = Option<OrderingDoc>, example = "in_order")]
    ordering: Option<EventOrdering>,
}

/// How an endpoint gets its events (the document's view of `EventOrdering`).
#[derive(ToSchema)]
#[schema(as = EventOrdering)]
#[allow(dead_code)]
#[serde(rename_all = "snake_case")]
enum OrderingDoc {
    InOrder,
    Unordered,
}

impl EndpointInput {
    fn spec(self) -> Result<EndpointSpec, ValidationError> {
        let url = EndpointUrl::parse("url", &self.url)?;
        let kinds = match self.types {
            None => EventKinds::all(),
            Some(types) => {
                let kinds = types
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        t.parse::<EventKind>()
                            .map_err(|e| ValidationError::new(format!("types[{i}]"), e))
                    })
                    .collect::<Result<EventKinds, _>>()?;
                if kinds.is_empty() {
                    return Err(ValidationError::new("types", "must name at least one type"));
                }
                kinds
            }
        };
        Ok(EndpointSpec {
            url,
            kinds,
            ordering: self.ordering.unwrap_or(EventOrdering::InOrder),
        })
    }
}

/// An endpoint and where its sending stands. `secret` only in the answer
/// that made it (creation, rotation): Toki shows it once.
#[derive(Serialize, ToSchema)]
pub(crate) struct EndpointView {
    id: String,
    url: String,
    types: Vec<String>,
    #[schema(value_type = OrderingDoc, example = "in_order")]
    ordering: EventOrdering,
    enabled: bool,
    /// Why it was turned off (after repeated failures).
    #[serde(skip_serializing_if = "Option::is_none")]
    disabled_reason: Option<String>,
    /// Failed attempts in a row.
    failures: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
    /// The last event (`seq`) it has.
    delivered_through: u64,
    #[schema(value_type = String, format = DateTime)]
    next_attempt_at: Instant,
    #[schema(value_type = String, format = DateTime)]
    created_at: Instant,
    /// `whsec_…`: verify the `webhook-signature` header with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
}

impl EndpointView {
    fn of(e: &EventEndpoint, secret: Option<String>) -> Self {
        let disabled_reason = match &e.progress.status {
            EndpointStatus::Enabled => None,
            EndpointStatus::Disabled { reason } => Some(reason.clone()),
        };
        EndpointView {
            id: e.id.to_string(),
            url: e.spec.url.as_str().to_owned(),
            types: e.spec.kinds.iter().map(|k| k.as_str().to_owned()).collect(),
            ordering: e.spec.ordering,
            enabled: disabled_reason.is_none(),
            disabled_reason,
            failures: e.progress.failures,
            last_error: e.progress.last_error.clone(),
            delivered_through: e.progress.cursor,
            next_attempt_at: e.progress.next_attempt_at,
            created_at: e.created_at,
            secret,
        }
    }
}

#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(crate) struct EndpointPath {
    /// The tenant (lowercase letters, digits, `_` and `-`, starting with a letter).
    #[param(pattern = "^[a-z][a-z0-9_-]{0,39}$", example = "acme")]
    tenant: String,
    /// The endpoint's id (letters, digits and `_ - . : @`), the tenant's choice.
    #[param(pattern = "^[A-Za-z0-9_.:@-]{1,128}$", example = "ops-events")]
    id: String,
}

/// Registers an endpoint for delivery events, or changes its URL, types or ordering.
#[utoipa::path(
    put,
    path = "/v1/tenants/{tenant}/event-endpoints/{id}",
    tag = "events",
    params(EndpointPath),
    request_body = EndpointInput,
    responses(
        (status = 201, description = "Registered: it gets the events that occur from now on; `secret` is shown this once", body = EndpointView),
        (status = 200, description = "Changed (secret and progress kept)", body = EndpointView),
        (status = 422, description = "A value is not valid (`field`: `url`, `types[i]`, `id`), or (`code: cap_reached`, `field: max_event_endpoints`) the tenant has as many endpoints as its cap allows (10 by default)", body = ErrorBody),
        BodyErrors,
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn put_endpoint(
    State(state): State<ApiState>,
    Path(IdParam { id }): Path<IdParam>,
    AuthedTenant(tenant): AuthedTenant,
    body: JsonBody,
) -> Result<(StatusCode, Json<EndpointView>), ApiError> {
    let id: EndpointId = path_id(&id)?;
    let input: EndpointInput = parse_body(body)?;
    let spec = input.spec()?;
    state.registrar.settings.egress.check("url", &spec.url)?;
    Ok(match service(&state).put(&tenant, &id, spec).await? {
        Put::Created { endpoint, secret } => (
            StatusCode::CREATED,
            Json(EndpointView::of(&endpoint, Some(secret.expose()))),
        ),
        Put::Updated(endpoint) => (StatusCode::OK, Json(EndpointView::of(&endpoint, None))),
    })
}

/// An endpoint and where its sending stands.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/event-endpoints/{id}",
    tag = "events",
    params(EndpointPath),
    responses(
        (status = 200, description = "The endpoint", body = EndpointView),
        (status = 404, description = "No such endpoint", body = ErrorBody),
        (status = 422, description = "The id is not an endpoint id (`field`: `id`)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn get_endpoint(
    State(state): State<ApiState>,
    Path(IdParam { id }): Path<IdParam>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<Json<EndpointView>, ApiError> {
    let e = service(&state).get(&tenant, &path_id(&id)?).await?;
    Ok(Json(EndpointView::of(&e, None)))
}

/// Removes an endpoint: nothing more is sent to it.
#[utoipa::path(
    delete,
    path = "/v1/tenants/{tenant}/event-endpoints/{id}",
    tag = "events",
    params(EndpointPath),
    responses(
        (status = 204, description = "Removed"),
        (status = 404, description = "No such endpoint", body = ErrorBody),
        (status = 422, description = "The id is not an endpoint id (`field`: `id`)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn delete_endpoint(
    State(state): State<ApiState>,
    Path(IdParam { id }): Path<IdParam>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<StatusCode, ApiError> {
    let id: EndpointId = path_id(&id)?;
    if service(&state).delete(&tenant, &id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(EventsError::NotFound(id).into())
    }
}

/// Every endpoint of the tenant.
#[derive(Serialize, ToSchema)]
pub(crate) struct EndpointList {
    endpoints: Vec<EndpointView>,
}

/// The tenant's endpoints.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/event-endpoints",
    tag = "events",
    params(TenantPath),
    responses((status = 200, description = "The endpoints, by id", body = EndpointList), TenantErrors),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn list_endpoints(
    State(state): State<ApiState>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<Json<EndpointList>, ApiError> {
    let endpoints = service(&state).list(&tenant).await?;
    Ok(Json(EndpointList {
        endpoints: endpoints
            .iter()
            .map(|e| EndpointView::of(e, None))
            .collect(),
    }))
}

/// A new signing secret; the one before it keeps signing for 24 hours (both
/// signatures are sent), so the receiver can switch without losing events.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/event-endpoints/{id}/secret:rotate",
    tag = "events",
    params(EndpointPath),
    responses(
        (status = 200, description = "Rotated; `secret` is the new one, shown this once", body = EndpointView),
        (status = 400, description = "An `Idempotency-Key` was sent (`bad_header`, `field`: `Idempotency-Key`): the answer is a secret, which is never kept, so this route takes no key; nothing was rotated", body = ErrorBody),
        (status = 404, description = "No such endpoint", body = ErrorBody),
        (status = 422, description = "The id is not an endpoint id (`field`: `id`)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn rotate_secret(
    State(state): State<ApiState>,
    Path(IdParam { id }): Path<IdParam>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<Json<EndpointView>, ApiError> {
    let (e, secret) = service(&state)
        .rotate_secret(&tenant, &path_id(&id)?)
        .await?;
    Ok(Json(EndpointView::of(&e, Some(secret.expose()))))
}

/// Sends to an endpoint again (after it was disabled), from where it stopped.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/event-endpoints/{id}/enable",
    tag = "events",
    params(EndpointPath),
    responses(
        (status = 200, description = "Enabled", body = EndpointView),
        (status = 404, description = "No such endpoint", body = ErrorBody),
        (status = 422, description = "The id is not an endpoint id (`field`: `id`)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn enable_endpoint(
    State(state): State<ApiState>,
    Path(IdParam { id }): Path<IdParam>,
    AuthedTenant(tenant): AuthedTenant,
) -> Result<Json<EndpointView>, ApiError> {
    let e = service(&state).enable(&tenant, &path_id(&id)?).await?;
    Ok(Json(EndpointView::of(&e, None)))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReplayInput {
    /// Every event that occurred at or after this instant is sent again (within the window kept).
    #[schema(value_type = String, format = DateTime)]
    since: Instant,
}

/// Sends again every event from an instant on (and enables the endpoint).
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/event-endpoints/{id}/replay",
    tag = "events",
    params(EndpointPath, IdempotencyKeyHeader),
    request_body = ReplayInput,
    responses(
        (status = 200, description = "The endpoint, rewound", body = EndpointView),
        (status = 404, description = "No such endpoint", body = ErrorBody),
        (status = 422, description = "The id is not an endpoint id (`field`: `id`), the body's `since` is not valid, or `Idempotency-Key` was used with another request (`field`: `Idempotency-Key`)", body = ErrorBody),
        IdempotentBodyErrors,
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn replay(
    State(state): State<ApiState>,
    Path(IdParam { id }): Path<IdParam>,
    AuthedTenant(tenant): AuthedTenant,
    body: JsonBody,
) -> Result<Json<EndpointView>, ApiError> {
    let id: EndpointId = path_id(&id)?;
    let input: ReplayInput = parse_body(body)?;
    let e = service(&state).replay(&tenant, &id, input.since).await?;
    Ok(Json(EndpointView::of(&e, None)))
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct EventsQuery {
    /// Events after this `seq` (0: from the oldest kept).
    #[serde(default)]
    #[param(maximum = 9223372036854775807_u64)]
    after: u64,
    /// At most this many (1 to 1,000; 100 by default).
    #[serde(default)]
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// One event as listed: what its endpoint receives, with its place in the log.
#[derive(Serialize, ToSchema)]
pub(crate) struct EventView {
    seq: u64,
    /// The `webhook-id` it is sent with.
    id: String,
    #[serde(rename = "type")]
    kind: String,
    #[schema(value_type = String, format = DateTime)]
    timestamp: Instant,
    #[schema(value_type = Object)]
    data: serde_json::Value,
}

impl From<&StoredEvent> for EventView {
    fn from(e: &StoredEvent) -> Self {
        EventView {
            seq: e.seq,
            id: e.webhook_id(),
            kind: e.kind.as_str().to_owned(),
            timestamp: e.occurred_at,
            data: serde_json::to_value(&e.data).expect("event data serialises"),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub(crate) struct EventList {
    events: Vec<EventView>,
    /// Pass as `after` for the next page (absent at the end).
    #[serde(skip_serializing_if = "Option::is_none")]
    next_after: Option<u64>,
}

/// The tenant's delivery events, in order of occurrence, kept for the window
/// (7 days by default). Events are recorded while the tenant has an enabled
/// endpoint that wants their type.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/events",
    tag = "events",
    params(TenantPath, EventsQuery),
    responses(
        (status = 200, description = "A page of events", body = EventList),
        (status = 400, description = "The query string is not this route's (`field` names the parameter)", body = ErrorBody),
        (status = 422, description = "`limit` is not 1 to 1,000, or `after` is beyond the largest sequence number (`field` names it)", body = ErrorBody),
        TenantErrors,
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub(crate) async fn list_events(
    State(state): State<ApiState>,
    AuthedTenant(tenant): AuthedTenant,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Json<EventList>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let page = SeqPage::checked(q.after, q.limit, MAX_LISTED)?;
    let events = service(&state)
        .events(&tenant, page.after, page.limit)
        .await?;
    let next_after = page.next_after(events.len(), events.last().map(|e| e.seq));
    Ok(Json(EventList {
        events: events.iter().map(EventView::from).collect(),
        next_after,
    }))
}
