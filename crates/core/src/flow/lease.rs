//! Leases on a limit's partitions: the port, and the pure rule of how many
//! partitions an instance should hold.
//!
//! A fleet-wide rate is split into P partitions; an instance may spend a
//! partition's share only while it holds the partition's lease, taken by a
//! conditional write on the partition's row (DynamoDB on AWS, SQLite
//! embedded). A lease is renewed while its holder has work and given back
//! when it is idle; one whose holder crashed expires.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rand::seq::SliceRandom;
use tracing::{debug, warn};

use super::gate::Gate;
use super::limits::FlowSettings;
use crate::domain::Instant;
use crate::error::chain;
use crate::plan::to_chrono;
use crate::ports::Clock;
use crate::StoreResult;

/// One partition's lease row, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLease {
    pub key: String,
    pub partition: u32,
    pub holder: String,
    pub expires_at: Instant,
}

/// Where lease rows live. Every write is conditional.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Takes or renews `partition` of `key` for `holder` until `until`: only
    /// if the partition has no row, its lease expired at `now`, or `holder`
    /// holds it already. True: `holder` holds it until `until`.
    async fn acquire(
        &self,
        key: &str,
        partition: u32,
        holder: &str,
        until: Instant,
        now: Instant,
    ) -> StoreResult<bool>;

    /// Gives `partition` back, if `holder` still holds it (true).
    async fn release(&self, key: &str, partition: u32, holder: &str) -> StoreResult<bool>;

    /// Every stored lease row of `key`, live or expired, by partition.
    async fn leases(&self, key: &str) -> StoreResult<Vec<PartitionLease>>;
}

/// How an instance keeps its partitions of one key: renews those it has,
/// takes free ones while deliveries wait, gives back all but the reserved
/// ones once idle, and lets go of a partition it held a long time so that
/// other instances with work get their turn.
pub(super) struct Leaser {
    pub key: String,
    pub holder: String,
    pub store: Arc<dyn LeaseStore>,
    pub clock: Arc<dyn Clock>,
    pub gate: Arc<Gate>,
    pub settings: FlowSettings,
}

/// Free partitions are looked for at most this often while deliveries wait.
const DEMAND_EVERY: Duration = Duration::from_millis(250);

/// A partition this instance holds.
struct Held {
    since: tokio::time::Instant,
    /// Ours until then by our own clock (a little before the row says).
    until: tokio::time::Instant,
}

impl Leaser {
    fn renew_every(&self) -> Duration {
        self.settings.lease() / 3
    }

    /// A partition held this long (beyond the reserved ones) is let go.
    fn max_hold(&self) -> Duration {
        self.settings.lease() * 3
    }

