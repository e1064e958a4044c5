//! The fault suite's shared parts: the receivers (the Slack and SMTP
//! stand-ins, chat rows), a burst of meetings due at one instant, the measure
//! of what arrived (expected, lost, duplicated, stale, lateness), and the row
//! each test reports for RELIABILITY.md (appended as a JSON line to
//! `$TOKI_RELIABILITY_OUT` when set; `scripts/reliability.sh` renders them).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::time::Duration;

use chrono::{DateTime, Duration as ChronoDuration, Utc};

pub use super::pipeline::due_in;
use serde::Serialize;
use toki_app::{Config, Toki};
use toki_devtools::progress::Progress;
use toki_devtools::scenario::{register, Meeting};
use toki_devtools::slack_standin::{Standin, StandinOptions};
use toki_devtools::smtp_standin::SmtpStandin;
use toki_devtools::webhook_standin::WebhookStandin;
use toki_model::input::{RuleInput, ScheduleInput};
use toki_model::{Channel, DeliveryStatus, TenantId};
use toki_ports::TenantStores;

/// The receivers every fault test sends to.
pub struct Sinks {
    pub slack: Standin,
    pub slack_url: String,
    pub smtp: SmtpStandin,
    pub smtp_addr: String,
    /// The tenants' webhook receiver: every signature verified.
    pub webhook: WebhookStandin,
    pub webhook_addr: String,
    /// The ports of receivers still down, held (bound, not listening:
    /// connections are refused) so that no other test takes them before
    /// they come up.
    pub reserved: Reserved,
}

/// Ports bound and not listened on, by address.
#[derive(Default)]
pub struct Reserved(std::sync::Mutex<HashMap<String, tokio::net::TcpSocket>>);

impl Reserved {
    /// A 127.0.0.1 port that refuses connections, held until [`Self::listen`].
    pub fn port(&self) -> String {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = socket.local_addr().unwrap().to_string();
        self.0.lock().unwrap().insert(addr.clone(), socket);
        addr
    }

    /// Listens on `addr`: on its held socket if it has one, else bound now.
    pub async fn listen(&self, addr: &str) -> tokio::net::TcpListener {
        match self.0.lock().unwrap().remove(addr) {
            Some(socket) => socket.listen(1024).unwrap(),
            None => std::net::TcpListener::bind(addr)
                .and_then(|l| {
                    l.set_nonblocking(true)?;
                    tokio::net::TcpListener::from_std(l)
                })
                .unwrap(),
        }
    }
}

/// A 127.0.0.1 port nothing listens on (bound, then let go): for a port
/// that stays closed. One that comes up later is [`Reserved::port`].
pub fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

impl Sinks {
    pub async fn start() -> Sinks {
        let (slack, slack_url) = super::services::slack_standin(StandinOptions::default()).await;
        let (smtp, smtp_addr) = toki_devtools::smtp_standin::start().await.unwrap();
        let sinks = Sinks {
            slack,
            slack_url,
            smtp,
            smtp_addr,
            webhook: WebhookStandin::new(),
            webhook_addr: free_addr().to_string(),
            reserved: Reserved::default(),
        };
        sinks.webhook_up().await;
        sinks
    }

    /// Receivers on ports nothing listens on yet: connections are refused
    /// until [`Sinks::slack_up`] / [`Sinks::smtp_up`].
    pub fn start_down() -> Sinks {
        let reserved = Reserved::default();
        Sinks {
            slack: Standin::new(StandinOptions::default()),
            slack_url: format!("http://{}/api", reserved.port()),
            smtp: SmtpStandin::new(),
            smtp_addr: reserved.port(),
            webhook: WebhookStandin::new(),
            webhook_addr: reserved.port(),
            reserved,
        }
    }

    /// These receivers, the webhook's down until [`Sinks::webhook_up`].
    pub fn with_webhook_down(self) -> Sinks {
        let webhook_addr = self.reserved.port();
        Sinks {
            webhook: WebhookStandin::new(),
            webhook_addr,
            ..self
        }
    }

