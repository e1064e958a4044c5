//! Delivery events end to end on the embedded backend: a local receiver
//! verifies every event's signature; a burst gives a `delivery.delivered`
//! per delivery, a channel outage `delivery.failed` then
//! `delivery.delivered`, and a receiver that was down gets every event;
//! on the AWS backend (Postgres, SQS and DynamoDB on the emulator) two
//! daemons' dispatchers send each event once between them.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use chrono::Duration as ChronoDuration;
use common::faults::{at, fast, outage, register_burst, tenants, wait_all, Sinks};
use common::pipeline::Harness;
use toki_core::events::{EventEndpoints, Put};
use toki_model::egress::EndpointUrl;
use toki_model::event::{EndpointSpec, EventKinds, EventOrdering};
use toki_model::webhook_signature::{verify, WebhookSecret};
use toki_model::Channel;
use toki_ports::TenantStores;
use tokio::sync::{watch, Notify};

/// An endpoint on 127.0.0.1: answers 503 while down, checks each request's
/// signature with the secret it is given, and keeps what it accepted.
#[derive(Default)]
struct Receiver {
    secret: Mutex<Option<WebhookSecret>>,
    down: AtomicBool,
    refused_while_down: AtomicU64,
    bad_signatures: AtomicU64,
    /// webhook-id → (type, data.delivery), in order of arrival.
    got: Mutex<Vec<(String, String, Option<String>)>>,
    arrived: Notify,
}

async fn receive(State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    if r.down.load(Ordering::SeqCst) {
        r.refused_while_down.fetch_add(1, Ordering::SeqCst);
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let (id, ts, sig) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    );
    let now_s = chrono::Utc::now().timestamp();
    let secret = r
        .secret
        .lock()
        .unwrap()
        .clone()
        .expect("a secret before any event");
    if verify(&secret, id, ts, sig, &body, now_s).is_err() {
        r.bad_signatures.fetch_add(1, Ordering::SeqCst);
        return StatusCode::UNAUTHORIZED;
    }
    let event: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let kind = event["type"].as_str().unwrap().to_owned();
    let delivery = event["data"]["delivery"].as_str().map(str::to_owned);
    r.got.lock().unwrap().push((id.to_owned(), kind, delivery));
    r.arrived.notify_waiters();
    StatusCode::NO_CONTENT
}

impl Receiver {
    async fn start() -> (Arc<Receiver>, String) {
        let r = Arc::new(Receiver::default());
        let app = axum::Router::new()
            .route("/events", axum::routing::post(receive))
            .with_state(r.clone());
        let url = format!("http://{}/events", toki_devtools::serve_locally(app).await);
        (r, url)
    }

