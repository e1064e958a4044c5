//! What the services report as they work: a scan's summary, a batch's
//! outcome counts, and the [`Observer`] that hears them. The application counts it (the
//! Prometheus metrics of `/metrics`); core depends on no metrics library.

use serde::Serialize;
use toki_model::{Channel, DeliveryOutcome, DeliveryStatus};

/// A batch's outcomes as they are counted: how many by channel and status
/// (one counter update per group, not per delivery), and the delivered
/// ones' seconds late by channel. Taken before the outcomes go to be
/// stored, reported once they are.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct OutcomeCounts {
    pub by_status: Vec<((Channel, DeliveryStatus), u64)>,
    pub late_seconds: Vec<(Channel, f64)>,
}

impl OutcomeCounts {
    pub fn of(outcomes: &[DeliveryOutcome]) -> Self {
        let mut o = OutcomeCounts::default();
        for d in outcomes {
            let group = (d.key.channel, d.status);
            match o.by_status.iter_mut().find(|(g, _)| *g == group) {
                Some((_, n)) => *n += 1,
                None => o.by_status.push((group, 1)),
            }
            if d.status == DeliveryStatus::Delivered {
                let late = (d.at - d.due_at.0).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6;
                o.late_seconds.push((d.key.channel, late));
            }
        }
        o
    }
}

/// One scan run, as logged and returned by the scanner Lambda.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ScanSummary {
    /// Index rows in the window, any status.
    pub scanned: usize,
    /// Rows waiting to be enqueued.
    pub pending: usize,
    pub enqueued: usize,
    pub already_claimed: usize,
    pub failed: usize,
    /// Rows held back because the tenant's contract is off, inactive or unknown.
    pub skipped_by_contract: usize,
    pub partitions: usize,
    /// Partitions whose query failed this run.
    pub failed_partitions: usize,
    /// Rows left pending because the run's deadline came first.
    pub deferred: usize,
    pub duration_ms: u64,
}

impl ScanSummary {
    /// Whether anything failed this run (rows the next run must retry).
    pub fn had_failures(&self) -> bool {
        self.failed > 0 || self.failed_partitions > 0
    }
}

/// Where the services report. Each method's default ignores the report.
pub trait Observer: Send + Sync {
    /// A batch's outcomes, once stored: a scrape that counts a delivery finds its row.
    fn deliveries_recorded(&self, _counts: &OutcomeCounts) {}

    /// One scanner run: what it did (`None`: it failed before it could
    /// say), how long it took, and when it finished (Unix seconds).
    fn scan_finished(&self, _summary: Option<&ScanSummary>, _seconds: f64, _finished_unix: i64) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use toki_model::{DeliveryKey, DeliveryPurpose, DueAt, Occurrence};

    fn outcome(channel: Channel, status: DeliveryStatus, late_ms: i64) -> DeliveryOutcome {
        let due: toki_model::Instant = "2026-11-23T08:55:00Z".parse().unwrap();
        DeliveryOutcome {
            key: DeliveryKey {
                schedule: "s".parse().unwrap(),
                occurrence: Occurrence(due),
                purpose: DeliveryPurpose::Reminder { minutes_before: 5 },
                recipient: "u".parse().unwrap(),
                channel,
            },
            version: 1,
            status,
            due_at: DueAt(due),
            at: due + chrono::Duration::milliseconds(late_ms),
            detail: None,
        }
    }

    #[test]
    fn outcomes_are_counted_by_channel_and_status_and_only_deliveries_are_late() {
        let counts = OutcomeCounts::of(&[
            outcome(Channel::Mail, DeliveryStatus::Delivered, 250),
            outcome(Channel::Mail, DeliveryStatus::Delivered, 0),
            outcome(Channel::Slack, DeliveryStatus::Failed, 900),
        ]);
        assert_eq!(
            counts.by_status,
            vec![
                ((Channel::Mail, DeliveryStatus::Delivered), 2),
                ((Channel::Slack, DeliveryStatus::Failed), 1),
            ]
        );
        assert_eq!(
            counts.late_seconds,
            vec![(Channel::Mail, 0.25), (Channel::Mail, 0.0)]
        );
    }
}