    /// Starts the webhook receiver on its (so far refused) port.
    pub async fn webhook_up(&self) {
        let listener = self.reserved.listen(&self.webhook_addr).await;
        tokio::spawn(toki_devtools::webhook_standin::serve(
            self.webhook.clone(),
            listener,
        ));
    }

    /// Points each tenant's default webhook endpoint at the receiver, and
    /// tells the receiver the secret Toki made for it.
    pub async fn webhook_endpoints(&self, toki: &Toki, tenants: &[TenantId]) {
        for t in tenants {
            let input = toki_model::webhook::WebhookSettingsInput {
                default_url: Some(format!("http://{}/hook", self.webhook_addr)),
            };
            let made = toki
                .registrar()
                .put_webhook_settings(t, &input)
                .await
                .unwrap();
            self.webhook
                .add_secret(t.as_str(), made.secret.unwrap().parse().unwrap());
        }
    }

    /// Starts serving Slack on its (so far refused) port.
    pub async fn slack_up(&self) {
        let addr = self
            .slack_url
            .trim_start_matches("http://")
            .trim_end_matches("/api")
            .to_owned();
        let listener = self.reserved.listen(&addr).await;
        tokio::spawn(toki_devtools::slack_standin::serve(
            self.slack.clone(),
            listener,
        ));
    }

    /// Starts serving SMTP on its (so far refused) port.
    pub async fn smtp_up(&self) {
        let listener = self.reserved.listen(&self.smtp_addr).await;
        tokio::spawn(self.smtp.clone().serve(listener));
    }

    /// Points a configuration's Slack and mail at these receivers.
    pub fn configure(&self, c: &mut Config) {
        c.slack.token = Some("xoxb-fault-suite-token".into());
        c.slack.api_url = self.slack_url.clone();
        c.mail.smtp_url = Some(format!("smtp://{}", self.smtp_addr).into());
        // The receiver is on this machine: the operator's exception.
        c.webhook.allow_addresses = vec!["127.0.0.1/32".parse().unwrap()];
        c.webhook.allow_http = true;
        c.webhook.allow_ports = vec![toki_model::egress::PortRange::ALL];
        // The stand-ins take everything at once; the faults are measured
        // without pacing (flow control is the fleet simulation's, crates/core/src/tests/sim/).
        c.flow.limits.clear();
    }

    /// The same as environment variables, for a daemon in its own process.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("TOKI_SLACK_TOKEN", "xoxb-fault-suite-token".into()),
            ("TOKI_SLACK_API_URL", self.slack_url.clone()),
            ("TOKI_SMTP_URL", format!("smtp://{}", self.smtp_addr)),
            ("TOKI_FLOW_LIMITS", "{}".into()),
            ("TOKI_WEBHOOK_ALLOW_ADDRESSES", "127.0.0.1/32".into()),
            ("TOKI_WEBHOOK_ALLOW_HTTP", "true".into()),
            ("TOKI_WEBHOOK_ALLOW_PORTS", "1-65535".into()),
        ]
    }
}

/// Settings that keep the suite fast: a short lease, quick retries and probes.
pub fn fast(c: &mut Config) {
    c.pipeline.scan_interval_s = 1;
    c.pipeline.lead_ms = 1000;
    c.daemon.workers = 4;
    c.daemon.visibility_timeout_s = 4;
    c.daemon.retry_base_ms = 200;
    c.daemon.max_backoff_s = 2;
    c.daemon.breaker_probe_ms = 250;
    c.mail.timeout_s = 2;
}

/// Meetings due at one instant, and what they should deliver.
#[derive(Debug, Clone)]
pub struct Burst {
    pub due: DateTime<Utc>,
    pub tenants: Vec<TenantId>,
    /// Deliveries expected per channel.
    pub expected: BTreeMap<Channel, u64>,
    /// The meetings, for moving or deleting them.
    pub meetings: Vec<(TenantId, String, ScheduleInput)>,
}

impl Burst {
    pub fn total(&self) -> u64 {
        self.expected.values().sum()
    }
}

