//! The API's leaf: what every handler module shares, and nothing else of
//! the API. The error an API call answers ([`error`]), tenant
//! authentication as an extractor ([`auth`]), the state and the key header
//! ([`state`]), each tenant's share of the API ([`quota`]), failed
//! authentications throttled per source ([`throttle`]), idempotent
//! writes ([`idempotency`]), reading bodies, queries and path ids ([`input`], after
//! [`strict`]), the schedule-write answer ([`written`]) and what the
//! handlers' OpenAPI annotations name ([`schema`]).

mod admission;
mod audit;
mod auth;
mod error;
mod idempotency;
mod input;
mod page;
mod quota;
mod schema;
mod state;
mod strict;
mod throttle;
mod written;

pub(crate) use admission::tenant_quota;
pub(crate) use audit::{AuditTarget, Audited};
pub(crate) use auth::AuthedTenant;
pub use error::ApiError;
pub(crate) use error::{ErrorBody, ErrorDetail};
pub use idempotency::IDEMPOTENT_REPLAYED_HEADER;
pub(crate) use idempotency::{idempotent_write, refuse_idempotency_key, IdempotentWrite};
pub(crate) use input::{
    bad_body, bad_input, bad_query, from_json, parse_body, path_id, serde_field, IdParam, JsonBody,
    OccurrenceParams, TemplateParams,
};
pub use input::{MAX_BATCH_BODY_BYTES, MAX_BODY_BYTES};
pub(crate) use page::SeqPage;
pub use quota::ApiQuotas;
pub(crate) use schema::{
    BatchItemDoc, BodyErrors, IdempotencyKeyHeader, IdempotentBodyErrors, OccurrenceInputDoc,
    OccurrencePath, OccurrenceViewDoc, ScheduleInputDoc, SchedulePath, ScheduleViewDoc,
    TemplateInputDoc, TemplateKeyPath, TenantErrors, TenantPath, UserInputDoc, UserPath,
    UserViewDoc, WebhookSettingsInputDoc, WebhookSettingsViewDoc,
};
pub use state::{ApiState, API_KEY_HEADER};
pub use throttle::{AuthThrottle, FAILURE_BURST, FAILURE_RATE, MAX_SOURCES};
pub(crate) use written::{schedule_response, written, ScheduleAnswer, ScheduleResponse};
