//! Traces as a collector receives them: `toki serve` pointed at an OTLP/HTTP
//! endpoint (a local receiver that keeps what it is sent), a schedule
//! registered with a caller's `traceparent`, and its reminder followed from
//! the API request through the enqueue and the daemon to each channel send.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;
use chrono::{Duration as ChronoDuration, Utc};
use serde_json::{json, Value};
use tokio::sync::Notify;

use common::process::{create_tenant, serve};

/// What the receiver was sent: every span, flattened, with its service name.
#[derive(Clone, Default)]
struct Received {
    spans: Arc<Mutex<Vec<Value>>>,
    arrived: Arc<Notify>,
}

impl Received {
    fn named(&self, name: &str) -> Vec<Value> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s["name"] == name)
            .cloned()
            .collect()
    }

    /// Waits (on the receiver's signal) until `done` holds, or `within` passes.
    async fn until(&self, within: Duration, done: impl Fn(&Received) -> bool) {
        let deadline = tokio::time::Instant::now() + within;
        while !done(self) {
            let arrived = self.arrived.notified();
            if done(self) {
                return;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return;
            }
        }
    }
}

/// An OTLP/HTTP (JSON) trace receiver on 127.0.0.1; returns its base URL.
async fn receiver(received: Received) -> String {
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let received = received.clone();
            async move {
                let export: Value = serde_json::from_slice(&body).expect("OTLP JSON");
                let mut spans = received.spans.lock().unwrap();
                for rs in export["resourceSpans"].as_array().into_iter().flatten() {
                    let service = attribute(&rs["resource"], "service.name");
                    for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                        for s in ss["spans"].as_array().into_iter().flatten() {
                            let mut s = s.clone();
                            s["service"] = json!(service);
                            spans.push(s);
                        }
                    }
                }
                drop(spans);
                received.arrived.notify_waiters();
                axum::Json(json!({}))
            }
        }),
    );
    format!("http://{}", toki_devtools::serve_locally(app).await)
}

/// A string attribute of an OTLP span or resource.
fn attribute(item: &Value, key: &str) -> Option<String> {
    item["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| {
            let v = &a["value"];
            v["stringValue"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| v["intValue"].as_str().map(str::to_owned))
                .unwrap_or_else(|| v["intValue"].to_string())
        })
}

