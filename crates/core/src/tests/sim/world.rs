//! Runs a [`Scenario`] on the testing kit's in-memory ports and tokio's
//! paused clock: N daemons (each on its own, possibly wrong, clock), one
//! scanner and the registrar share one queue, index, lease store and the
//! tenants' stores; the scenario's changes and faults are applied at their
//! moments; what every channel and store holds afterwards is the outcome.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::scenario::{span, Change, Fault, KillMoment, Scenario};
use super::trap::{Trap, Trapped};
use crate::daemon::{Daemon, DaemonSettings, DebounceChecks};
use crate::registrar::RegistrarError;
use crate::testing::{SentNotification, TestKit};
use toki_flow::Flow;
use toki_model::change::ChangeNoticeSettings;
use toki_model::domain::{Channel, DeliveryOutcome, Instant, ScheduleId, TenantId, UserId};
use toki_model::input::ScheduleInput;
use toki_model::limits::{FlowSettings, Limit};
use toki_ports::channel::{ChannelSender, Notification, SendError, SendResult};
use toki_ports::{
    ChatMessage, Clock, DelayQueue, ReceivedMessage, TenantDirectory, TenantStore, TenantStores,
};

/// Change notices on the run's scale: a storm of up to 40 edits, up to 3 s
/// apart, meets the hard cap.
pub const NOTICES: ChangeNoticeSettings = ChangeNoticeSettings {
    enabled: true,
    min_delay_ms: 1_000,
    max_delay_ms: 10_000,
    hard_cap_ms: 30_000,
};

/// A clock `by` milliseconds off the true one.
struct Skewed {
    truth: Arc<dyn Clock>,
    by: chrono::Duration,
}

impl Clock for Skewed {
    fn now(&self) -> Instant {
        self.truth.now() + self.by
    }
}

/// In-app chat as production writes it (toki-channels' `ChatChannel`,
/// which the services' tests do not depend on: adapters sit above them): a
/// row per delivery key in the tenant's own store, the first one kept.
struct StoreChat {
    stores: Arc<dyn TenantStores>,
    clock: Arc<dyn Clock>,
}

#[async_trait]
impl ChannelSender for StoreChat {
    fn channel(&self) -> Channel {
        Channel::Chat
    }

    async fn send(&self, batch: &[Notification]) -> Vec<SendResult> {
        let Some(first) = batch.first() else {
            return Vec::new();
        };
        let failed =
            |e: toki_ports::StoreError| vec![Err(SendError::transient(e.to_string())); batch.len()];
        let store = match self.stores.open(&first.tenant).await {
            Ok(s) => s,
            Err(e) => return failed(e),
        };
        let now = self.clock.now();
        let rows: Vec<ChatMessage> = batch
            .iter()
            .map(|n| ChatMessage {
                key: n.key.clone(),
                version: n.version,
                user: n.key.recipient.clone(),
                text: n.text.clone(),
                created_at: now,
            })
            .collect();
        match store.insert_chat_messages(&rows).await {
            Ok(()) => vec![Ok(self.clock.now()); batch.len()],
            Err(e) => failed(e),
        }
    }
}

/// What the run left behind, for the invariants.
pub struct Outcome {
    pub origin: Instant,
    pub end: Instant,
    /// Mail and Slack, as the channels sent them (true time).
    pub sent: Vec<(Channel, SentNotification)>,
    pub chat: Vec<(TenantId, ChatMessage)>,
    pub rows: Vec<(TenantId, DeliveryOutcome)>,
    /// Each meeting's last state (None: deleted).
    pub meetings: BTreeMap<(TenantId, ScheduleId), Option<ScheduleInput>>,
    /// When each meeting's change took effect (true time).
    pub changed_at: BTreeMap<(TenantId, ScheduleId), Instant>,
    /// Storms: first and last edit of each.
    pub storms: BTreeMap<(TenantId, ScheduleId), (Instant, Instant)>,
    pub kills: Vec<Instant>,
    /// Notifications sent by daemons killed before they recorded them.
    pub killed_between_send_and_record: usize,
    /// When each tenant's store was down or stalled: from, until.
    pub store_faults: Vec<(TenantId, Instant, Instant)>,
    pub dead_letters: Vec<ReceivedMessage>,
    pub left_in_queue: u64,
}

/// A running daemon: its run, its flow (to crash with it), its stop.
struct Slot {
    task: JoinHandle<()>,
    flow: Option<Arc<Flow>>,
    stop: watch::Sender<bool>,
}

