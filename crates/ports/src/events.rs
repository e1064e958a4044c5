//! The event log port: a tenant's delivery events in order of occurrence,
//! the endpoints that receive them, and where each endpoint's sending stands.
//! Part of the tenant's database: an outcome and its event are written together.

use async_trait::async_trait;

use thiserror::Error;
use toki_model::domain::{EndpointId, Instant};
use toki_model::event::{EndpointProgress, EndpointUrl, EventEndpoint, NewEvent, StoredEvent};

use crate::error::StoreResult;

/// A write of an endpoint's progress that names the revision it read:
/// refused if the tenant changed the endpoint in between (a replay, a
/// re-enable), so the dispatcher never undoes the tenant's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgressWrite<'a> {
    pub id: &'a EndpointId,
    pub read_revision: u64,
    pub progress: &'a EndpointProgress,
}

#[async_trait]
pub trait EventLog: Send + Sync {
    /// Appends the events some enabled endpoint subscribes to (the others are
    /// dropped here: nobody asked for them); how many were kept.
    async fn append_events(&self, events: &[NewEvent]) -> StoreResult<usize>;

    /// Up to `limit` events after `after`, in order.
    async fn events_after(&self, after: u64, limit: usize) -> StoreResult<Vec<StoredEvent>>;

    /// The last event's sequence number (0 for none): a new endpoint starts there.
    async fn last_event_seq(&self) -> StoreResult<u64>;

    /// The last sequence number of an event that occurred before `since`
    /// (0 for none): a replay from `since` rewinds the cursor there.
    async fn event_seq_before(&self, since: Instant) -> StoreResult<u64>;

    /// Creates or replaces an endpoint whole (bumping its revision).
    async fn put_event_endpoint(&self, endpoint: &EventEndpoint) -> StoreResult<()>;

    /// An endpoint and its revision.
    async fn event_endpoint(&self, id: &EndpointId) -> StoreResult<Option<(EventEndpoint, u64)>>;

    /// Every endpoint with its revision, by id.
    async fn event_endpoints(&self) -> StoreResult<Vec<(EventEndpoint, u64)>>;

    async fn delete_event_endpoint(&self, id: &EndpointId) -> StoreResult<bool>;

    /// Stores the dispatcher's progress if the endpoint is still at
    /// `read_revision`; whether it was.
    async fn set_endpoint_progress(&self, write: ProgressWrite<'_>) -> StoreResult<bool>;

    /// Takes the right to send to the endpoint until `until`, if nobody else
    /// holds it at `now` (one sender per endpoint across a fleet).
    async fn hold_endpoint(
        &self,
        id: &EndpointId,
        holder: &str,
        until: Instant,
        now: Instant,
    ) -> StoreResult<bool>;

    // Old events are purged through `RetentionStore::purge_rows` (`TenantRows::Events`).
}

/// A signed request to an endpoint: the Standard Webhooks headers and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedPost {
    pub webhook_id: String,
    pub timestamp_s: i64,
    pub signature: String,
    pub body: Vec<u8>,
}

/// Why an endpoint did not take a request (what the tenant sees as `last_error`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct PostError(pub String);

/// Sends a signed request to an endpoint: 2xx is taken; anything else, a
/// refused address or no answer in time is a [`PostError`].
#[async_trait]
pub trait EventPoster: Send + Sync {
    async fn post(&self, url: &EndpointUrl, request: &SignedPost) -> Result<(), PostError>;
}