/// The spans of the trace an enqueue span roots: the daemon's, a child of
/// the enqueue across the queue, and one send per delivery beneath it, each
/// with its outcome. Returns the reminder key.
fn check_reminder_trace(
    received: &Received,
    enqueue: &Value,
    tenant: &str,
    recipients: usize,
) -> String {
    let reminder = attribute(enqueue, "toki.reminder").expect("the reminder key");
    assert!(
        enqueue["parentSpanId"].as_str().unwrap_or("").is_empty(),
        "a root: {enqueue}"
    );
    let trace = &enqueue["traceId"];
    let delivers: Vec<Value> = received
        .named("toki.deliver")
        .into_iter()
        .filter(|s| &s["traceId"] == trace)
        .collect();
    assert_eq!(
        delivers.len(),
        1,
        "one daemon span in {reminder}'s trace: {delivers:?}"
    );
    let deliver = &delivers[0];
    assert_eq!(deliver["parentSpanId"], enqueue["spanId"]);
    assert_eq!(attribute(deliver, "toki.reminder"), Some(reminder.clone()));

    let sends: Vec<Value> = received
        .named("toki.send")
        .into_iter()
        .filter(|s| &s["traceId"] == trace)
        .collect();
    let mut deliveries = Vec::new();
    for send in &sends {
        assert_eq!(send["parentSpanId"], deliver["spanId"]);
        assert_eq!(attribute(send, "toki.channel").as_deref(), Some("chat"));
        assert_eq!(attribute(send, "toki.outcome").as_deref(), Some("sent"));
        let delivery = attribute(send, "toki.delivery").expect("the delivery key");
        // A delivery key is the reminder's within its tenant, plus whom and how.
        assert!(
            format!("{tenant}#{delivery}").starts_with(&reminder),
            "{delivery} of {reminder}"
        );
        deliveries.push(delivery);
    }
    deliveries.sort();
    deliveries.dedup();
    assert_eq!(
        deliveries.len(),
        recipients,
        "one send per participant: {deliveries:?}"
    );
    reminder
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_is_one_trace_from_its_enqueue_to_each_send() {
    let received = Received::default();
    let endpoint = receiver(received.clone()).await;
    let data = tempfile::tempdir().unwrap();
    let tenant = "traces-acme";
    let key = create_tenant(data.path(), tenant);
    // The scanner looks 5 s ahead every second: a reminder due within 5 s of
    // its registration is enqueued by the API request, a later one by a scan.
    let config = data.path().join("toki.toml");
    std::fs::write(&config, "[pipeline]\nwindow_s = 5\nscan_interval_s = 1\n").unwrap();
    let (serve, base) = serve(data.path(), |cmd| {
        cmd.arg("--config")
            .arg(&config)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
            .env("OTEL_SERVICE_NAME", "toki-traces-test")
            // Export every 100 ms rather than every 5 s.
            .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    });
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{base}/v1/tenants/{tenant}/{p}");
    for u in ["ann", "bob"] {
        let r = http
            .put(url(&format!("users/{u}")))
            .bearer_auth(&key)
            .json(&json!({"name": u}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let schedule = |seconds: i64| {
        let starts = (Utc::now() + ChronoDuration::seconds(seconds)).to_rfc3339();
        json!({"title": "Stand-up", "starts_at": starts, "participants": ["ann", "bob"],
               "reminders": [{"minutes_before": 0, "channels": ["chat"]}]})
    };

    // The caller's own trace: the request is its child.
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let r = http
        .put(url("schedules/standup"))
        .bearer_auth(&key)
        .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
        .json(&schedule(3))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let r = http
        .put(url("schedules/review"))
        .bearer_auth(&key)
        .json(&schedule(12))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    received
        .until(Duration::from_secs(60), |r| {
            // A parent ends after its children: wait for the daemon's spans too.
            r.named("toki.send").len() >= 4 && r.named("toki.deliver").len() >= 2
        })
        .await;
    assert_eq!(
        received.named("toki.send").len(),
        4,
        "one send span per delivery; log:\n{}",
        serve.log()
    );

    // Named as OpenTelemetry's HTTP conventions say: method and route.
    let requests: Vec<Value> = received
        .named("PUT /v1/tenants/{tenant}/schedules/{id}")
        .into_iter()
        .filter(|s| s["traceId"] == caller_trace)
        .collect();
    assert_eq!(requests.len(), 1, "the first PUT, in the caller's trace");
    let request = &requests[0];
    assert_eq!(request["parentSpanId"], caller_span);
    assert_eq!(
        attribute(request, "http.route").as_deref(),
        Some("/v1/tenants/{tenant}/schedules/{id}")
    );
    assert_eq!(
        attribute(request, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(request["service"], "toki-traces-test");

    // Each reminder's enqueue roots its own trace and links to what enqueued
    // it: the request for the first, a scanner run for the second.
    let enqueues = received.named("toki.enqueue");
    assert_eq!(enqueues.len(), 2, "{enqueues:?}");
    let linked_to = |e: &Value, span: &Value| {
        e["links"]
            .as_array()
            .is_some_and(|ls| ls.iter().any(|l| l["spanId"] == span["spanId"]))
    };
    let direct: Vec<&Value> = enqueues.iter().filter(|e| linked_to(e, request)).collect();
    assert_eq!(
        direct.len(),
        1,
        "one enqueue linked to the request: {enqueues:?}"
    );
    let reminder = check_reminder_trace(&received, direct[0], tenant, 2);
    assert!(reminder.starts_with("traces-acme#standup#"), "{reminder}");

    let scans = received.named("toki.scan");
    let scanned: Vec<&Value> = enqueues
        .iter()
        .filter(|e| scans.iter().any(|s| linked_to(e, s)))
        .collect();
    assert_eq!(
        scanned.len(),
        1,
        "one enqueue linked to a scan: {enqueues:?}\n{scans:?}"
    );
    let reminder = check_reminder_trace(&received, scanned[0], tenant, 2);
    assert!(reminder.starts_with("traces-acme#review#"), "{reminder}");
    let scan = scans.iter().find(|s| linked_to(scanned[0], s)).unwrap();
    assert!(
        attribute(scan, "toki.enqueued").is_some_and(|n| n != "0"),
        "the scan says what it enqueued: {scan}"
    );
}
