//! What a bench run found ([`BenchRun`]), and its rows in the printed table.

use std::path::PathBuf;

use serde::Serialize;
use toki_app::BackendKind;
use toki_model::lateness::Lateness;
use toki_model::Channel;

/// Lateness of one group of tenants' deliveries.
#[derive(Debug, Clone, Serialize)]
pub struct GroupLateness {
    pub group: String,
    pub deliveries: usize,
    pub lateness_ms: Lateness,
}

/// Where lateness was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MeasuredAt {
    /// At a stand-in: its arrival clock.
    Sink,
    /// From the delivery rows (`delivered_at` - due).
    Rows,
}

/// One run, as printed (`--json`: one object per line).
#[derive(Debug, Clone, Serialize)]
pub struct BenchRun {
    pub deliveries: usize,
    pub workers: usize,
    /// Daemon processes; `share` is each one's part of the delivered rows, in start order.
    pub daemons: usize,
    pub share: Vec<u64>,
    pub backend: BackendKind,
    pub channel: Channel,
    pub lateness_ms: Lateness,
    pub missing: u64,
    pub duplicates: u64,
    pub deliveries_per_s: f64,
    /// The largest daemon's peak RSS, and the CPU seconds of all daemons.
    pub peak_rss_mb: f64,
    pub cpu_s: f64,
    /// The stand-in's CPU seconds over the run (none: deliveries counted in
    /// the rows), so a run shows what the receiving end cost too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink_cpu_s: Option<f64>,
    /// Registration of every meeting, until the last reminder was enqueued.
    pub enqueue_s: f64,
    /// SMTP sessions the stand-in accepted (mail through it only).
    pub smtp_sessions: Option<u64>,
    /// 429s the Slack stand-in answered (its rate limit and `throttle_first`).
    pub throttle_answers: Option<u64>,
    /// The most deliveries the Slack stand-in accepted in any 1-second window.
    pub max_per_second: Option<u64>,
    /// With a large tenant: lateness of its deliveries and of the others'.
    pub groups: Vec<GroupLateness>,
    /// Deliveries the Slack stand-in accepted per second from the due
    /// instant (second 0 holds the due instant), for a look at the pacing.
    pub per_second: Vec<u64>,
    /// Where lateness was measured: "sink" (the stand-in's arrival clock) or "rows" (delivery rows).
    pub measured_at: MeasuredAt,
    /// The run's lateness CDF (`--plot`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plot: Option<PathBuf>,
    /// With `--events`: the delivery events' lag and counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<super::events::EventFigures>,
    /// Each delivery's lateness (ms) as measured, all of them and then per
    /// group, for `--plot`; not printed.
    #[serde(skip)]
    pub samples_ms: Vec<(String, Vec<i64>)>,
}

pub fn header() -> Vec<&'static str> {
    vec![
        "N",
        "W",
        "D",
        "backend",
        "channel",
        "enqueue s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "deliv/s",
        "missing",
        "dup",
        "RSS MB",
        "CPU s",
        "sink CPU s",
        "sessions",
        "share %",
        "429s",
        "max/s",
    ]
}

pub fn row(r: &BenchRun, label: Option<&str>) -> Vec<String> {
    vec![
        format!("{}{}", r.deliveries, label.unwrap_or("")),
        r.workers.to_string(),
        r.daemons.to_string(),
        r.backend.to_string(),
        r.channel.to_string(),
        format!("{:.1}", r.enqueue_s),
        r.lateness_ms.p50.to_string(),
        r.lateness_ms.p90.to_string(),
        r.lateness_ms.p99.to_string(),
        r.lateness_ms.max.to_string(),
        format!("{:.0}", r.deliveries_per_s),
        r.missing.to_string(),
        r.duplicates.to_string(),
        format!("{:.1}", r.peak_rss_mb),
        format!("{:.2}", r.cpu_s),
        r.sink_cpu_s
            .map_or_else(|| "-".to_owned(), |s| format!("{s:.2}")),
        r.smtp_sessions
            .map_or_else(|| "-".to_owned(), |s| s.to_string()),
        share_percent(&r.share),
        r.throttle_answers
            .map_or_else(|| "-".to_owned(), |s| s.to_string()),
        r.max_per_second
            .map_or_else(|| "-".to_owned(), |s| s.to_string()),
    ]
}

/// Lateness per group of tenants, as a table.
pub fn groups_table(groups: &[GroupLateness]) -> String {
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            vec![
                g.group.clone(),
                g.deliveries.to_string(),
                g.lateness_ms.p50.to_string(),
                g.lateness_ms.p99.to_string(),
                g.lateness_ms.max.to_string(),
            ]
        })
        .collect();
    toki_app::table::table(
        &["tenants", "deliveries", "p50 ms", "p99 ms", "max ms"],
        &rows,
    )
}

/// The delivery events of each run (by its deliveries), as a table.
pub fn events_table(runs: &[(usize, super::events::EventFigures)]) -> String {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|(n, e)| {
            vec![
                n.to_string(),
                e.expected.to_string(),
                e.received.to_string(),
                e.missing.to_string(),
                e.duplicated.to_string(),
                e.lag_ms.p50.to_string(),
                e.lag_ms.p99.to_string(),
                e.lag_ms.max.to_string(),
                format!("{:.2}", e.receiver_cpu_s),
            ]
        })
        .collect();
    toki_app::table::table(
        &[
            "N",
            "events expected",
            "received",
            "missing",
            "dup",
            "lag p50 ms",
            "lag p99 ms",
            "lag max ms",
            "receiver CPU s",
        ],
        &rows,
    )
}

/// Each daemon's part of the deliveries, in percent: `34/33/33`.
fn share_percent(share: &[u64]) -> String {
    let total: u64 = share.iter().sum();
    if total == 0 {
        return "-".into();
    }
    share
        .iter()
        .map(|s| format!("{:.0}", *s as f64 * 100.0 / total as f64))
        .collect::<Vec<_>>()
        .join("/")
}
