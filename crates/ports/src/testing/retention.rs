//! The retention purge of a tenant's database in memory, with the SQL
//! stores' semantics: oldest first, a bounded batch per call.

use async_trait::async_trait;

use super::store::MemoryTenantStore;
use crate::error::StoreResult;
use crate::retention::{
    batch_limit, is_finished, PurgeRecord, RetentionStore, TenantRows, Trimmed,
};
use toki_model::domain::Instant;

/// The `limit` oldest of `aged` (key, instant) older than `before`.
fn oldest<K: Clone + Ord>(
    aged: impl Iterator<Item = (K, Instant)>,
    before: Instant,
    limit: u32,
) -> Vec<K> {
    let mut old: Vec<(Instant, K)> = aged
        .filter(|(_, at)| *at < before)
        .map(|(k, at)| (at, k))
        .collect();
    old.sort();
    old.into_iter()
        .take(limit as usize)
        .map(|(_, k)| k)
        .collect()
}

/// Deletes up to `limit` of the first (oldest: keyed by sequence number)
/// entries of `log` beyond the last `keep`; how many.
fn trim_log<V>(log: &mut std::collections::BTreeMap<u64, V>, keep: u64, limit: u64) -> u64 {
    let n = (log.len() as u64).saturating_sub(keep).min(limit);
    for _ in 0..n {
        log.pop_first();
    }
    n
}

#[async_trait]
impl RetentionStore for MemoryTenantStore {
    async fn oldest_row(&self, rows: TenantRows) -> StoreResult<Option<Instant>> {
        Ok(match rows {
            TenantRows::Events => {
                let events = self.enter_events().await?;
                events.log.values().map(|e| e.occurred_at).min()
            }
            TenantRows::Deliveries => {
                let state = self.enter().await?;
                state
                    .deliveries
                    .values()
                    .filter_map(|r| r.finished_at.filter(|_| is_finished(r.status)))
                    .min()
            }
            TenantRows::Audit => crate::audit::AuditLog::audit_after(self, 0, 1)
                .await?
                .first()
                .map(|e| e.entry.at),
            TenantRows::Chat => {
                let state = self.enter().await?;
                state.chat.values().map(|m| m.created_at).min()
            }
        })
    }

    async fn purge_rows(&self, rows: TenantRows, before: Instant, limit: u32) -> StoreResult<u64> {
        let limit = batch_limit(limit);
        let n = match rows {
            TenantRows::Events => {
                let mut events = self.enter_events().await?;
                let old = oldest(
                    events.log.values().map(|e| (e.seq, e.occurred_at)),
                    before,
                    limit,
                );
                old.iter().for_each(|seq| drop(events.log.remove(seq)));
                old.len()
            }
            TenantRows::Deliveries => {
                let mut state = self.enter().await?;
                let old = oldest(
                    state.deliveries.iter().filter_map(|(k, r)| {
                        let at = r.finished_at.filter(|_| is_finished(r.status))?;
                        Some((k.clone(), at))
                    }),
                    before,
                    limit,
                );
                old.iter().for_each(|k| drop(state.deliveries.remove(k)));
                old.len()
            }
            TenantRows::Audit => {
                crate::audit::AuditLog::purge_audit(self, before, limit).await? as usize
            }
            TenantRows::Chat => {
                let mut state = self.enter().await?;
                let old = oldest(
                    state.chat.iter().map(|(k, m)| (k.clone(), m.created_at)),
                    before,
                    limit,
                );
                old.iter().for_each(|k| drop(state.chat.remove(k)));
                old.len()
            }
        };
        Ok(n as u64)
    }

    async fn trim_rows(&self, rows: Trimmed, keep: u64, limit: u32) -> StoreResult<u64> {
        let limit = u64::from(batch_limit(limit));
        Ok(match rows {
            Trimmed::Events => trim_log(&mut self.enter_events().await?.log, keep, limit),
            Trimmed::Audit => trim_log(&mut self.enter_audit().await?.log, keep, limit),
        })
    }

    async fn record_purge(&self, record: &PurgeRecord) -> StoreResult<()> {
        let mut state = self.enter().await?;
        let total = state
            .purge_log
            .get(&record.kind)
            .map_or(0, |r| r.total_purged);
        state.purge_log.insert(
            record.kind,
            PurgeRecord {
                total_purged: total + record.last_purged,
                ..record.clone()
            },
        );
        Ok(())
    }

    async fn purge_log(&self) -> StoreResult<Vec<PurgeRecord>> {
        Ok(self.enter().await?.purge_log.values().cloned().collect())
    }
}
