//! `toki report`: what the delivery rows say — counts per tenant × channel ×
//! status, lateness per channel, and deliveries per second around each due
//! instant. The table, `--json` and the HTML page ([`crate::report_page`])
//! all print this one [`Report`], so their figures cannot disagree.
//!
//! Read as aggregates each tenant's database computes (`toki_ports::report`:
//! GROUP BY counts, lateness buckets, per-second counts around the busiest
//! due instants), over the last [`WINDOW`] and at most [`MAX_TENANTS`]
//! tenants: what it holds in memory is bounded by the buckets and seconds it
//! shows, never by how many deliveries there are.

use std::collections::BTreeMap;
use toki_model::event::EndpointStatus;

use chrono::{DateTime, Utc};
use serde::Serialize;
use toki_model::{Channel, DueAt};
use toki_ports::report::{bucket_width, DeliverySummary, ReportWindow, SecondCount};
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
    /// Lateness of the delivered rows due in the last [`WINDOW`], per
    /// channel with any.
    pub lateness: Vec<ChannelLateness>,
    /// Due instants with delivered rows in the window, counted per tenant
    /// (an instant two tenants share counts twice).
    pub due_instants: u64,
    /// Delivered rows per second around the busiest due instants, in time order.
    pub per_second: Vec<DueSeconds>,
    /// Delivery-event endpoints and how far behind each is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub event_endpoints: Vec<EndpointRow>,
    /// What the last retention purge pass deleted, per tenant and kind.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub purges: Vec<PurgeRow>,
    /// Tenants past [`MAX_TENANTS`], not read.
    #[serde(skip_serializing_if = "is_zero")]
    pub tenants_not_read: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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

/// Lateness (delivered_at − due_at) of one channel's delivered rows, from
/// the buckets the database counted (`toki_ports::report::lateness_bucket`):
/// a percentile is the upper end of its bucket, so exact below 100 ms and
/// at most 10 % high above; the least and the most are exact.
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

/// How far back the delivered rows a report reads were due: its lateness
/// and per-second figures cover this window (the counts cover every row).
pub const WINDOW: chrono::TimeDelta = chrono::TimeDelta::days(7);
/// The most tenants a report reads (the first by id); the rest are counted
/// in [`Report::tenants_not_read`].
pub const MAX_TENANTS: usize = 1000;

/// Reads every tenant's aggregates (at most [`MAX_TENANTS`] of them; the
/// database groups and counts, no delivery row comes back) and summarises them.
pub async fn collect(toki: &Toki) -> anyhow::Result<Report> {
    let mut tenants = toki.directory.list().await?;
    tenants.sort_by(|a, b| a.id.cmp(&b.id));
    let not_read = tenants.len().saturating_sub(MAX_TENANTS) as u64;
    tenants.truncate(MAX_TENANTS);
    let window = ReportWindow {
        since: toki.clock.now() - WINDOW,
        busiest: MAX_DUE_INSTANTS,
    };
    let mut counts = Vec::new();
    let mut endpoints = Vec::new();
    let mut purges = Vec::new();
    let mut merged = Merged::default();
    let mut stores = Vec::with_capacity(tenants.len());
    for t in &tenants {
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
        counts.extend(
            store
                .delivery_counts()
                .await?
                .into_iter()
                .map(|c| ReportRow {
                    tenant: t.id.to_string(),
                    channel: c.channel.to_string(),
                    status: c.status.to_string(),
                    count: c.count,
                }),
        );
        merged.add_summary(store.delivery_summary(&window).await?);
        stores.push(store);
    }
    let busiest = merged.busiest();
    for store in &stores {
        merged.add_seconds(store.delivered_per_second(&busiest, MAX_SPAN_S).await?);
    }
    Ok(Report {
        event_endpoints: endpoints,
        purges,
        tenants_not_read: not_read,
        ..build(counts, merged)
    })
}

/// Every tenant's aggregates added together: what the report is drawn from.
#[derive(Debug, Default)]
pub struct Merged {
    /// Per channel: delivered rows, the least and the most lateness.
    channels: BTreeMap<Channel, (u64, i64, i64)>,
    /// Per channel: delivered rows per lateness bucket (by its floor).
    buckets: BTreeMap<Channel, BTreeMap<i64, u64>>,
    /// Each tenant's busiest due instants, summed where they meet.
    due: BTreeMap<DueAt, u64>,
    due_instants: u64,
    /// Per chosen due instant: delivered rows per second of lateness.
    seconds: BTreeMap<DueAt, BTreeMap<i64, u64>>,
}

