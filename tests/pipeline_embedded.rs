//! End to end on the embedded backend: registrar → index → scanner → queue → daemon → channels.

use crate::common;

use std::time::Duration;

use chrono::{Duration as ChronoDuration, Utc};
use common::pipeline::{due_in, meeting, Harness};
use toki_devtools::scenario::sink_key;
use toki_model::index::reminders_for;
use toki_model::{DeliveryStatus, IndexStatus};
use toki_ports::message;
use toki_ports::{OutgoingMessage, TenantStores};

/// Each delivery made for the instant `due` and not before it (within the
/// 5 ms the clocks' rounding allows). How late it went is printed, not
/// asserted: the paused-clock tests of toki-core show the instant to the
/// millisecond, and the bench measures it on real parts.
fn assert_at_its_instant(outcomes: &[toki_model::DeliveryOutcome], due: chrono::DateTime<Utc>) {
    for o in outcomes {
        assert_eq!(o.due_at.0, due, "delivery {} for another instant", o.key);
        let late = (o.at - o.due_at.0).num_milliseconds();
        assert!(late >= -5, "delivery {} went {} ms early", o.key, -late);
        eprintln!("delivery {}: {late} ms after its instant", o.key);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_scan_deliver() {
    // A 5 s scan window: a reminder due in 8 s is left to the scanner, not enqueued directly.
    let h = Harness::start(|c| c.pipeline.window_s = 5).await;
    let t = h.tenant("acme", true).await;
    let due = due_in(8);
    let r = h
        .toki
        .registrar()
        .put_schedule(&t, &common::pipeline::sid("review"), &meeting(due))
        .await
        .unwrap();
    assert_eq!(
        r.enqueued_directly, 0,
        "outside the window the registrar must leave it to the scanner"
    );
    assert!(r.mirrored);
    let delivered = h.wait_delivered(&t, 4, Duration::from_secs(20)).await;
    assert_eq!(delivered.len(), 4, "2 recipients × mail and Slack");
    assert_at_its_instant(&delivered, due);
    let sinks = h.sinks();
    for d in &delivered {
        assert_eq!(
            sinks.get(&sink_key(&t, &d.key)),
            Some(&1),
            "{} not in its outbox exactly once",
            d.key
        );
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_after_enqueue_delivers_only_the_new_time() {
    let h = Harness::start(|_| {}).await;
    let t = h.tenant("acme", true).await;
    let first = due_in(4);
    let r1 = h
        .toki
        .registrar()
        .put_schedule(&t, &common::pipeline::sid("review"), &meeting(first))
        .await
        .unwrap();
    assert_eq!(r1.enqueued_directly, 1);
    let moved = first + ChronoDuration::seconds(3);
    let r2 = h
        .toki
        .registrar()
        .put_schedule(&t, &common::pipeline::sid("review"), &meeting(moved))
        .await
        .unwrap();
    assert_eq!(r2.schedule.version, 2);
    h.daemon
        .stats
        .wait_for(Duration::from_secs(20), |s| {
            s.delivered >= 4 && s.stale >= 4
        })
        .await;
    let delivered = h.delivered(&t).await;
    let all = h.outcomes(&t).await;
    let delivered_now = h.delivered(&t).await;
    assert_eq!(delivered_now.len(), 4, "{all:?}");
    assert!(
        delivered
            .iter()
            .all(|d| d.due_at.0 == moved && d.version == 2),
        "{delivered:?}"
    );
    assert_at_its_instant(&delivered_now, moved);
    let stale: Vec<_> = all
        .iter()
        .filter(|o| o.status == DeliveryStatus::Stale)
        .collect();
    assert_eq!(
        stale.len(),
        4,
        "the first version's message is dropped as stale"
    );
    assert!(stale.iter().all(|o| o.version == 1 && o.due_at.0 == first));
    assert_eq!(h.sinks().values().sum::<u64>(), 4);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_after_enqueue_delivers_nothing() {
    let h = Harness::start(|_| {}).await;
    let t = h.tenant("acme", true).await;
    let due = due_in(3);
    let r = h
        .toki
        .registrar()
        .put_schedule(&t, &common::pipeline::sid("review"), &meeting(due))
        .await
        .unwrap();
    assert_eq!(r.enqueued_directly, 1);
    h.toki
        .registrar()
        .delete_schedule(&t, &common::pipeline::sid("review"))
        .await
        .unwrap();
    let s = h
        .daemon
        .stats
        .wait_for(Duration::from_secs(20), |s| {
            s.stale_messages >= 1 && s.acked >= 1
        })
        .await;
    assert_eq!((s.delivered, s.stale_messages, s.acked), (0, 1, 1));
    assert!(h.delivered(&t).await.is_empty());
    assert!(
        h.sinks().is_empty(),
        "something reached an outbox: {:?}",
        h.sinks()
    );
    // A deleted schedule names nobody any more: no delivery rows at all.
    assert!(h.outcomes(&t).await.is_empty());
    assert_eq!(
        h.toki.queue.depth().await.unwrap().messages,
        0,
        "the stale message was not acknowledged"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_inside_the_scanned_window_is_delivered_at_its_instant() {
    // Due in 10 s with a 2 s lead: enqueued directly with an 8 s delay. (The
    // same at 15 minutes runs on the paused clock in toki-core's tests.)
    let h = Harness::start(|c| c.pipeline.lead_ms = 2000).await;
    let t = h.tenant("acme", true).await;
    let due = due_in(10);
    let r = h
        .toki
        .registrar()
        .put_schedule(&t, &common::pipeline::sid("review"), &meeting(due))
        .await
        .unwrap();
    assert_eq!(
        r.enqueued_directly, 1,
        "inside the covered window it goes straight to the queue"
    );
    let delivered = h.wait_delivered(&t, 4, Duration::from_secs(30)).await;
    assert_eq!(delivered.len(), 4);
    assert_at_its_instant(&delivered, due);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_received_twice_delivers_once() {
    let h = Harness::start(|_| {}).await;
    let t = h.tenant("acme", true).await;
    let due = due_in(4);
    let r = h
        .toki
        .registrar()
        .put_schedule(&t, &common::pipeline::sid("review"), &meeting(due))
        .await
        .unwrap();
    // The queue is at-least-once: two more copies of the same message arrive too.
    let reminder = reminders_for(&t, &r.schedule, Utc::now(), far_future())
        .unwrap()
        .remove(0);
    let copy = |id: &str| OutgoingMessage {
        id: id.into(),
        body: reminder.key.to_string(),
        attributes: message::encode(&reminder),
        delay: toki_model::time::delay_for(reminder.due_at, Utc::now(), Duration::from_secs(1)),
        group: None,
    };
    h.toki
        .queue
        .send_batch(&[copy("a"), copy("b")])
        .await
        .unwrap();
    // All three copies settle: one sends, the others find the deliveries
    // taken (or held, and come back after a backoff until they are final).
    h.daemon
        .stats
        .wait_for(Duration::from_secs(30), |s| {
            s.delivered >= 4 && s.acked >= 3
        })
        .await;
    let sinks = h.sinks();
    assert_eq!(sinks.len(), 4);
    assert!(
        sinks.values().all(|&n| n == 1),
        "a delivery went out twice: {sinks:?}"
    );
    assert_eq!(h.delivered(&t).await.len(), 4);
    assert!(h.daemon.stats.snapshot().duplicates_skipped >= 8);
    assert_eq!(
        h.toki.queue.depth().await.unwrap().messages,
        0,
        "duplicates must be acknowledged"
    );
    assert_eq!(
        h.sinks().values().sum::<u64>(),
        4,
        "nothing went out twice meanwhile"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_contract_is_off_gets_nothing() {
    let h = Harness::start(|_| {}).await;
    let off = h.tenant("offco", false).await;
    let due = due_in(3);
    let r = h
        .toki
        .registrar()
        .put_schedule(&off, &common::pipeline::sid("review"), &meeting(due))
        .await
        .unwrap();
    assert_eq!(r.enqueued_directly, 0);
    let summary = h.toki.scanner().scan_once().await.unwrap();
    assert!(summary.skipped_by_contract >= 1, "{summary:?}");
    assert_eq!(summary.enqueued, 0);
    // Nothing was ever enqueued, so nothing can be delivered.
    assert_eq!(h.toki.queue.depth().await.unwrap().messages, 0);
    assert_eq!(h.daemon.stats.snapshot().received, 0);
    assert!(h.outcomes(&off).await.is_empty());
    assert!(h.sinks().is_empty());
    let p = toki_model::index::Partition::of(
        &reminders_for(
            &off,
            &r.schedule,
            Utc::now() - ChronoDuration::hours(1),
            far_future(),
        )
        .unwrap()[0],
        h.toki.config.pipeline.shards,
    );
    let rows = h
        .toki
        .index
        .query_partition(&p, due - ChronoDuration::minutes(1), due)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, IndexStatus::Pending, "held back, not lost");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_message_is_dead_lettered_at_once_with_its_reason() {
    let h = Harness::start(|_| {}).await;
    let mut attributes = toki_ports::message::Attributes::new();
    attributes.insert("tenant".into(), "acme".into());
    attributes.insert("due".into(), "not-a-number".into());
    h.toki
        .queue
        .send_batch(&[OutgoingMessage {
            id: "0".into(),
            body: "garbage".into(),
            attributes,
            delay: Duration::ZERO,
            group: None,
        }])
        .await
        .unwrap();
    // Retrying cannot make it decode: the daemon dead-letters it on first sight.
    let s = h
        .daemon
        .stats
        .wait_for(Duration::from_secs(20), |s| s.dead_lettered >= 1)
        .await;
    assert_eq!((s.dead_lettered, s.retried), (1, 0));
    let queue = h.toki.queue.clone();
    h.stop().await;
    let depth = queue.depth().await.unwrap();
    assert_eq!(
        (depth.messages, depth.dead_letters),
        (0, 1),
        "never deleted, dead-lettered"
    );
    let letters = queue
        .dead_letters(10, Duration::from_secs(30))
        .await
        .unwrap();
    let why = &letters[0].attributes[toki_ports::DEAD_LETTER_REASON];
    assert!(why.starts_with("undecodable message: "), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_mirror_is_repaired() {
    let h = Harness::start(|_| {}).await;
    let t = h.tenant("acme", true).await;
    // Write the tenant database only, as if the process died before mirroring.
    let store = h.toki.stores.open(&t).await.unwrap();
    let schedule = meeting(due_in(4))
        .validate(&common::pipeline::sid("review"), Utc::now())
        .unwrap();
    store.put_schedule(&schedule, Utc::now()).await.unwrap();
    assert_eq!(store.unmirrored(Utc::now()).await.unwrap().len(), 1);
    assert_eq!(h.toki.registrar().repair(&t).await.unwrap(), 1);
    assert!(store.unmirrored(Utc::now()).await.unwrap().is_empty());
    let delivered = h.wait_delivered(&t, 4, Duration::from_secs(15)).await;
    assert_eq!(delivered.len(), 4);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_for_one_tenant_never_opens_another_tenants_database() {
    // Registrar side: two tenants, a meeting for one of them.
    let h = Harness::start(|_| {}).await;
    let a = h.tenant("alpha", true).await;
    let _b = h.tenant("beta", true).await;
    let dir = h.stop().await;
    // A separate daemon process-equivalent with its own pools.
    let mut config = toki_app::Config {
        data_dir: dir,
        ..toki_app::Config::default()
    };
    config.pipeline.lead_ms = 1000;
    config.validate().unwrap();
    let daemon_side = toki_app::Toki::open(config).await.unwrap();
    let registrar_side = toki_app::Toki::open(daemon_side.config.clone())
        .await
        .unwrap();
    registrar_side
        .registrar()
        .put_schedule(&a, &common::pipeline::sid("review"), &meeting(due_in(3)))
        .await
        .unwrap();
    let daemon = daemon_side.daemon().await.unwrap();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(daemon.clone().run(shutdown));
    daemon
        .stats
        .wait_for(Duration::from_secs(15), |s| s.delivered >= 4)
        .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    assert_eq!(daemon.stats.snapshot().delivered, 4);
    assert_eq!(
        daemon_side.stores.opened().await,
        vec![a],
        "the daemon opened a database it had no delivery for"
    );
}

/// A process keeps at most `database.max_open_tenants` tenant databases
/// open: opening one more lets the least recently used go, and an open
/// store used again is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_tenant_stores_are_bounded_least_recently_used_first() {
    use toki_ports::TenantStores;
    let h = Harness::start(|_| {}).await;
    let ids = [
        h.tenant("alpha", true).await,
        h.tenant("beta", true).await,
        h.tenant("gamma", true).await,
    ];
    let dir = h.stop().await;
    let mut config = toki_app::Config {
        data_dir: dir,
        ..toki_app::Config::default()
    };
    config.database.max_open_tenants = 2;
    config.validate().unwrap();
    let toki = toki_app::Toki::open(config).await.unwrap();
    let [a, b, c] = &ids;
    toki.stores.open(a).await.unwrap();
    toki.stores.open(b).await.unwrap();
    toki.stores.open(a).await.unwrap(); // a used again: b is now the oldest
    toki.stores.open(c).await.unwrap();
    assert_eq!(toki.stores.opened().await, vec![a.clone(), c.clone()]);
    // A store let go opens again when asked for, and reads what it holds.
    let again = toki.stores.open(b).await.unwrap();
    let u0 = again.get_user(&"u0".parse().unwrap()).await.unwrap();
    assert!(u0.is_some(), "its users are there");
    assert_eq!(toki.stores.opened().await.len(), 2);
}

/// Slack refuses every connection: the reminder is retried, then dead-lettered,
/// never deleted. `redrive` lists it by tenant, channel and the failure the
/// delivery row recorded, leaves it on a dry run, and moves it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_with_their_reason_and_moved_back() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let h = Harness::start(|c| {
        c.daemon.max_failures = 2;
        c.daemon.retry_base_ms = 100;
        // Keep the circuit shut: this test is about the failure budget.
        c.daemon.breaker_threshold = 100;
        c.slack.token = Some("xoxb-test".into());
        c.slack.api_url = format!("http://{closed}/api");
    })
    .await;
    let t = h.tenant("acme", true).await;
    let mut input = meeting(due_in(2));
    input.reminders[0].channels = vec!["slack".into()];
    h.toki
        .registrar()
        .put_schedule(&t, &common::pipeline::sid("review"), &input)
        .await
        .unwrap();
    // A WARN per failed attempt, then out of its budget (2): dead-lettered.
    let s = h
        .daemon
        .stats
        .wait_for(Duration::from_secs(30), |s| s.dead_lettered >= 1)
        .await;
    assert_eq!((s.retried, s.dead_lettered), (1, 1), "{s:?}");
    let toki = h.toki.clone();
    h.stop().await;
    let opts = |dry_run| toki_app::redrive::RedriveOptions {
        dry_run,
        tenant: None,
        max: 100,
    };
    let dry = toki_app::redrive::redrive(&toki, &opts(true))
        .await
        .unwrap();
    assert_eq!((dry.listed, dry.moved), (1, 0));
    assert_eq!(dry.groups.len(), 1);
    let g = &dry.groups[0];
    assert_eq!(
        (g.tenant.as_str(), g.channels.as_str(), g.messages),
        ("acme", "slack", 1)
    );
    assert!(
        g.reason
            .starts_with("2 failed attempts, the last on slack: slack:"),
        "the daemon's verdict: {}",
        g.reason
    );
    assert_eq!(
        toki.queue.depth().await.unwrap().dead_letters,
        1,
        "a dry run moves nothing"
    );
    let moved = toki_app::redrive::redrive(&toki, &opts(false))
        .await
        .unwrap();
    assert_eq!(moved.moved, 1);
    let depth = toki.queue.depth().await.unwrap();
    assert_eq!(
        (depth.messages, depth.dead_letters),
        (1, 0),
        "back in the queue"
    );
    assert!(toki_app::redrive::render(&moved).contains("moved 1 of 1"));
}

fn far_future() -> toki_model::Instant {
    Utc::now() + ChronoDuration::days(365)
}

/// Debounce on the embedded parts: rows in SQLite, checks on the SQLite delay queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debounced_key_acts_on_both_edges_across_a_daemon_restart() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let control = toki_sql::ControlDb::open(&dir.path().join("control.sqlite"))
        .await
        .unwrap();
    let queue = Arc::new(toki_sql::SqliteDelayQueue::new(
        control.pool.clone(),
        common::conformance::unique("q"),
        5,
        Arc::new(toki_ports::SystemClock),
    ));
    let store = Arc::new(toki_sql::SqliteDebounceStore::new(control.pool.clone()));
    common::debounce::both_edges_across_a_daemon_restart(queue, store).await;
}

/// Two `toki serve` processes on one data folder (SQLite shared between
/// them) split a burst of edits of one schedule: one leading and one
/// trailing change notice, never zero, never two of either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_editing_one_schedule_notify_once_per_edge() {
    let dir = tempfile::tempdir().unwrap();
    let config = toki_app::Config {
        data_dir: dir.path().to_path_buf(),
        ..toki_app::Config::default()
    };
    common::debounce::two_processes_one_burst(config, Vec::new()).await;
}

/// On the embedded backend: a tenant whose id predates the rule
/// (`acme_corp`) still loads; `acme-corp` (same database name) is refused
/// naming it; a key created, then revoked, then one expired (the injected
/// clock moved, no sleep) no longer authenticates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colliding_ids_are_refused_and_keys_are_revoked_and_expire() {
    use std::sync::{Arc, Mutex};
    use toki_model::api_key::authenticate;
    use toki_ports::Clock;
    /// A clock the test moves.
    struct Manual(Mutex<toki_model::Instant>);
    impl Clock for Manual {
        fn now(&self) -> toki_model::Instant {
            *self.0.lock().unwrap()
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut config = toki_app::Config {
        data_dir: dir.path().to_owned(),
        ..toki_app::Config::default()
    };
    config.validate().unwrap();
    let start = "2026-11-23T08:00:00Z".parse().unwrap();
    let clock = Arc::new(Manual(Mutex::new(start)));
    let toki = toki_app::Toki::open_with_clock(config, clock.clone())
        .await
        .unwrap();
    let (mut old, _) = toki
        .create_tenant(&"acme".parse().unwrap(), true)
        .await
        .unwrap();
    old.id = "acme_corp".parse().unwrap(); // as written before the rule
    toki.directory.put(&old).await.unwrap();
    assert!(
        toki.tenant_record(&old.id).await.is_ok(),
        "old ids still load"
    );
    let err = toki
        .create_tenant(&"acme-corp".parse().unwrap(), true)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("existing tenant acme_corp"),
        "{err:#}"
    );
    let err = toki
        .create_tenant(&"acme_corp".parse().unwrap(), true)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains('_'),
        "the rule for new ids: {err:#}"
    );
    let id = "globex".parse().unwrap();
    let (_, first) = toki.create_tenant(&id, true).await.unwrap();
    let expiry = clock.now() + ChronoDuration::hours(1);
    let ci = toki
        .create_key(&id, "ci".parse().unwrap(), Some(expiry))
        .await
        .unwrap();
    toki.revoke_key(&id, &"default".parse().unwrap())
        .await
        .unwrap();
    let keys = toki.tenant_record(&id).await.unwrap().api_keys;
    assert!(
        authenticate(&keys, &first, clock.now()).is_none(),
        "revoked"
    );
    assert!(authenticate(&keys, &ci, clock.now()).is_some());
    *clock.0.lock().unwrap() = expiry;
    assert!(authenticate(&keys, &ci, clock.now()).is_none(), "expired");
}
