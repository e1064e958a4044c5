//! The registrar HTTP API: `PUT/GET/DELETE /v1/tenants/{tenant}/schedules/{id}`,
//! `POST /v1/tenants/{tenant}/schedules:batch` (many at once), a series' occurrences (`GET .../occurrences?from=&to=`, `PUT/DELETE
//! .../occurrences/{original}`, `PUT .../occurrences/{original}/following`),
//! `PUT/GET /v1/tenants/{tenant}/users/{id}`, reminder templates
//! (`.../templates/{channel}/{locale}`, [`templates`]), the webhook channel's
//! settings (`.../webhook`, [`webhook`]), delivery-event endpoints and the
//! event log ([`events`]), the audit log, read-only (`.../audit`, [`audit`]), JSON in and out, a bearer API
//! key per tenant; `GET /openapi.json` describes them all (see
//! [`crate::openapi`]). Served by `toki serve` and by the registrar Lambda.
//!
//! In layers, each importing only those below it:
//! - [`shared`], the leaf: the error body, the API-key header, tenant
//!   authentication as an extractor ([`shared::AuthedTenant`]), idempotent
//!   writes as a middleware (`Idempotency-Key`, [`shared::idempotent_write`]), reading
//!   inputs, and the path and schema types the handlers' annotations name;
//! - the handlers, a module per resource: [`schedules`], [`batch`],
//!   [`occurrences`], [`users`], [`templates`], [`webhook`], [`health`];
//! - [`crate::openapi`], the document, over the handlers;
//! - [`router`], which puts every route (the document's too) on its path.

pub(crate) mod audit;
pub(crate) mod batch;
pub(crate) mod erase;
pub(crate) mod events;
pub(crate) mod health;
pub(crate) mod occurrences;
mod router;
pub(crate) mod schedules;
pub(crate) mod shared;
pub(crate) mod suppressions;
pub(crate) mod templates;
pub(crate) mod users;
pub(crate) mod webhook;

pub use router::{router, router_with, router_with_quotas};
pub use shared::{
    ApiError, ApiQuotas, ApiState, AuthThrottle, API_KEY_HEADER, FAILURE_BURST, FAILURE_RATE,
    IDEMPOTENT_REPLAYED_HEADER, MAX_BATCH_BODY_BYTES, MAX_BODY_BYTES, MAX_SOURCES,
};
