//! One delivery identity, whatever the schedule version: a version-2 copy of a
//! reminder that meets the version-1 claim still being sent must not be
//! acknowledged; if the version-1 send then fails, the reminder is still sent.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use common::pipeline::{due_in, meeting};
use toki_app::{Config, Toki};
use toki_core::daemon::Daemon;
use toki_model::{Channel, DeliveryStatus, Instant};
use toki_ports::channel::{ChannelSender, Notification, SendError};
use toki_ports::TenantStores;
use tokio::sync::{watch, Notify};

/// Slack whose first send starts, waits for `release`, then fails; later sends succeed.
struct GatedSlack {
    started: Notify,
    release: Notify,
    sends: AtomicUsize,
    delivered: AtomicUsize,
}

#[async_trait]
impl ChannelSender for GatedSlack {
    fn channel(&self) -> Channel {
        Channel::Slack
    }

    async fn send(&self, batch: &[Notification]) -> Vec<Result<Instant, SendError>> {
        if self.sends.fetch_add(1, Ordering::SeqCst) == 0 {
            self.started.notify_one();
            self.release.notified().await;
            return batch
                .iter()
                .map(|_| Err(SendError::transient("connection reset")))
                .collect();
        }
        self.delivered.fetch_add(batch.len(), Ordering::SeqCst);
        vec![Ok(Utc::now()); batch.len()]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_copy_meeting_an_older_claim_in_flight_is_not_acknowledged() {
    let dir = tempfile::tempdir().unwrap().keep();
    let mut config = Config {
        data_dir: dir,
        ..Config::default()
    };
    config.pipeline.lead_ms = 1000;
    config.validate().unwrap();
    let toki = Toki::open(config).await.unwrap();
    let tenant = "acme".parse().unwrap();
    toki.create_tenant(&tenant, true).await.unwrap();
    toki.registrar()
        .put_user(&tenant, &"u0".parse().unwrap(), &common::pipeline::user(0))
        .await
        .unwrap();
    let slack = Arc::new(GatedSlack {
        started: Notify::new(),
        release: Notify::new(),
        sends: AtomicUsize::new(0),
        delivered: AtomicUsize::new(0),
    });
    let daemon = Arc::new(Daemon::new(
        toki.queue.clone(),
        toki.stores.clone(),
        vec![slack.clone() as Arc<dyn ChannelSender>],
        toki.clock.clone(),
        toki.marks.clone(),
        toki.config.daemon_settings(),
    ));
    let (stop, shutdown) = watch::channel(false);
    let task = tokio::spawn(daemon.clone().run(shutdown));

    let mut v1 = meeting(due_in(2));
    v1.participants = vec!["u0".into()];
    v1.reminders[0].channels = vec!["slack".into()];
    toki.registrar()
        .put_schedule(&tenant, &common::pipeline::sid("review"), &v1)
        .await
        .unwrap();
    // Version 1 is being sent (and will fail) ...
    tokio::time::timeout(Duration::from_secs(10), slack.started.notified())
        .await
        .expect("the version-1 send never started");
    // ... when the title changes: version 2, same instant, enqueued at once.
    let v2 = toki_model::input::ScheduleInput {
        title: "Design review (room changed)".into(),
        ..v1.clone()
    };
    let r2 = toki
        .registrar()
        .put_schedule(&tenant, &common::pipeline::sid("review"), &v2)
        .await
        .unwrap();
    assert_eq!(r2.schedule.version, 2);
    // Wait until the daemon has dealt with the version-2 copy (acknowledged or sent back).
    let s = daemon
        .stats
        .wait_for(Duration::from_secs(10), |s| s.acked + s.busy >= 1)
        .await;
    assert_eq!(
        (s.acked, s.busy),
        (0, 1),
        "the version-2 copy must come back, not be acknowledged"
    );
    slack.release.notify_one();

    // The version-1 failure must not be the end of the reminder.
    daemon
        .stats
        .wait_for(Duration::from_secs(40), |s| s.delivered >= 1)
        .await;
    stop.send(true).unwrap();
    let store = toki.stores.open(&tenant).await.unwrap();
    let delivered: Vec<_> = store
        .deliveries()
        .await
        .unwrap()
        .into_iter()
        .filter(|o| o.status == DeliveryStatus::Delivered)
        .collect();
    task.await.unwrap();
    assert_eq!(
        slack.delivered.load(Ordering::SeqCst),
        1,
        "the reminder was lost: {:?}",
        store.deliveries().await.unwrap()
    );
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].version, 2);
}