pub struct World {
    pub scenario: Scenario,
    kit: TestKit,
    chat: Arc<StoreChat>,
    tenants: Vec<TenantId>,
    slots: Vec<Option<Slot>>,
    /// Each slot's trap for a kill between send and record.
    traps: Vec<Arc<Trap>>,
    started: u32,
    start: tokio::time::Instant,
}

/// What the driver does at a moment.
enum Step {
    Fault(Fault),
    Heal(Fault),
    Restart(usize),
}

/// A client's write to one meeting, made at its moment.
#[derive(Clone)]
enum Write {
    Move(chrono::Duration),
    Delete,
    /// The storm's n-th title edit.
    Retitle(u32),
}

/// One meeting's writes (tenant and meeting by their place in the scenario).
type Writes = (usize, usize, Vec<(Duration, Write)>);

/// What the clients' writes did, shared by their tasks.
#[derive(Default)]
struct Written {
    meetings: BTreeMap<(TenantId, ScheduleId), Option<ScheduleInput>>,
    changed_at: BTreeMap<(TenantId, ScheduleId), Instant>,
    storms: BTreeMap<(TenantId, ScheduleId), (Instant, Instant)>,
}

impl World {
    pub async fn new(scenario: Scenario) -> World {
        let mut kit = TestKit::starting_at(scenario.day.origin(), 100);
        kit.pipeline.window = Duration::from_secs(120);
        kit.pipeline.lead = scenario.lead;
        // As production: messages of a crowded instant arrive up to the longest lead early.
        kit.daemon_settings.lead = scenario.lead.max(kit.pipeline.max_lead);
        let clock: Arc<dyn Clock> = kit.clock.clone();
        kit.slack.look_up_sent(scenario.reconcile);
        let chat = Arc::new(StoreChat {
            stores: kit.stores.clone(),
            clock,
        });
        let mut tenants = Vec::new();
        for plan in &scenario.tenants {
            let t = kit.tenant(&plan.id).await;
            if plan.notices {
                kit.change_notices_on(&t, NOTICES).await;
            }
            if let Some(cap) = plan.slack_cap {
                let mut record = kit
                    .directory
                    .get(&t)
                    .await
                    .expect("directory")
                    .expect("tenant");
                record.limits.edit(&format!("slack={cap}")).expect("a cap");
                kit.directory.put(&record).await.expect("directory");
            }
            tenants.push(t);
        }
        let slots = scenario.skews_ms.iter().map(|_| None).collect();
        let traps = scenario
            .skews_ms
            .iter()
            .map(|_| Trap::new(kit.clock.clone()))
            .collect();
        World {
            scenario,
            kit,
            chat,
            tenants,
            slots,
            traps,
            started: 0,
            start: tokio::time::Instant::now(),
        }
    }

    pub async fn run(mut self) -> Outcome {
        let registrar = self.kit.registrar();
        let mut meetings = BTreeMap::new();
        for (t, plan) in self.scenario.tenants.iter().enumerate() {
            for m in &plan.meetings {
                let id: ScheduleId = m.id.parse().expect("a schedule id");
                registrar
                    .put_schedule(&self.tenants[t], &id, &m.input)
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", m.id));
                meetings.insert((self.tenants[t].clone(), id), Some(m.input.clone()));
            }
        }
        for d in 0..self.slots.len() {
            self.start_daemon(d);
        }
        let (stop_scanner, scanner_stop) = watch::channel(false);
        let scanner = self.kit.scanner();
        let scanning = tokio::spawn(async move {
            scanner
                .run_every(Duration::from_secs(60), scanner_stop)
                .await
        });
        let mut out = Outcome {
            origin: self.kit.now(),
            end: self.kit.now(),
            sent: Vec::new(),
            chat: Vec::new(),
            rows: Vec::new(),
            meetings,
            changed_at: BTreeMap::new(),
            storms: BTreeMap::new(),
            kills: Vec::new(),
            killed_between_send_and_record: 0,
            store_faults: Vec::new(),
            dead_letters: Vec::new(),
            left_in_queue: 0,
        };
        let written = Arc::new(std::sync::Mutex::new(Written::default()));
        let clients: Vec<_> = self
            .writes()
            .into_iter()
            .map(|(t, m, writes)| self.client(t, m, writes, written.clone()))
            .collect();
        for (at, step) in self.timeline() {
            tokio::time::sleep_until(self.start + at).await;
            self.act(step, &mut out).await;
        }
        for c in clients {
            c.await.expect("a client's writes");
        }
        let written = std::mem::take(&mut *written.lock().expect("written"));
        out.meetings.extend(written.meetings);
        out.changed_at = written.changed_at;
        out.storms = written.storms;
        self.settled().await;
        for slot in self.slots.iter_mut().filter_map(Option::take) {
            slot.stop.send_replace(true);
            slot.task.await.expect("a daemon's run");
        }
        stop_scanner.send_replace(true);
        scanning.await.expect("the scanner");
        self.collect(out).await
    }

