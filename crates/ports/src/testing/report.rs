//! The report's aggregate reads in memory, with the SQL stores' semantics
//! (`crate::report`): computed from the rows, as the database would.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use toki_model::domain::{Channel, DeliveryStatus, DueAt};

use super::store::MemoryTenantStore;
use crate::error::StoreResult;
use crate::report::{
    lateness_bucket, lateness_second, ChannelDelivered, DeliveryReport, DeliverySummary, DueCount,
    LatenessCount, ReportWindow, SecondCount,
};
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
        let mut channels: BTreeMap<Channel, ChannelDelivered> = BTreeMap::new();
        let mut buckets: BTreeMap<(Channel, i64), u64> = BTreeMap::new();
        let mut per_due: BTreeMap<DueAt, u64> = BTreeMap::new();
        for (channel, due, late) in &rows {
            let c = channels.entry(*channel).or_insert(ChannelDelivered {
                channel: *channel,
                count: 0,
                min_ms: *late,
                max_ms: *late,
            });
            c.count += 1;
            c.min_ms = c.min_ms.min(*late);
            c.max_ms = c.max_ms.max(*late);
            *buckets
                .entry((*channel, lateness_bucket(*late)))
                .or_default() += 1;
            *per_due.entry(*due).or_default() += 1;
        }
        let due_instants = per_due.len() as u64;
        let mut busiest: Vec<DueCount> = per_due
            .into_iter()
            .map(|(due_at, count)| DueCount { due_at, count })
            .collect();
        busiest.sort_by(|a, b| b.count.cmp(&a.count).then(a.due_at.cmp(&b.due_at)));
        busiest.truncate(window.busiest);
        Ok(DeliverySummary {
            channels: channels.into_values().collect(),
            lateness: buckets
                .into_iter()
                .map(|((channel, bucket_ms), count)| LatenessCount {
                    channel,
                    bucket_ms,
                    count,
                })
                .collect(),
            busiest,
            due_instants,
        })
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
