//! The report's aggregate reads in memory, with the SQL stores' semantics
//! (`crate::report`): computed from the rows, as the database would.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use toki_model::domain::{Channel, DeliveryStatus, DueAt};

use super::store::MemoryTenantStore;
use crate::error::StoreResult;
use crate::report::{lateness_second, DeliveryReport, DeliverySummary, ReportWindow, SecondCount};
use crate::TenantStore;

/// Each delivered row that `keep` keeps: its channel, due instant and lateness.
async fn delivered(
    store: &MemoryTenantStore,
    keep: impl Fn(DueAt) -> bool,
) -> StoreResult<Vec<(Channel, DueAt, i64)>> {
    Ok(store
        .deliveries()
        .await?
        .into_iter()
        .filter(|d| d.status == DeliveryStatus::Delivered && keep(d.due_at))
        .map(|d| {
            let late = d.at.timestamp_millis() - d.due_at.0.timestamp_millis();
            (d.key.channel, d.due_at, late)
        })
        .collect())
}

#[async_trait]
impl DeliveryReport for MemoryTenantStore {
    async fn delivery_summary(&self, window: &ReportWindow) -> StoreResult<DeliverySummary> {
        let rows = delivered(self, |due| due.0 >= window.since).await?;
        Ok(DeliverySummary::of_rows(rows, window.busiest))
    }

    async fn delivered_per_second(
        &self,
        due: &[DueAt],
        span_s: i64,
    ) -> StoreResult<Vec<SecondCount>> {
        let wanted: BTreeSet<DueAt> = due.iter().copied().collect();
        let mut seconds: BTreeMap<(DueAt, i64), u64> = BTreeMap::new();
        for (_, due_at, late) in delivered(self, |d| wanted.contains(&d)).await? {
            *seconds
                .entry((due_at, lateness_second(late, span_s)))
                .or_default() += 1;
        }
        Ok(seconds
            .into_iter()
            .map(|((due_at, second), count)| SecondCount {
                due_at,
                second,
                count,
            })
            .collect())
    }
}
