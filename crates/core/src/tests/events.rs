//! Delivery events on the paused clock: every event reaches its endpoint,
//! signed, in order, through an outage; a failing endpoint holds up no other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::events::dispatch::{DispatchSettings, Dispatcher};
use crate::events::wake::WakingMarks;
use crate::events::{EventEndpoints, Put};
use crate::testing::TestKit;
use toki_model::domain::{
    Channel, DeliveryKey, DeliveryOutcome, DeliveryPurpose, DeliveryStatus, DueAt, EndpointId,
    Occurrence, TenantId,
};
use toki_model::event::{
    EndpointSpec, EndpointStatus, EndpointUrl, EventKind, EventKinds, EventOrdering,
};
use toki_model::webhook_signature::{verify, WebhookSecret};
use toki_ports::events::{EventPoster, PostError, SignedPost};
use toki_ports::{Clock, TenantStores, WorkKind, WorkMarks};

/// Endpoints by URL: down until an instant, and what each received.
#[derive(Default)]
struct Receiver {
    down_until: Mutex<HashMap<String, tokio::time::Instant>>,
    /// Addresses that take this long to answer each request.
    slow: Mutex<HashMap<String, Duration>>,
    got: Mutex<HashMap<String, Vec<SignedPost>>>,
}

impl Receiver {
    fn down_for(&self, url: &str, d: Duration) {
        let until = tokio::time::Instant::now() + d;
        self.down_until.lock().unwrap().insert(url.into(), until);
    }

    fn got(&self, url: &str) -> Vec<SignedPost> {
        self.got
            .lock()
            .unwrap()
            .get(url)
            .cloned()
            .unwrap_or_default()
    }
}

#[async_trait]
impl EventPoster for Receiver {
    async fn post(&self, url: &EndpointUrl, request: &SignedPost) -> Result<(), PostError> {
        let slow = self.slow.lock().unwrap().get(url.as_str()).copied();
        if let Some(answer_after) = slow {
            tokio::time::sleep(answer_after).await;
        }
        let down = self.down_until.lock().unwrap().get(url.as_str()).copied();
        if down.is_some_and(|until| tokio::time::Instant::now() < until) {
            return Err(PostError("HTTP 503".into()));
        }
        let mut got = self.got.lock().unwrap();
        got.entry(url.as_str().into())
            .or_default()
            .push(request.clone());
        Ok(())
    }
}

struct Setup {
    kit: TestKit,
    receiver: Arc<Receiver>,
    endpoints: EventEndpoints,
    shutdown: tokio::sync::watch::Sender<bool>,
    /// The marks this process writes through (woken or not).
    marks: Arc<dyn WorkMarks>,
}

/// How the test's dispatcher learns of the marks this process writes.
enum Learns {
    ByPoll,
    /// Woken at once, as in a daemon ([`WakingMarks`]).
    Woken,
}

async fn setup(tenants: &[&str]) -> Setup {
    setup_with(tenants, DispatchSettings::default()).await
}

async fn setup_with(tenants: &[&str], settings: DispatchSettings) -> Setup {
    setup_on(tenants, settings, Learns::ByPoll).await
}

