//! The daemon: W workers long-poll the delay queue (one at a time while it
//! is empty). A worker splits each batch by tenant and hands each tenant's
//! part to a task of its own, which makes one round trip for the schedules
//! with their participants and one for the claims, decides every delivery in
//! a pure plan, fires at the due instant, settles, records one row per
//! delivery and tells the queue what became of each message. While a part is
//! held its messages' visibility and its claims are renewed (a heartbeat), so
//! a process that dies is taken over within seconds. A message that failed is
//! never deleted: it comes back with a jittered backoff and, out of its
//! failure budget, goes to the dead-letter queue; throttles, open circuits and
//! early arrivals never use the budget.
//!
//! Decisions are pure functions of what was read ([`intake`], [`plan_batch`],
//! [`settle`], [`disposition`]); this module only does the I/O around them.

mod breaker;
mod burst;
mod checks;
mod deliver;
mod dispose;
mod fire;
mod gated;
mod heartbeat;
mod holdings;
mod intake;
mod looks;
mod notices;
mod offboarded;
mod plan;
mod poll_turn;
mod prepare;
mod receive;
mod record;
mod settle;
mod stats;
mod templates;
#[cfg(test)]
mod tests;
mod work;

use crate::observe::Observer;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use toki_flow::Flow;
use toki_model::domain::{Channel, Instant};
use toki_model::error::chain;
use toki_ports::channel::ChannelSender;
use toki_ports::{Clock, DelayQueue, TenantDirectory, TenantStores};

pub use breaker::{BreakerSettings, Breakers};
pub use checks::DebounceChecks;
pub use intake::{intake, Intake};
pub use plan::{
    claims_for, plan_batch, reads_for, BatchPlan, ChannelState, PlannedDelivery, PlannedMessage,
    ToSend, Verdict,
};
pub use settle::{disposition, settle, Disposition, RetryPolicy, Sent, Settlement};
pub use stats::{DaemonGauges, DaemonStats, StatsSnapshot};
pub use work::{MessageFate, Work};

#[derive(Debug, Clone)]
pub struct DaemonSettings {
    /// Concurrent workers, each long-polling the queue.
    pub workers: usize,
    /// Messages per receive (SQS: at most 10).
    pub batch: usize,
    /// Long-poll wait.
    pub wait: Duration,
    /// How long a received message stays hidden, and how long a claim lasts,
    /// unless the holder renews them: short, so a dead holder is taken over
    /// in seconds (a live one renews every third of it).
    pub visibility: Duration,
    /// How early a message may arrive and still be held for its due instant.
    pub lead: Duration,
    /// A schedule change committed this long before the due instant is still
    /// honoured (the last version check before firing).
    pub late_change_cutoff: Duration,
    /// Messages held in memory at once (received, waiting for due, or sending);
    /// work beyond this stays in the queue.
    pub max_in_flight: usize,
    pub retry: RetryPolicy,
    pub breaker: BreakerSettings,
    /// Before sending a delivery taken over from a holder that stopped, ask
    /// the channel whether it went out already (where the channel can tell).
    pub reconcile_takeovers: bool,
}

impl Default for DaemonSettings {
    fn default() -> Self {
        let visibility = Duration::from_secs(10);
        DaemonSettings {
            workers: 4,
            batch: 10,
            wait: Duration::from_secs(20),
            visibility,
            lead: Duration::from_secs(5),
            late_change_cutoff: Duration::from_millis(200),
            max_in_flight: 12_000,
            retry: RetryPolicy {
                busy_wait: visibility / 4,
                ..RetryPolicy::default()
            },
            breaker: BreakerSettings::default(),
            reconcile_takeovers: true,
        }
    }
}

