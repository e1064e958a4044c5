//! What a report reads of a tenant's delivery rows: aggregates the store
//! computes (delivered rows per channel and lateness bucket, the busiest due
//! instants, deliveries per second around them), never the rows themselves,
//! so a report's memory and answer are bounded by the buckets and seconds it
//! shows, whatever the table holds. A supertrait of `TenantStore`.
//!
//! Lateness is `finished_at − due_at` of a delivered row (its claim, or its
//! due instant, when it has no finish), in milliseconds.

use async_trait::async_trait;

use toki_model::domain::{Channel, DueAt, Instant};

use crate::error::StoreResult;

/// Lateness below this (5 minutes early) falls in one bucket, that of this floor.
pub const EARLIEST_BUCKET_MS: i64 = -300_000;
/// Lateness from this on (about 17 minutes) falls in one bucket.
pub const LATEST_BUCKET_MS: i64 = 1_000_000;

/// The floor of the lateness bucket `ms` falls in. Buckets are 1 ms wide up
/// to 100 ms (so the figures that matter are exact), then 10 ms to 1 s,
/// 100 ms to 10 s, 1 s to 100 s, 10 s to [`LATEST_BUCKET_MS`], and 1 s wide
/// when early; beyond [`EARLIEST_BUCKET_MS`] and [`LATEST_BUCKET_MS`], one
/// bucket each. The SQL stores compute the same in the database.
pub fn lateness_bucket(ms: i64) -> i64 {
    if ms < EARLIEST_BUCKET_MS {
        return EARLIEST_BUCKET_MS;
    }
    if ms >= LATEST_BUCKET_MS {
        return LATEST_BUCKET_MS;
    }
    let width = bucket_width(ms);
    ms.div_euclid(width) * width
}

/// The width of the bucket whose floor (or any member) is `ms`; the last
/// bucket's is open, given as 1.
pub fn bucket_width(ms: i64) -> i64 {
    match ms {
        ..0 => 1_000,
        0..100 => 1,
        100..1_000 => 10,
        1_000..10_000 => 100,
        10_000..100_000 => 1_000,
        100_000..LATEST_BUCKET_MS => 10_000,
        _ => 1,
    }
}

/// The delivered rows a report reads: those due from `since` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportWindow {
    pub since: Instant,
    /// How many of the busiest due instants to name.
    pub busiest: usize,
}

/// One channel's delivered rows in the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelDelivered {
    pub channel: Channel,
    pub count: u64,
    /// The least and the most lateness, exact.
    pub min_ms: i64,
    pub max_ms: i64,
}

/// Delivered rows of one channel in one lateness bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LatenessCount {
    pub channel: Channel,
    /// The bucket's floor ([`lateness_bucket`]).
    pub bucket_ms: i64,
    pub count: u64,
}

/// Delivered rows due at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DueCount {
    pub due_at: DueAt,
    pub count: u64,
}

/// A tenant's delivered rows in a window, aggregated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliverySummary {
    /// By channel, in channel order.
    pub channels: Vec<ChannelDelivered>,
    /// By channel and bucket, in that order.
    pub lateness: Vec<LatenessCount>,
    /// The busiest due instants, most delivered first (the earlier on a
    /// tie), at most [`ReportWindow::busiest`].
    pub busiest: Vec<DueCount>,
    /// Distinct due instants with delivered rows.
    pub due_instants: u64,
}

impl DeliverySummary {
    /// The summary of delivered rows given one by one (channel, due instant,
    /// lateness in ms), as a database computes it: for stores and tests that
    /// hold the rows themselves. At most `busiest` due instants are kept.
    pub fn of_rows(rows: impl IntoIterator<Item = (Channel, DueAt, i64)>, busiest: usize) -> Self {
        use std::collections::BTreeMap;
        let mut channels: BTreeMap<Channel, ChannelDelivered> = BTreeMap::new();
        let mut buckets: BTreeMap<(Channel, i64), u64> = BTreeMap::new();
        let mut per_due: BTreeMap<DueAt, u64> = BTreeMap::new();
        for (channel, due, late) in rows {
            let c = channels.entry(channel).or_insert(ChannelDelivered {
                channel,
                count: 0,
                min_ms: late,
                max_ms: late,
            });
            (c.count, c.min_ms, c.max_ms) = (c.count + 1, c.min_ms.min(late), c.max_ms.max(late));
            *buckets.entry((channel, lateness_bucket(late))).or_default() += 1;
            *per_due.entry(due).or_default() += 1;
        }
        let due_instants = per_due.len() as u64;
        let mut top: Vec<DueCount> = per_due
            .into_iter()
            .map(|(due_at, count)| DueCount { due_at, count })
            .collect();
        top.sort_by(|a, b| b.count.cmp(&a.count).then(a.due_at.cmp(&b.due_at)));
        top.truncate(busiest);
        DeliverySummary {
            channels: channels.into_values().collect(),
            lateness: buckets
                .into_iter()
                .map(|((channel, bucket_ms), count)| LatenessCount {
                    channel,
                    bucket_ms,
                    count,
                })
                .collect(),
            busiest: top,
            due_instants,
        }
    }
}

/// Delivered rows due at one instant, delivered in one second of lateness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SecondCount {
    pub due_at: DueAt,
    /// `floor(lateness / 1 s)`, within `-span - 1 ..= span`: the two ends
    /// also hold everything beyond them.
    pub second: i64,
    pub count: u64,
}

/// A tenant database's aggregate reads for reports.
#[async_trait]
pub trait DeliveryReport: Send + Sync {
    /// The delivered rows due in `window`, aggregated.
    async fn delivery_summary(&self, window: &ReportWindow) -> StoreResult<DeliverySummary>;

    /// The delivered rows due at each of `due`, per second of lateness
    /// clamped to `-span_s - 1 ..= span_s`; in (due, second) order.
    async fn delivered_per_second(
        &self,
        due: &[DueAt],
        span_s: i64,
    ) -> StoreResult<Vec<SecondCount>>;
}

/// `floor(ms / 1 s)` clamped as [`SecondCount::second`] says.
pub fn lateness_second(ms: i64, span_s: i64) -> i64 {
    ms.div_euclid(1000).clamp(-span_s - 1, span_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_exact_below_100_ms_and_widen_after() {
        let cases = [
            (-400_000, EARLIEST_BUCKET_MS),
            (-300_001, EARLIEST_BUCKET_MS),
            (-1_001, -2_000),
            (-1_000, -1_000),
            (-1, -1_000),
            (0, 0),
            (99, 99),
            (100, 100),
            (109, 100),
            (999, 990),
            (1_000, 1_000),
            (9_999, 9_900),
            (10_000, 10_000),
            (99_999, 99_000),
            (100_000, 100_000),
            (999_999, 990_000),
            (1_000_000, LATEST_BUCKET_MS),
            (i64::MAX, LATEST_BUCKET_MS),
        ];
        for (ms, floor) in cases {
            assert_eq!(lateness_bucket(ms), floor, "{ms}");
            assert!(ms < floor + bucket_width(floor) || floor == LATEST_BUCKET_MS);
        }
    }

    #[test]
    fn seconds_floor_and_clamp() {
        assert_eq!(lateness_second(-1, 300), -1);
        assert_eq!(lateness_second(999, 300), 0);
        assert_eq!(lateness_second(-400_000, 300), -301);
        assert_eq!(lateness_second(3_600_000, 300), 300);
    }
}