    /// Until the flow stops or the gate is retired (its tenant's contract
    /// changed); either way its partitions are given back.
    pub(super) async fn run(
        self,
        mut stop: tokio::sync::watch::Receiver<bool>,
        mut retired: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut held: BTreeMap<u32, Held> = BTreeMap::new();
        let mut cooling: HashMap<u32, tokio::time::Instant> = HashMap::new();
        let all = self.settings.partitions as usize;
        'run: loop {
            let now_t = tokio::time::Instant::now();
            // Deliveries waited or were refused within the last round: want
            // every partition; else only the reserved ones, at once, so an
            // instance that still has work gets the rest.
            let target = if self.gate.pressed_since(now_t - self.renew_every()) {
                all
            } else {
                self.settings.reserved_partitions as usize
            };
            cooling.retain(|_, until| *until > now_t);
            self.keep(&mut held, &mut cooling, target, now_t).await;
            if held.len() < target {
                self.take_more(&mut held, &cooling, target).await;
            }
            self.set_share(&held);
            // Until the next round: when deliveries start to wait, take free
            // partitions (at most every quarter second, not at every wait).
            let next_round = now_t + self.renew_every();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(next_round) => break,
                    _ = self.gate.demand.notified(), if held.len() < all => {
                        tokio::time::sleep(DEMAND_EVERY.min(self.renew_every())).await;
                        self.take_more(&mut held, &cooling, all).await;
                        self.set_share(&held);
                    }
                    _ = stop.changed() => break 'run,
                    _ = retired.changed() => break 'run,
                }
            }
        }
        // Shutting down: give every partition back for the others.
        for partition in held.keys() {
            let _ = self
                .store
                .release(&self.key, *partition, &self.holder)
                .await;
        }
        self.gate.set_share(0.0);
    }

    /// Renews what is held, lets go of what is beyond `target` or held too
    /// long, and forgets what was lost (taken over after our lease ran out).
    async fn keep(
        &self,
        held: &mut BTreeMap<u32, Held>,
        cooling: &mut HashMap<u32, tokio::time::Instant>,
        target: usize,
        now_t: tokio::time::Instant,
    ) {
        let reserved = self.settings.reserved_partitions as usize;
        let mut excess = held.len().saturating_sub(target);
        // One partition a round at most: the share drops by a partition, never
        // at once; and only while another instance uses the key (holds a live
        // lease on it): alone, a partition let go would only sit idle.
        let overdue = held.len() > reserved
            && held
                .values()
                .any(|h| now_t.duration_since(h.since) >= self.max_hold());
        let mut may_rotate = overdue && self.others_hold().await;
        let partitions: Vec<u32> = held.keys().rev().copied().collect();
        for partition in partitions {
            let h = &held[&partition];
            let rotate = may_rotate
                && held.len() > reserved
                && now_t.duration_since(h.since) >= self.max_hold();
            if rotate {
                may_rotate = false;
            }
            if excess > 0 || rotate {
                excess = excess.saturating_sub(1);
                held.remove(&partition);
                if rotate {
                    cooling.insert(partition, now_t + self.settings.lease());
                }
                if let Err(e) = self.store.release(&self.key, partition, &self.holder).await {
                    warn!(key = %self.key, partition, error = %chain(&e), "giving a lease back failed; it expires");
                }
                continue;
            }
            match self.lease(partition).await {
                Ok(true) => {
                    held.get_mut(&partition).expect("held").until = self.until(now_t);
                }
                Ok(false) => {
                    debug!(key = %self.key, partition, "lease taken over");
                    held.remove(&partition);
                }
                Err(e) => {
                    warn!(key = %self.key, partition, error = %chain(&e), "renewing a lease failed");
                    if held[&partition].until <= now_t {
                        held.remove(&partition);
                    }
                }
            }
        }
    }

    /// Whether another instance holds a live lease on the key (reading the
    /// rows failed: assume so, and take turns as before).
    async fn others_hold(&self) -> bool {
        let now = self.clock.now();
        match self.store.leases(&self.key).await {
            Ok(rows) => rows
                .iter()
                .any(|l| l.holder != self.holder && l.expires_at > now),
            Err(_) => true,
        }
    }

    /// Takes free partitions (no row, expired, not cooling) until `target`.
    async fn take_more(
        &self,
        held: &mut BTreeMap<u32, Held>,
        cooling: &HashMap<u32, tokio::time::Instant>,
        target: usize,
    ) {
        let now = self.clock.now();
        let rows = match self.store.leases(&self.key).await {
            Ok(rows) => rows,
            Err(e) => {
                warn!(key = %self.key, error = %chain(&e), "reading leases failed");
                return;
            }
        };
        let live: HashSet<u32> = rows
            .iter()
            .filter(|l| l.expires_at > now && l.holder != self.holder)
            .map(|l| l.partition)
            .collect();
        let mut free: Vec<u32> = (0..self.settings.partitions)
            .filter(|p| !held.contains_key(p) && !live.contains(p) && !cooling.contains_key(p))
            .collect();
        // Instances racing for the same free partitions try them in
        // different orders, so most of them win something at once.
        free.shuffle(&mut rand::thread_rng());
        for partition in free {
            if held.len() >= target {
                break;
            }
            let now_t = tokio::time::Instant::now();
            match self.lease(partition).await {
                Ok(true) => {
                    held.insert(
                        partition,
                        Held {
                            since: now_t,
                            until: self.until(now_t),
                        },
                    );
                }
                Ok(false) => {}
                Err(e) => {
                    warn!(key = %self.key, partition, error = %chain(&e), "taking a lease failed");
                    return;
                }
            }
        }
    }

    /// Takes or renews `partition` for a lease from now.
    async fn lease(&self, partition: u32) -> StoreResult<bool> {
        let now = self.clock.now();
        let until = now + to_chrono(self.settings.lease());
        self.store
            .acquire(&self.key, partition, &self.holder, until, now)
            .await
    }

    fn set_share(&self, held: &BTreeMap<u32, Held>) {
        let share = held.len() as f64 / f64::from(self.settings.partitions);
        if (share - self.gate.share()).abs() > f64::EPSILON {
            debug!(key = %self.key, partitions = held.len(), "leases held");
        }
        self.gate.set_share(share);
    }

    /// Ours until a tenth before the lease ends: clocks differ a little.
    fn until(&self, now_t: tokio::time::Instant) -> tokio::time::Instant {
        now_t + self.settings.lease() * 9 / 10
    }
}