pub struct Daemon {
    pub queue: Arc<dyn DelayQueue>,
    pub stores: Arc<dyn TenantStores>,
    pub channels: HashMap<Channel, Arc<dyn ChannelSender>>,
    pub clock: Arc<dyn Clock>,
    pub settings: DaemonSettings,
    pub stats: Arc<DaemonStats>,
    pub breakers: Arc<Breakers>,
    /// Probe loops of open circuits (ended with the run).
    probes: Mutex<JoinSet<()>>,
    recorder: record::Recorder,
    /// Marks the work outcomes leave a tenant (events to send, rows to purge).
    marker: crate::work::Marker,
    holdings: holdings::Holdings,
    /// The versions held groups look at before firing, read per tenant at once.
    looks: looks::Looks,
    warmed: Mutex<HashMap<Channel, tokio::time::Instant>>,
    /// Runs the debounce checks that arrive on the queue (none: they come
    /// back until a daemon that has one takes them, or dead-letter).
    debounce: Option<checks::DebounceChecks>,
    /// Limits on the services deliveries spend (none: nothing is limited).
    flow: Option<Arc<Flow>>,
    /// Where outcomes are reported (none: nowhere).
    observer: Option<Arc<dyn Observer>>,
    templates: templates::TemplateCache,
    /// The queue's own receive limit, read once (see `dispose::renew_from`).
    receive_limit: tokio::sync::OnceCell<Option<u32>>,
    /// When reading it last failed: asked again a minute later, not at
    /// every dispose (a queue outage would log one warning per batch).
    receive_limit_failed: Mutex<Option<tokio::time::Instant>>,
    /// Batches sending now: the others' rows and deletes wait for them.
    burst: burst::Burst,
    /// One worker polls an idle queue, all of them a busy one.
    poll_turn: poll_turn::PollTurn,
    /// Asked whether a tenant still exists when its database fails or holds
    /// nothing a batch needs (none: never asked; see [`offboarded`]).
    directory: Option<Arc<dyn TenantDirectory>>,
}

/// How long past due a message is at `now` (zero before).
fn overdue(due: toki_model::domain::DueAt, now: Instant) -> Duration {
    toki_model::time::wait_between(due.0, now)
}

impl Daemon {
    pub fn new(
        queue: Arc<dyn DelayQueue>,
        stores: Arc<dyn TenantStores>,
        channels: Vec<Arc<dyn ChannelSender>>,
        clock: Arc<dyn Clock>,
        marks: Arc<dyn toki_ports::WorkMarks>,
        settings: DaemonSettings,
    ) -> Self {
        let marker = crate::work::Marker::new(marks, clock.clone());
        Daemon {
            queue,
            stores,
            channels: channels.into_iter().map(|c| (c.channel(), c)).collect(),
            clock,
            breakers: Arc::new(Breakers::new(settings.breaker.clone())),
            probes: Mutex::default(),
            settings,
            stats: Arc::default(),
            recorder: record::Recorder::new(marker.clone()),
            marker,
            holdings: holdings::Holdings::default(),
            looks: looks::Looks::default(),
            warmed: Mutex::default(),
            debounce: None,
            flow: None,
            observer: None,
            templates: templates::TemplateCache::default(),
            receive_limit: tokio::sync::OnceCell::new(),
            receive_limit_failed: Mutex::new(None),
            burst: burst::Burst::default(),
            poll_turn: poll_turn::PollTurn::default(),
            directory: None,
        }
    }

    /// Reports each batch's outcomes, once stored, to `observer`.
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// What an observer may read at any time: the counters, the messages
    /// held now and (if set before) the flow's keys.
    pub fn gauges(&self) -> DaemonGauges {
        DaemonGauges {
            stats: self.stats.clone(),
            in_flight: self.holdings.messages.clone(),
            flow: self.flow.clone(),
        }
    }

    /// Held groups look at `index`'s versions before their tenants' databases.
    pub fn with_index(mut self, index: Arc<dyn toki_ports::ReminderIndex>) -> Self {
        self.looks = looks::Looks::with_index(index);
        self
    }

    /// Disposes of the messages of tenants `directory` no longer has.
    pub fn with_directory(mut self, directory: Arc<dyn TenantDirectory>) -> Self {
        self.directory = Some(directory);
        self
    }

    /// Sends through the gates of `flow`'s limits.
    pub fn with_flow(mut self, flow: Arc<Flow>) -> Self {
        self.flow = Some(flow);
        self
    }

    /// The limits' figures now (empty without flow control).
    pub fn flow_stats(&self) -> Vec<toki_flow::KeyStats> {
        self.flow.as_ref().map(|f| f.stats()).unwrap_or_default()
    }

    /// Runs the debounce checks the queue brings with `checks`.
    pub fn with_debounce(mut self, checks: checks::DebounceChecks) -> Self {
        self.debounce = Some(checks);
        self
    }

