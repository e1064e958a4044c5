//! One key's gate: a rate released in slices and/or permits in flight, and
//! the fair waiting room in front of them (the seeds' waiting room: everyone
//! queues, a guide ticks to hand out what was released and to revoke stuck
//! holders, a finished holder hands its permit straight to the next waiter).
//!
//! Waiters queue per tenant and are served round-robin across tenants, first
//! come first served within one: a large tenant's burst does not starve a
//! small tenant. A holder's state changes only by compare-and-set (held →
//! done by its holder, held → revoked by the guide), so a permit is never
//! released twice nor lost.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use toki_model::flow_key::FlowKey;
use toki_model::limits::Limit;

/// A refused delivery is told to come back this part of the wait before its
/// turn: its way back through the queue, then the rest in the waiting room.
const RETURN_EARLY_OF_WAIT: u32 = 2;

/// Refused messages are planned to come back this much faster than the
/// fleet sends: a message refused again costs a trip through the queue, an
/// instance with nothing to send loses its share of the rate for good. Twice
/// in a fleet: each instance plans only its own refusals, and one whose
/// refusals are all back (it refused fewer) brings back nothing more.
fn return_surplus(fleet: u32) -> f64 {
    if fleet > 1 {
        2.0
    } else {
        1.1
    }
}

/// The longest a refused delivery is told to stay away.
const MAX_RETURN: Duration = Duration::from_secs(300);

const HELD: u8 = 0;
const DONE: u8 = 1;
const REVOKED: u8 = 2;

/// One holder of a permit.
#[derive(Debug)]
struct Holder {
    state: AtomicU8,
    deadline: Instant,
    revoked: Notify,
}

/// A grant of one operation on a key: a token of its rate (spent) and, if the
/// key has permits, a permit held until this is dropped.
#[derive(Debug)]
pub struct Grant {
    permit: Option<Permit>,
}

#[derive(Debug)]
struct Permit {
    gate: Arc<Gate>,
    id: u64,
    holder: Arc<Holder>,
}

impl Grant {
    /// Resolves if the guide revokes this grant's permit (its holder was
    /// stuck past the deadline); never for a grant without one.
    pub async fn revoked(&self) {
        match &self.permit {
            Some(p) => p.holder.revoked.notified().await,
            None => std::future::pending().await,
        }
    }

    /// Whether the permit was revoked already.
    pub fn is_revoked(&self) -> bool {
        self.permit
            .as_ref()
            .is_some_and(|p| p.holder.state.load(Ordering::Acquire) == REVOKED)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        // Done by its holder, unless the guide revoked it first (then the
        // guide gave the permit back already).
        if self
            .holder
            .state
            .compare_exchange(HELD, DONE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.gate.give_back(self.id);
        }
    }
}

/// Why a delivery did not get through the gate: come back after this long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoRoom {
    pub retry_after: Duration,
}

struct Waiter {
    tx: oneshot::Sender<Grant>,
}

struct State {
    /// The part of the limit's rate this instance holds (0..=1).
    share: f64,
    /// Operations per second this instance may spend now (its leased share,
    /// or the whole rate of a local key); zero while paused.
    per_second: f64,
    /// The most that may be saved up (the burst share, at least one).
    cap: f64,
    tokens: f64,
    /// The slice boundary capacity was last released at.
    released_at: Instant,
    /// A throttle answer: nothing is released before this.
    paused_until: Option<Instant>,
    free_permits: u32,
    holders: HashMap<u64, Arc<Holder>>,
    next_id: u64,
    queues: HashMap<String, VecDeque<Waiter>>,
    /// Tenants with waiters, in turn order.
    turn: VecDeque<String>,
    waiting: usize,
    /// When a delivery last waited or was refused here: demand for leases.
    pressed_at: Option<Instant>,
    /// When the gate was made or last granted (with `pressed_at`: when it
    /// was last in use).
    granted_at: Instant,
    /// Refused deliveries on their way back, per tenant: the instant each is
    /// to be served. They are ahead of later refusals, so a backlog refused
    /// at once comes back spread at the rate it can be served, rather than
    /// all together, to be refused again (and again).
    booked: HashMap<String, BinaryHeap<Reverse<Instant>>>,
    /// Instances sharing the key (holding its leases), this one included:
    /// refused messages come back to any of them.
    fleet: u32,
    /// The largest share any of them holds (0..=1).
    largest_share: f64,
}