impl Merged {
    pub fn add_summary(&mut self, s: DeliverySummary) {
        for c in s.channels {
            let e = self
                .channels
                .entry(c.channel)
                .or_insert((0, c.min_ms, c.max_ms));
            *e = (e.0 + c.count, e.1.min(c.min_ms), e.2.max(c.max_ms));
        }
        for l in s.lateness {
            *self
                .buckets
                .entry(l.channel)
                .or_default()
                .entry(l.bucket_ms)
                .or_default() += l.count;
        }
        for d in s.busiest {
            *self.due.entry(d.due_at).or_default() += d.count;
        }
        self.due_instants += s.due_instants;
    }

    /// The busiest due instants of those the tenants named, at most
    /// [`MAX_DUE_INSTANTS`], in time order.
    pub fn busiest(&self) -> Vec<DueAt> {
        let mut due: Vec<(DueAt, u64)> = self.due.iter().map(|(d, n)| (*d, *n)).collect();
        due.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        due.truncate(MAX_DUE_INSTANTS);
        let mut due: Vec<DueAt> = due.into_iter().map(|(d, _)| d).collect();
        due.sort();
        due
    }

    pub fn add_seconds(&mut self, seconds: Vec<SecondCount>) {
        for s in seconds {
            *self
                .seconds
                .entry(s.due_at)
                .or_default()
                .entry(s.second)
                .or_default() += s.count;
        }
    }
}

