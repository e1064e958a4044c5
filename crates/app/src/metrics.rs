//! What an operator scrapes at `/metrics` (OpenMetrics text, by the
//! Prometheus project's client): lateness per channel, deliveries by channel
//! and status, the daemon's message counters, the flow's keys, the queue's
//! depth, scanner runs, registrar requests and the repair backlog.
//!
//! One [`Metrics`] per process. Services record into it as they go (a
//! delivery's lateness when its outcome is stored); counters the services
//! already keep (the daemon's, the flow's) are read at scrape time, so the
//! hot path pays for nothing twice.

use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub use prometheus_client;

use toki_core::observe::ScanSummary;
use toki_core::observe::{Observer, OutcomeCounts};
use toki_core::repair::RepairSummary;
use toki_ports::QueueDepth;

mod collect;
mod daemon;
mod events;
mod retention;
pub use daemon::DaemonCollector;
pub use events::EventsCollector;
pub use retention::RetentionCollector;

/// Writes the API made but could not append to the audit log (the write
/// stands; docs/audit.md): process-wide, so the API's middleware needs no handle.
pub static AUDIT_APPEND_FAILURES: std::sync::LazyLock<Counter> =
    std::sync::LazyLock::new(Counter::default);

/// Seconds late: fine enough to tell 10 ms from 100 ms from 1 s, and wide
/// enough for a delivery that waited out a retry.
pub const LATENESS_BUCKETS: [f64; 17] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
    900.0,
];

