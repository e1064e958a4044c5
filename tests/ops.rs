//! What an operator looks at, as they would: `/metrics` scraped from
//! `toki serve`'s operator listener after a demo-sized run through the API,
//! `/healthz` and `/readyz`, none of the operator's surfaces on the tenant
//! API's port, and `/readyz` of a daemon on the AWS backend going unready
//! when its control store (the emulator, behind a proxy that can be cut)
//! stops answering, and ready again when it is back.

use crate::aws_support;
use crate::common;

use std::process::Command;
use std::time::Duration;

use chrono::{Duration as ChronoDuration, Utc};
use serde_json::{json, Value};

use common::process::{create_tenant, serve_operated, Process, TOKI};
use common::proxy::Proxy;

/// The value of the first sample line of `text` that starts with `series`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn get(http: &reqwest::Client, url: &str) -> (u16, String) {
    let r = http.get(url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Scrapes `url` until `done` holds for the text, or `within` passes.
async fn scrape_until(
    http: &reqwest::Client,
    url: &str,
    within: Duration,
    done: impl Fn(&str) -> bool,
) -> String {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let (status, text) = get(http, url).await;
        assert_eq!(status, 200, "{text}");
        if done(&text) || tokio::time::Instant::now() >= deadline {
            return text;
        }
        // A scrape interval, as Prometheus would poll; not a synchronisation.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

const DELIVERIES: usize = 3_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_after_a_demo_sized_run_count_every_delivery() {
    let data = tempfile::tempdir().unwrap();
    let key = create_tenant(data.path(), "ops-acme");
    let (_serve, base, operator) = serve_operated(data.path(), |_| {});
    let http = reqwest::Client::new();

    for at in [&base, &operator] {
        let (status, body) = get(&http, &format!("{at}/healthz")).await;
        assert_eq!((status, body.trim()), (200, "ok"), "{at}");
    }
    let (status, body) = get(&http, &format!("{operator}/readyz")).await;
    assert_eq!(status, 200, "{body}");
    let ready: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["ready"], true);
    let names: Vec<&str> = ready["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["control_store", "directory", "queue"]);

    // The demo's shape: 3,000 deliveries due at one instant (10 people in
    // each of 300 meetings, by in-app chat), registered through the API.
    let url = |p: &str| format!("{base}/v1/tenants/ops-acme/{p}");
    let people: Vec<String> = (0..10).map(|i| format!("u{i}")).collect();
    for u in &people {
        let r = http
            .put(url(&format!("users/{u}")))
            .bearer_auth(&key)
            .json(&json!({"name": u}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let starts = (Utc::now() + ChronoDuration::seconds(25)).to_rfc3339();
    let meetings: Vec<Value> = (0..DELIVERIES / people.len())
        .map(|m| {
            json!({"id": format!("m{m}"), "title": "Stand-up", "starts_at": starts,
                   "participants": people, "reminders": [{"minutes_before": 0, "channels": ["chat"]}]})
        })
        .collect();
    for chunk in meetings.chunks(100) {
        let r = http
            .post(url("schedules:batch"))
            .bearer_auth(&key)
            .json(&json!({ "schedules": chunk }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }

    let delivered = "toki_deliveries_total{channel=\"chat\",status=\"delivered\"}";
    let text = scrape_until(
        &http,
        &format!("{operator}/metrics"),
        Duration::from_secs(120),
        |t| sample(t, delivered) == Some(DELIVERIES as f64),
    )
    .await;
    assert_eq!(sample(&text, delivered), Some(DELIVERIES as f64), "{text}");
    let count = sample(
        &text,
        "toki_delivery_lateness_seconds_count{channel=\"chat\"}",
    );
    assert_eq!(
        count,
        Some(DELIVERIES as f64),
        "one lateness per delivery: {text}"
    );
    // Buckets fine enough to tell 10 ms from 100 ms from 1 s.
    for le in ["0.01", "0.1", "1.0"] {
        assert!(
            sample(
                &text,
                &format!("toki_delivery_lateness_seconds_bucket{{le=\"{le}\",channel=\"chat\"}}")
            )
            .is_some(),
            "no {le} bucket: {text}"
        );
    }
    // The rows agree: what `toki report --json` counts is what was scraped.
    let report = Command::new(TOKI)
        .args(["report", "--json", "--data-dir"])
        .arg(data.path())
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    let delivered_rows: u64 = report["counts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "delivered")
        .map(|r| r["count"].as_u64().unwrap())
        .sum();
    assert_eq!(delivered_rows, DELIVERIES as u64);

    // The rest of what an operator watches is there.
    let batch = "toki_registrar_requests_total{method=\"POST\",route=\"/v1/tenants/{tenant}/schedules:batch\",status=\"200\"}";
    assert_eq!(sample(&text, batch), Some(3.0), "{text}");
    assert!(
        sample(&text, "toki_scanner_runs_total{result=\"ok\"}").unwrap_or(0.0) >= 1.0,
        "{text}"
    );
    assert!(
        sample(&text, "toki_messages_received_total").unwrap() >= 300.0,
        "{text}"
    );
    for series in [
        "toki_queue_messages{state=\"visible\"}",
        "toki_queue_messages{state=\"in_flight\"}",
        "toki_queue_messages{state=\"delayed\"}",
        "toki_dead_letter_messages",
        "toki_messages_in_flight",
        "toki_message_retries_total{reason=\"failure\"}",
        "toki_repair_backlog",
    ] {
        assert!(sample(&text, series).is_some(), "no {series}: {text}");
    }
    assert_eq!(sample(&text, "toki_dead_letter_messages"), Some(0.0));

    // The picture of the same run, at /report on the operator's listener.
    let (status, page) = get(&http, &format!("{operator}/report")).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("<svg") && page.contains("data-figure="),
        "{}",
        &page[..page.len().min(500)]
    );
}

/// The tenant API's port serves the API and nothing of the operator's: a
/// stranger without a key reads no tenant's names, counts or due instants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_port_serves_no_operator_surface() {
    let data = tempfile::tempdir().unwrap();
    create_tenant(data.path(), "ops-acme");
    let (_serve, base, operator) = serve_operated(data.path(), |_| {});
    let http = reqwest::Client::new();
    for path in ["/report", "/metrics", "/readyz"] {
        let (status, body) = get(&http, &format!("{base}{path}")).await;
        assert_eq!(status, 404, "{path} on the API's port: {body}");
        assert!(!body.contains("ops-acme"), "{path}: {body}");
        let (status, _) = get(&http, &format!("{operator}{path}")).await;
        assert_eq!(status, 200, "{path} on the operator's listener");
    }
    for path in ["/healthz", "/openapi.json"] {
        let (status, _) = get(&http, &format!("{base}{path}")).await;
        assert_eq!(status, 200, "{path} on the API's port");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto) and Postgres: scripts/test.sh runs it"]
async fn readyz_goes_unready_while_the_control_store_is_unreachable() {
    let moto = aws_support::endpoint();
    let proxy = Proxy::start(moto.trim_start_matches("http://")).await;
    let suffix = common::conformance::unique("ops");
    let mut cmd = Command::new(TOKI);
    cmd.args([
        "daemon",
        "--workers",
        "1",
        "--metrics-listen",
        "127.0.0.1:0",
    ])
    .env("RUST_LOG", "info")
    .env("TOKI_BACKEND", "aws")
    .env("TOKI_AWS_CREATE_RESOURCES", "true")
    .env("AWS_REGION", aws_support::REGION)
    .env("AWS_ACCESS_KEY_ID", "test")
    .env("AWS_SECRET_ACCESS_KEY", "test")
    .env(
        "TOKI_AWS_ENDPOINT_URL",
        format!("http://{}", proxy.address()),
    )
    .env("AWS_ENDPOINT_URL", format!("http://{}", proxy.address()))
    .env_remove("AWS_ENDPOINT_URL_SQS")
    .env_remove("AWS_ENDPOINT_URL_DYNAMODB")
    .env("TOKI_INDEX_TABLE", format!("{suffix}-index"))
    .env("TOKI_DIRECTORY_TABLE", format!("{suffix}-tenants"))
    .env("TOKI_QUEUE_NAME", format!("{suffix}-q"))
    .env("TOKI_DLQ_NAME", format!("{suffix}-dlq"))
    .env(
        "TOKI_DATABASE_URL_TEMPLATE",
        common::services::postgres_url_for("toki_ops_{tenant}"),
    )
    .env(
        "TOKI_HEARTBEAT_FILE",
        std::env::temp_dir().join(format!("{suffix}.heartbeat")),
    );
    let (daemon, line) = Process::spawn(
        cmd,
        "metrics, healthz and readyz listening",
        Duration::from_secs(60),
    );
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("addr="))
        .unwrap_or_else(|| panic!("the address in {line:?}"))
        .to_owned();
    let readyz = format!("http://{addr}/readyz");
    let http = reqwest::Client::new();

    let (status, body) = get(&http, &readyz).await;
    assert_eq!(status, 200, "{body}");

    proxy.down();
    let (status, body) = get(&http, &readyz).await;
    assert_eq!(status, 503, "{body}");
    let r: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(r["ready"], false);
    let failed: Vec<&str> = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(failed.contains(&"control_store"), "{body}");
    assert!(
        r["checks"][0]["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "says why: {body}"
    );
    // Alive all the same: the process is up (a restart would not help).
    let (status, _) = get(&http, &format!("http://{addr}/healthz")).await;
    assert_eq!(status, 200);

    proxy.up();
    let (status, body) = get(&http, &readyz).await;
    assert_eq!(status, 200, "ready again once it answers: {body}");
    drop(daemon);
}
