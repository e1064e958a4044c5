//! The daemon: W workers long-poll the delay queue; for each batch they make one
//! tenant-database round trip per tenant, drop stale reminders, claim the
//! deliveries, wait for the due instant, send, record one row per delivery and
//! delete what is done. A failed message is never deleted: it comes back with
//! backoff and, after the queue's receive limit, goes to the dead-letter queue.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, error, info, warn};

use crate::channel::{ChannelSender, Notification, SendError};
use crate::domain::{
    Channel, DeliveryKey, DeliveryOutcome, DeliveryStatus, DueAt, Instant, Reminder, TenantId,
};
use crate::error::StoreError;
use crate::message;
use crate::plan::{retry_backoff, to_chrono};
use crate::ports::{delivery_keys, Clock, DelayQueue, ReceivedMessage, TenantStore, TenantStores};
use crate::render::reminder_text;

#[derive(Debug, Clone)]
pub struct DaemonSettings {
    /// Concurrent workers, each long-polling the queue.
    pub workers: usize,
    /// Messages per receive (SQS: at most 10).
    pub batch: usize,
    /// Long-poll wait.
    pub wait: Duration,
    /// How long a received message stays hidden while it is worked on.
    pub visibility: Duration,
    /// How early a message may arrive and still be held for its due instant.
    pub lead: Duration,
    /// Longest backoff for a failed message.
    pub max_backoff: Duration,
    /// Messages held in memory at once (received, waiting for due, or sending);
    /// work beyond this stays in the queue.
    pub max_in_flight: usize,
}

impl Default for DaemonSettings {
    fn default() -> Self {
        DaemonSettings {
            workers: 4,
            batch: 10,
            wait: Duration::from_secs(20),
            visibility: Duration::from_secs(60),
            lead: Duration::from_secs(2),
            max_backoff: Duration::from_secs(300),
            max_in_flight: 5_000,
        }
    }
}

/// Counters for progress displays; the delivery rows are the record.
#[derive(Debug, Default)]
pub struct DaemonStats {
    pub received: AtomicU64,
    pub delivered: AtomicU64,
    pub stale: AtomicU64,
    pub undeliverable: AtomicU64,
    pub failed: AtomicU64,
    pub duplicates_skipped: AtomicU64,
    pub acked: AtomicU64,
    pub retried: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub received: u64,
    pub delivered: u64,
    pub stale: u64,
    pub undeliverable: u64,
    pub failed: u64,
    pub duplicates_skipped: u64,
    pub acked: u64,
    pub retried: u64,
}

impl DaemonStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            received: l(&self.received),
            delivered: l(&self.delivered),
            stale: l(&self.stale),
            undeliverable: l(&self.undeliverable),
            failed: l(&self.failed),
            duplicates_skipped: l(&self.duplicates_skipped),
            acked: l(&self.acked),
            retried: l(&self.retried),
        }
    }
}

fn bump(a: &AtomicU64, n: usize) {
    a.fetch_add(n as u64, Ordering::Relaxed);
}

pub struct Daemon {
    pub queue: Arc<dyn DelayQueue>,
    pub stores: Arc<dyn TenantStores>,
    pub channels: HashMap<Channel, Arc<dyn ChannelSender>>,
    pub clock: Arc<dyn Clock>,
    pub settings: DaemonSettings,
    pub stats: Arc<DaemonStats>,
    warmed: std::sync::Mutex<HashMap<Channel, std::time::Instant>>,
    /// One outcome writer per tenant (see `record`).
    writers: std::sync::Mutex<HashMap<TenantId, mpsc::UnboundedSender<OutcomeWrite>>>,
}

/// Channels are warmed again after this long (pooled connections go idle).
const WARM_EVERY: Duration = Duration::from_secs(20);

/// A received message after decoding.
struct Work {
    msg: ReceivedMessage,
    reminder: Reminder,
}

/// What to do with a message when its batch is finished.
enum Disposition {
    Ack,
    Retry(Duration),
}

impl Daemon {
    pub fn new(
        queue: Arc<dyn DelayQueue>,
        stores: Arc<dyn TenantStores>,
        channels: Vec<Arc<dyn ChannelSender>>,
        clock: Arc<dyn Clock>,
        settings: DaemonSettings,
    ) -> Self {
        Daemon {
            queue,
            stores,
            channels: channels.into_iter().map(|c| (c.channel(), c)).collect(),
            clock,
            settings,
            stats: Arc::default(),
            warmed: std::sync::Mutex::default(),
            writers: std::sync::Mutex::default(),
        }
    }