/// Seconds a registrar request or a scan took.
pub const DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChannelLabel {
    pub channel: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    pub channel: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: String,
    /// The route's pattern (`/v1/tenants/{tenant}/schedules/{id}`), never
    /// the path itself: tenants and ids would make a series each.
    pub route: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub method: String,
    pub route: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn lateness_histogram() -> Histogram {
    Histogram::new(LATENESS_BUCKETS)
}

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The process's metrics.
pub struct Metrics {
    registry: Mutex<Registry>,
    pub lateness: HistogramFamily<ChannelLabel>,
    pub deliveries: Family<DeliveryLabels, Counter>,
    pub queue: Family<StateLabel, Gauge>,
    pub dead_letters: Gauge,
    pub scanner_runs: Family<ResultLabel, Counter>,
    pub scanner_rows: Counter,
    pub scanner_enqueued: Counter,
    pub scanner_failed_rows: Counter,
    pub scanner_failed_partitions: Counter,
    pub scanner_duration: Histogram,
    /// Unix seconds of the last scan that finished (0: none yet).
    pub scanner_last_run: Gauge,
    pub requests: Family<RequestLabels, Counter>,
    pub request_duration: HistogramFamily<RouteLabels>,
    pub repair_backlog: Gauge,
    pub repair_failed_tenants: Gauge,
    pub repair_timed_out_tenants: Gauge,
    pub repair_deferred_tenants: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let m = Metrics {
            registry: Mutex::new(Registry::default()),
            lateness: Family::new_with_constructor(lateness_histogram),
            deliveries: Family::default(),
            queue: Family::default(),
            dead_letters: Gauge::default(),
            scanner_runs: Family::default(),
            scanner_rows: Counter::default(),
            scanner_enqueued: Counter::default(),
            scanner_failed_rows: Counter::default(),
            scanner_failed_partitions: Counter::default(),
            scanner_duration: duration_histogram(),
            scanner_last_run: Gauge::default(),
            requests: Family::default(),
            request_duration: Family::new_with_constructor(duration_histogram),
            repair_backlog: Gauge::default(),
            repair_failed_tenants: Gauge::default(),
            repair_timed_out_tenants: Gauge::default(),
            repair_deferred_tenants: Gauge::default(),
        };
        {
            let mut r = m.registry.lock().expect("registry");
            m.register_deliveries(&mut r);
            m.register_scanner(&mut r);
            m.register_requests_and_repair(&mut r);
        }
        Arc::new(m)
    }

    /// Lateness, outcomes, and the queue's depth.
    fn register_deliveries(&self, r: &mut Registry) {
        let m = self;
        r.register(
            "toki_delivery_lateness_seconds",
            "Delivered minus due, per delivery, by channel",
            m.lateness.clone(),
        );
        r.register(
            "toki_deliveries",
            "Delivery outcomes recorded, by channel and status",
            m.deliveries.clone(),
        );
        r.register(
            "toki_queue_messages",
            "Messages in the delay queue by state (visible, in_flight, delayed), as of the scrape",
            m.queue.clone(),
        );
        r.register(
            "toki_dead_letter_messages",
            "Messages in the dead-letter queue, as of the scrape",
            m.dead_letters.clone(),
        );
    }

    fn register_scanner(&self, r: &mut Registry) {
        let m = self;
        r.register(
            "toki_scanner_runs",
            "Scanner runs by result (ok, partial: some rows or partitions failed, failed)",
            m.scanner_runs.clone(),
        );
        r.register(
            "toki_scanner_rows_seen",
            "Index rows the scanner found in its window",
            m.scanner_rows.clone(),
        );
        r.register(
            "toki_scanner_enqueued",
            "Reminders the scanner sent to the delay queue",
            m.scanner_enqueued.clone(),
        );
        r.register(
            "toki_scanner_failed_rows",
            "Rows the scanner could not enqueue (the next run retries them)",
            m.scanner_failed_rows.clone(),
        );
        r.register(
            "toki_scanner_failed_partitions",
            "Index partitions the scanner could not query",
            m.scanner_failed_partitions.clone(),
        );
        r.register(
            "toki_scanner_run_duration_seconds",
            "How long a scan took",
            m.scanner_duration.clone(),
        );
        r.register(
            "toki_scanner_last_run_timestamp_seconds",
            "When the last scan finished (Unix seconds)",
            m.scanner_last_run.clone(),
        );
    }

    fn register_requests_and_repair(&self, r: &mut Registry) {
        let m = self;
        r.register(
            "toki_registrar_requests",
            "Registrar API requests by method, route and status",
            m.requests.clone(),
        );
        r.register(
            "toki_registrar_request_duration_seconds",
            "Registrar API request latency by method and route",
            m.request_duration.clone(),
        );
        r.register(
            "toki_audit_append_failures",
            "API writes made but not recorded in the tenant's audit log",
            AUDIT_APPEND_FAILURES.clone(),
        );
        r.register(
            "toki_repair_backlog",
            "Index mirrors found unfinished by the last repair pass",
            m.repair_backlog.clone(),
        );
        r.register(
            "toki_repair_failed_tenants",
            "Tenants whose repair failed in the last pass",
            m.repair_failed_tenants.clone(),
        );
        r.register(
            "toki_repair_timed_out_tenants",
            "Tenants whose repair passed its deadline in the last pass",
            m.repair_timed_out_tenants.clone(),
        );
        r.register(
            "toki_repair_deferred_tenants",
            "Tenants the last repair pass ran out of budget for (the next pass starts with them)",
            m.repair_deferred_tenants.clone(),
        );
    }

    /// Adds figures read at scrape time (the daemon's counters, the flow's keys).
    pub fn register_collector(&self, collector: Box<dyn Collector>) {
        self.registry
            .lock()
            .expect("registry")
            .register_collector(collector);
    }

    /// A batch's outcomes once stored: counted by channel and status; the
    /// delivered ones' lateness observed.
    pub fn observe(&self, observed: &OutcomeCounts) {
        for ((channel, status), n) in &observed.by_status {
            self.deliveries
                .get_or_create(&DeliveryLabels {
                    channel: channel.to_string(),
                    status: status.to_string(),
                })
                .inc_by(*n);
        }
        let mut channel = None;
        for (c, late) in &observed.late_seconds {
            // One histogram look-up per run of a channel (a batch is mostly one).
            let histogram = match &channel {
                Some((last, h)) if last == c => h,
                _ => {
                    let h = self.lateness.get_or_create_owned(&ChannelLabel {
                        channel: c.to_string(),
                    });
                    &channel.insert((*c, h)).1
                }
            };
            histogram.observe(*late);
        }
    }

    pub fn observe_queue(&self, depth: &QueueDepth) {
        for (state, n) in [
            ("visible", depth.visible),
            ("in_flight", depth.in_flight),
            ("delayed", depth.delayed),
        ] {
            self.queue
                .get_or_create(&StateLabel {
                    state: state.into(),
                })
                .set(n as i64);
        }
        self.dead_letters.set(depth.dead_letters as i64);
    }

    /// One scanner run (`None`: it failed before it could say what it did).
    pub fn observe_scan(&self, summary: Option<&ScanSummary>, seconds: f64, finished_unix: i64) {
        let result = match summary {
            None => "failed",
            Some(s) if s.had_failures() => "partial",
            Some(_) => "ok",
        };
        self.scanner_runs
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
        if let Some(s) = summary {
            self.scanner_rows.inc_by(s.scanned as u64);
            self.scanner_enqueued.inc_by(s.enqueued as u64);
            self.scanner_failed_rows.inc_by(s.failed as u64);
            self.scanner_failed_partitions
                .inc_by(s.failed_partitions as u64);
        }
        self.scanner_duration.observe(seconds);
        self.scanner_last_run.set(finished_unix);
    }

    pub fn observe_repair(&self, summary: &RepairSummary) {
        self.repair_backlog.set(summary.repaired as i64);
        self.repair_failed_tenants
            .set(summary.failed_tenants as i64);
        self.repair_timed_out_tenants
            .set(summary.timed_out_tenants as i64);
        self.repair_deferred_tenants
            .set(summary.deferred_tenants as i64);
    }

    pub fn observe_request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                method: method.into(),
                route: route.into(),
                status: status.to_string(),
            })
            .inc();
        self.request_duration
            .get_or_create(&RouteLabels {
                method: method.into(),
                route: route.into(),
            })
            .observe(seconds);
    }

    /// The OpenMetrics text of everything registered.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(
            &mut out,
            &self.registry.lock().expect("registry"),
        )
        .expect("writing to a String cannot fail");
        out
    }
}