    /// Waits until the run has settled: every reminder's due instant and
    /// every fault passed, and nothing left in the queue (held, delayed or
    /// visible), for a minute on end.
    async fn settled(&self) {
        let origin = self.scenario.day.origin();
        let last_due = self
            .scenario
            .tenants
            .iter()
            .flat_map(|t| &t.meetings)
            .map(|m| match &m.input.recurrence {
                Some(_) => series_last_due(&m.input, origin) + Duration::from_secs(150),
                None => due_of(&m.input, origin) + Duration::from_secs(150),
            })
            .max()
            .unwrap_or_default();
        tokio::time::sleep_until(self.start + last_due).await;
        let mut quiet = 0;
        while quiet < 6 {
            tokio::time::sleep(Duration::from_secs(10)).await;
            let depth = self.kit.queue.depth().await;
            let empty = depth.is_ok_and(|d| d.messages + d.in_flight + d.delayed == 0);
            quiet = if empty { quiet + 1 } else { 0 };
        }
    }

    fn timeline(&self) -> Vec<(Duration, Step)> {
        let mut steps = Vec::new();
        for (at, f) in &self.scenario.faults {
            let lasts = match f {
                Fault::Kill {
                    daemon,
                    restart_after,
                    ..
                } => {
                    steps.push((*at + *restart_after, Step::Restart(*daemon)));
                    None
                }
                Fault::Outage { lasts, .. }
                | Fault::StoreDown { lasts, .. }
                | Fault::StoreStall { lasts, .. }
                | Fault::QueueDown { lasts } => Some(*lasts),
                Fault::Throttle { .. } | Fault::Copies { .. } => None,
            };
            if let Some(lasts) = lasts {
                steps.push((*at + lasts, Step::Heal(f.clone())));
            }
            steps.push((*at, Step::Fault(f.clone())));
        }
        // Stable: at one moment, faults before heals before changes, as listed.
        steps.sort_by_key(|(at, _)| *at);
        steps
    }

    /// Each changed meeting's writes, at their moments: made a margin
    /// before the due instant (and before the new one), the clocks' errors
    /// and the cut-off included.
    fn writes(&self) -> Vec<Writes> {
        let margin = self.scenario.change_margin() + Duration::from_secs(1);
        let mut all = Vec::new();
        for (t, plan) in self.scenario.tenants.iter().enumerate() {
            for (m, meeting) in plan.meetings.iter().enumerate() {
                let Some(change) = &meeting.change else {
                    continue;
                };
                let due = due_of(&meeting.input, self.scenario.day.origin());
                let latest = due.saturating_sub(margin);
                let writes = match change.clone() {
                    Change::Move { at, by } => {
                        let at = at.min(latest);
                        let by = by.max(span(at + margin) - span(due));
                        vec![(at, Write::Move(by))]
                    }
                    Change::Delete { at } => vec![(at.min(latest), Write::Delete)],
                    Change::Storm { at, edits, every } => (0..edits)
                        .map(|e| (at + every * e, Write::Retitle(e)))
                        .collect(),
                };
                all.push((t, m, writes));
            }
        }
        all
    }

    async fn act(&mut self, step: Step, out: &mut Outcome) {
        match step {
            Step::Fault(f) => self.inject(&f, true, out).await,
            Step::Heal(f) => self.inject(&f, false, out).await,
            Step::Restart(d) => {
                self.reap_trap(d, out).await;
                self.start_daemon(d)
            }
        }
    }