/// A delivery of `tenant` got in: taken for one of its refused ones coming
/// back (the earliest booked), whichever instance refused it. A booking
/// otherwise stays until its turn, and one served early elsewhere (or
/// served at another instance) would be counted ahead of later refusals
/// for seconds after it was gone: near the end of a backlog, those were
/// told to come back seconds after there was room.
fn came_back(s: &mut State, tenant: &str) {
    if let Some(turns) = s.booked.get_mut(tenant) {
        turns.pop();
        if turns.is_empty() {
            s.booked.remove(tenant);
        }
    }
}

/// Bookings whose turn has come are no longer ahead of anyone.
fn forget_served(s: &mut State, now: Instant) {
    s.booked.retain(|_, turns| {
        while turns.peek().is_some_and(|Reverse(at)| *at <= now) {
            turns.pop();
        }
        !turns.is_empty()
    });
}

/// The deliveries served before one more of `tenant`'s: those waiting here
/// and those refused and on their way back. They are served round-robin
/// across tenants, so each other tenant goes at most once per turn of this
/// one: a tenant with few deliveries beside a large backlog is reached long
/// before the backlog is through, and its refused ones are told to come
/// back that soon, not after it.
fn ahead_in_turn(s: &State, tenant: &str) -> usize {
    let count = |t: &str| {
        s.queues.get(t).map_or(0, VecDeque::len) + s.booked.get(t).map_or(0, BinaryHeap::len)
    };
    let mine = count(tenant);
    let others: BTreeSet<&str> = s
        .queues
        .keys()
        .chain(s.booked.keys())
        .map(String::as_str)
        .filter(|t| *t != tenant)
        .collect();
    mine + others
        .into_iter()
        .map(|t| count(t).min(mine + 1))
        .sum::<usize>()
}

/// Counters, for logs and `toki bench`.
#[derive(Debug, Default)]
pub struct GateCounters {
    pub granted: AtomicU64,
    /// Deliveries sent back to the queue for want of capacity.
    pub refused: AtomicU64,
    /// 429s (and the like) the service answered for this key.
    pub throttle_answers: AtomicU64,
    pub revoked: AtomicU64,
}

pub struct Gate {
    pub key: FlowKey,
    pub limit: Limit,
    /// Its rate is leased in partitions (it may grow while deliveries wait).
    leased: bool,
    /// How many (1: a local key).
    pub partitions: u32,
    slice: Duration,
    hold_deadline: Duration,
    state: Mutex<State>,
    pub counters: GateCounters,
    /// Woken when a delivery has to wait: the leaser takes more partitions.
    pub demand: Notify,
    /// Woken when a delivery waits or holds a permit here: the guide, which
    /// sleeps while no gate has either, ticks again.
    guide: OnceLock<Arc<Notify>>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").field("key", &self.key).finish()
    }
}

/// What a gate looks like now.
#[derive(Debug, Clone, PartialEq)]
pub struct GateView {
    pub per_second: f64,
    pub waiting: usize,
    pub holders: usize,
    pub free_permits: u32,
    pub tokens: f64,
}

