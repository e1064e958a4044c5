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

use rand::seq::SliceRandom;
use tracing::{debug, warn};

use super::gate::Gate;
use toki_model::domain::Instant;
use toki_model::error::chain;
use toki_model::limits::FlowSettings;
use toki_model::time::to_chrono;
use toki_ports::StoreResult;
use toki_ports::{Clock, Conditional, LeaseStore, PartitionLease};

/// How an instance keeps its partitions of one key: renews those it has,
/// takes free ones while deliveries wait, gives back all but the reserved
/// ones once idle, and lets go of those beyond its fair part (the partitions
/// over the instances holding them) while another instance holds fewer, so
/// that the instances with work even out rather than one keeping most.
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

/// A partition let go for another instance is not taken back for this long:
/// enough for one with deliveries waiting to find it (it looks every
/// `DEMAND_EVERY`), short enough that, if none wants it, it idles little.
const LET_GO_FOR: Duration = Duration::from_millis(600);

/// At most this many partitions are let go for others in one round (one
/// while the last let go was not taken).
const LET_GO_AT_ONCE: usize = 2;

/// A partition this instance holds.
struct Held {
    /// Ours until then by our own clock (a little before the row says).
    until: tokio::time::Instant,
}

/// Presence rows are numbered from the key's partitions up, in this many
/// slots: an instance's is picked from its name, the next one on a clash.
const PRESENCE_SLOTS: u32 = 1 << 20;

/// The instances on a key, as read at `now`: every holder of a live row
/// (a partition's lease or a presence), with how many of the `partitions`
/// it leases (zero: present only).
fn holders(rows: &[PartitionLease], now: Instant, partitions: u32) -> HashMap<&str, usize> {
    let mut by_holder = HashMap::new();
    for l in rows.iter().filter(|l| l.expires_at > now) {
        let n = by_holder.entry(l.holder.as_str()).or_default();
        if l.partition < partitions {
            *n += 1;
        }
    }
    by_holder
}

impl Leaser {
    fn renew_every(&self) -> Duration {
        self.settings.lease() / 3
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
        // Evening out stops for a lease once a partition let go was not
        // taken by anyone (the others have no deliveries waiting), and then
        // lets one go at a time until one is taken.
        let mut quiet_until = tokio::time::Instant::now();
        let mut probing = false;
        // A row beyond the partitions, kept while this runs: an instance
        // that holds no partition (all taken when it started) is still seen
        // by the others, who let it have its even part.
        let mut presence = None;
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
            presence = self.keep_presence(presence).await;
            let let_go: Vec<u32> = cooling
                .iter()
                .filter(|(_, until)| **until <= now_t)
                .map(|(p, _)| *p)
                .collect();
            cooling.retain(|_, until| *until > now_t);
            let rows = self.rows().await;
            if let (Some(rows), false) = (&rows, let_go.is_empty()) {
                if let_go.iter().all(|p| self.held_by_another(rows, *p)) {
                    probing = false;
                } else {
                    quiet_until = now_t + self.settings.lease();
                    probing = true;
                }
            }
            let even_out = now_t >= quiet_until;
            let rows = rows.as_deref().filter(|_| even_out);
            let at_once = if probing { 1 } else { LET_GO_AT_ONCE };
            self.keep(&mut held, &mut cooling, target, now_t, rows, at_once)
                .await;
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
        for partition in held.keys().chain(presence.as_ref()) {
            let _ = self
                .store
                .release(&self.key, *partition, &self.holder)
                .await;
        }
        self.gate.set_share(0.0);
    }