/// The report from the aggregates read: pure, so that it is tested without a store.
pub fn build(counts: Vec<ReportRow>, merged: Merged) -> Report {
    let lateness = merged
        .channels
        .iter()
        .map(|(channel, (n, min, max))| {
            let empty = BTreeMap::new();
            let buckets = merged.buckets.get(channel).unwrap_or(&empty);
            channel_lateness(*channel, *n, (*min, *max), buckets)
        })
        .collect();
    Report {
        counts,
        lateness,
        due_instants: merged.due_instants,
        per_second: merged
            .seconds
            .iter()
            .map(|(due_at, seconds)| per_second(due_at.0, seconds))
            .collect(),
        event_endpoints: Vec::new(),
        purges: Vec::new(),
        tenants_not_read: 0,
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

/// One channel's lateness from its buckets: each percentile the upper end
/// of the bucket its rank falls in (exact below 100 ms, within 10 % above),
/// within the exact least and most.
fn channel_lateness(
    channel: Channel,
    deliveries: u64,
    (min, max): (i64, i64),
    buckets: &BTreeMap<i64, u64>,
) -> ChannelLateness {
    let at = |q: f64| -> i64 {
        // Nearest rank, as `toki_model::lateness::percentile`.
        let rank = ((q / 100.0) * deliveries as f64).ceil().max(1.0) as u64;
        if rank <= 1 {
            return min;
        }
        if rank >= deliveries {
            return max;
        }
        let mut seen = 0;
        for (floor, n) in buckets {
            seen += n;
            if seen >= rank {
                return (floor + bucket_width(*floor) - 1).clamp(min, max);
            }
        }
        max
    };
    ChannelLateness {
        channel: channel.to_string(),
        deliveries,
        p50_ms: at(50.0),
        p90_ms: at(90.0),
        p99_ms: at(99.0),
        max_ms: max,
        percentiles_ms: (0..=100).map(|q| at(f64::from(q))).collect(),
    }
}

/// Seconds from `LEAD_IN_S` before the due instant (or the earliest
/// delivery) to the last delivery, each within `MAX_SPAN_S`; what is
/// outside is counted in `outside`.
fn per_second(due_at: DateTime<Utc>, seconds: &BTreeMap<i64, u64>) -> DueSeconds {
    let earliest = seconds.keys().next().copied().unwrap_or(0);
    let latest = seconds.keys().next_back().copied().unwrap_or(0);
    let from_s = earliest.clamp(-MAX_SPAN_S, -LEAD_IN_S);
    let to_s = latest.clamp(0, MAX_SPAN_S - 1);
    let mut counts = vec![0; (to_s - from_s + 1) as usize];
    let mut outside = 0;
    for (&second, &n) in seconds {
        match usize::try_from(second - from_s) {
            Ok(i) if i < counts.len() => counts[i] += n,
            _ => outside += n,
        }
    }
    DueSeconds {
        due_at,
        deliveries: seconds.values().sum(),
        from_s,
        busiest_second: counts.iter().copied().max().unwrap_or(0),
        counts,
        outside,
    }
}

/// One delivered row: the tests build reports from rows, aggregated as a
/// store aggregates them.
#[cfg(test)]
#[derive(Debug, Clone, Copy)]
pub struct Delivered {
    pub channel: Channel,
    pub due_at: DateTime<Utc>,
    pub at: DateTime<Utc>,
}

/// The report of `delivered` (one tenant's rows, all in the window).
#[cfg(test)]
pub fn summarise(counts: Vec<ReportRow>, delivered: &[Delivered]) -> Report {
    use toki_ports::report::lateness_second;
    let late = |d: &Delivered| (d.at - d.due_at).num_milliseconds();
    let rows = delivered
        .iter()
        .map(|d| (d.channel, DueAt(d.due_at), late(d)));
    let mut merged = Merged::default();
    merged.add_summary(DeliverySummary::of_rows(rows, usize::MAX));
    let busiest = merged.busiest();
    merged.add_seconds(
        delivered
            .iter()
            .filter(|d| busiest.contains(&DueAt(d.due_at)))
            .map(|d| SecondCount {
                due_at: DueAt(d.due_at),
                second: lateness_second(late(d), MAX_SPAN_S),
                count: 1,
            })
            .collect(),
    );
    build(counts, merged)
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
    if report.tenants_not_read > 0 {
        out.push_str(&format!(
            "\n\n{} more tenants not read (a report reads the first {MAX_TENANTS})",
            report.tenants_not_read
        ));
    }
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
    use toki_model::lateness::Lateness;

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
    fn below_100_ms_the_percentiles_are_exact() {
        let due = Utc.with_ymd_and_hms(2030, 1, 7, 8, 55, 0).unwrap();
        let mut rows = delivered(Channel::Slack, due, &(0..=99).rev().collect::<Vec<_>>());
        rows.extend(delivered(Channel::Mail, due, &[40, 10]));
        let report = summarise(Vec::new(), &rows);
        let channels: Vec<&str> = report.lateness.iter().map(|l| &*l.channel).collect();
        assert_eq!(channels, ["mail", "slack"]);
        let slack = &report.lateness[1];
        let expected = Lateness::from_millis((0..=99).collect());
        assert_eq!(
            (
                slack.deliveries,
                slack.p50_ms,
                slack.p90_ms,
                slack.p99_ms,
                slack.max_ms
            ),
            (100, expected.p50, expected.p90, expected.p99, expected.max)
        );
        assert_eq!(slack.percentiles_ms.len(), 101);
        assert_eq!(slack.percentiles_ms[0], 0, "the least late");
        assert_eq!(slack.percentiles_ms[50], slack.p50_ms);
        assert_eq!(slack.percentiles_ms[99], slack.p99_ms);
        assert_eq!(slack.percentiles_ms[100], slack.max_ms);
        assert_eq!(report.lateness[0].max_ms, 40);
    }

    #[test]
    fn above_100_ms_a_percentile_is_at_most_its_bucket_high() {
        let due = Utc.with_ymd_and_hms(2030, 1, 7, 8, 55, 0).unwrap();
        let late: Vec<i64> = (1..=2000).map(|i| i * 7).collect();
        let report = summarise(Vec::new(), &delivered(Channel::Mail, due, &late));
        let mail = &report.lateness[0];
        let exact = Lateness::from_millis(late.clone());
        for (got, exact) in [
            (mail.p50_ms, exact.p50),
            (mail.p90_ms, exact.p90),
            (mail.p99_ms, exact.p99),
        ] {
            assert!(
                got >= exact && got <= exact + exact / 10,
                "{got} for {exact}"
            );
        }
        assert_eq!(
            (mail.percentiles_ms[0], mail.max_ms),
            (7, 14_000),
            "exact ends"
        );
        assert!(mail.percentiles_ms.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn tenants_aggregates_add_up() {
        use toki_ports::report::{ChannelDelivered, DueCount, LatenessCount};
        let due = DueAt(Utc.with_ymd_and_hms(2030, 1, 7, 9, 0, 0).unwrap());
        let tenant = |count, min_ms, max_ms| DeliverySummary {
            channels: vec![ChannelDelivered {
                channel: Channel::Mail,
                count,
                min_ms,
                max_ms,
            }],
            lateness: vec![LatenessCount {
                channel: Channel::Mail,
                bucket_ms: 5,
                count,
            }],
            busiest: vec![DueCount { due_at: due, count }],
            due_instants: 1,
        };
        let mut merged = Merged::default();
        merged.add_summary(tenant(3, 5, 5));
        merged.add_summary(tenant(2, 4, 9));
        assert_eq!(merged.busiest(), [due]);
        merged.add_seconds(vec![SecondCount {
            due_at: due,
            second: 0,
            count: 5,
        }]);
        let report = build(Vec::new(), merged);
        let mail = &report.lateness[0];
        assert_eq!(
            (mail.deliveries, mail.percentiles_ms[0], mail.max_ms),
            (5, 4, 9)
        );
        assert_eq!(report.due_instants, 2, "counted per tenant");
        assert_eq!(report.per_second[0].deliveries, 5);
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
