//! Testing kit: [`TestKit`] wires registrar, scanner and daemon on the
//! in-memory ports of `toki_ports::testing` (re-exported here), with the
//! debouncer's timers on tokio's (pausable) time. With
//! `#[tokio::test(start_paused = true)]` a reminder due in 15 minutes is
//! delivered at its instant in a test that takes milliseconds.
//!
//! Enabled by the `testing` feature (and in this crate's own tests).

mod debounce;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use debounce::{Acted, Armed, RecordingAction, TokioTimers};
pub use toki_ports::testing::*;

use crate::daemon::{Daemon, DaemonSettings, DebounceChecks};
use crate::debounce::{Debouncer, QueueTimer};
use crate::notice::NoticeAction;
use crate::registrar::{ChangeNotices, Registrar};
use crate::scanner::Scanner;
use crate::settings::PipelineSettings;
use toki_flow::Flow;
use toki_model::change::ChangeNoticeSettings;
use toki_model::domain::{Channel, Instant, TenantId};
use toki_model::input::{RuleInput, ScheduleInput, UserInput};
use toki_model::limits::FlowSettings;
use toki_model::TenantRecord;
use toki_ports::channel::ChannelSender;
use toki_ports::{Clock, TenantDirectory};

/// The whole pipeline on in-memory ports and a tokio clock.
pub struct TestKit {
    pub clock: Arc<TokioClock>,
    pub directory: Arc<MemoryDirectory>,
    pub stores: Arc<MemoryTenantStores>,
    pub index: Arc<MemoryIndex>,
    pub queue: Arc<MemoryQueue>,
    pub mail: Arc<RecordingChannel>,
    pub chat: Arc<RecordingChannel>,
    pub slack: Arc<RecordingChannel>,
    pub pipeline: PipelineSettings,
    pub daemon_settings: DaemonSettings,
    /// How often `run` scans (EventBridge's rate(1 minute) in production).
    pub scan_every: Duration,
    /// Change notices' debounce rows (checks and notices go on `queue`).
    pub debounce: Arc<MemoryDebounceStore>,
    /// Flow control for the daemons `daemon()` makes (none: unlimited).
    pub flow: Option<FlowSettings>,
    /// Where their shared rates are leased.
    pub leases: Arc<MemoryLeaseStore>,
    /// Which tenants have events, a repair or a purge waiting.
    pub marks: Arc<toki_ports::testing::MemoryWorkMarks>,
    /// The tenants enqueued for each instant, shared by the kit's
    /// registrars and scanners as in one process.
    pub crowds: Arc<crate::crowd::Crowds>,
}

impl Default for TestKit {
    fn default() -> Self {
        Self::new()
    }
}

impl TestKit {
    /// A kit whose clock starts at [`monday_morning`] (on tokio's clock: pause it).
    pub fn new() -> Self {
        Self::starting_at(monday_morning(), 100)
    }

    /// A kit at `origin`, whose queue dead-letters by itself after
    /// `max_receives` (a backstop: the daemon dead-letters by its budget).
    pub fn starting_at(origin: Instant, max_receives: u32) -> Self {
        let clock = Arc::new(TokioClock::starting_at(origin));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let pipeline = PipelineSettings::default();
        let recording = |c| Arc::new(RecordingChannel::new(c, dyn_clock.clone()));
        TestKit {
            directory: Arc::default(),
            stores: Arc::default(),
            index: Arc::new(MemoryIndex::new(pipeline.shards)),
            queue: Arc::new(MemoryQueue::new(dyn_clock.clone(), max_receives)),
            mail: recording(Channel::Mail),
            chat: recording(Channel::Chat),
            slack: recording(Channel::Slack),
            daemon_settings: DaemonSettings {
                lead: pipeline.max_lead,
                ..DaemonSettings::default()
            },
            pipeline,
            scan_every: Duration::from_secs(60),
            debounce: Arc::default(),
            flow: None,
            leases: Arc::default(),
            marks: Arc::default(),
            crowds: Arc::default(),
            clock,
        }
    }

    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// A tenant (contract on unless `reminders_enabled` is false) with users u0..u9,
    /// each with an e-mail address and a Slack id.
    pub async fn tenant_with(&self, id: &str, reminders_enabled: bool) -> TenantId {
        let tenant: TenantId = id.parse().expect("a valid tenant id");
        self.stores.add(&tenant);
        self.directory
            .put(&TenantRecord {
                id: tenant.clone(),
                reminders_enabled,
                active: true,
                database: format!("memory:{tenant}"),
                api_keys: Vec::new(),
                change_notices: Default::default(),
                limits: Default::default(),
                retention: Default::default(),
            })
            .await
            .expect("memory directory");
        let registrar = self.registrar();
        for j in 0..10 {
            registrar
                .put_user(
                    &tenant,
                    &format!("u{j}").parse().expect("user id"),
                    &user(j),
                )
                .await
                .expect("a valid user");
        }
        tenant
    }

    pub async fn tenant(&self, id: &str) -> TenantId {
        self.tenant_with(id, true).await
    }