/// A meeting reminded `MINUTES_BEFORE` before it starts: due at `due`.
pub fn meeting_at(
    due: DateTime<Utc>,
    participants: &[String],
    channels: &[Channel],
) -> ScheduleInput {
    ScheduleInput {
        title: "Fault drill".into(),
        body: "Room 3".into(),
        starts_at: (due + ChronoDuration::minutes(5)).to_rfc3339(),
        time_zone: "Asia/Tokyo".into(),
        participants: participants.to_vec(),
        reminders: vec![RuleInput {
            minutes_before: 5,
            channels: channels.iter().map(|c| c.to_string()).collect(),
        }],
        recurrence: None,
        dst: None,
    }
}

/// Tenants with users u0..u9 (`pipeline::user`), created through `toki`.
pub async fn tenants(toki: &Toki, names: &[&str]) -> Vec<TenantId> {
    let mut out = Vec::new();
    for name in names {
        let id: TenantId = super::conformance::unique(name).parse().unwrap();
        toki.create_tenant(&id, true).await.unwrap();
        for j in 0..10 {
            toki.registrar()
                .put_user(
                    &id,
                    &format!("u{j}").parse().unwrap(),
                    &super::pipeline::user(j),
                )
                .await
                .unwrap();
        }
        out.push(id);
    }
    out
}

/// The least time a burst must be registered before it is due: the fault
/// suite's pipelines scan every second and enqueue a second ahead (`fast`).
const SETUP_MARGIN: Duration = Duration::from_secs(2);

/// Where a burst is first registered: a day ahead, beyond every scan window
/// of the suite, so nothing of it is enqueued before it is moved to its instant.
const PARKED: ChronoDuration = ChronoDuration::days(1);

/// Registers `meetings` meetings over `tenants`, `participants` each (of
/// u0..u9), on the channels `channels_of(i)` gives meeting i, all due at one
/// instant at least `lead` ahead, chosen once they are registered.
///
/// Through the bench's `scenario::register`: each tenant's meetings in one
/// batch (one transaction, one index write), as a calendar importing them
/// would. A due instant chosen before the set-up can be overtaken by it on a
/// loaded machine (twenty writes one by one once took over 6 s on 2 cores,
/// and a burst registered after its due instant is late before the daemon
/// sees it). So the burst is first registered a day ahead ([`PARKED`]),
/// which measures what registering it costs here and now, then moved to an
/// instant `lead` plus three times that cost ahead; should the move itself
/// end inside [`SETUP_MARGIN`] of that instant, it is moved on again, further.
/// A move is a new version: whatever the daemon got of an earlier one is
/// dropped as stale at its last look, as for any edit.
pub async fn register_burst(
    toki: &Toki,
    tenants: &[TenantId],
    meetings: usize,
    participants: usize,
    channels_of: impl Fn(usize) -> Vec<Channel>,
    lead: Duration,
) -> Burst {
    let mut expected: BTreeMap<Channel, u64> = BTreeMap::new();
    let mut plan = Vec::new();
    for i in 0..meetings {
        let tenant = tenants[i % tenants.len()].clone();
        let people: Vec<String> = (0..participants)
            .map(|k| format!("u{}", (i + k) % 10))
            .collect();
        let channels = channels_of(i);
        for c in &channels {
            *expected.entry(*c).or_default() += participants as u64;
        }
        plan.push((tenant, format!("drill-{i}"), people, channels));
    }
    let at = |due: DateTime<Utc>| -> Vec<(TenantId, String, ScheduleInput)> {
        plan.iter()
            .map(|(tenant, id, people, channels)| {
                (
                    tenant.clone(),
                    id.clone(),
                    meeting_at(due, people, channels),
                )
            })
            .collect()
    };
    let put = |list: &[(TenantId, String, ScheduleInput)]| {
        let meetings = list
            .iter()
            .map(|(tenant, id, input)| Meeting {
                tenant: tenant.clone(),
                id: id.parse().unwrap(),
                input: input.clone(),
            })
            .collect();
        async move {
            let started = Utc::now();
            register(toki, meetings, &Progress::new(false))
                .await
                .unwrap();
            Utc::now() - started
        }
    };
    let mut cost = put(&at(due_in(PARKED.num_seconds()))).await;
    let lead = ChronoDuration::from_std(lead).unwrap();
    let margin = ChronoDuration::from_std(SETUP_MARGIN).unwrap();
    loop {
        let due = due_in((lead + cost * 3).num_seconds().max(margin.num_seconds()));
        let list = at(due);
        cost = put(&list).await;
        let left = due - Utc::now();
        if left >= margin {
            return Burst {
                due,
                tenants: tenants.to_vec(),
                expected,
                meetings: list,
            };
        }
        eprintln!(
            "set-up slower than planned: the burst was registered {} ms before it was due \
             (the move took {} ms); moving it further ahead",
            left.num_milliseconds(),
            cost.num_milliseconds()
        );
    }
}