    async fn inject(&mut self, f: &Fault, on: bool, out: &mut Outcome) {
        let kit = &self.kit;
        match f {
            Fault::Kill {
                daemon,
                moment: KillMoment::AfterASend,
                ..
            } => {
                if self.slots[*daemon].is_some() {
                    self.traps[*daemon].arm();
                }
            }
            Fault::Kill { daemon, .. } => {
                // Killed by its trap already: that kill counts, not a second one.
                self.reap_trap(*daemon, out).await;
                if let Some(slot) = self.slots[*daemon].take() {
                    slot.task.abort();
                    let _ = slot.task.await;
                    if let Some(flow) = slot.flow {
                        flow.crash();
                    }
                    out.kills.push(self.kit.now());
                }
            }
            Fault::Outage { channel, .. } => {
                let down = on.then(|| SendError::transient("connection refused"));
                match channel {
                    Channel::Mail => kit.mail.set_down(down),
                    _ => kit.slack.set_down(down),
                }
            }
            Fault::Throttle { n, retry_after } => kit.slack.fail_next(
                *n,
                SendError::Throttled {
                    retry_after: *retry_after,
                },
            ),
            Fault::StoreDown { tenant, .. } => {
                self.store(*tenant).set_down(on);
                self.store_fault(*tenant, on, out);
            }
            Fault::StoreStall { tenant, by, .. } => {
                self.store(*tenant).set_stall(on.then_some(*by));
                self.store_fault(*tenant, on, out);
            }
            Fault::QueueDown { .. } => kit.queue.set_down(on),
            Fault::Copies { n } => kit.queue.copy_next(*n),
        }
    }

    /// Disarms slot `d`'s trap; if it sprang, the daemon it killed is
    /// cleared away and the kill counted.
    async fn reap_trap(&mut self, d: usize, out: &mut Outcome) {
        let Some((at, sent)) = self.traps[d].disarm() else {
            return;
        };
        if let Some(slot) = self.slots[d].take() {
            let _ = slot.task.await;
        }
        out.kills.push(at);
        out.killed_between_send_and_record += sent;
    }

    fn store_fault(&self, tenant: usize, on: bool, out: &mut Outcome) {
        let (t, now) = (self.tenants[tenant].clone(), self.kit.now());
        if on {
            out.store_faults.push((t, now, Instant::MAX_UTC));
        } else if let Some(f) = out
            .store_faults
            .iter_mut()
            .rev()
            .find(|f| f.0 == t && f.2 == Instant::MAX_UTC)
        {
            f.2 = now;
        }
    }

    fn store(&self, tenant: usize) -> Arc<toki_ports::testing::MemoryTenantStore> {
        self.kit
            .stores
            .get(&self.tenants[tenant])
            .expect("a tenant's store")
    }

    /// A client making one meeting's writes at their moments, each retried
    /// every half second while a store or the queue is down (as an API
    /// client retries a 503); any other refusal is the scenario's mistake.
    fn client(
        &self,
        t: usize,
        m: usize,
        writes: Vec<(Duration, Write)>,
        written: Arc<std::sync::Mutex<Written>>,
    ) -> JoinHandle<()> {
        let tenant = self.tenants[t].clone();
        let meeting = self.scenario.tenants[t].meetings[m].clone();
        let id: ScheduleId = meeting.id.parse().expect("an id");
        let registrar = self.kit.registrar();
        let clock = self.kit.clock.clone();
        let start = self.start;
        tokio::spawn(async move {
            for (at, write) in writes {
                tokio::time::sleep_until(start + at).await;
                let mut input = meeting.input.clone();
                let state = loop {
                    let done = match &write {
                        Write::Move(by) => {
                            let starts = chrono::DateTime::parse_from_rfc3339(&input.starts_at)
                                .expect("an instant");
                            let mut moved = input.clone();
                            moved.starts_at = (starts + *by).to_rfc3339();
                            registrar
                                .put_schedule(&tenant, &id, &moved)
                                .await
                                .map(|_| Some(moved))
                        }
                        Write::Delete => {
                            registrar.delete_schedule(&tenant, &id).await.map(|_| None)
                        }
                        Write::Retitle(n) => {
                            input.title = format!("{} (edit {n})", meeting.input.title);
                            registrar
                                .put_schedule(&tenant, &id, &input)
                                .await
                                .map(|_| Some(input.clone()))
                        }
                    };
                    match done {
                        Ok(state) => break state,
                        Err(RegistrarError::Store(_)) => {
                            tokio::time::sleep(Duration::from_millis(500)).await
                        }
                        Err(e) => panic!("{tenant}/{id}: a write was refused: {e}"),
                    }
                };
                let now = clock.now();
                let mut w = written.lock().expect("written");
                let key = (tenant.clone(), id.clone());
                match write {
                    Write::Retitle(_) => w.storms.entry(key.clone()).or_insert((now, now)).1 = now,
                    _ => {
                        w.changed_at.insert(key.clone(), now);
                    }
                }
                w.meetings.insert(key, state);
            }
        })
    }

