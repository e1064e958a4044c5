//! A tenant's audit log in memory, with the SQL one's semantics.

use async_trait::async_trait;

use super::store::MemoryTenantStore;
use crate::audit::AuditLog;
use crate::error::StoreResult;
use toki_model::audit::{AuditEntry, StoredAuditEntry};
use toki_model::domain::Instant;

#[async_trait]
impl AuditLog for MemoryTenantStore {
    async fn append_audit(&self, entries: &[AuditEntry]) -> StoreResult<()> {
        let mut audit = self.enter_audit().await?;
        for entry in entries {
            audit.last_seq += 1;
            let seq = audit.last_seq;
            audit.log.insert(
                seq,
                StoredAuditEntry {
                    seq,
                    entry: entry.clone(),
                },
            );
        }
        Ok(())
    }

    async fn audit_after(&self, after: u64, limit: usize) -> StoreResult<Vec<StoredAuditEntry>> {
        let audit = self.enter_audit().await?;
        Ok(audit
            .log
            .range(after.saturating_add(1)..)
            .take(limit)
            .map(|(_, e)| e.clone())
            .collect())
    }

    async fn purge_audit(&self, before: Instant, limit: u32) -> StoreResult<u64> {
        let mut audit = self.enter_audit().await?;
        let old: Vec<u64> = audit
            .log
            .values()
            .filter(|e| e.entry.at < before)
            .take(limit as usize)
            .map(|e| e.seq)
            .collect();
        for seq in &old {
            audit.log.remove(seq);
        }
        Ok(old.len() as u64)
    }
}