/// What arrived of a burst, measured at the receivers.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Measured {
    pub expected: u64,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    /// Delivery rows recorded stale (a change made the reminder moot).
    pub stale: u64,
    /// Delivery rows recorded undeliverable (a definite refusal).
    pub undeliverable: u64,
    /// first arrival − due, per delivery.
    #[serde(skip)]
    pub lateness_ms: Vec<i64>,
    pub by_channel: BTreeMap<String, ChannelMeasure>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ChannelMeasure {
    pub expected: u64,
    pub delivered: u64,
    pub duplicated: u64,
    pub max_late_ms: i64,
}

impl Measured {
    pub fn max_late_ms(&self) -> i64 {
        self.lateness_ms.iter().copied().max().unwrap_or(0)
    }

    pub fn p50_late_ms(&self) -> i64 {
        let mut v = self.lateness_ms.clone();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    }

    pub fn channel(&self, c: Channel) -> ChannelMeasure {
        self.by_channel.get(c.as_str()).cloned().unwrap_or_default()
    }
}

fn ours(delivery: &str, tenants: &[TenantId]) -> bool {
    tenants
        .iter()
        .any(|t| delivery.starts_with(&format!("{t}/")))
}

/// Counts a burst's deliveries at the receivers and its rows in the tenant databases.
pub async fn measure(toki: &Toki, sinks: &Sinks, burst: &Burst) -> Measured {
    let due_ms = burst.due.timestamp_millis();
    let mut m = Measured {
        expected: burst.total(),
        ..Measured::default()
    };
    let add = |m: &mut Measured, channel: Channel, arrivals: Vec<(i64, u64)>| {
        let c = m.by_channel.entry(channel.as_str().to_owned()).or_default();
        c.expected = burst.expected.get(&channel).copied().unwrap_or(0);
        for (arrived, copies) in arrivals {
            c.delivered += 1;
            c.duplicated += copies.saturating_sub(1);
            c.max_late_ms = c.max_late_ms.max(arrived - due_ms);
            m.lateness_ms.push(arrived - due_ms);
        }
    };
    let slack: Vec<(i64, u64)> = sinks
        .slack
        .arrivals()
        .into_iter()
        .filter(|a| ours(&a.delivery, &burst.tenants))
        .map(|a| (a.arrived_ms, a.copies))
        .collect();
    add(&mut m, Channel::Slack, slack);
    let mail: Vec<(i64, u64)> = sinks
        .smtp
        .arrivals()
        .into_iter()
        .filter(|(d, _)| ours(d, &burst.tenants))
        .map(|(_, v)| v)
        .collect();
    add(&mut m, Channel::Mail, mail);
    let webhook: Vec<(i64, u64)> = sinks
        .webhook
        .arrivals()
        .into_iter()
        .filter(|a| ours(&a.delivery, &burst.tenants))
        .map(|a| (a.arrived_ms, a.copies))
        .collect();
    if burst.expected.contains_key(&Channel::Webhook) {
        add(&mut m, Channel::Webhook, webhook);
    }
    let mut chat = Vec::new();
    for t in &burst.tenants {
        let store = toki.stores.open(t).await.unwrap();
        for j in 0..10 {
            for c in store
                .chat_messages(&format!("u{j}").parse().unwrap())
                .await
                .unwrap()
            {
                if c.key.schedule.as_str().starts_with("drill-") {
                    // One row per delivery key: exactly once by construction.
                    chat.push((c.created_at.timestamp_millis(), 1));
                }
            }
        }
        for row in store.deliveries().await.unwrap() {
            match row.status {
                DeliveryStatus::Stale => m.stale += 1,
                DeliveryStatus::Undeliverable => m.undeliverable += 1,
                _ => {}
            }
        }
    }
    add(&mut m, Channel::Chat, chat);
    m.delivered = m.by_channel.values().map(|c| c.delivered).sum();
    m.duplicated = m.by_channel.values().map(|c| c.duplicated).sum();
    m.lost = burst
        .expected
        .iter()
        .map(|(c, n)| n.saturating_sub(m.channel(*c).delivered))
        .sum();
    m
}

