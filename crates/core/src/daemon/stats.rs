//! Counters for progress displays and tests; the delivery rows are the record.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Notify;

use crate::domain::{DeliveryOutcome, DeliveryStatus};

#[derive(Debug, Default)]
pub struct DaemonStats {
    pub received: AtomicU64,
    pub delivered: AtomicU64,
    pub stale: AtomicU64,
    /// Messages dropped as stale (a deleted schedule's have no delivery rows).
    pub stale_messages: AtomicU64,
    pub undeliverable: AtomicU64,
    pub failed: AtomicU64,
    pub duplicates_skipped: AtomicU64,
    pub acked: AtomicU64,
    /// Messages hidden for a retry after a failure.
    pub retried: AtomicU64,
    /// Messages re-delayed because a service asked to slow down.
    pub throttled: AtomicU64,
    /// Messages re-delayed because another holder is still sending some of their deliveries.
    pub busy: AtomicU64,
    /// Messages parked behind an open circuit.
    pub parked: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub circuits_opened: AtomicU64,
    /// Deliveries not attempted because their circuit opened after the plan.
    pub deferred: AtomicU64,
    /// Receive calls that returned (empty or not): moves while workers are alive.
    pub polls: AtomicU64,
    /// Change notice deliveries sent (not counted in `delivered`).
    pub notices_delivered: AtomicU64,
    /// Woken whenever the counters move, so waiters need not poll.
    changed: Notify,
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub received: u64,
    pub delivered: u64,
    pub stale: u64,
    pub stale_messages: u64,
    pub undeliverable: u64,
    pub failed: u64,
    pub duplicates_skipped: u64,
    pub acked: u64,
    pub retried: u64,
    pub throttled: u64,
    pub busy: u64,
    pub parked: u64,
    pub dead_lettered: u64,
    pub circuits_opened: u64,
    pub deferred: u64,
    pub notices_delivered: u64,
}

/// Outcome rows of a batch, counted by status.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    delivered: u64,
    stale: u64,
    undeliverable: u64,
    failed: u64,
    deferred: u64,
}

impl Tally {
    pub(crate) fn of(outcomes: &[DeliveryOutcome]) -> Self {
        let mut t = Tally::default();
        for o in outcomes {
            match o.status {
                DeliveryStatus::Delivered => t.delivered += 1,
                DeliveryStatus::Stale => t.stale += 1,
                DeliveryStatus::Undeliverable => t.undeliverable += 1,
                DeliveryStatus::Failed => t.failed += 1,
                DeliveryStatus::Deferred => t.deferred += 1,
                // Throttles are counted per message (`throttled`).
                DeliveryStatus::Throttled | DeliveryStatus::Sending => {}
            }
        }
        t
    }
}

impl DaemonStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            received: l(&self.received),
            delivered: l(&self.delivered),
            stale: l(&self.stale),
            stale_messages: l(&self.stale_messages),
            undeliverable: l(&self.undeliverable),
            failed: l(&self.failed),
            duplicates_skipped: l(&self.duplicates_skipped),
            acked: l(&self.acked),
            retried: l(&self.retried),
            throttled: l(&self.throttled),
            busy: l(&self.busy),
            parked: l(&self.parked),
            dead_lettered: l(&self.dead_lettered),
            circuits_opened: l(&self.circuits_opened),
            deferred: l(&self.deferred),
            notices_delivered: l(&self.notices_delivered),
        }
    }

    pub(crate) fn add(&self, counter: &AtomicU64, n: usize) {
        if n > 0 {
            counter.fetch_add(n as u64, Ordering::Relaxed);
            self.changed.notify_waiters();
        }
    }

    pub(crate) fn add_tally(&self, t: &Tally) {
        for (counter, n) in [
            (&self.delivered, t.delivered),
            (&self.stale, t.stale),
            (&self.undeliverable, t.undeliverable),
            (&self.failed, t.failed),
            (&self.deferred, t.deferred),
        ] {
            counter.fetch_add(n, Ordering::Relaxed);
        }
        self.changed.notify_waiters();
    }

    /// Waits until `done` holds for the counters, or `timeout` passes; returns
    /// the last snapshot either way.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&StatsSnapshot) -> bool,
    ) -> StatsSnapshot {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let s = self.snapshot();
            if done(&s) {
                return s;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return self.snapshot();
            }
        }
    }
}

