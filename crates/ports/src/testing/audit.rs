//! A tenant's audit log in memory, with the SQL one's semantics.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::store::MemoryTenantStore;
use crate::audit::AuditLog;
use crate::error::StoreResult;
use toki_model::audit::{AuditEntry, StoredAuditEntry};
use toki_model::domain::Instant;

#[derive(Default)]
pub(super) struct MemoryAudit {
    log: BTreeMap<u64, StoredAuditEntry>,
    last_seq: u64,
}

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

impl MemoryAudit {
    /// An erasure's part: `pseudonym` in place of `user` in the entries
    /// about their user row; how many.
    pub(super) fn pseudonymise(&mut self, user: &str, pseudonym: &str) -> u64 {
        let mut n = 0;
        for e in self.log.values_mut() {
            let entry = &mut e.entry;
            if toki_model::audit::AuditAction::ON_USERS.contains(&entry.action)
                && entry.resource.as_deref() == Some(user)
            {
                entry.resource = Some(pseudonym.to_owned());
                n += 1;
            }
        }
        n
    }
}
