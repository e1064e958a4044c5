//! The retention ports: deleting a tenant's records that are past their
//! retention, a bounded batch per call, and remembering what each pass did.
//! The tenant database's part is a supertrait of `TenantStore`; the control
//! store's part (the embedded queue's dead letters, the index's expired rows)
//! is [`ControlPurge`], which AWS does not need (SQS and DynamoDB expire
//! those themselves).

use async_trait::async_trait;

use toki_model::domain::{DeliveryStatus, Instant, TenantId};
use toki_model::retention::RetentionKind;

use crate::error::StoreResult;

/// The most rows one purge statement deletes: small enough that a batch
/// holds the database's write lock (SQLite) or row locks (Postgres) for a
/// moment only, so deliveries never wait long behind it.
pub const MAX_PURGE_BATCH: u32 = 500;

/// The kinds of row in a tenant's database the purge deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TenantRows {
    /// Finished delivery rows, by when they finished ([`is_finished`]).
    Deliveries,
    /// Chat messages, by when they were written.
    Chat,
    /// Delivery events, by when they occurred.
    Events,
    /// Audit-log entries, by when they were written.
    Audit,
}

impl TenantRows {
    /// Every kind the purge deletes, in the order a pass visits them.
    pub const ALL: [TenantRows; 4] = [
        TenantRows::Deliveries,
        TenantRows::Chat,
        TenantRows::Events,
        TenantRows::Audit,
    ];

    /// The retention setting that bounds this kind.
    pub fn kind(self) -> RetentionKind {
        match self {
            TenantRows::Deliveries => RetentionKind::Deliveries,
            TenantRows::Chat => RetentionKind::Chat,
            TenantRows::Events => RetentionKind::Events,
            TenantRows::Audit => RetentionKind::Audit,
        }
    }
}

/// The kinds of row Toki keeps because of what a tenant does (not because
/// it asked) that have a cap on their number: the oldest beyond it are
/// trimmed by the retention pass rather than any write refused
/// ([`toki_model::quota::Counted::is_trimmed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trimmed {
    /// Delivery events, by sequence number.
    Events,
    /// Audit-log entries, by sequence number.
    Audit,
}

impl Trimmed {
    pub const ALL: [Trimmed; 2] = [Trimmed::Events, Trimmed::Audit];

    /// The cap that bounds this kind.
    pub fn counted(self) -> toki_model::quota::Counted {
        match self {
            Trimmed::Events => toki_model::quota::Counted::Events,
            Trimmed::Audit => toki_model::quota::Counted::AuditEntries,
        }
    }

    /// The same rows as the age purge names them.
    pub fn rows(self) -> TenantRows {
        match self {
            Trimmed::Events => TenantRows::Events,
            Trimmed::Audit => TenantRows::Audit,
        }
    }
}

/// A delivery that will not be tried again: its row may be purged once
/// old. `sending` (claimed), `throttled` and `deferred` (waiting for their
/// retry) never are. `failed` counts as finished: its message comes back
/// within minutes or is dead-lettered, far inside the shortest retention
/// (a day), and its age is measured from its last attempt.
pub fn is_finished(status: DeliveryStatus) -> bool {
    use DeliveryStatus::*;
    match status {
        Delivered | Stale | Undeliverable | Failed => true,
        Sending | Throttled | Deferred => false,
    }
}

/// What one purge pass did to one kind of a tenant's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeRecord {
    pub kind: RetentionKind,
    pub last_pass_at: Instant,
    /// Records older than this were deleted (up to the pass's cap).
    pub cutoff: Instant,
    pub last_purged: u64,
    /// Since the tenant's database began keeping the record.
    pub total_purged: u64,
}

#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Deletes up to `limit` (at most [`MAX_PURGE_BATCH`]) rows of `rows`
    /// older than `before`, oldest first; how many.
    async fn purge_rows(&self, rows: TenantRows, before: Instant, limit: u32) -> StoreResult<u64>;

    /// Deletes up to `limit` (at most [`MAX_PURGE_BATCH`]) of the oldest
    /// rows of `rows` beyond the newest `keep`; how many (the tenant's cap
    /// on them, whatever their age).
    async fn trim_rows(&self, rows: Trimmed, keep: u64, limit: u32) -> StoreResult<u64>;

    /// The age of the oldest row of `rows` a purge could delete (for
    /// deliveries, the oldest finished): when the tenant is next due a visit.
    async fn oldest_row(&self, rows: TenantRows) -> StoreResult<Option<Instant>>;

    /// Records what a pass did to `record.kind` (its total is added to the
    /// stored one).
    async fn record_purge(&self, record: &PurgeRecord) -> StoreResult<()>;

    /// What the last pass did, per kind it has touched.
    async fn purge_log(&self) -> StoreResult<Vec<PurgeRecord>>;
}

/// Purges in the control store, where the embedded backend keeps the queue
/// and the index.
#[async_trait]
pub trait ControlPurge: Send + Sync {
    /// Deletes up to `limit` dead letters of `tenant` (None: those naming
    /// no tenant) dead since before `before`, oldest first; how many.
    async fn purge_dead_letters(
        &self,
        tenant: Option<&TenantId>,
        before: Instant,
        limit: u32,
    ) -> StoreResult<u64>;

    /// Deletes up to `limit` index rows whose expiry passed before `now`.
    async fn purge_expired_index(&self, now: Instant, limit: u32) -> StoreResult<u64>;
}

/// `limit` within `1..=`[`MAX_PURGE_BATCH`].
pub fn batch_limit(limit: u32) -> u32 {
    limit.clamp(1, MAX_PURGE_BATCH)
}
