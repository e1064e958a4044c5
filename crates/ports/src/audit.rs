//! The audit log port: who changed what in a tenant, and when, appended to
//! the tenant's database (docs/audit.md). Append-only: nothing updates or
//! deletes an entry except the retention purge.

use async_trait::async_trait;

use toki_model::audit::{AuditEntry, StoredAuditEntry};
use toki_model::domain::Instant;

use crate::error::StoreResult;

#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Appends `entries` in order, numbered after the last, in one transaction.
    async fn append_audit(&self, entries: &[AuditEntry]) -> StoreResult<()>;

    /// Up to `limit` entries numbered after `after`, oldest first.
    async fn audit_after(&self, after: u64, limit: usize) -> StoreResult<Vec<StoredAuditEntry>>;

    /// Deletes up to `limit` entries made before `before`, oldest first;
    /// how many (for the retention purge, and nothing else).
    async fn purge_audit(&self, before: Instant, limit: u32) -> StoreResult<u64>;
}
