//! A whole pipeline (registrar, scanner loop, daemon) on the embedded backend
//! in a temporary folder, for end-to-end tests.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Duration as ChronoDuration, SubsecRound, Utc};
use toki_app::{Config, Toki};
use toki_core::daemon::Daemon;
use toki_devtools::scenario::{count_outboxes, SinkCounts};
use toki_model::input::{RuleInput, ScheduleInput, UserInput};
use toki_model::{DeliveryOutcome, DeliveryStatus, TenantId};
use toki_ports::TenantStores;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct Harness {
    pub toki: Toki,
    pub daemon: Arc<Daemon>,
    pub dir: PathBuf,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Harness {
    /// Embedded pipeline in a fresh folder: scanner every second, 1 s lead.
    pub async fn start(tweak: impl FnOnce(&mut Config)) -> Harness {
        let dir = tempfile::tempdir().unwrap().keep();
        let mut config = Config {
            data_dir: dir.clone(),
            ..Config::default()
        };
        config.pipeline.scan_interval_s = 1;
        config.pipeline.lead_ms = 1000;
        config.daemon.workers = 2;
        // Unpaced unless a test sets limits (the sinks take everything at once).
        config.flow.limits.clear();
        tweak(&mut config);
        config.validate().unwrap();
        let toki = Toki::open(config).await.unwrap();
        let daemon = toki.daemon().await.unwrap();
        let (stop, shutdown) = watch::channel(false);
        let tasks = vec![
            tokio::spawn(daemon.clone().run(shutdown.clone())),
            tokio::spawn(toki.clone().run_scanner(shutdown)),
        ];
        Harness {
            toki,
            daemon,
            dir,
            stop,
            tasks,
        }
    }

    /// A tenant with users u0..u9 (mail + Slack addresses).
    pub async fn tenant(&self, id: &str, reminders_enabled: bool) -> TenantId {
        let id: TenantId = id.parse().unwrap();
        self.toki
            .create_tenant(&id, reminders_enabled)
            .await
            .unwrap();
        for j in 0..10 {
            self.toki
                .registrar()
                .put_user(&id, &format!("u{j}").parse().unwrap(), &user(j))
                .await
                .unwrap();
        }
        id
    }

    /// Stops the pipeline; every message then in the dead-letter queue must
    /// carry the daemon's reason (none moved there by the receive limit).
    pub async fn stop(self) -> PathBuf {
        self.stop.send(true).unwrap();
        for t in self.tasks {
            t.await.unwrap();
        }
        let letters = self
            .toki
            .queue
            .dead_letters(1_000, Duration::from_secs(1))
            .await
            .unwrap();
        let unexplained: Vec<_> = letters
            .iter()
            .filter(|l| !l.attributes.contains_key(toki_ports::DEAD_LETTER_REASON))
            .collect();
        assert!(
            unexplained.is_empty(),
            "dead letters without a reason: {unexplained:?}"
        );
        self.dir
    }

    pub async fn outcomes(&self, tenant: &TenantId) -> Vec<DeliveryOutcome> {
        self.toki
            .stores
            .open(tenant)
            .await
            .unwrap()
            .deliveries()
            .await
            .unwrap()
    }

    pub async fn delivered(&self, tenant: &TenantId) -> Vec<DeliveryOutcome> {
        self.outcomes(tenant)
            .await
            .into_iter()
            .filter(|o| o.status == DeliveryStatus::Delivered)
            .collect()
    }

    pub fn sinks(&self) -> SinkCounts {
        count_outboxes(&self.dir).unwrap()
    }

    /// Waits until the daemon has delivered `n` (counted as it records them,
    /// not polled), or `timeout`; returns `tenant`'s delivered rows.
    pub async fn wait_delivered(
        &self,
        tenant: &TenantId,
        n: usize,
        timeout: Duration,
    ) -> Vec<DeliveryOutcome> {
        self.daemon
            .stats
            .wait_for(timeout, |s| s.delivered >= n as u64 && s.acked >= 1)
            .await;
        self.delivered(tenant).await
    }
}

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

/// A whole second at least `secs` ahead.
pub fn due_in(secs: i64) -> DateTime<Utc> {
    (Utc::now() + ChronoDuration::seconds(secs)).trunc_subsecs(0) + ChronoDuration::seconds(1)
}

/// A meeting starting 5 minutes after `due`, reminded 5 minutes before, to u0 and u1 by mail and Slack.
pub fn meeting(due: DateTime<Utc>) -> ScheduleInput {
    ScheduleInput {
        title: "Design review".into(),
        body: "Room 3".into(),
        starts_at: (due + ChronoDuration::minutes(5)).to_rfc3339(),
        time_zone: "Asia/Tokyo".into(),
        participants: vec!["u0".into(), "u1".into()],
        reminders: vec![RuleInput {
            minutes_before: 5,
            channels: vec!["mail".into(), "slack".into()],
        }],
        recurrence: None,
        dst: None,
    }
}

/// A schedule id from a literal.
pub fn sid(s: &str) -> toki_model::ScheduleId {
    s.parse().unwrap()
}