    /// Runs the workers until `shutdown` turns true, then drains in-flight work.
    pub async fn run(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        let room = Arc::new(Semaphore::new(
            self.settings.max_in_flight.max(self.settings.batch),
        ));
        let deliveries = Arc::new(tokio::sync::Mutex::new(JoinSet::new()));
        // In a set of its own: it ends with this future, however that ends.
        let mut heartbeat = JoinSet::new();
        heartbeat.spawn(self.clone().heartbeat(shutdown.clone()));
        let mut workers = JoinSet::new();
        for worker in 0..self.settings.workers.max(1) {
            let me = self.clone();
            workers.spawn(me.worker(worker, shutdown.clone(), room.clone(), deliveries.clone()));
        }
        while workers.join_next().await.is_some() {}
        let mut deliveries = deliveries.lock().await;
        if !deliveries.is_empty() {
            info!(batches = deliveries.len(), "draining in-flight deliveries");
        }
        while deliveries.join_next().await.is_some() {}
        heartbeat.abort_all();
        self.probes.lock().expect("probes lock").abort_all();
        if let Some(flow) = &self.flow {
            flow.close().await; // leases go back to the fleet
        }
    }

    /// receive → intake; then each tenant's part in a task of its own: read
    /// and claim → plan → fire at the due instant → settle → record → ack or
    /// retry. The worker goes back to the queue at once: a tenant's slow
    /// database or templates hold up neither the other tenants of its batch
    /// nor the batches after it.
    async fn worker(
        self: Arc<Self>,
        worker: usize,
        mut shutdown: watch::Receiver<bool>,
        room: Arc<Semaphore>,
        deliveries: Arc<tokio::sync::Mutex<JoinSet<()>>>,
    ) {
        let batch = self.settings.batch;
        while let Some((mut permits, received)) = self.receive_batch(&mut shutdown, &room).await {
            let messages = match received {
                Ok(m) if m.is_empty() => continue,
                Ok(m) => m,
                Err(e) => {
                    warn!(worker, error = %chain(&e), "receive failed; backing off");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let hidden_until = tokio::time::Instant::now() + self.settings.visibility;
            self.stats.add(&self.stats.received, messages.len());
            drop(permits.split(batch - messages.len()));
            let now = self.clock.now();
            let Intake {
                by_tenant,
                set_aside,
                checks,
                notices,
            } = intake(messages, now, self.settings.lead);
            self.dispose(set_aside).await;
            if !checks.is_empty() || !notices.is_empty() {
                // In a task of their own: a slow channel sending a change
                // notice must not hold up the reminders of the same batch.
                let me = self.clone();
                deliveries.lock().await.spawn(async move {
                    let fates = me.run_checks(checks).await;
                    me.dispose(fates).await;
                    let fates = me.run_notices(notices, hidden_until).await;
                    me.dispose(fates).await;
                });
            }
            let channels = self.channel_state();
            let mut set = deliveries.lock().await;
            while set.try_join_next().is_some() {} // reap finished batches
            for (tenant, work) in by_tenant {
                let room = permits.split(work.len()).expect("a permit per message");
                let part = TenantPart {
                    tenant,
                    work,
                    channels: channels.clone(),
                    now,
                    hidden_until,
                };
                set.spawn(self.clone().prepare_and_deliver(part, room));
            }
        }
        debug!(worker, "worker stopped");
    }

    /// One tenant's part of a batch, from its reads to its messages' fates.
    async fn prepare_and_deliver(self: Arc<Self>, part: TenantPart, room: OwnedSemaphorePermit) {
        let TenantPart {
            tenant,
            work,
            channels,
            now,
            hidden_until,
        } = part;
        let Some(prepared) = self.prepare_tenant(tenant, work, &channels, now).await else {
            return;
        };
        let held = self.hold_part(&prepared, hidden_until);
        self.warm_channels(&prepared);
        self.expect_flow(&prepared);
        self.deliver(prepared, held, room).await;
    }
}

/// A tenant's messages of one received batch, handed from the worker that
/// received them to the task that prepares and delivers them.
struct TenantPart {
    tenant: toki_model::domain::TenantId,
    work: Vec<Work>,
    channels: ChannelState,
    /// When the batch was received.
    now: Instant,
    /// Until when its messages are hidden, unless renewed.
    hidden_until: tokio::time::Instant,
}
