//! The retention purge on paused time: the periodic pass runs, deletes per
//! each tenant's own settings and nothing younger, leaves pending rows, and
//! stops at its cap (the rest waits for the next pass).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Duration as ChronoDuration;

use crate::retention::{PurgeSettings, Purger};
use crate::testing::TestKit;
use toki_model::domain::{
    Channel, DeliveryKey, DeliveryOutcome, DeliveryPurpose, DeliveryStatus, DueAt, Instant,
    Occurrence, TenantId,
};
use toki_model::retention::RetentionKind;
use toki_ports::retention::ControlPurge;
use toki_ports::{ChatMessage, StoreResult, TenantDirectory, TenantStore, WorkMarks};

/// A control store that remembers which dead letters it was asked to purge.
#[derive(Default)]
struct RecordingControl {
    dead_letter_calls: Mutex<Vec<(Option<TenantId>, Instant)>>,
}

#[async_trait]
impl ControlPurge for RecordingControl {
    async fn purge_dead_letters(
        &self,
        tenant: Option<&TenantId>,
        before: Instant,
        _limit: u32,
    ) -> StoreResult<u64> {
        let mut calls = self.dead_letter_calls.lock().unwrap();
        calls.push((tenant.cloned(), before));
        Ok(0)
    }

    async fn purge_expired_index(&self, _now: Instant, _limit: u32) -> StoreResult<u64> {
        Ok(0)
    }
}

fn outcome(recipient: &str, status: DeliveryStatus, at: Instant) -> DeliveryOutcome {
    DeliveryOutcome {
        key: DeliveryKey {
            schedule: "s".parse().unwrap(),
            occurrence: Occurrence(at),
            purpose: DeliveryPurpose::Reminder { minutes_before: 5 },
            recipient: recipient.parse().unwrap(),
            channel: Channel::Mail,
        },
        version: 1,
        due_at: DueAt(at),
        status,
        at,
        detail: None,
    }
}

fn chat(recipient: &str, at: Instant) -> ChatMessage {
    ChatMessage {
        key: DeliveryKey {
            channel: Channel::Chat,
            ..outcome(recipient, DeliveryStatus::Delivered, at).key
        },
        version: 1,
        user: recipient.parse().unwrap(),
        text: "hi".into(),
        created_at: at,
    }
}

fn purger(kit: &TestKit, control: Arc<RecordingControl>, settings: PurgeSettings) -> Arc<Purger> {
    Arc::new(Purger {
        directory: kit.directory.clone(),
        stores: kit.stores.clone(),
        marks: kit.marks.clone(),
        control: Some(control),
        clock: kit.clock.clone(),
        settings,
        stats: Default::default(),
    })
}

/// `tenants` marked for the purge now, as the writes the tests make
/// straight into their stores would have marked them.
async fn mark_for_purge(kit: &TestKit, tenants: &[&TenantId]) {
    for t in tenants {
        kit.marks
            .mark(toki_ports::WorkKind::Retention, t, kit.now())
            .await
            .unwrap();
    }
}

async fn set_retention(kit: &TestKit, tenant: &TenantId, spec: &str) {
    let mut record = kit.directory.get(tenant).await.unwrap().unwrap();
    record.retention.edit(spec).unwrap();
    kit.directory.put(&record).await.unwrap();
}

async fn store(kit: &TestKit, tenant: &TenantId) -> Arc<dyn TenantStore> {
    kit.stores.get(tenant).unwrap()
}

/// Users with these ids (an outcome without a claim is written for a user
/// who exists only).
async fn users(kit: &TestKit, tenant: &TenantId, ids: &[&str]) {
    let s = store(kit, tenant).await;
    for id in ids {
        let user = crate::testing::user(0)
            .validate(&id.parse().unwrap())
            .unwrap();
        s.put_user(&user, kit.now()).await.unwrap();
    }
}

/// Recipients of the tenant's delivery rows, sorted.
async fn recipients(kit: &TestKit, tenant: &TenantId) -> Vec<String> {
    let mut r: Vec<String> = store(kit, tenant)
        .await
        .deliveries()
        .await
        .unwrap()
        .iter()
        .map(|d| d.key.recipient.to_string())
        .collect();
    r.sort();
    r
}