/// The daemon's counters, its in-flight messages and its flow's keys, read
/// at each scrape of `/metrics`.
pub(crate) struct DaemonCollector {
    pub stats: std::sync::Arc<DaemonStats>,
    pub in_flight: std::sync::Arc<AtomicU64>,
    pub flow: Option<std::sync::Arc<crate::flow::Flow>>,
}

impl std::fmt::Debug for DaemonCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonCollector").finish_non_exhaustive()
    }
}

impl prometheus_client::collector::Collector for DaemonCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
    ) -> std::fmt::Result {
        use crate::metrics::collect::{counter, gauge};
        let s = self.stats.snapshot();
        let none = Vec::new;
        let reason = |r: &str| vec![("reason", r.to_owned())];
        let e = &mut encoder;
        counter(
            e,
            "toki_messages_received",
            "Messages the daemon received",
            &[(none(), s.received)],
        )?;
        counter(
            e,
            "toki_messages_acked",
            "Messages done with and deleted",
            &[(none(), s.acked)],
        )?;
        counter(
            e,
            "toki_message_retries",
            "Messages put back on the queue, by reason: failure (a send failed), throttled (a service or a limit said wait), busy (another holder is still sending), parked (behind an open circuit)",
            &[
                (reason("failure"), s.retried),
                (reason("throttled"), s.throttled),
                (reason("busy"), s.busy),
                (reason("parked"), s.parked),
            ],
        )?;
        counter(
            e,
            "toki_messages_dead_lettered",
            "Messages moved to the dead-letter queue",
            &[(none(), s.dead_lettered)],
        )?;
        counter(
            e,
            "toki_messages_stale",
            "Messages dropped because their schedule changed or went away",
            &[(none(), s.stale_messages)],
        )?;
        counter(
            e,
            "toki_deliveries_skipped",
            "Deliveries not sent again: another claim holds them or they were already sent (duplicates)",
            &[(reason("duplicate"), s.duplicates_skipped)],
        )?;
        counter(
            e,
            "toki_circuits_opened",
            "Times a channel's circuit opened",
            &[(none(), s.circuits_opened)],
        )?;
        counter(
            e,
            "toki_change_notices_delivered",
            "Change notices sent",
            &[(none(), s.notices_delivered)],
        )?;
        gauge(
            e,
            "toki_messages_in_flight",
            "Messages this daemon holds now",
            &[(none(), self.in_flight.load(Ordering::Relaxed) as f64)],
        )?;
        if let Some(flow) = &self.flow {
            // Per-recipient keys (slack:<ws>:<user>) come and go by the
            // thousand: the workspace, account, database and tenant keys say
            // enough and keep the series few.
            let keys: Vec<_> = flow
                .stats()
                .into_iter()
                .filter(|k| !(k.key.starts_with("slack:") && k.key.matches(':').count() > 1))
                .collect();
            let by_key =
                |f: &dyn Fn(&crate::flow::KeyStats) -> f64| -> Vec<(Vec<(&str, String)>, f64)> {
                    keys.iter()
                        .map(|k| (vec![("key", k.key.clone())], f(k)))
                        .collect()
                };
            let counts =
                |f: &dyn Fn(&crate::flow::KeyStats) -> u64| -> Vec<(Vec<(&str, String)>, u64)> {
                    keys.iter()
                        .map(|k| (vec![("key", k.key.clone())], f(k)))
                        .collect()
                };
            gauge(
                e,
                "toki_flow_granted_rate",
                "What this instance may spend per second now, by key (its leased share)",
                &by_key(&|k| k.granted_rate),
            )?;
            gauge(
                e,
                "toki_flow_leases",
                "Partitions of the key's fleet-wide rate this instance leases",
                &by_key(&|k| f64::from(k.leases)),
            )?;
            gauge(
                e,
                "toki_flow_waiting",
                "Deliveries waiting at the key's gate now",
                &by_key(&|k| k.waiting as f64),
            )?;
            counter(
                e,
                "toki_flow_granted",
                "Deliveries the key's gate let through",
                &counts(&|k| k.granted),
            )?;
            counter(
                e,
                "toki_flow_refused",
                "Deliveries sent back to the queue for want of capacity",
                &counts(&|k| k.refused),
            )?;
            counter(
                e,
                "toki_throttle_answers",
                "429 / Retry-After answers from the service behind the key",
                &counts(&|k| k.throttle_answers),
            )?;
            counter(
                e,
                "toki_flow_revoked",
                "Permits revoked from holders stuck past the deadline",
                &counts(&|k| k.revoked),
            )?;
        }
        Ok(())
    }
}