impl Observer for Metrics {
    fn deliveries_recorded(&self, counts: &OutcomeCounts) {
        self.observe(counts);
    }

    fn scan_finished(&self, summary: Option<&ScanSummary>, seconds: f64, finished_unix: i64) {
        self.observe_scan(summary, seconds, finished_unix);
    }
}

/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;
    use toki_model::{
        Channel, DeliveryKey, DeliveryOutcome, DeliveryPurpose, DeliveryStatus, DueAt, Occurrence,
    };

    #[test]
    fn lateness_is_counted_per_delivered_outcome_in_fine_buckets() {
        let m = Metrics::new();
        let due = toki_core::testing::monday_morning();
        let outcome = |ms: i64, status: DeliveryStatus| DeliveryOutcome {
            key: DeliveryKey {
                schedule: "s".parse().unwrap(),
                occurrence: Occurrence(due),
                purpose: DeliveryPurpose::Reminder { minutes_before: 0 },
                recipient: "u".parse().unwrap(),
                channel: Channel::Slack,
            },
            version: 1,
            due_at: DueAt(due),
            status,
            at: due + chrono::Duration::milliseconds(ms),
            detail: None,
        };
        m.observe(&OutcomeCounts::of(&[
            outcome(8, DeliveryStatus::Delivered),
            outcome(80, DeliveryStatus::Delivered),
            outcome(800, DeliveryStatus::Delivered),
            outcome(0, DeliveryStatus::Failed),
        ]));
        let text = m.encode();
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
                .rsplit(' ')
                .next()
                .unwrap()
                .to_owned()
        };
        assert_eq!(
            line("toki_delivery_lateness_seconds_count{channel=\"slack\"}"),
            "3"
        );
        // One in each decade: ≤10 ms, ≤100 ms, ≤1 s.
        assert_eq!(
            line("toki_delivery_lateness_seconds_bucket{le=\"0.01\",channel=\"slack\"}"),
            "1"
        );
        assert_eq!(
            line("toki_delivery_lateness_seconds_bucket{le=\"0.1\",channel=\"slack\"}"),
            "2"
        );
        assert_eq!(
            line("toki_delivery_lateness_seconds_bucket{le=\"1.0\",channel=\"slack\"}"),
            "3"
        );
        assert_eq!(
            line("toki_deliveries_total{channel=\"slack\",status=\"failed\"}"),
            "1"
        );
        assert_eq!(
            line("toki_deliveries_total{channel=\"slack\",status=\"delivered\"}"),
            "3"
        );
    }
}