    /// Renews what is held, lets go of what is beyond `target` or (given
    /// the key's `rows`) beyond the fair part while others hold fewer, and
    /// forgets what was lost (taken over after our lease ran out).
    async fn keep(
        &self,
        held: &mut BTreeMap<u32, Held>,
        cooling: &mut HashMap<u32, tokio::time::Instant>,
        target: usize,
        now_t: tokio::time::Instant,
        rows: Option<&[PartitionLease]>,
        at_once: usize,
    ) {
        let mut excess = held.len().saturating_sub(target);
        let mut even_out = if excess == 0 {
            rows.map_or(0, |rows| self.beyond_fair(held.len(), rows).min(at_once))
        } else {
            0
        };
        let partitions: Vec<u32> = held.keys().rev().copied().collect();
        for partition in partitions {
            if excess > 0 || even_out > 0 {
                if excess > 0 {
                    excess -= 1;
                } else {
                    even_out -= 1;
                    cooling.insert(partition, now_t + LET_GO_FOR);
                }
                held.remove(&partition);
                if let Err(e) = self.store.release(&self.key, partition, &self.holder).await {
                    warn!(key = %self.key, partition, error = %chain(&e), "giving a lease back failed; it expires");
                }
                continue;
            }
            match self.lease(partition).await {
                Ok(Conditional::Written) => {
                    held.get_mut(&partition).expect("held").until = self.until(now_t);
                }
                Ok(Conditional::Refused) => {
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

    /// The key's lease rows, and the fleet's size told to the gate (reading
    /// failed: none, and the gate keeps the size it had).
    async fn rows(&self) -> Option<Vec<PartitionLease>> {
        match self.store.leases(&self.key).await {
            Ok(rows) => {
                let by_holder = holders(&rows, self.clock.now(), self.settings.partitions);
                let others = by_holder.keys().filter(|h| **h != self.holder).count();
                let largest = by_holder.values().copied().max().unwrap_or(0);
                self.gate.set_fleet(
                    others as u32 + 1,
                    largest as f64 / f64::from(self.settings.partitions.max(1)),
                );
                Some(rows)
            }
            Err(e) => {
                warn!(key = %self.key, error = %chain(&e), "reading leases failed");
                None
            }
        }
    }

    /// How many of `mine` partitions to let go this round: those beyond a
    /// fair part of them (among the instances holding any), as many as the
    /// others holding fewer than that lack. Whether those want them is not
    /// known here: one with deliveries waiting takes them within a quarter
    /// second; if none does, they are taken back after `LET_GO_FOR`.
    fn beyond_fair(&self, mine: usize, rows: &[PartitionLease]) -> usize {
        let reserved = self.settings.reserved_partitions as usize;
        let by_holder = holders(rows, self.clock.now(), self.settings.partitions);
        let fleet = by_holder.keys().filter(|h| **h != self.holder).count() + 1;
        // The even part rounded down: 10 among three is 3, so that 4, 4 and
        // 2 even out to 4, 3 and 3.
        let fair = (self.settings.partitions as usize / fleet).max(reserved);
        let lacking: usize = by_holder
            .iter()
            .filter(|(h, _)| **h != self.holder)
            .map(|(_, n)| fair.saturating_sub(*n))
            .sum();
        mine.saturating_sub(fair).min(lacking)
    }

    /// Takes or renews this instance's presence row: the one it has, else
    /// the slot its name picks (or the next few, taken by others).
    async fn keep_presence(&self, current: Option<u32>) -> Option<u32> {
        use std::hash::{Hash, Hasher};
        let partitions = self.settings.partitions;
        let offset = match current {
            Some(slot) => slot - partitions,
            None => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                self.holder.hash(&mut h);
                (h.finish() % u64::from(PRESENCE_SLOTS)) as u32
            }
        };
        for attempt in 0..8 {
            let slot = partitions + (offset + attempt) % PRESENCE_SLOTS;
            match self.lease(slot).await {
                Ok(Conditional::Written) => return Some(slot),
                Ok(Conditional::Refused) => continue,
                Err(e) => {
                    debug!(key = %self.key, error = %chain(&e), "keeping the presence row failed");
                    return current;
                }
            }
        }
        None
    }

    /// Whether another instance holds a live lease on `partition`.
    fn held_by_another(&self, rows: &[PartitionLease], partition: u32) -> bool {
        let now = self.clock.now();
        rows.iter()
            .any(|l| l.partition == partition && l.holder != self.holder && l.expires_at > now)
    }

    /// Takes free partitions (no row, expired, not cooling) until `target`.
    async fn take_more(
        &self,
        held: &mut BTreeMap<u32, Held>,
        cooling: &HashMap<u32, tokio::time::Instant>,
        target: usize,
    ) {
        let now = self.clock.now();
        let Some(rows) = self.rows().await else {
            return;
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
                Ok(Conditional::Written) => {
                    held.insert(
                        partition,
                        Held {
                            until: self.until(now_t),
                        },
                    );
                }
                Ok(Conditional::Refused) => {}
                Err(e) => {
                    warn!(key = %self.key, partition, error = %chain(&e), "taking a lease failed");
                    return;
                }
            }
        }
    }

    /// Takes or renews `partition` for a lease from now.
    async fn lease(&self, partition: u32) -> StoreResult<Conditional> {
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