    /// Runs the workers until `shutdown` turns true, then drains in-flight work.
    pub async fn run(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        let in_flight = Arc::new(Semaphore::new(
            self.settings.max_in_flight.max(self.settings.batch),
        ));
        let tasks = Arc::new(tokio::sync::Mutex::new(JoinSet::new()));
        let mut workers = JoinSet::new();
        for worker in 0..self.settings.workers.max(1) {
            let me = self.clone();
            let mut shutdown = shutdown.clone();
            let in_flight = in_flight.clone();
            let tasks = tasks.clone();
            workers.spawn(async move {
                loop {
                    if *shutdown.borrow() {
                        break;
                    }
                    let permits = tokio::select! {
                        p = in_flight.clone().acquire_many_owned(me.settings.batch as u32) => p.expect("semaphore never closed"),
                        _ = shutdown.changed() => break,
                    };
                    let received = tokio::select! {
                        r = me.queue.receive(me.settings.batch, me.settings.wait, me.settings.visibility) => r,
                        _ = shutdown.changed() => break,
                    };
                    let messages = match received {
                        Ok(m) => m,
                        Err(e) => {
                            warn!(worker, error = %e, "receive failed; backing off");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            continue;
                        }
                    };
                    if messages.is_empty() {
                        continue;
                    }
                    bump(&me.stats.received, messages.len());
                    let mut permits = permits;
                    if messages.len() < me.settings.batch {
                        drop(permits.split(me.settings.batch - messages.len()));
                    }
                    // Preparation happens here (so the worker paces itself);
                    // waiting for due and sending run as a task, and the worker
                    // goes back to the queue.
                    let fire = me.clone().prepare(messages).await;
                    let mut set = tasks.lock().await;
                    // Reap finished batches so the set holds only work in flight.
                    while set.try_join_next().is_some() {}
                    set.spawn(async move {
                        fire.await;
                        drop(permits);
                    });
                }
                debug!(worker, "worker stopped");
            });
        }
        while workers.join_next().await.is_some() {}
        let mut tasks = tasks.lock().await;
        let draining = tasks.len();
        if draining > 0 {
            info!(batches = draining, "draining in-flight deliveries");
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Processes one received batch to completion (prepare, wait for due, send, record).
    pub async fn process_batch(self: Arc<Self>, messages: Vec<ReceivedMessage>) {
        self.prepare(messages).await.await
    }

    /// Decodes, loads and claims; returns the future that fires at the due instant.
    async fn prepare(
        self: Arc<Self>,
        messages: Vec<ReceivedMessage>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let now = self.clock.now();
        let mut by_tenant: BTreeMap<TenantId, Vec<Work>> = BTreeMap::new();
        for msg in messages {
            let reminder = match message::decode(&msg.attributes) {
                Ok(r) => r,
                Err(e) => {
                    // Cannot be processed: leave it to come back and, after the
                    // receive limit, be dead-lettered. Never deleted here.
                    error!(receipt = %msg.receipt, error = %e, "undecodable message");
                    self.retry(&msg, self.backoff(&msg)).await;
                    continue;
                }
            };
            let early = reminder.due_at.0 - now;
            if early > to_chrono(self.settings.lead + Duration::from_secs(1)) {
                // Arrived before its time (the 900 s delay cap): hide it until lead before due.
                let wait = (early - to_chrono(self.settings.lead))
                    .to_std()
                    .unwrap_or_default()
                    .min(Duration::from_secs(12 * 3600));
                debug!(reminder = %reminder.key, ?wait, "early message re-delayed");
                if let Err(e) = self.queue.change_visibility(&msg.receipt, wait).await {
                    warn!(error = %e, "re-delay failed; the message returns after its visibility timeout");
                }
                continue;
            }
            by_tenant
                .entry(reminder.key.tenant.clone())
                .or_default()
                .push(Work { msg, reminder });
        }

        let prepared = join_all(
            by_tenant
                .into_iter()
                .map(|(tenant, work)| self.clone().prepare_tenant(tenant, work, now)),
        )
        .await;
        self.warm_channels(&prepared).await;

        let me = self;
        async move {
            let fired = join_all(prepared.into_iter().flatten().map(|p| me.clone().fire(p))).await;
            let mut acks = Vec::new();
            for (msg, disposition) in fired.into_iter().flatten() {
                match disposition {
                    Disposition::Ack => acks.push(msg.receipt),
                    Disposition::Retry(after) => me.retry(&msg, after).await,
                }
            }
            me.ack(acks).await;
        }
    }

    /// Warms the channels a batch will use, at most once per WARM_EVERY each,
    /// while there is still time before the due instant.
    async fn warm_channels(&self, prepared: &[Option<Prepared>]) {
        let used: HashSet<Channel> = prepared
            .iter()
            .flatten()
            .flat_map(|p| p.messages.iter())
            .flat_map(|m| m.notifications.iter().map(|n| n.key.channel))
            .collect();
        for channel in used {
            let due_for_warming = {
                let mut warmed = self.warmed.lock().expect("warm lock");
                let last = warmed.get(&channel).copied();
                let now = std::time::Instant::now();
                if last.is_none_or(|t| now.duration_since(t) > WARM_EVERY) {
                    warmed.insert(channel, now);
                    true
                } else {
                    false
                }
            };
            if due_for_warming {
                if let Some(sender) = self.channels.get(&channel) {
                    sender.warm_up().await;
                }
            }
        }
    }

    fn backoff(&self, msg: &ReceivedMessage) -> Duration {
        retry_backoff(msg.receive_count, self.settings.max_backoff)
    }

    async fn retry(&self, msg: &ReceivedMessage, after: Duration) {
        bump(&self.stats.retried, 1);
        if let Err(e) = self.queue.change_visibility(&msg.receipt, after).await {
            warn!(error = %e, "backoff failed; the message returns after its visibility timeout");
        }
    }

    /// Sends every message of a failed tenant round trip back, with backoff.
    async fn retry_all(&self, work: &[Work]) {
        for w in work {
            self.retry(&w.msg, self.backoff(&w.msg)).await;
        }
    }

    async fn ack(&self, receipts: Vec<String>) {
        for chunk in receipts.chunks(10) {
            match self.queue.delete_batch(chunk).await {
                Ok(()) => bump(&self.stats.acked, chunk.len()),
                // Not deleted: it comes back and the delivery rows keep it from sending twice.
                Err(e) => warn!(error = %e, "delete failed"),
            }
        }
    }

    /// One tenant's part of a batch: one round trip for context, one for claims.
    async fn prepare_tenant(
        self: Arc<Self>,
        tenant: TenantId,
        work: Vec<Work>,
        now: Instant,
    ) -> Option<Prepared> {
        let store = match self.stores.open(&tenant).await {
            Ok(s) => s,
            Err(e) => {
                warn!(%tenant, error = %e, "tenant database unavailable");
                self.retry_all(&work).await;
                return None;
            }
        };
        match self
            .load_and_claim(&tenant, store.as_ref(), work, now)
            .await
        {
            Ok((messages, undeliverable)) => Some(Prepared {
                tenant,
                store,
                messages,
                undeliverable,
            }),
            Err((e, work)) => {
                warn!(%tenant, error = %e, "tenant database round trip failed");
                self.retry_all(&work).await;
                None
            }
        }
    }

    async fn load_and_claim(
        &self,
        tenant: &TenantId,
        store: &dyn TenantStore,
        work: Vec<Work>,
        now: Instant,
    ) -> Result<(Vec<PreparedMessage>, Vec<DeliveryOutcome>), (StoreError, Vec<Work>)> {
        let schedules: Vec<_> = work
            .iter()
            .map(|w| w.reminder.key.schedule.clone())
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let users: Vec<_> = work
            .iter()
            .flat_map(|w| w.reminder.recipients.iter().cloned())
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let ctx = match store.delivery_context(&schedules, &users).await {
            Ok(c) => c,
            Err(e) => return Err((e, work)),
        };

        let mut stale = Vec::new();
        let mut live = Vec::new();
        for w in work {
            let current = ctx.schedules.get(&w.reminder.key.schedule);
            // Moved, edited or deleted since it was enqueued: the version tells.
            let is_current = current.is_some_and(|s| s.version == w.reminder.version);
            if is_current {
                live.push(w);
            } else {
                for key in delivery_keys(&w.reminder) {
                    stale.push(DeliveryOutcome {
                        key,
                        due_at: w.reminder.due_at,
                        status: DeliveryStatus::Stale,
                        at: now,
                        detail: Some(match current {
                            None => "schedule deleted".to_string(),
                            Some(s) => format!(
                                "schedule is at version {}, message has {}",
                                s.version, w.reminder.version
                            ),
                        }),
                    });
                }
                live.push(Work {
                    reminder: Reminder {
                        recipients: Vec::new(),
                        ..w.reminder
                    },
                    msg: w.msg,
                });
            }
        }
        if !stale.is_empty() {
            if let Err(e) = store.record_outcomes(&stale).await {
                return Err((e, live));
            }
            bump(&self.stats.stale, stale.len());
        }

        // The same message may arrive more than once, even in one batch: claim
        // each delivery once, and hand each owned claim to one message only.
        let mut seen = HashSet::new();
        let claims: Vec<(DeliveryKey, DueAt)> = live
            .iter()
            .flat_map(|w| {
                delivery_keys(&w.reminder)
                    .into_iter()
                    .map(move |k| (k, w.reminder.due_at))
            })
            .filter(|(k, _)| seen.insert(k.clone()))
            .collect();
        let requested = live
            .iter()
            .map(|w| w.reminder.delivery_count())
            .sum::<usize>();
        // A claim is taken over only once its holder has had longer than any
        // hold (visibility timeout + lead + margin): it must have died.
        let takeover_before = now
            - to_chrono(self.settings.visibility + self.settings.lead + Duration::from_secs(10));
        let (mut owned, busy): (HashSet<DeliveryKey>, HashSet<DeliveryKey>) = if claims.is_empty() {
            Default::default()
        } else {
            match store.claim_deliveries(&claims, now, takeover_before).await {
                Ok(c) => (c.owned.into_iter().collect(), c.busy.into_iter().collect()),
                Err(e) => return Err((e, live)),
            }
        };
        bump(&self.stats.duplicates_skipped, requested - owned.len());

        let users: HashMap<_, Arc<crate::domain::User>> = ctx
            .users
            .into_iter()
            .map(|(id, u)| (id, Arc::new(u)))
            .collect();
        let mut messages = Vec::with_capacity(live.len());
        let mut undeliverable = Vec::new();
        for w in live {
            let mut notifications = Vec::new();
            let snapshot = ctx.schedules.get(&w.reminder.key.schedule);
            for key in delivery_keys(&w.reminder) {
                if !owned.remove(&key) {
                    continue;
                }
                let snapshot = snapshot.expect("live reminders have a current schedule");
                let problem = match users.get(&key.recipient) {
                    None => Some("recipient no longer exists".to_string()),
                    Some(u) if key.channel == Channel::Mail && u.email.is_none() => {
                        Some("recipient has no e-mail address".to_string())
                    }
                    Some(u) if key.channel == Channel::Slack && u.slack_user_id.is_none() => {
                        Some("recipient has no Slack user id".to_string())
                    }
                    Some(_) if !self.channels.contains_key(&key.channel) => {
                        Some(format!("channel {} is not configured", key.channel))
                    }
                    Some(u) => {
                        let (subject, text) = reminder_text(snapshot, w.reminder.due_at, u);
                        notifications.push(Notification {
                            tenant: tenant.clone(),
                            key: key.clone(),
                            due_at: w.reminder.due_at,
                            recipient: u.clone(),
                            subject,
                            text,
                        });
                        None
                    }
                };
                if let Some(problem) = problem {
                    undeliverable.push(DeliveryOutcome {
                        key,
                        due_at: w.reminder.due_at,
                        status: DeliveryStatus::Undeliverable,
                        at: now,
                        detail: Some(problem),
                    });
                }
            }
            // Another holder is still sending some of these: the message must
            // come back until they are final, never be acknowledged meanwhile.
            let busy = delivery_keys(&w.reminder).iter().any(|k| busy.contains(k));
            messages.push(PreparedMessage {
                msg: w.msg,
                due_at: w.reminder.due_at,
                notifications,
                busy,
            });
        }
        Ok((messages, undeliverable))
    }

    /// Waits for each due instant, sends, records outcomes; returns what to do
    /// with each message.
    async fn fire(self: Arc<Self>, p: Prepared) -> Vec<(ReceivedMessage, Disposition)> {
        let Prepared {
            tenant,
            store,
            mut messages,
            undeliverable,
        } = p;
        messages.sort_by_key(|m| m.due_at);
        let mut outcomes = undeliverable;
        bump(&self.stats.undeliverable, outcomes.len());
        let mut dispositions = Vec::with_capacity(messages.len());
        // Messages of one batch are usually due together; send each due group at once.
        let mut i = 0;
        while i < messages.len() {
            let due = messages[i].due_at;
            let mut j = i;
            while j < messages.len() && messages[j].due_at == due {
                j += 1;
            }
            if let Ok(wait) = (due.0 - self.clock.now()).to_std() {
                tokio::time::sleep(wait).await;
            }
            // Notifications move into per-channel batches: no copies on the hot path.
            let mut per_channel: BTreeMap<Channel, (Vec<usize>, Vec<Notification>)> =
                BTreeMap::new();
            for (m, pm) in messages[i..j].iter_mut().enumerate() {
                for n in pm.notifications.drain(..) {
                    let (idx, batch) = per_channel.entry(n.key.channel).or_default();
                    idx.push(m);
                    batch.push(n);
                }
            }
            let group = &messages[i..j];
            let store_ref = store.as_ref();
            let sent = join_all(per_channel.into_iter().map(|(channel, (idx, batch))| {
                let sender = self.channels[&channel].clone();
                async move {
                    let results = sender.send(store_ref, &batch).await;
                    idx.into_iter().zip(batch).zip(results).collect::<Vec<_>>()
                }
            }))
            .await;
            let mut retry_after: Vec<Option<Duration>> = vec![None; group.len()];
            for ((m, n), result) in sent.into_iter().flatten() {
                let (status, at, detail) = match result {
                    Ok(at) => {
                        bump(&self.stats.delivered, 1);
                        (DeliveryStatus::Delivered, at, None)
                    }
                    Err(SendError::Permanent(why)) => {
                        bump(&self.stats.undeliverable, 1);
                        (DeliveryStatus::Undeliverable, self.clock.now(), Some(why))
                    }
                    Err(SendError::Transient {
                        reason,
                        retry_after: ra,
                    }) => {
                        bump(&self.stats.failed, 1);
                        let backoff = ra.unwrap_or_else(|| self.backoff(&group[m].msg));
                        retry_after[m] = Some(retry_after[m].map_or(backoff, |b| b.max(backoff)));
                        (DeliveryStatus::Failed, self.clock.now(), Some(reason))
                    }
                };
                outcomes.push(DeliveryOutcome {
                    key: n.key,
                    due_at: n.due_at,
                    status,
                    at,
                    detail,
                });
            }
            for (m, pm) in group.iter().enumerate() {
                dispositions.push((
                    pm.msg.clone(),
                    match (retry_after[m], pm.busy) {
                        (None, false) => Disposition::Ack,
                        (None, true) => Disposition::Retry(self.backoff(&pm.msg)),
                        (Some(d), _) => Disposition::Retry(d),
                    },
                ));
            }
            i = j;
        }
        if let Err(e) = self.record(&tenant, &store, outcomes).await {
            // Sent but not recorded: keep the messages so nothing is lost; the
            // claims expire and a redelivery may repeat a send (at-least-once).
            error!(error = %e, "recording outcomes failed; messages will come back");
            return dispositions
                .into_iter()
                .map(|(m, _)| {
                    let b = self.backoff(&m);
                    (m, Disposition::Retry(b))
                })
                .collect();
        }
        dispositions
    }
}

/// Outcomes waiting to be written, and who waits for the write.
type OutcomeWrite = (Vec<DeliveryOutcome>, oneshot::Sender<Result<(), String>>);

/// How long a tenant's outcome writer gathers batches before one write: batches
/// fired at the same due instant finish together, and one statement for all of
/// them costs the burst far less than one per batch.
const COALESCE: Duration = Duration::from_millis(5);

impl Daemon {
    /// Records outcomes through the tenant's writer; resolves once they are stored.
    async fn record(
        &self,
        tenant: &TenantId,
        store: &Arc<dyn TenantStore>,
        outcomes: Vec<DeliveryOutcome>,
    ) -> Result<(), String> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let (done, wait) = oneshot::channel();
        let tx = {
            let mut writers = self.writers.lock().expect("writers lock");
            writers
                .entry(tenant.clone())
                .or_insert_with(|| spawn_writer(store.clone()))
                .clone()
        };
        tx.send((outcomes, done))
            .map_err(|_| "outcome writer stopped".to_string())?;
        wait.await
            .map_err(|_| "outcome writer stopped".to_string())?
    }
}

fn spawn_writer(store: Arc<dyn TenantStore>) -> mpsc::UnboundedSender<OutcomeWrite> {
    let (tx, mut rx) = mpsc::unbounded_channel::<OutcomeWrite>();
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            tokio::time::sleep(COALESCE).await;
            let mut waiting = vec![first];
            while let Ok(more) = rx.try_recv() {
                waiting.push(more);
            }
            let all: Vec<DeliveryOutcome> = waiting
                .iter_mut()
                .flat_map(|(o, _)| std::mem::take(o))
                .collect();
            let result = store.record_outcomes(&all).await.map_err(|e| e.to_string());
            for (_, done) in waiting {
                let _ = done.send(result.clone());
            }
        }
    });
    tx
}

struct PreparedMessage {
    msg: ReceivedMessage,
    due_at: DueAt,
    notifications: Vec<Notification>,
    /// Some of its deliveries are being sent by another holder.
    busy: bool,
}

struct Prepared {
    tenant: TenantId,
    store: Arc<dyn TenantStore>,
    messages: Vec<PreparedMessage>,
    undeliverable: Vec<DeliveryOutcome>,
}