    pub fn registrar(&self) -> Registrar {
        Registrar {
            directory: self.directory.clone(),
            stores: self.stores.clone(),
            index: self.index.clone(),
            queue: self.queue.clone(),
            clock: self.clock.clone(),
            settings: self.pipeline.clone(),
            notices: Some(self.change_notices()),
            marker: self.marker(),
            crowds: self.crowds.clone(),
        }
    }

    /// Writes marks of the work the kit's services make.
    pub fn marker(&self) -> crate::work::Marker {
        crate::work::Marker::new(self.marks.clone(), self.clock.clone())
    }

    /// Change notices as production wires them, on the kit's ports.
    pub fn change_notices(&self) -> ChangeNotices {
        let clock: Arc<dyn Clock> = self.clock.clone();
        ChangeNotices {
            debouncer: Debouncer {
                store: self.debounce.clone(),
                timer: Arc::new(QueueTimer {
                    queue: self.queue.clone(),
                    clock: clock.clone(),
                }),
                clock: clock.clone(),
            },
            action: Arc::new(NoticeAction {
                queue: self.queue.clone(),
                clock,
            }),
        }
    }

    /// Turns a tenant's change notices on with `settings`.
    pub async fn change_notices_on(&self, tenant: &TenantId, settings: ChangeNoticeSettings) {
        let mut record = self
            .directory
            .get(tenant)
            .await
            .expect("memory directory")
            .expect("a tenant");
        record.change_notices = ChangeNoticeSettings {
            enabled: true,
            ..settings
        };
        self.directory.put(&record).await.expect("memory directory");
    }

    pub fn scanner(&self) -> Scanner {
        Scanner {
            index: self.index.clone(),
            queue: self.queue.clone(),
            directory: self.directory.clone(),
            clock: self.clock.clone(),
            settings: self.pipeline.clone(),
            observer: None,
            crowds: self.crowds.clone(),
        }
    }

    pub fn daemon(&self) -> Arc<Daemon> {
        let channels: Vec<Arc<dyn ChannelSender>> =
            vec![self.mail.clone(), self.chat.clone(), self.slack.clone()];
        let notices = self.change_notices();
        let daemon = Daemon::new(
            self.queue.clone(),
            self.stores.clone(),
            channels,
            self.clock.clone(),
            self.marks.clone(),
            self.daemon_settings.clone(),
        )
        .with_debounce(DebounceChecks {
            debouncer: notices.debouncer,
            settings: Default::default(),
            action: notices.action,
        })
        .with_directory(self.directory.clone())
        .with_index(self.index.clone());
        let daemon = match &self.flow {
            Some(settings) => {
                let leases: Arc<dyn toki_ports::LeaseStore> = self.leases.clone();
                let flow = Flow::new(settings.clone(), Some(leases), self.clock.clone(), "kit");
                flow.read_contracts_from(self.directory.clone());
                daemon.with_flow(flow)
            }
            None => daemon,
        };
        Arc::new(daemon)
    }

    /// Starts the daemon and a scanner that runs every `scan_every`.
    pub fn run(&self) -> Running {
        let daemon = self.daemon();
        let (stop, shutdown) = watch::channel(false);
        let scanner = self.scanner();
        let every = self.scan_every;
        let tasks = vec![
            tokio::spawn(daemon.clone().run(shutdown.clone())),
            tokio::spawn(async move { scanner.run_every(every, shutdown).await }),
        ];
        Running {
            daemon,
            stop,
            tasks,
        }
    }

    /// Everything sent on every channel, by instant.
    pub fn sent(&self) -> Vec<SentNotification> {
        let mut all: Vec<_> = [&self.mail, &self.chat, &self.slack]
            .iter()
            .flat_map(|c| c.sent())
            .collect();
        all.sort_by_key(|s| (s.at, s.key.clone()));
        all
    }
}

/// A running pipeline; `stop` drains it.
pub struct Running {
    pub daemon: Arc<Daemon>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Ends the daemon and the scanner at once, as `kill -9` would: nothing
    /// drains, nothing is recorded, held messages and claims are not renewed.
    pub async fn kill(self) {
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
    }

    pub async fn stop(self) {
        self.stop.send_replace(true);
        for t in self.tasks {
            t.await.expect("pipeline task");
        }
    }
}

/// User `u{j}`: mail and Slack addresses, Tokyo, English.
pub fn user(j: usize) -> UserInput {
    UserInput {
        name: format!("User {j}"),
        email: Some(format!("u{j}@example.com")),
        slack_user_id: Some(format!("U{j:04}")),
        webhook_url: None,
        time_zone: "Asia/Tokyo".into(),
        locale: "en".into(),
        channels: Default::default(),
    }
}

/// A meeting starting at `starts_at`, reminded `minutes_before` by `channels` to `participants`.
pub fn meeting(
    starts_at: Instant,
    minutes_before: u32,
    participants: &[&str],
    channels: &[Channel],
) -> ScheduleInput {
    ScheduleInput {
        title: "Design review".into(),
        body: "Room 3".into(),
        starts_at: starts_at.to_rfc3339(),
        time_zone: "Asia/Tokyo".into(),
        participants: participants.iter().map(|p| p.to_string()).collect(),
        reminders: vec![RuleInput {
            minutes_before: i64::from(minutes_before),
            channels: channels.iter().map(|c| c.to_string()).collect(),
        }],
        recurrence: None,
        dst: None,
    }
}
