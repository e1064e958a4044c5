//! `toki report`: what the delivery rows say — counts per tenant × channel ×
//! status, lateness per channel, and deliveries per second around each due
//! instant. The table, `--json` and the HTML page ([`crate::report_page`])
//! all print this one [`Report`], so their figures cannot disagree.

use std::collections::{BTreeMap, HashMap};
use toki_model::event::EndpointStatus;

use chrono::{DateTime, Utc};
use serde::Serialize;
use toki_model::lateness::{percentile, Lateness};
use toki_model::{Channel, DeliveryStatus};
use toki_ports::TenantStores;

use crate::table::table;
use crate::toki::Toki;

/// Seconds shown before a due instant, so that the chart shows the quiet
/// before the burst (and any delivery that went out early).
pub const LEAD_IN_S: i64 = 2;
/// The most seconds shown after (and before) a due instant; deliveries
/// outside are counted, not drawn, so one straggler cannot stretch a chart
/// to hours.
pub const MAX_SPAN_S: i64 = 300;
/// The most due instants shown: the busiest ones.
pub const MAX_DUE_INSTANTS: usize = 6;

/// Everything `toki report` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Delivery rows per tenant × channel × status.
    pub counts: Vec<ReportRow>,
    /// Lateness of the delivered rows, per channel with any.
    pub lateness: Vec<ChannelLateness>,
    /// Due instants with delivered rows.
    pub due_instants: u64,
    /// Delivered rows per second around the busiest due instants, in time order.
    pub per_second: Vec<DueSeconds>,
    /// Delivery-event endpoints and how far behind each is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub event_endpoints: Vec<EndpointRow>,
    /// What the last retention purge pass deleted, per tenant and kind.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub purges: Vec<PurgeRow>,
}

/// One tenant's last purge of one kind of record.
#[derive(Debug, Clone, Serialize)]
pub struct PurgeRow {
    pub tenant: String,
    pub kind: String,
    pub last_pass_at: DateTime<Utc>,
    /// Records older than this were deleted (up to the pass's cap).
    pub cutoff: DateTime<Utc>,
    pub last_purged: u64,
    pub total_purged: u64,
}

/// One delivery-event endpoint as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointRow {
    pub tenant: String,
    pub endpoint: String,
    /// `enabled`, or `disabled: <reason>`.
    pub status: String,
    /// Failed attempts in a row.
    pub failures: u32,
    /// Events in the log it has not had yet.
    pub behind: u64,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReportRow {
    pub tenant: String,
    pub channel: String,
    pub status: String,
    pub count: u64,
}

/// Lateness (delivered_at − due_at) of one channel's delivered rows.
#[derive(Debug, Clone, Serialize)]
pub struct ChannelLateness {
    pub channel: String,
    pub deliveries: u64,
    pub p50_ms: i64,
    pub p90_ms: i64,
    pub p99_ms: i64,
    pub max_ms: i64,
    /// The distribution the page draws: the nearest-rank lateness at each
    /// whole percent, 0 (the least late) to 100 (the latest).
    pub percentiles_ms: Vec<i64>,
}

/// Delivered rows per second around one due instant.
#[derive(Debug, Clone, Serialize)]
pub struct DueSeconds {
    pub due_at: DateTime<Utc>,
    /// Delivered rows due at it.
    pub deliveries: u64,
    /// The second `counts[0]` covers, from the due instant (negative: before).
    pub from_s: i64,
    /// `counts[i]` were delivered in [due_at + from_s + i, due_at + from_s + i + 1) s.
    pub counts: Vec<u64>,
    /// The most delivered in any one of those seconds.
    pub busiest_second: u64,
    /// Delivered more than [`MAX_SPAN_S`] from the due instant: not in `counts`.
    pub outside: u64,
}

/// One delivered row, as the report reads it.
#[derive(Debug, Clone, Copy)]
pub struct Delivered {
    pub channel: Channel,
    pub due_at: DateTime<Utc>,
    pub at: DateTime<Utc>,
}

