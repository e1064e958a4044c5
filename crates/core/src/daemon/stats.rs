//! Counters for progress displays and tests; the delivery rows are the record.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Notify;

use toki_model::domain::{DeliveryOutcome, DeliveryStatus};

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
    /// Waiting messages put back as new near the queue's own receive limit.
    pub renewed: AtomicU64,
    /// Held messages whose visibility ran out before the heartbeat extended
    /// them: the queue may give them to another worker while their holder
    /// is alive (a late heartbeat).
    pub lapsed: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub circuits_opened: AtomicU64,
    /// Deliveries not attempted because their circuit opened after the plan.
    pub deferred: AtomicU64,
    /// Receive calls that returned (empty or not): moves while workers are alive.
    pub polls: AtomicU64,
    /// Change notice deliveries sent (not counted in `delivered`).
    pub notices_delivered: AtomicU64,
    /// Addresses put on a tenant's suppression list after a server refused them.
    pub suppressed: AtomicU64,
    /// Messages deleted because their tenant was deleted (offboarded).
    pub tenant_deleted: AtomicU64,
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
    pub renewed: u64,
    pub lapsed: u64,
    pub dead_lettered: u64,
    pub circuits_opened: u64,
    pub deferred: u64,
    pub notices_delivered: u64,
    pub suppressed: u64,
    pub tenant_deleted: u64,
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
            renewed: l(&self.renewed),
            lapsed: l(&self.lapsed),
            dead_lettered: l(&self.dead_lettered),
            circuits_opened: l(&self.circuits_opened),
            deferred: l(&self.deferred),
            notices_delivered: l(&self.notices_delivered),
            suppressed: l(&self.suppressed),
            tenant_deleted: l(&self.tenant_deleted),
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

/// What a daemon lets an observer read at any time: its counters, the
/// messages it holds now, and its flow's keys (if it has flow control).
#[derive(Clone)]
pub struct DaemonGauges {
    pub stats: std::sync::Arc<DaemonStats>,
    pub in_flight: std::sync::Arc<AtomicU64>,
    pub flow: Option<std::sync::Arc<toki_flow::Flow>>,
}