async fn setup_on(tenants: &[&str], settings: DispatchSettings, learns: Learns) -> Setup {
    let kit = TestKit::new();
    for t in tenants {
        kit.tenant(t).await;
    }
    let receiver = Arc::new(Receiver::default());
    let marks: Arc<dyn WorkMarks> = kit.marks.clone();
    let (marks, wake) = match learns {
        Learns::ByPoll => (marks, Arc::default()),
        Learns::Woken => WakingMarks::wrap(marks),
    };
    let dispatcher = Dispatcher::waking(
        kit.stores.clone(),
        marks.clone(),
        receiver.clone(),
        kit.clock.clone(),
        "test".into(),
        settings,
        wake,
    );
    let (shutdown, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(dispatcher.run(stop));
    let endpoints = EventEndpoints::new(kit.stores.clone(), marks.clone(), kit.clock.clone());
    Setup {
        kit,
        receiver,
        endpoints,
        shutdown,
        marks,
    }
}

fn url(tenant: &str) -> String {
    format!("https://{tenant}.example/events")
}

async fn register(
    s: &Setup,
    tenant: &str,
    kinds: EventKinds,
    ordering: EventOrdering,
) -> WebhookSecret {
    register_at(s, tenant, "hook", &url(tenant), kinds, ordering).await
}

async fn register_at(
    s: &Setup,
    tenant: &str,
    id: &str,
    at: &str,
    kinds: EventKinds,
    ordering: EventOrdering,
) -> WebhookSecret {
    let spec = EndpointSpec {
        url: EndpointUrl::parse("url", at).unwrap(),
        kinds,
        ordering,
    };
    match s
        .endpoints
        .put(&tenant.parse().unwrap(), &id.parse().unwrap(), spec)
        .await
        .unwrap()
    {
        Put::Created { secret, .. } => secret,
        Put::Updated(_) => panic!("a new endpoint"),
    }
}

fn outcome(i: u32, status: DeliveryStatus, at: toki_model::Instant) -> DeliveryOutcome {
    let occurrence = Occurrence(at + chrono::Duration::minutes(5));
    DeliveryOutcome {
        key: DeliveryKey {
            schedule: format!("s{i}").parse().unwrap(),
            occurrence,
            purpose: DeliveryPurpose::Reminder { minutes_before: 5 },
            recipient: "u0".parse().unwrap(),
            channel: Channel::Mail,
        },
        version: 1,
        due_at: DueAt(at),
        status,
        at,
        detail: (status == DeliveryStatus::Failed).then(|| "smtp: 421".to_owned()),
    }
}

/// `n` delivered, then delivery n failing once and delivered.
async fn record(s: &Setup, tenant: &str, n: u32) {
    let store = s
        .kit
        .stores
        .open(&tenant.parse::<TenantId>().unwrap())
        .await
        .unwrap();
    let now = s.kit.clock.now();
    let delivered: Vec<_> = (0..n)
        .map(|i| outcome(i, DeliveryStatus::Delivered, now))
        .collect();
    store.record_outcomes(&delivered).await.unwrap();
    store
        .record_outcomes(&[outcome(n, DeliveryStatus::Failed, now)])
        .await
        .unwrap();
    store
        .record_outcomes(&[outcome(n, DeliveryStatus::Delivered, now)])
        .await
        .unwrap();
}

/// Marks `tenant`'s events due now, as an outcome's writer does, and
/// gives the dispatcher three seconds (three polls).
async fn mark_events_now(s: &Setup, tenant: &TenantId) {
    let now = s.kit.now();
    s.kit
        .marks
        .mark(WorkKind::Events, tenant, now)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
}

/// Each request's signature verifies; the bodies' types in order.
fn verified_types(got: &[SignedPost], secret: &WebhookSecret) -> Vec<String> {
    got.iter()
        .map(|p| {
            let ts = p.timestamp_s.to_string();
            verify(
                secret,
                &p.webhook_id,
                &ts,
                &p.signature,
                &p.body,
                p.timestamp_s,
            )
            .expect("signed");
            let body: serde_json::Value = serde_json::from_slice(&p.body).unwrap();
            assert_eq!(body["id"], p.webhook_id.as_str());
            body["type"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_receiver_down_for_two_minutes_then_gets_every_event_in_order_and_holds_up_no_other() {
    let s = setup(&["down", "up"]).await;
    let down = register(&s, "down", EventKinds::all(), EventOrdering::InOrder).await;
    let up = register(&s, "up", EventKinds::all(), EventOrdering::InOrder).await;
    s.receiver.down_for(&url("down"), Duration::from_secs(120));
    record(&s, "down", 100).await;
    record(&s, "up", 10).await;

    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        s.receiver.got(&url("up")).len(),
        12,
        "the other tenant's endpoint is not held up"
    );
    assert!(s.receiver.got(&url("down")).is_empty());

    tokio::time::sleep(Duration::from_secs(300)).await;
    let got = s.receiver.got(&url("down"));
    let types = verified_types(&got, &down);
    assert_eq!(types.len(), 102, "every event, none lost and none twice");
    assert!(types[..100].iter().all(|t| t == "delivery.delivered"));
    assert_eq!(types[100..], ["delivery.failed", "delivery.delivered"]);
    let ids: Vec<&str> = got.iter().map(|p| p.webhook_id.as_str()).collect();
    let mut sorted = ids.clone();
    sorted.sort_by_key(|id| id[4..].parse::<u64>().unwrap());
    assert_eq!(ids, sorted, "in order of occurrence");
    let failed: serde_json::Value = serde_json::from_slice(&got[100].body).unwrap();
    assert_eq!(failed["data"]["attempt"], 1);
    assert_eq!(failed["data"]["reason"], "smtp: 421");
    verified_types(&s.receiver.got(&url("up")), &up);

    let tenant: TenantId = "down".parse().unwrap();
    let e = s
        .endpoints
        .get(&tenant, &"hook".parse().unwrap())
        .await
        .unwrap();
    assert_eq!(e.progress.status, EndpointStatus::Enabled);
    assert_eq!(e.progress.failures, 0);
    let _ = s.shutdown.send(true);
}

#[tokio::test(start_paused = true)]
async fn an_endpoint_failing_for_long_is_disabled_with_a_reason_and_re_enabled_gets_everything() {
    let s = setup(&["t"]).await;
    let secret = register(&s, "t", EventKinds::all(), EventOrdering::Unordered).await;
    s.receiver
        .down_for(&url("t"), Duration::from_secs(3 * 3600));
    record(&s, "t", 20).await;
    tokio::time::sleep(Duration::from_secs(2 * 3600)).await;
    let tenant: TenantId = "t".parse().unwrap();
    let id: EndpointId = "hook".parse().unwrap();
    let e = s.endpoints.get(&tenant, &id).await.unwrap();
    let EndpointStatus::Disabled { reason } = e.progress.status else {
        panic!(
            "disabled after repeated failures, got {:?}",
            e.progress.status
        );
    };
    assert!(reason.contains("HTTP 503"), "{reason}");

    // Back up and re-enabled: what occurred meanwhile arrives.
    s.receiver.down_for(&url("t"), Duration::ZERO);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        s.receiver.got(&url("t")).is_empty(),
        "a disabled endpoint is not sent to"
    );
    s.endpoints.enable(&tenant, &id).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        verified_types(&s.receiver.got(&url("t")), &secret).len(),
        22
    );
    let _ = s.shutdown.send(true);
}

#[tokio::test(start_paused = true)]
async fn an_endpoint_gets_only_its_types_and_a_replay_sends_again_under_both_secrets() {
    let s = setup(&["t"]).await;
    let failed_only: EventKinds = [EventKind::Failed].into_iter().collect();
    let first = register(&s, "t", failed_only, EventOrdering::InOrder).await;
    record(&s, "t", 5).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        verified_types(&s.receiver.got(&url("t")), &first),
        ["delivery.failed"]
    );

    let tenant: TenantId = "t".parse().unwrap();
    let id: EndpointId = "hook".parse().unwrap();
    let (_, second) = s.endpoints.rotate_secret(&tenant, &id).await.unwrap();
    let since = s.kit.clock.now() - chrono::Duration::minutes(1);
    s.endpoints.replay(&tenant, &id, since).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let got = s.receiver.got(&url("t"));
    assert_eq!(got.len(), 2, "replayed once");
    assert_eq!(
        got[0].webhook_id, got[1].webhook_id,
        "a replay keeps the event's id"
    );
    verified_types(&got[1..], &first);
    verified_types(&got[1..], &second);
    let _ = s.shutdown.send(true);
}

/// A replay goes out at the tenant's replay rate, its endpoints together,
/// however often it is asked for; first sends and another tenant's replay
/// are not held back by it.
#[tokio::test(start_paused = true)]
async fn replays_are_paced_per_tenant() {
    let settings = DispatchSettings {
        replay_rate: 10.0,
        replay_burst: 10,
        ..DispatchSettings::default()
    };
    let s = setup_with(&["r", "other"], settings).await;
    let victim = "https://victim.example/events";
    for id in ["one", "two"] {
        register_at(
            &s,
            "r",
            id,
            victim,
            EventKinds::all(),
            EventOrdering::Unordered,
        )
        .await;
    }
    register(&s, "other", EventKinds::all(), EventOrdering::Unordered).await;
    record(&s, "r", 98).await;
    record(&s, "other", 98).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        s.receiver.got(victim).len(),
        200,
        "first sends are not paced"
    );

    // Both endpoints replay everything, and again a second later.
    let r: TenantId = "r".parse().unwrap();
    let since = s.kit.clock.now() - chrono::Duration::minutes(5);
    for _ in 0..2 {
        for id in ["one", "two"] {
            s.endpoints
                .replay(&r, &id.parse().unwrap(), since)
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let other: TenantId = "other".parse().unwrap();
    s.endpoints
        .replay(&other, &"hook".parse().unwrap(), since)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    // Ten seconds of replaying: the burst and ten a second at most.
    let replayed = s.receiver.got(victim).len() - 200;
    assert!(
        (60..=10 + 10 * 10).contains(&replayed),
        "{replayed} replayed to one address in 10 s at 10 a second"
    );
    // Eight seconds of the other tenant's: its own burst and rate.
    let theirs = s.receiver.got(&url("other")).len() - 100;
    assert!(
        (60..=10 + 10 * 8).contains(&theirs),
        "{theirs} of another tenant's replayed in 8 s"
    );
    // In the end every event is replayed, once per endpoint.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let got = s.receiver.got(victim);
    assert!(got.len() >= 400, "{}", got.len());
    let _ = s.shutdown.send(true);
}

/// A tenant's slow endpoint (a minute a request) holds up only itself: its
/// other endpoint gets each batch of events within seconds of its mark,
/// the second batch too, while the slow one is still sending the first.
#[tokio::test(start_paused = true)]
async fn a_slow_endpoint_holds_up_none_of_its_tenants_other_endpoints() {
    let s = setup(&["acme"]).await;
    let (slow, fast) = ("https://slow.example/events", "https://fast.example/events");
    s.receiver
        .slow
        .lock()
        .unwrap()
        .insert(slow.into(), Duration::from_secs(60));
    for (id, at) in [("slow", slow), ("fast", fast)] {
        register_at(
            &s,
            "acme",
            id,
            at,
            EventKinds::all(),
            EventOrdering::InOrder,
        )
        .await;
    }
    let acme: TenantId = "acme".parse().unwrap();
    record(&s, "acme", 3).await;
    mark_events_now(&s, &acme).await;
    assert_eq!(s.receiver.got(fast).len(), 5, "the first batch");
    assert!(s.receiver.got(slow).is_empty(), "still sending its first");

    let store = s.kit.stores.open(&acme).await.unwrap();
    let now = s.kit.now();
    store
        .record_outcomes(&[outcome(10, DeliveryStatus::Delivered, now)])
        .await
        .unwrap();
    mark_events_now(&s, &acme).await;
    assert_eq!(s.receiver.got(fast).len(), 6, "the second batch, at once");
    assert!(s.receiver.got(slow).is_empty());
    // The slow one gets everything in the end, once each.
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(s.receiver.got(slow).len(), 6);
    let _ = s.shutdown.send(true);
}

/// A process that looked at an endpoint and had nothing to send lets its
/// hold go: another process's dispatcher, taking the tenant's next mark,
/// sends at once (before, it waited out the first one's minute-long hold).
#[tokio::test(start_paused = true)]
async fn an_endpoint_looked_at_with_nothing_to_send_is_free_to_another_process() {
    let s = setup(&["acme"]).await;
    register(&s, "acme", EventKinds::all(), EventOrdering::InOrder).await;
    // The first process looks (the endpoint's creation marks the tenant),
    // finds nothing to send, and stops.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = s.shutdown.send(true);
    let other = Dispatcher::new(
        s.kit.stores.clone(),
        s.kit.marks.clone(),
        s.receiver.clone(),
        s.kit.clock.clone(),
        "other".into(),
        DispatchSettings::default(),
    );
    let (_stop_other, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(other.run(stop));
    record(&s, "acme", 2).await;
    let acme: TenantId = "acme".parse().unwrap();
    mark_events_now(&s, &acme).await;
    let store = s.kit.stores.open(&acme).await.unwrap();
    let logged = store.events_after(0, 100).await.unwrap().len();
    assert!(logged > 0);
    assert_eq!(
        s.receiver.got(&url("acme")).len(),
        logged,
        "sent by the other process at once"
    );
}

/// A tenant whose database is gone is reported once, however many polls
/// pass (before: a warning a second for each such tenant), and is news
/// again once it was read and fails anew.
#[tokio::test(start_paused = true)]
async fn a_tenant_whose_database_is_gone_is_reported_once() {
    let kit = TestKit::new();
    let gone = kit.tenant("gone").await;
    let fine = kit.tenant("fine").await;
    assert!(kit.stores.remove(&gone));
    for t in [&gone, &fine] {
        kit.marks
            .mark(WorkKind::Events, t, kit.now())
            .await
            .unwrap();
    }
    let dispatcher = Dispatcher::new(
        kit.stores.clone(),
        kit.marks.clone(),
        Arc::new(Receiver::default()),
        kit.clock.clone(),
        "test".into(),
        DispatchSettings::default(),
    );
    let (_shutdown, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(dispatcher.clone().run(stop));
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(dispatcher.failing.count(), 1, "the gone tenant only");
    assert_eq!(dispatcher.failing.reported(), 1, "once in 30 polls");
    // Back, read, then gone again: reported a second time.
    // (An unreadable tenant is looked at again five polls later.)
    kit.stores.add(&gone);
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(dispatcher.failing.count(), 0);
    // Read and through: its mark is gone; a new one brings it back.
    assert!(kit.marks.marked(WorkKind::Events).await.unwrap().is_empty());
    assert!(kit.stores.remove(&gone));
    kit.marks
        .mark(WorkKind::Events, &gone, kit.now())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(dispatcher.failing.reported(), 2);
}

/// One delivered outcome of `tenant`, recorded and marked as the daemon's
/// recorder does (the mark through the process's marks).
async fn record_here(s: &Setup, tenant: &TenantId, i: u32) {
    let store = s.kit.stores.open(tenant).await.unwrap();
    let outcome = outcome(i, DeliveryStatus::Delivered, s.kit.now());
    assert_eq!(store.record_outcomes(&[outcome]).await.unwrap(), 1);
    crate::work::Marker::new(s.marks.clone(), s.kit.clock.clone())
        .events(tenant)
        .await;
}

/// An outcome recorded in this process reaches its endpoint within the
/// wake's gather and a send, not at the next poll: the poll is a minute
/// here, so only the wake can explain it. (The poll alone put up to a
/// second, the default poll, between an outcome and its event.)
#[tokio::test(start_paused = true)]
async fn an_outcome_recorded_here_wakes_the_dispatcher_at_once() {
    let settings = DispatchSettings {
        poll: Duration::from_secs(60),
        ..DispatchSettings::default()
    };
    let s = setup_on(&["acme"], settings, Learns::Woken).await;
    let secret = register(&s, "acme", EventKinds::all(), EventOrdering::InOrder).await;
    // The endpoint's creation woke it too; that look found nothing to send.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let acme: TenantId = "acme".parse().unwrap();
    record_here(&s, &acme, 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        verified_types(&s.receiver.got(&url("acme")), &secret),
        ["delivery.delivered"],
        "sent within 100 ms of its outcome"
    );
    let _ = s.shutdown.send(true);
}

/// Events logged while their endpoint's task is sending (a 2 s answer) go
/// out right after its pass, not at the look's retry five polls later.
#[tokio::test(start_paused = true)]
async fn events_logged_while_their_endpoint_sends_follow_that_pass() {
    let s = setup_on(&["acme"], DispatchSettings::default(), Learns::Woken).await;
    s.receiver
        .slow
        .lock()
        .unwrap()
        .insert(url("acme"), Duration::from_secs(2));
    register(&s, "acme", EventKinds::all(), EventOrdering::InOrder).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let acme: TenantId = "acme".parse().unwrap();
    // Sent at once, answered 2 s later.
    record_here(&s, &acme, 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Logged after that pass read the log: its look finds the endpoint busy.
    record_here(&s, &acme, 2).await;
    tokio::time::sleep(Duration::from_millis(3900)).await;
    let got = s.receiver.got(&url("acme"));
    let ids: Vec<&str> = got.iter().map(|p| p.webhook_id.as_str()).collect();
    assert_eq!(ids, ["evt_1", "evt_2"], "the second right after the first");
    let _ = s.shutdown.send(true);
}