/// Reads every tenant's delivery rows and summarises them.
pub async fn collect(toki: &Toki) -> anyhow::Result<Report> {
    let mut counts = Vec::new();
    let mut delivered = Vec::new();
    let mut endpoints = Vec::new();
    let mut purges = Vec::new();
    for t in toki.directory.list().await? {
        let store = toki.stores.open(&t.id).await?;
        endpoints.extend(endpoint_rows(&t.id, store.as_ref()).await?);
        purges.extend(store.purge_log().await?.into_iter().map(|p| PurgeRow {
            tenant: t.id.to_string(),
            kind: p.kind.to_string(),
            last_pass_at: p.last_pass_at,
            cutoff: p.cutoff,
            last_purged: p.last_purged,
            total_purged: p.total_purged,
        }));
        for c in store.delivery_counts().await? {
            counts.push(ReportRow {
                tenant: t.id.to_string(),
                channel: c.channel.to_string(),
                status: c.status.to_string(),
                count: c.count,
            });
        }
        delivered.extend(
            store
                .deliveries()
                .await?
                .into_iter()
                .filter(|d| d.status == DeliveryStatus::Delivered)
                .map(|d| Delivered {
                    channel: d.key.channel,
                    due_at: d.due_at.0,
                    at: d.at,
                }),
        );
    }
    Ok(Report {
        event_endpoints: endpoints,
        purges,
        ..summarise(counts, &delivered)
    })
}

/// The report from the rows read: pure, so that it is tested without a store.
pub fn summarise(counts: Vec<ReportRow>, delivered: &[Delivered]) -> Report {
    let mut by_due: HashMap<DateTime<Utc>, Vec<i64>> = HashMap::new();
    for d in delivered {
        by_due.entry(d.due_at).or_default().push(lateness_ms(d));
    }
    let due_instants = by_due.len() as u64;
    let mut busiest: Vec<(DateTime<Utc>, Vec<i64>)> = by_due.into_iter().collect();
    busiest.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    busiest.truncate(MAX_DUE_INSTANTS);
    busiest.sort_by_key(|(due, _)| *due);
    Report {
        counts,
        lateness: lateness_per_channel(delivered),
        due_instants,
        per_second: busiest
            .into_iter()
            .map(|(due_at, late)| per_second(due_at, &late))
            .collect(),
        event_endpoints: Vec::new(),
        purges: Vec::new(),
    }
}

/// A tenant's endpoints, each with how many logged events it has not had.
async fn endpoint_rows(
    tenant: &toki_model::TenantId,
    store: &dyn toki_ports::TenantStore,
) -> anyhow::Result<Vec<EndpointRow>> {
    let last = store.last_event_seq().await?;
    Ok(store
        .event_endpoints()
        .await?
        .into_iter()
        .map(|(e, _)| EndpointRow {
            tenant: tenant.to_string(),
            endpoint: e.id.to_string(),
            status: match e.progress.status {
                EndpointStatus::Enabled => "enabled".into(),
                EndpointStatus::Disabled { reason } => format!("disabled: {reason}"),
            },
            failures: e.progress.failures,
            behind: last.saturating_sub(e.progress.cursor),
            last_error: e.progress.last_error,
        })
        .collect())
}

fn lateness_ms(d: &Delivered) -> i64 {
    (d.at - d.due_at).num_milliseconds()
}

fn lateness_per_channel(delivered: &[Delivered]) -> Vec<ChannelLateness> {
    let mut by_channel: BTreeMap<Channel, Vec<i64>> = BTreeMap::new();
    for d in delivered {
        by_channel
            .entry(d.channel)
            .or_default()
            .push(lateness_ms(d));
    }
    by_channel
        .into_iter()
        .map(|(channel, mut late)| {
            late.sort_unstable();
            let summary = Lateness::from_millis(late.clone());
            ChannelLateness {
                channel: channel.to_string(),
                deliveries: late.len() as u64,
                p50_ms: summary.p50,
                p90_ms: summary.p90,
                p99_ms: summary.p99,
                max_ms: summary.max,
                percentiles_ms: (0..=100).map(|q| percentile(&late, q as f64)).collect(),
            }
        })
        .collect()
}