/// acme keeps deliveries and chat a day, beta the defaults (90 days): a day
/// and a pass later acme's finished rows and chat are gone, its throttled
/// row (pending a retry) stays, and beta keeps everything.
#[tokio::test(start_paused = true)]
async fn the_serve_pass_purges_by_each_tenants_settings() {
    let kit = TestKit::new();
    let acme = kit.tenant("acme").await;
    let beta = kit.tenant("beta").await;
    set_retention(&kit, &acme, "deliveries=1,chat=1,dead_letters=2").await;
    let t0 = kit.now();
    for t in [&acme, &beta] {
        users(&kit, t, &["done", "failed", "waiting"]).await;
        let s = store(&kit, t).await;
        s.record_outcomes(&[
            outcome("done", DeliveryStatus::Delivered, t0),
            outcome("failed", DeliveryStatus::Failed, t0),
            outcome("waiting", DeliveryStatus::Throttled, t0),
        ])
        .await
        .unwrap();
        s.insert_chat_messages(&[chat("u0", t0)]).await.unwrap();
    }
    let control = Arc::new(RecordingControl::default());
    let purger = purger(&kit, control.clone(), PurgeSettings::default());
    // Rows written straight into the stores mark nothing: as a write would.
    mark_for_purge(&kit, &[&acme, &beta]).await;
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(purger.clone().run(shutdown));

    // Passes at once and every 5 minutes for 23 hours: all still young.
    tokio::time::sleep(Duration::from_secs(23 * 3600)).await;
    assert_eq!(recipients(&kit, &acme).await, ["done", "failed", "waiting"]);
    assert_eq!(purger.stats.purged(RetentionKind::Deliveries), 0);

    // The pass at 24 h finds them exactly a day old (kept); the next, older.
    tokio::time::sleep(Duration::from_secs(3600 + 450)).await;
    assert_eq!(recipients(&kit, &acme).await, ["waiting"], "pending stays");
    assert!(store(&kit, &acme)
        .await
        .chat_messages(&"u0".parse().unwrap())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(recipients(&kit, &beta).await, ["done", "failed", "waiting"]);
    assert_eq!(
        store(&kit, &beta)
            .await
            .chat_messages(&"u0".parse().unwrap())
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(purger.stats.purged(RetentionKind::Deliveries), 2);
    assert_eq!(purger.stats.purged(RetentionKind::Chat), 1);
    assert!(
        purger
            .stats
            .passes
            .load(std::sync::atomic::Ordering::Relaxed)
            > 280
    );

    // The purge log says what the pass that found them did.
    let log = store(&kit, &acme).await.purge_log().await.unwrap();
    let deliveries = log
        .iter()
        .find(|r| r.kind == RetentionKind::Deliveries)
        .unwrap();
    assert_eq!(deliveries.total_purged, 2);
    assert_eq!(
        deliveries.cutoff,
        deliveries.last_pass_at - ChronoDuration::days(1)
    );

    // Dead letters: each tenant's own retention, then those of no tenant.
    let calls = control.dead_letter_calls.lock().unwrap().clone();
    let last_acme = calls.iter().rev().find(|(t, _)| t.as_ref() == Some(&acme));
    let last_beta = calls.iter().rev().find(|(t, _)| t.as_ref() == Some(&beta));
    let now = kit.now();
    let within = |cut: Instant, days: i64| {
        // Each tenant's last visit: beta's a day in, acme's a pass ago.
        let expected = now - ChronoDuration::days(days);
        (expected - cut).num_minutes().abs() <= 10
    };
    assert!(within(last_acme.unwrap().1, 2), "{last_acme:?}");
    assert!(within(last_beta.unwrap().1, 14), "{last_beta:?}");
    assert!(calls.iter().any(|(t, _)| t.is_none()));

    stop.send_replace(true);
    run.await.unwrap();
}

/// A pass stops at its cap, in batches within the batch size; the next
/// pass goes on.
#[tokio::test(start_paused = true)]
async fn a_pass_stops_at_its_cap_and_the_next_goes_on() {
    let kit = TestKit::new();
    let acme = kit.tenant("acme").await;
    let old = kit.now() - ChronoDuration::days(100);
    users(&kit, &acme, &["r0", "r1", "r2", "r3", "r4"]).await;
    let outcomes: Vec<_> = (0..5)
        .map(|i| outcome(&format!("r{i}"), DeliveryStatus::Delivered, old))
        .collect();
    store(&kit, &acme)
        .await
        .record_outcomes(&outcomes)
        .await
        .unwrap();
    let settings = PurgeSettings {
        batch: 2,
        per_pass: 3,
        ..PurgeSettings::default()
    };
    let purger = purger(&kit, Arc::default(), settings);
    mark_for_purge(&kit, &[&acme]).await;
    let first = purger.pass(None).await;
    assert_eq!(first.purged.get(&RetentionKind::Deliveries), Some(&3));
    assert_eq!(recipients(&kit, &acme).await.len(), 2);
    let second = purger.pass(None).await;
    assert_eq!(second.purged.get(&RetentionKind::Deliveries), Some(&2));
    assert!(recipients(&kit, &acme).await.is_empty());
}

/// A pass past its deadline purges nothing and defers every tenant.
#[tokio::test(start_paused = true)]
async fn a_pass_past_its_deadline_defers() {
    let kit = TestKit::new();
    let acme = kit.tenant("acme").await;
    let old = kit.now() - ChronoDuration::days(100);
    users(&kit, &acme, &["r"]).await;
    store(&kit, &acme)
        .await
        .record_outcomes(&[outcome("r", DeliveryStatus::Delivered, old)])
        .await
        .unwrap();
    let purger = purger(&kit, Arc::default(), PurgeSettings::default());
    mark_for_purge(&kit, &[&acme]).await;
    let pass = purger.pass(Some(tokio::time::Instant::now())).await;
    assert_eq!((pass.total(), pass.deferred_tenants), (0, 1));
    assert_eq!(recipients(&kit, &acme).await, ["r"]);
}

/// Events are kept the tenant's setting, but never past the deployment's cap.
#[tokio::test(start_paused = true)]
async fn the_events_cap_shortens_a_longer_setting() {
    let kit = TestKit::new();
    let settings = PurgeSettings {
        events_cap: Some(Duration::from_secs(48 * 3600)),
        ..PurgeSettings::default()
    };
    let purger = purger(&kit, Arc::default(), settings);
    let now = kit.now();
    let mut retention = toki_model::retention::RetentionSettings::default();
    let cut =
        |r: &toki_model::retention::RetentionSettings| purger.cutoff(r, RetentionKind::Events, now);
    assert_eq!(cut(&retention), now - ChronoDuration::days(2), "capped");
    retention.edit("events=1").unwrap();
    assert_eq!(
        cut(&retention),
        now - ChronoDuration::days(1),
        "shorter kept"
    );
    assert_eq!(
        purger.cutoff(&retention, RetentionKind::Chat, now),
        now - ChronoDuration::days(90),
        "the cap is the events' only"
    );
}

/// Audit entries and events are capped (issue 59): a pass deletes the
/// oldest beyond the tenant's caps, however young, and counts them in the
/// kind's purge; another tenant under the default caps keeps all of its own.
#[tokio::test(start_paused = true)]
async fn a_pass_trims_audit_entries_and_events_beyond_the_caps() {
    use toki_model::audit::{Actor, AuditAction, AuditEntry};
    use toki_model::event::{EndpointSpec, EndpointUrl, EventKinds, EventOrdering};
    use toki_model::quota::{Cap, QuotaOverrides};

    let kit = TestKit::new();
    let acme = kit.tenant("acme").await;
    let beta = kit.tenant("beta").await;
    let mut record = kit.directory.get(&acme).await.unwrap().unwrap();
    record.limits.quota = QuotaOverrides {
        max_events: Some(Cap(2)),
        max_audit_entries: Some(Cap(1)),
        ..Default::default()
    };
    kit.directory.put(&record).await.unwrap();
    let endpoints = crate::events::EventEndpoints::new(
        kit.stores.clone(),
        kit.marks.clone(),
        kit.clock.clone(),
    );
    let now = kit.now();
    for t in [&acme, &beta] {
        let spec = EndpointSpec {
            url: EndpointUrl::parse("url", "https://h.example/").unwrap(),
            kinds: EventKinds::all(),
            ordering: EventOrdering::InOrder,
        };
        endpoints
            .put(t, &"hook".parse().unwrap(), spec)
            .await
            .unwrap();
        let s = store(&kit, t).await;
        let outcomes: Vec<_> = (0..5)
            .map(|i| {
                outcome(
                    "u0",
                    DeliveryStatus::Delivered,
                    now + ChronoDuration::minutes(i),
                )
            })
            .collect();
        s.record_outcomes(&outcomes).await.unwrap();
        let actor = Actor::Key("default".parse().unwrap());
        let entries: Vec<_> = (0..3)
            .map(|i| {
                AuditEntry::new(
                    now,
                    actor.clone(),
                    AuditAction::SchedulePut,
                    Some(&format!("s{i}")),
                )
            })
            .collect();
        s.append_audit(&entries).await.unwrap();
    }
    let purger = purger(&kit, Arc::default(), PurgeSettings::default());
    mark_for_purge(&kit, &[&acme, &beta]).await;
    let pass = purger.pass(None).await;
    assert_eq!(pass.purged.get(&RetentionKind::Events), Some(&3));
    assert_eq!(pass.purged.get(&RetentionKind::Audit), Some(&2));
    let acme_store = store(&kit, &acme).await;
    let events = acme_store.events_after(0, 100).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [4, 5],
        "the newest"
    );
    let audit = acme_store.audit_after(0, 100).await.unwrap();
    assert_eq!(audit[0].entry.resource.as_deref(), Some("s2"));
    let beta_store = store(&kit, &beta).await;
    assert_eq!(beta_store.events_after(0, 100).await.unwrap().len(), 5);
    assert_eq!(beta_store.audit_after(0, 100).await.unwrap().len(), 3);
}