    /// Waits (woken by each arrival) until `done` holds of what arrived, or `timeout`.
    async fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&[(String, String, Option<String>)]) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let arrived = self.arrived.notified();
            if done(&self.got.lock().unwrap()) {
                return;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_gets_a_signed_event_for_every_delivery_through_outages_of_slack_and_of_itself()
{
    let sinks = Sinks::start_down();
    sinks.smtp_up().await;
    let (receiver, url) = Receiver::start().await;
    let h = Harness::start(|c| {
        fast(c);
        sinks.configure(c);
        c.daemon.events_poll_ms = 100;
        c.webhook.allow_addresses = vec!["127.0.0.1/32".parse().unwrap()];
        c.webhook.allow_http = true;
        c.webhook.allow_ports = vec![toki_model::egress::PortRange::ALL];
    })
    .await;
    let (stop, shutdown) = watch::channel(false);
    let dispatcher = tokio::spawn(h.toki.event_dispatcher().unwrap().run(shutdown));

    let t = tenants(&h.toki, &["events"]).await;
    let endpoints = EventEndpoints::new(
        h.toki.stores.clone(),
        h.toki.marks.clone(),
        h.toki.clock.clone(),
    );
    let spec = EndpointSpec {
        url: EndpointUrl::parse("url", &url).unwrap(),
        kinds: EventKinds::all(),
        ordering: EventOrdering::InOrder,
    };
    let Put::Created { secret, .. } = endpoints
        .put(&t[0], &"hook".parse().unwrap(), spec)
        .await
        .unwrap()
    else {
        panic!("a new endpoint");
    };
    *receiver.secret.lock().unwrap() = Some(secret);

    // The receiver is down from before the burst until well after it.
    receiver.down.store(true, Ordering::SeqCst);
    let slack_down = outage(5);
    let burst = register_burst(
        &h.toki,
        &t,
        10,
        3,
        |_| vec![Channel::Chat, Channel::Slack, Channel::Mail],
        Duration::from_secs(3),
    )
    .await;
    at(burst.due + ChronoDuration::from_std(slack_down).unwrap()).await;
    sinks.slack_up().await;
    let m = wait_all(&h.toki, &sinks, &burst, Duration::from_secs(60)).await;
    assert_eq!(m.lost, 0, "{m:?}");
    at(burst.due + ChronoDuration::from_std(slack_down * 2).unwrap()).await;
    assert!(
        receiver.refused_while_down.load(Ordering::SeqCst) > 0,
        "the dispatcher tried while it was down"
    );
    receiver.down.store(false, Ordering::SeqCst);

    // Every delivery's `delivered` event arrives once the receiver is back.
    let store = h.toki.stores.open(&t[0]).await.unwrap();
    let total = burst.total() as usize;
    receiver
        .wait_for(Duration::from_secs(60), |got| {
            got.iter()
                .filter(|(_, k, _)| k == "delivery.delivered")
                .count()
                >= total
        })
        .await;
    let log = store.events_after(0, 10_000).await.unwrap();
    let got = receiver.got.lock().unwrap().clone();
    assert_eq!(
        receiver.bad_signatures.load(Ordering::SeqCst),
        0,
        "every signature verifies"
    );

    // None lost: every event of the log arrived, in order, once.
    let ids: Vec<&str> = got.iter().map(|(id, _, _)| id.as_str()).collect();
    let logged: Vec<String> = log.iter().map(|e| e.webhook_id()).collect();
    assert_eq!(ids, logged, "every logged event arrived, in order, once");

    // A `delivered` per delivery; Slack's outage shows as failed, then delivered.
    let mut by_delivery: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (_, kind, delivery) in &got {
        by_delivery
            .entry(delivery.clone().unwrap())
            .or_default()
            .push(kind);
    }
    let delivered = by_delivery
        .values()
        .filter(|k| k.last() == Some(&"delivery.delivered"))
        .count();
    assert_eq!(delivered, total, "{by_delivery:?}");
    let through_outage: Vec<_> = by_delivery
        .iter()
        .filter(|(_, kinds)| kinds.contains(&"delivery.failed"))
        .collect();
    assert!(
        !through_outage.is_empty(),
        "Slack's outage failed some sends: {by_delivery:?}"
    );
    for (key, kinds) in &through_outage {
        assert!(key.ends_with("#slack"), "{key}: {kinds:?}");
        assert_eq!(
            kinds.last(),
            Some(&"delivery.delivered"),
            "{key}: {kinds:?}"
        );
    }
    let per_kind: HashMap<&str, usize> = got.iter().fold(HashMap::new(), |mut n, (_, k, _)| {
        *n.entry(k.as_str()).or_default() += 1;
        n
    });
    eprintln!(
        "events received: {per_kind:?}; deliveries through the Slack outage: {}",
        through_outage.len()
    );

    let report = toki_app::report::collect(&h.toki).await.unwrap();
    let shown = &report.event_endpoints;
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(
        (shown[0].endpoint.as_str(), shown[0].status.as_str()),
        ("hook", "enabled")
    );
    assert!(toki_app::report::render(&report).contains("delivery events"));

    stop.send(true).unwrap();
    dispatcher.await.unwrap();
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto) and Postgres: scripts/test.sh runs it"]
async fn on_the_aws_backend_two_daemons_send_every_event_once_in_order() {
    let (receiver, url) = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::aws_support::backend_config("ev", dir.path());
    config.pipeline.lead_ms = 1000;
    config.daemon.workers = 2;
    config.daemon.events_poll_ms = 100;
    config.webhook.allow_addresses = vec!["127.0.0.1/32".parse().unwrap()];
    config.webhook.allow_http = true;
    config.webhook.allow_ports = vec![toki_model::egress::PortRange::ALL];
    config.validate().unwrap();
    let registrar_side = toki_app::Toki::open(config.clone()).await.unwrap();
    let tenant: toki_model::TenantId = "events".parse().unwrap();
    registrar_side.create_tenant(&tenant, true).await.unwrap();
    for j in 0..4 {
        let id = format!("u{j}").parse().unwrap();
        registrar_side
            .registrar()
            .put_user(&tenant, &id, &common::pipeline::user(j))
            .await
            .unwrap();
    }
    let endpoints = EventEndpoints::new(
        registrar_side.stores.clone(),
        registrar_side.marks.clone(),
        registrar_side.clock.clone(),
    );
    let spec = EndpointSpec {
        url: EndpointUrl::parse("url", &url).unwrap(),
        kinds: EventKinds::all(),
        ordering: EventOrdering::InOrder,
    };
    let Put::Created { secret, .. } = endpoints
        .put(&tenant, &"hook".parse().unwrap(), spec)
        .await
        .unwrap()
    else {
        panic!("a new endpoint");
    };
    *receiver.secret.lock().unwrap() = Some(secret);
    let mut meeting = common::pipeline::meeting(common::pipeline::due_in(4));
    meeting.participants = (0..4).map(|j| format!("u{j}")).collect();
    registrar_side
        .registrar()
        .put_schedule(&tenant, &common::pipeline::sid("review"), &meeting)
        .await
        .unwrap();
    let expected = meeting.participants.len() * meeting.reminders[0].channels.len();

    // Two daemon processes' worth: each with its daemon and its dispatcher.
    let (stop, shutdown) = watch::channel(false);
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let side = toki_app::Toki::open(config.clone()).await.unwrap();
        tasks.push(tokio::spawn(
            side.daemon().await.unwrap().run(shutdown.clone()),
        ));
        tasks.push(tokio::spawn(
            side.event_dispatcher().unwrap().run(shutdown.clone()),
        ));
    }
    receiver
        .wait_for(Duration::from_secs(60), |got| {
            got.iter()
                .filter(|(_, k, _)| k == "delivery.delivered")
                .count()
                >= expected
        })
        .await;
    stop.send(true).unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let store = registrar_side.stores.open(&tenant).await.unwrap();
    let logged: Vec<String> = store
        .events_after(0, 1000)
        .await
        .unwrap()
        .iter()
        .map(|e| e.webhook_id())
        .collect();
    let got = receiver.got.lock().unwrap().clone();
    let ids: Vec<&str> = got.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(receiver.bad_signatures.load(Ordering::SeqCst), 0);
    assert_eq!(
        logged.len(),
        expected,
        "one delivered event per delivery: {got:?}"
    );
    assert_eq!(
        ids, logged,
        "every event once, in order, across two dispatchers"
    );
}