/// Seconds from `LEAD_IN_S` before the due instant (or the earliest
/// delivery) to the last delivery, each within `MAX_SPAN_S`.
fn per_second(due_at: DateTime<Utc>, lateness_ms: &[i64]) -> DueSeconds {
    let second = |ms: i64| ms.div_euclid(1000);
    let earliest = lateness_ms.iter().copied().min().map_or(0, second);
    let latest = lateness_ms.iter().copied().max().map_or(0, second);
    let from_s = earliest.clamp(-MAX_SPAN_S, -LEAD_IN_S);
    let to_s = latest.clamp(0, MAX_SPAN_S - 1);
    let mut counts = vec![0; (to_s - from_s + 1) as usize];
    let mut outside = 0;
    for &ms in lateness_ms {
        match usize::try_from(second(ms) - from_s) {
            Ok(i) if i < counts.len() => counts[i] += 1,
            _ => outside += 1,
        }
    }
    DueSeconds {
        due_at,
        deliveries: lateness_ms.len() as u64,
        from_s,
        busiest_second: counts.iter().copied().max().unwrap_or(0),
        counts,
        outside,
    }
}

/// The tables `toki report` prints: counts, then lateness per channel.
pub fn render(report: &Report) -> String {
    if report.counts.is_empty() {
        let mut out = String::from("no deliveries recorded yet");
        out.push_str(&render_purges(&report.purges));
        return out;
    }
    let cells: Vec<Vec<String>> = report
        .counts
        .iter()
        .map(|r| {
            vec![
                r.tenant.clone(),
                r.channel.clone(),
                r.status.clone(),
                r.count.to_string(),
            ]
        })
        .collect();
    let mut out = table(&["tenant", "channel", "status", "count"], &cells);
    if !report.event_endpoints.is_empty() {
        let cells: Vec<Vec<String>> = report
            .event_endpoints
            .iter()
            .map(|e| {
                vec![
                    e.tenant.clone(),
                    e.endpoint.clone(),
                    e.status.clone(),
                    e.failures.to_string(),
                    e.behind.to_string(),
                    e.last_error.clone().unwrap_or_default(),
                ]
            })
            .collect();
        out.push_str("\n\ndelivery events\n");
        out.push_str(&table(
            &[
                "tenant",
                "endpoint",
                "status",
                "failures",
                "behind",
                "last error",
            ],
            &cells,
        ));
    }
    if !report.lateness.is_empty() {
        let cells: Vec<Vec<String>> = report
            .lateness
            .iter()
            .map(|l| {
                vec![
                    l.channel.clone(),
                    l.deliveries.to_string(),
                    l.p50_ms.to_string(),
                    l.p90_ms.to_string(),
                    l.p99_ms.to_string(),
                    l.max_ms.to_string(),
                ]
            })
            .collect();
        out.push_str("\n\n");
        out.push_str(&table(
            &[
                "channel",
                "delivered",
                "p50 ms",
                "p90 ms",
                "p99 ms",
                "max ms",
            ],
            &cells,
        ));
    }
    out.push_str(&render_purges(&report.purges));
    out
}