/// Waits until every expected delivery of the burst reached its receiver, or
/// `timeout`: on the stand-ins' arrival signals, and on the chat rows (written
/// by another process, possibly) looked at every 100 ms.
pub async fn wait_all(toki: &Toki, sinks: &Sinks, burst: &Burst, timeout: Duration) -> Measured {
    let deadline = tokio::time::Instant::now() + timeout;
    let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
    if let Some(n) = burst.expected.get(&Channel::Slack) {
        sinks.slack.wait_unique(*n, left()).await;
    }
    if let Some(n) = burst.expected.get(&Channel::Mail) {
        sinks.smtp.wait_unique(*n, left()).await;
    }
    if let Some(n) = burst.expected.get(&Channel::Webhook) {
        sinks.webhook.wait_unique(*n, left()).await;
    }
    loop {
        let m = measure(toki, sinks, burst).await;
        if m.lost == 0 || tokio::time::Instant::now() >= deadline {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One row of RELIABILITY.md.
#[derive(Debug, Clone, Serialize)]
pub struct FaultRow {
    pub fault: String,
    pub injected: String,
    pub expected: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub stale: u64,
    pub undeliverable: u64,
    pub p50_late_ms: i64,
    pub max_late_ms: i64,
    pub note: String,
    pub by_channel: BTreeMap<String, ChannelMeasure>,
}

/// Prints the row and appends it to `$TOKI_RELIABILITY_OUT` if set.
pub fn report(fault: &str, injected: &str, m: &Measured, note: &str) {
    let row = FaultRow {
        fault: fault.into(),
        injected: injected.into(),
        expected: m.expected,
        lost: m.lost,
        duplicated: m.duplicated,
        stale: m.stale,
        undeliverable: m.undeliverable,
        p50_late_ms: m.p50_late_ms(),
        max_late_ms: m.max_late_ms(),
        note: note.into(),
        by_channel: m.by_channel.clone(),
    };
    let line = serde_json::to_string(&row).unwrap();
    eprintln!("RELIABILITY {line}");
    if let Ok(path) = std::env::var("TOKI_RELIABILITY_OUT") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        writeln!(f, "{line}").unwrap();
    }
}

/// An outage's length for this run: `TOKI_FAULT_OUTAGE_S` (RELIABILITY.md is
/// made with the minutes), else `default_s` (CI stays fast).
pub fn outage(default_s: u64) -> Duration {
    seconds_from_env("TOKI_FAULT_OUTAGE_S", default_s)
}

/// A tenant database's outage for this run: `TOKI_FAULT_DB_OUTAGE_S`, else
/// `default_s` (the figure is 2 minutes; Slack's and SMTP's are 5).
pub fn db_outage(default_s: u64) -> Duration {
    seconds_from_env("TOKI_FAULT_DB_OUTAGE_S", default_s)
}

fn seconds_from_env(name: &str, default_s: u64) -> Duration {
    Duration::from_secs(
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default_s),
    )
}

/// Sleeps until a wall-clock instant: when a fault is injected, not a wait for a result.
pub async fn at(instant: DateTime<Utc>) {
    if let Ok(d) = (instant - Utc::now()).to_std() {
        tokio::time::sleep(d).await;
    }
}

/// Deliveries per tenant by status, for failure messages.
pub async fn statuses(toki: &Toki, tenants: &[TenantId]) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for t in tenants {
        let store = toki.stores.open(t).await.unwrap();
        for row in store.deliveries().await.unwrap() {
            *out.entry(format!("{:?}", row.status)).or_default() += 1;
        }
    }
    out
}