impl Gate {
    /// A gate with `share` (0..=1) of the limit's rate to spend: the whole
    /// rate for a local key, the leased share of a shared one.
    pub fn new(
        key: FlowKey,
        limit: Limit,
        share: f64,
        partitions: u32,
        slice: Duration,
        hold_deadline: Duration,
        now: Instant,
    ) -> Arc<Gate> {
        let gate = Gate {
            key,
            leased: partitions > 1,
            partitions,
            slice,
            hold_deadline,
            state: Mutex::new(State {
                share: 0.0,
                per_second: 0.0,
                cap: 1.0,
                tokens: 0.0,
                released_at: now,
                paused_until: None,
                free_permits: limit.permits.unwrap_or(0),
                holders: HashMap::new(),
                next_id: 0,
                queues: HashMap::new(),
                turn: VecDeque::new(),
                waiting: 0,
                pressed_at: None,
                granted_at: now,
                booked: HashMap::new(),
                fleet: 1,
                largest_share: 0.0,
            }),
            limit,
            counters: GateCounters::default(),
            demand: Notify::new(),
            guide: OnceLock::new(),
        };
        gate.set_share(share);
        // A fresh gate starts with its burst to spend.
        {
            let mut s = gate.state.lock().expect("gate lock");
            s.tokens = s.cap;
        }
        Arc::new(gate)
    }

    /// Spend `share` of the limit's rate from now on (leases came or went).
    pub fn set_share(&self, share: f64) {
        let mut s = self.state.lock().expect("gate lock");
        let share = share.clamp(0.0, 1.0);
        s.share = share;
        if let Some(rate) = self.limit.rate {
            s.per_second = rate * share;
            // Summed over the fleet the caps make the burst, so that no
            // second sees more than rate + burst; at least one, or nothing
            // could ever be granted. A leased key's instances release their
            // slices out of step, so a 1-second window can hold one slice
            // more than a second's rate: that slice comes off the burst.
            let burst = if self.leased {
                (f64::from(self.limit.burst) - rate * self.slice.as_secs_f64()).max(0.0)
            } else {
                f64::from(self.limit.burst)
            };
            s.cap = (burst * share).max(1.0);
            s.tokens = s.tokens.min(if share > 0.0 { s.cap } else { 0.0 });
        }
    }

    /// Releases what the whole slices since the last release brought.
    fn release(&self, s: &mut State, now: Instant) {
        if self.limit.rate.is_none() {
            return;
        }
        if let Some(until) = s.paused_until {
            if now < until {
                s.released_at = now;
                return;
            }
            s.paused_until = None;
            s.released_at = until;
        }
        let since = now.saturating_duration_since(s.released_at);
        let slices = (since.as_nanos() / self.slice.as_nanos().max(1)) as u32;
        if slices > 0 {
            let per_slice = s.per_second * self.slice.as_secs_f64();
            // What one slice releases is spendable by those waiting for it;
            // with nobody waiting, savings are capped by the burst (a gate
            // idle before an instant must not meet it with a slice saved up
            // beyond the burst: that second would see rate + a slice).
            let limit = if s.waiting > 0 {
                s.cap.max(per_slice.ceil())
            } else {
                s.cap
            };
            let tokens = s.tokens + per_slice * f64::from(slices);
            // Whole tokens beyond the limit are dropped; the fraction is kept,
            // or a share below one token a slice would lose part of its rate.
            s.tokens = if tokens > limit {
                limit + tokens.fract()
            } else {
                tokens
            };
            s.released_at += self.slice * slices;
        }
    }

    fn has_room(&self, s: &State) -> bool {
        let token = self.limit.rate.is_none() || s.tokens >= 1.0;
        let permit = self.limit.permits.is_none() || s.free_permits > 0;
        token && permit
    }

    /// Takes a token and a permit (room was checked).
    fn take(self: &Arc<Self>, s: &mut State, now: Instant) -> Grant {
        if self.limit.rate.is_some() {
            s.tokens -= 1.0;
        }
        s.granted_at = now;
        self.counters.granted.fetch_add(1, Ordering::Relaxed);
        let permit = self.limit.permits.map(|_| {
            s.free_permits -= 1;
            s.next_id += 1;
            let holder = Arc::new(Holder {
                state: AtomicU8::new(HELD),
                deadline: now + self.hold_deadline,
                revoked: Notify::new(),
            });
            s.holders.insert(s.next_id, holder.clone());
            self.wake_guide();
            Permit {
                gate: self.clone(),
                id: s.next_id,
                holder,
            }
        });
        Grant { permit }
    }