/// The last purge pass per tenant and kind (empty when none has run).
fn render_purges(purges: &[PurgeRow]) -> String {
    if purges.is_empty() {
        return String::new();
    }
    let cells: Vec<Vec<String>> = purges
        .iter()
        .map(|p| {
            vec![
                p.tenant.clone(),
                p.kind.clone(),
                p.last_pass_at.format("%Y-%m-%d %H:%M").to_string(),
                p.cutoff.format("%Y-%m-%d %H:%M").to_string(),
                p.last_purged.to_string(),
                p.total_purged.to_string(),
            ]
        })
        .collect();
    let mut out = String::from("\n\npurged (last pass)\n");
    out.push_str(&table(
        &[
            "tenant",
            "kind",
            "last pass",
            "older than",
            "purged",
            "total",
        ],
        &cells,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(due: DateTime<Utc>, ms: i64) -> DateTime<Utc> {
        due + chrono::Duration::milliseconds(ms)
    }

    fn delivered(channel: Channel, due: DateTime<Utc>, late_ms: &[i64]) -> Vec<Delivered> {
        late_ms
            .iter()
            .map(|&ms| Delivered {
                channel,
                due_at: due,
                at: at(due, ms),
            })
            .collect()
    }

    #[test]
    fn lateness_per_channel_uses_the_shared_percentiles() {
        let due = Utc.with_ymd_and_hms(2030, 1, 7, 8, 55, 0).unwrap();
        let mut rows = delivered(Channel::Slack, due, &(1..=200).rev().collect::<Vec<_>>());
        rows.extend(delivered(Channel::Mail, due, &[40, 10]));
        let report = summarise(Vec::new(), &rows);
        let channels: Vec<&str> = report.lateness.iter().map(|l| &*l.channel).collect();
        assert_eq!(channels, ["mail", "slack"]);
        let slack = &report.lateness[1];
        let expected = Lateness::from_millis((1..=200).collect());
        assert_eq!(
            (
                slack.deliveries,
                slack.p50_ms,
                slack.p90_ms,
                slack.p99_ms,
                slack.max_ms
            ),
            (200, expected.p50, expected.p90, expected.p99, expected.max)
        );
        assert_eq!(slack.percentiles_ms.len(), 101);
        assert_eq!(slack.percentiles_ms[0], 1, "the least late");
        assert_eq!(slack.percentiles_ms[50], slack.p50_ms);
        assert_eq!(slack.percentiles_ms[99], slack.p99_ms);
        assert_eq!(slack.percentiles_ms[100], slack.max_ms);
        assert_eq!(report.lateness[0].max_ms, 40);
    }

    #[test]
    fn deliveries_per_second_span_the_lead_in_to_the_last_delivery() {
        let due = Utc.with_ymd_and_hms(2030, 1, 7, 8, 55, 0).unwrap();
        // 3 in the due second, 2 in the next, one 4.5 s late; one 1.2 s early.
        let rows = delivered(Channel::Chat, due, &[0, 10, 999, 1000, 1500, 4500, -1200]);
        let report = summarise(Vec::new(), &rows);
        assert_eq!(report.due_instants, 1);
        let s = &report.per_second[0];
        assert_eq!((s.due_at, s.deliveries, s.from_s), (due, 7, -2));
        assert_eq!(s.counts, [1, 0, 3, 2, 0, 0, 1], "seconds -2..=4");
        assert_eq!((s.busiest_second, s.outside), (3, 0));
        assert_eq!(s.counts.iter().sum::<u64>(), s.deliveries);
    }

    #[test]
    fn a_straggler_is_counted_not_drawn() {
        let due = Utc.with_ymd_and_hms(2030, 1, 7, 9, 0, 0).unwrap();
        let rows = delivered(Channel::Mail, due, &[5, 3_600_000]);
        let s = &summarise(Vec::new(), &rows).per_second[0];
        assert_eq!(s.counts.len() as i64, MAX_SPAN_S + LEAD_IN_S);
        assert_eq!((s.counts.iter().sum::<u64>(), s.outside), (1, 1));
    }

    #[test]
    fn only_the_busiest_due_instants_are_drawn_in_time_order() {
        let first = Utc.with_ymd_and_hms(2030, 1, 7, 9, 0, 0).unwrap();
        let mut rows = Vec::new();
        // Due instant k has k + 1 deliveries: the last MAX_DUE_INSTANTS are the busiest.
        let total = MAX_DUE_INSTANTS + 3;
        for k in 0..total {
            let due = first + chrono::Duration::minutes(k as i64);
            rows.extend(delivered(Channel::Slack, due, &vec![20; k + 1]));
        }
        let report = summarise(Vec::new(), &rows);
        assert_eq!(report.due_instants, total as u64);
        let shown: Vec<u64> = report.per_second.iter().map(|s| s.deliveries).collect();
        let expected: Vec<u64> = (total - MAX_DUE_INSTANTS + 1..=total)
            .map(|k| k as u64)
            .collect();
        assert_eq!(shown, expected);
    }
}