    fn start_daemon(&mut self, d: usize) {
        if self.slots[d].is_some() {
            return;
        }
        self.started += 1;
        let kit = &self.kit;
        let truth: Arc<dyn Clock> = kit.clock.clone();
        let clock: Arc<dyn Clock> = Arc::new(Skewed {
            truth,
            by: chrono::Duration::milliseconds(self.scenario.skews_ms[d]),
        });
        let trap = self.traps[d].clone();
        let trapped = |inner: Arc<dyn ChannelSender>| -> Arc<dyn ChannelSender> {
            Arc::new(Trapped {
                inner,
                trap: trap.clone(),
            })
        };
        let channels: Vec<Arc<dyn ChannelSender>> = vec![
            trapped(kit.mail.clone()),
            trapped(self.chat.clone()),
            trapped(kit.slack.clone()),
        ];
        let notices = kit.change_notices();
        let settings = DaemonSettings {
            reconcile_takeovers: self.scenario.reconcile,
            ..kit.daemon_settings.clone()
        };
        let daemon = Daemon::new(
            kit.queue.clone(),
            kit.stores.clone(),
            channels,
            clock.clone(),
            kit.marks.clone(),
            settings,
        )
        .with_debounce(DebounceChecks {
            debouncer: notices.debouncer,
            settings: Default::default(),
            action: notices.action,
        })
        .with_index(kit.index.clone());
        let flow = self.scenario.slack_limit.map(|(rate, burst)| {
            let settings = FlowSettings {
                limits: [("slack:*".to_owned(), Limit::rate(f64::from(rate), burst))].into(),
                ..FlowSettings::default()
            };
            let leases: Arc<dyn toki_ports::LeaseStore> = kit.leases.clone();
            let flow = Flow::new(
                settings,
                Some(leases),
                clock.clone(),
                format!("d{d}-{}", self.started),
            );
            flow.read_contracts_from(kit.directory.clone());
            flow
        });
        let daemon = Arc::new(match &flow {
            Some(flow) => daemon.with_flow(flow.clone()),
            None => daemon,
        });
        let (stop, shutdown) = watch::channel(false);
        let task = tokio::spawn(daemon.run(shutdown));
        trap.bind(task.abort_handle(), flow.clone());
        self.slots[d] = Some(Slot { task, flow, stop });
    }

    async fn collect(self, mut out: Outcome) -> Outcome {
        out.end = self.kit.now();
        let kit = &self.kit;
        out.sent = [(Channel::Mail, &kit.mail), (Channel::Slack, &kit.slack)]
            .into_iter()
            .flat_map(|(c, ch)| ch.sent().into_iter().map(move |s| (c, s)))
            .collect();
        for t in &self.tenants {
            let store = kit.stores.get(t).expect("a store");
            store.set_down(false);
            store.set_stall(None);
            for j in 0..10 {
                let u: UserId = format!("u{j}").parse().expect("a user id");
                for c in store.chat_messages(&u).await.expect("chat rows") {
                    out.chat.push((t.clone(), c));
                }
            }
            for r in store.deliveries().await.expect("delivery rows") {
                out.rows.push((t.clone(), r));
            }
        }
        kit.queue.set_down(false);
        out.dead_letters = kit.queue.dead_lettered();
        out.left_in_queue = kit
            .queue
            .depth()
            .await
            .map(|d| d.messages + d.in_flight)
            .unwrap_or(u64::MAX);
        out
    }
}

/// When the daily series' last reminder in the run's first 70 minutes falls
/// due, from `origin` (on the fall-back day its two 01:50s are an hour apart).
fn series_last_due(input: &ScheduleInput, origin: Instant) -> Duration {
    let series = input.series(origin).expect("a valid series");
    let occurrences = series
        .between(origin, origin + chrono::Duration::minutes(75))
        .expect("an expansion");
    let before = input
        .reminders
        .first()
        .map(|r| r.minutes_before)
        .unwrap_or(0);
    occurrences
        .iter()
        .map(|o| {
            (o.at - chrono::Duration::minutes(before) - origin)
                .to_std()
                .unwrap_or_default()
        })
        .max()
        .unwrap_or_default()
}

/// When a one-off meeting's reminder falls due, from `origin` (zero for a series).
pub fn due_of(input: &ScheduleInput, origin: Instant) -> Duration {
    if input.recurrence.is_some() {
        return Duration::ZERO;
    }
    let starts = chrono::DateTime::parse_from_rfc3339(&input.starts_at)
        .expect("an instant")
        .to_utc();
    let before = input
        .reminders
        .first()
        .map(|r| r.minutes_before)
        .unwrap_or(0);
    (starts - chrono::Duration::minutes(before) - origin)
        .to_std()
        .unwrap_or_default()
}