    /// Serves the waiters, round-robin across tenants, while there is room.
    fn serve(self: &Arc<Self>, s: &mut State, now: Instant) {
        self.release(s, now);
        while s.waiting > 0 && self.has_room(s) {
            let Some(tenant) = s.turn.pop_front() else {
                break;
            };
            let queue = s
                .queues
                .get_mut(&tenant)
                .expect("a tenant in turn has a queue");
            let waiter = queue.pop_front().expect("a tenant in turn has a waiter");
            let more = !queue.is_empty();
            if more {
                s.turn.push_back(tenant);
            } else {
                s.queues.remove(&tenant);
            }
            s.waiting -= 1;
            if waiter.tx.is_closed() {
                continue; // gave up waiting: its place goes to the next
            }
            let grant = self.take(s, now);
            if let Err(grant) = waiter.tx.send(grant) {
                // Gave up just now: its permit comes back here (a drop would
                // take this lock again); the token is spent.
                if let Some(p) = &grant.permit {
                    if p.holder
                        .state
                        .compare_exchange(HELD, DONE, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                        && s.holders.remove(&p.id).is_some()
                    {
                        s.free_permits += 1;
                    }
                }
                drop(grant);
            }
        }
    }

    /// The rate this instance's refused deliveries are planned to come back
    /// at. A local key: its own. A leased key: refused messages come back to
    /// any instance of the fleet (each refusing its own), so each plans with
    /// the rate of the largest share among them (at least an even part of
    /// the fleet's rate, which a share grows to within a lease round trip
    /// once deliveries wait), a little more: every instance then gets back
    /// at least what it can send, and the largest does not idle; what a
    /// smaller one cannot take is refused again, and comes back later.
    fn return_rate(&self, s: &State) -> f64 {
        match self.limit.rate {
            Some(rate) if self.leased => {
                let even = 1.0 / f64::from(s.fleet.max(1));
                rate * s.largest_share.max(even) * return_surplus(s.fleet)
            }
            _ => s.per_second,
        }
    }

    /// A leased key's rate with one partition: admission plans with at
    /// least that, so a gate whose leases are still coming admits a few.
    fn min_rate(&self) -> f64 {
        match self.limit.rate {
            Some(rate) if self.leased => rate / f64::from(self.partitions.max(1)),
            _ => 0.0,
        }
    }

    /// Refuses a delivery of `tenant`: it is booked for its turn behind
    /// everything ahead of it (waiting here or refused before it), and told
    /// to come back a part of the wait before that turn.
    fn refuse(&self, s: &mut State, tenant: &str, now: Instant, max_wait: Duration) -> NoRoom {
        forget_served(s, now);
        let paused = s
            .paused_until
            .map(|u| u.saturating_duration_since(now))
            .unwrap_or_default();
        let rate = self.return_rate(s);
        let ahead = ahead_in_turn(s, tenant) + 1;
        let turn = if rate > 0.0 {
            Duration::from_secs_f64(ahead as f64 / rate)
        } else {
            Duration::from_secs(1)
        };
        let turn = (paused + turn).min(MAX_RETURN);
        s.booked
            .entry(tenant.to_owned())
            .or_default()
            .push(Reverse(now + turn));
        let retry_after = turn
            .saturating_sub(max_wait / RETURN_EARLY_OF_WAIT)
            .max(self.slice);
        tracing::trace!(key = %self.key, tenant, ahead, ?retry_after, "refused");
        NoRoom { retry_after }
    }

    /// A grant now, or a place in the waiting room for at most `max_wait`;
    /// `NoRoom` when even that is not enough (its message goes back to the
    /// queue for `retry_after`). A tenant is refused at once when its own
    /// waiters already fill its fair share of what `max_wait` can serve.
    pub async fn acquire(
        self: &Arc<Self>,
        tenant: &str,
        max_wait: Duration,
    ) -> Result<Grant, NoRoom> {
        let rx = {
            let now = Instant::now();
            let mut s = self.state.lock().expect("gate lock");
            self.serve(&mut s, now);
            if s.waiting == 0 && self.has_room(&s) {
                came_back(&mut s, tenant);
                return Ok(self.take(&mut s, now));
            }
            s.pressed_at = Some(now);
            self.demand.notify_one();
            if !self.admits(&s, tenant, max_wait) {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                return Err(self.refuse(&mut s, tenant, now, max_wait));
            }
            came_back(&mut s, tenant);
            let (tx, rx) = oneshot::channel();
            if !s.queues.contains_key(tenant) {
                s.turn.push_back(tenant.to_owned());
            }
            s.queues
                .entry(tenant.to_owned())
                .or_default()
                .push_back(Waiter { tx });
            s.waiting += 1;
            self.wake_guide();
            rx
        };
        let mut rx = rx;
        // Admission planned the tenant's waiters to be served within
        // `max_wait` at its turn; slices and the turn order can make the last
        // of them a little later. Half as long again before giving up: a
        // wait given up sends its delivery to the back of the queue.
        match tokio::time::timeout(max_wait + max_wait / 2, &mut rx).await {
            Ok(Ok(grant)) => Ok(grant),
            _ => {
                rx.close();
                if let Ok(grant) = rx.try_recv() {
                    return Ok(grant); // granted as the wait ran out
                }
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                let mut s = self.state.lock().expect("gate lock");
                Err(self.refuse(&mut s, tenant, Instant::now(), max_wait))
            }
        }
    }

    /// Whether the tenant's waiters leave room for one more within its share
    /// of what can be served within `max_wait`. Keys with permits only
    /// admit everyone: their waits end by the deadline.
    fn admits(&self, s: &State, tenant: &str, max_wait: Duration) -> bool {
        if self.limit.rate.is_none() {
            return true;
        }
        // What this instance can serve within the wait at its share now (a
        // share about to grow is planned with by the return delay instead:
        // refused deliveries come back soon and find it).
        let capacity =
            s.per_second.max(self.min_rate()) * max_wait.as_secs_f64() + s.tokens.max(0.0);
        let mine = s.queues.get(tenant).map_or(0, VecDeque::len);
        let tenants = s.queues.len() + usize::from(mine == 0);
        let share = (capacity / tenants as f64).floor().max(0.0) as usize;
        mine < share
    }

    /// A holder finished: its permit goes straight to the next waiter, or back.
    fn give_back(self: &Arc<Self>, id: u64) {
        let now = Instant::now();
        let mut s = self.state.lock().expect("gate lock");
        if s.holders.remove(&id).is_some() {
            s.free_permits += 1;
        }
        self.serve(&mut s, now);
    }

    /// The guide's tick: revokes holders stuck past their deadline, then
    /// hands out what the slices released. Returns whether the gate is
    /// settled: nothing waits and no permit is held, so a tick has nothing
    /// to do here until a delivery waits or takes a permit.
    pub fn tick(self: &Arc<Self>, now: Instant) -> bool {
        let mut s = self.state.lock().expect("gate lock");
        let stuck: Vec<u64> = s
            .holders
            .iter()
            .filter(|(_, h)| h.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        let mut revoked = 0;
        for id in stuck {
            let holder = s.holders[&id].clone();
            // Only if its holder did not finish meanwhile (then its own
            // give-back, waiting for this lock, frees the permit).
            if holder
                .state
                .compare_exchange(HELD, REVOKED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                s.holders.remove(&id);
                s.free_permits += 1;
                revoked += 1;
                holder.revoked.notify_one();
            }
        }
        self.counters
            .revoked
            .fetch_add(revoked as u64, Ordering::Relaxed);
        self.serve(&mut s, now);
        s.waiting == 0 && s.holders.is_empty()
    }

    /// The service answered "slow down" for `retry_after`: nothing is
    /// released on this key until then, and what was saved up is dropped.
    pub fn throttled(&self, retry_after: Duration) {
        let now = Instant::now();
        let mut s = self.state.lock().expect("gate lock");
        self.counters
            .throttle_answers
            .fetch_add(1, Ordering::Relaxed);
        let until = now + retry_after;
        s.paused_until = Some(s.paused_until.map_or(until, |u| u.max(until)));
        s.tokens = 0.0;
        s.released_at = now;
        s.pressed_at = Some(now);
    }

    /// Deliveries are coming: counts as pressed (the leaser wants every
    /// partition) and wakes the leaser now.
    pub fn expect_demand(&self, until: Instant) {
        if self.leased {
            // Pressed until the deliveries' instant, not only now: held in
            // memory until then, they would otherwise let the leases drop
            // to the reserved share a round later and meet their instant
            // with a fraction of the rate.
            let mut s = self.state.lock().expect("gate lock");
            let until = until.max(Instant::now());
            s.pressed_at = Some(s.pressed_at.map_or(until, |p| p.max(until)));
            drop(s);
            self.demand.notify_one();
        }
    }

    /// Whether deliveries waited or were refused here since `since`, or
    /// refused ones are still on their way back.
    pub fn pressed_since(&self, since: Instant) -> bool {
        let mut s = self.state.lock().expect("gate lock");
        forget_served(&mut s, Instant::now());
        s.waiting > 0 || s.pressed_at.is_some_and(|p| p >= since) || !s.booked.is_empty()
    }

    /// How many instances share the key now (the holders of its leases,
    /// this one included: refused messages come back to any of them), and
    /// the largest share one of them holds.
    pub fn set_fleet(&self, instances: u32, largest_share: f64) {
        let mut s = self.state.lock().expect("gate lock");
        s.fleet = instances.max(1);
        s.largest_share = largest_share.clamp(0.0, 1.0);
    }

    /// Wakes `guide` whenever a delivery waits or takes a permit here.
    pub fn report_to(&self, guide: Arc<Notify>) {
        let _ = self.guide.set(guide);
    }

    fn wake_guide(&self) {
        if let Some(guide) = self.guide.get() {
            // Stores a wake-up if the guide is not asleep yet: it cannot
            // miss one between its last look and its sleep.
            guide.notify_one();
        }
    }

    /// Nothing waits or is held here and the key has saved up all it may
    /// by `now`: dropping this gate (a new one starts full) changes nothing.
    /// With no share (others lease every partition) nothing is ever saved
    /// up: a gate made again has the one token any new gate has.
    pub fn is_idle(&self, now: Instant) -> bool {
        let mut s = self.state.lock().expect("gate lock");
        self.release(&mut s, now);
        s.waiting == 0
            && s.holders.is_empty()
            && s.paused_until.is_none()
            && (self.limit.rate.is_none() || s.tokens >= s.cap || s.share <= 0.0)
    }

    /// How long nothing was granted, waited, refused, throttled or
    /// expected here by `now` (zero while deliveries are expected): a gate
    /// can be idle at every look and still be used in between.
    pub(crate) fn quiet_for(&self, now: Instant) -> Duration {
        let s = self.state.lock().expect("gate lock");
        let used_at = s.pressed_at.map_or(s.granted_at, |p| p.max(s.granted_at));
        now.saturating_duration_since(used_at)
    }

    /// The part of the limit's rate this instance holds (0..=1).
    pub fn share(&self) -> f64 {
        self.state.lock().expect("gate lock").share
    }

    pub fn view(&self) -> GateView {
        let s = self.state.lock().expect("gate lock");
        GateView {
            per_second: if s.paused_until.is_some() {
                0.0
            } else {
                s.per_second
            },
            waiting: s.waiting,
            holders: s.holders.len(),
            free_permits: s.free_permits,
            tokens: s.tokens,
        }
    }
}
