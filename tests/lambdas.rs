//! The three Lambdas (`lambdas/scanner`, `lambdas/registrar`,
//! `lambdas/repair`) driven by real event payloads (`tests/lambda_events/`):
//! an EventBridge "Scheduled Event" for the scanner and the repair pass, API
//! Gateway HTTP API (payload 2.0) requests for the registrar. They run on the aws backend against the emulator (DynamoDB, SQS;
//! see `aws_support`) and Postgres (tenant databases), with tables, queues and
//! databases unique to each test.
//!
//! Fixtures hold `{{TENANT}}`, `{{API_KEY}}` and `{{STARTS_AT}}` where a test
//! fills in its own values.

use crate::aws_support;
use crate::common;

use std::time::{Duration, Instant as StdInstant};

use chrono::{DateTime, Duration as ChronoDuration, SubsecRound, Utc};
use lambda_http::request::LambdaRequest;
use lambda_http::tower::ServiceExt;
use lambda_http::{Context, LambdaEvent, Service};
use serde_json::{json, Value};
use toki_app::Toki;
use toki_aws::aws_sdk_dynamodb::types::AttributeValue;
use toki_model::TenantId;
use toki_ports::message;

const TENANT: &str = "acme";

/// A fixture from `tests/lambda_events/`, with its placeholders filled in.
/// A `content-length` header is brought in line with the filled-in body.
fn fixture(name: &str, vars: &[(&str, &str)]) -> Value {
    let path = aws_support::repo_root()
        .join("tests/lambda_events")
        .join(name);
    let mut text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    for (name, value) in vars {
        text = text.replace(&format!("{{{{{name}}}}}"), value);
    }
    let mut event: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{name} is not JSON once filled in: {e}"));
    if let Some(len) = event["body"].as_str().map(str::len) {
        if event["headers"].get("content-length").is_some() {
            event["headers"]["content-length"] = json!(len.to_string());
        }
    }
    event
}

/// One Toki on the aws backend with its own tables, queue and tenant databases.
struct Aws {
    toki: Toki,
    db_template: String,
}

impl Aws {
    async fn open() -> Aws {
        let mut config = aws_support::backend_config("lt", &tempfile::tempdir().unwrap().keep());
        let db_template = config
            .tenant_database_template
            .clone()
            .unwrap()
            .expose()
            .to_owned();
        config.validate().unwrap();
        Aws {
            toki: Toki::open(config)
                .await
                .expect("open the aws backend on the emulator"),
            db_template,
        }
    }

    /// Creates a tenant (database + directory entry); returns its API key.
    async fn tenant(&self, id: &str, reminders_enabled: bool) -> String {
        let id: TenantId = id.parse().unwrap();
        let (_, key) = self
            .toki
            .create_tenant(&id, reminders_enabled)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "creating tenant {id} (Postgres at {} is needed): {e:#}",
                    common::services::postgres_base_url()
                )
            });
        key
    }

    /// Drops the test's tenant databases.
    async fn drop_databases(&self, tenants: &[&str]) {
        for t in tenants {
            let id: TenantId = t.parse().unwrap();
            let _ = toki_sql::drop_tenant_database(&toki_sql::database_for(&self.db_template, &id))
                .await;
        }
    }

    /// The index table's reminder rows (`R#…`), as DynamoDB holds them: not
    /// the schedules' version markers nor the repair cursor.
    async fn index_items(&self) -> Vec<std::collections::HashMap<String, AttributeValue>> {
        aws_support::dynamo()
            .await
            .scan()
            .table_name(&self.toki.config.aws.index_table)
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .items
            .unwrap_or_default()
            .into_iter()
            .filter(|item| {
                matches!(item.get("pk"), Some(AttributeValue::S(pk)) if pk.starts_with("R#"))
            })
            .collect()
    }
}

/// Invokes the registrar Lambda's service with an API Gateway v2 payload, as
/// the runtime does: JSON → `LambdaRequest` → `http::Request` → router.
/// Returns the status and the JSON body.
async fn invoke_registrar(app: &axum::Router, event: Value) -> (u16, Value) {
    let request: LambdaRequest =
        serde_json::from_value(event).expect("an API Gateway v2 payload deserializes");
    assert!(
        matches!(request, LambdaRequest::ApiGatewayV2(_)),
        "read as an HTTP API (payload 2.0) request"
    );
    let request: lambda_http::Request = request.into();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!(
                "response body is not JSON ({e}): {}",
                String::from_utf8_lossy(&body)
            )
        })
    };
    (status, body)
}

fn s(item: &std::collections::HashMap<String, AttributeValue>, name: &str) -> String {
    match item.get(name) {
        Some(AttributeValue::S(v)) => v.clone(),
        Some(AttributeValue::N(v)) => v.clone(),
        other => panic!("attribute {name}: {other:?}"),
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto) and Postgres: scripts/test.sh runs it"]
async fn registrar_lambda_registers_through_api_gateway_payloads() {
    let aws = Aws::open().await;
    let key = aws.tenant(TENANT, true).await;
    let app = toki_registrar_lambda::app(&aws.toki);

    // A user, with a SigV4-signed request (IAM authorizer) carrying the tenant
    // key in x-toki-api-key.
    let (status, body) = invoke_registrar(
        &app,
        fixture(
            "apigw-v2-put-user.json",
            &[("TENANT", TENANT), ("API_KEY", &key)],
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], "ana");
    assert_eq!(body["email"], "ana@example.com");
    assert_eq!(body["time_zone"], "Asia/Tokyo");

    // The same SigV4 request without x-toki-api-key: the signature is no tenant key.
    let mut unsigned_key = fixture(
        "apigw-v2-put-user.json",
        &[("TENANT", TENANT), ("API_KEY", &key)],
    );
    unsigned_key["headers"]
        .as_object_mut()
        .unwrap()
        .remove("x-toki-api-key");
    let (status, body) = invoke_registrar(&app, unsigned_key).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");

    // A schedule whose reminder (5 minutes before) is due in 16 minutes: just
    // beyond the 15-minute window, so it is mirrored into the index, pending,
    // and not enqueued directly.
    let starts_at = Utc::now().trunc_subsecs(0) + ChronoDuration::minutes(21);
    let due = starts_at - ChronoDuration::minutes(5);
    let (status, body) = invoke_registrar(
        &app,
        fixture(
            "apigw-v2-put-schedule.json",
            &[
                ("TENANT", TENANT),
                ("API_KEY", &key),
                ("STARTS_AT", &rfc3339(starts_at)),
            ],
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], "design-review");
    assert_eq!(body["mirrored"], true, "{body}");
    assert_eq!(body["enqueued_directly"], 0, "{body}");
    let version = body["version"].as_i64().expect("a version");

    let items = aws.index_items().await;
    assert_eq!(
        items.len(),
        1,
        "one index row per reminder instance: {items:?}"
    );
    let row = &items[0];
    assert!(
        s(row, "pk").starts_with(&format!("R#{}#", due.format("%Y-%m-%dT%H:%M"))),
        "partitioned by due minute: {row:?}"
    );
    assert_eq!(s(row, "tenant"), TENANT);
    assert_eq!(s(row, "schedule"), "design-review");
    assert_eq!(s(row, "due"), due.timestamp_millis().to_string());
    assert_eq!(s(row, "version"), version.to_string());
    assert!(
        !row.contains_key("recipients"),
        "index rows carry no recipient list (the daemon reads the participants)"
    );
    assert_eq!(s(row, "status"), "pending");

    // Bad input: 422 naming the field, and nothing written.
    let (status, body) = invoke_registrar(
        &app,
        fixture(
            "apigw-v2-put-schedule-bad.json",
            &[
                ("TENANT", TENANT),
                ("API_KEY", &key),
                ("STARTS_AT", &rfc3339(starts_at + ChronoDuration::hours(1))),
            ],
        ),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid");
    assert_eq!(body["error"]["field"], "reminders[0].channels[1]", "{body}");

    // Read back: the first version, untouched by the bad request.
    let get = |api_key: &str| {
        fixture(
            "apigw-v2-get-schedule.json",
            &[("TENANT", TENANT), ("API_KEY", api_key)],
        )
    };
    let (status, body) = invoke_registrar(&app, get(&key)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["title"], "Design review");
    assert_eq!(body["version"], version);
    assert_eq!(body["participants"], json!(["ana"]));
    assert_eq!(
        DateTime::parse_from_rfc3339(body["starts_at"].as_str().unwrap()).unwrap(),
        starts_at
    );
    assert_eq!(
        body["reminders"],
        json!([{"minutes_before": 5, "channels": ["mail", "chat"]}])
    );
    assert_eq!(aws.index_items().await.len(), 1);

    // A wrong key: 401.
    let (status, body) = invoke_registrar(
        &app,
        get("toki_0123456789abcdef0123456789abcdef0123456789abcdef"),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");

    // What the runtime sends back to API Gateway (through lambda_http's
    // adapter, as `lambda_http::run` does): a payload 2.0 response.
    let request: LambdaRequest = serde_json::from_value(get(&key)).unwrap();
    let mut adapter = lambda_http::Adapter::from(app.clone());
    let response = adapter
        .call(LambdaEvent::new(request, Context::default()))
        .await
        .unwrap();
    let response = serde_json::to_value(&response).unwrap();
    assert_eq!(response["statusCode"], 200, "{response}");
    assert_eq!(response["headers"]["content-type"], "application/json");
    let body: Value = serde_json::from_str(response["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["id"], "design-review");

    aws.drop_databases(&[TENANT]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto) and Postgres: scripts/test.sh runs it"]
async fn scanner_lambda_enqueues_what_is_due_in_its_window() {
    let aws = Aws::open().await;
    let key = aws.tenant(TENANT, true).await;
    // A tenant whose contract has reminders off: the scanner holds its rows back.
    let off_key = aws.tenant("globex", false).await;

    // The registrar enqueues directly whatever is due inside its window; with
    // a 1-second window it leaves these to the scanner (window: 15 minutes).
    let mut registrar_side = aws.toki.clone();
    registrar_side.config.pipeline.window_s = 1;
    registrar_side.config.pipeline.scan_interval_s = 1;
    let app = toki_registrar_lambda::app(&registrar_side);
    for (tenant, key) in [(TENANT, &key), ("globex", &off_key)] {
        let (status, body) = invoke_registrar(
            &app,
            fixture(
                "apigw-v2-put-user.json",
                &[("TENANT", tenant), ("API_KEY", key)],
            ),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    // Due (5 minutes before the start) 10 seconds from now.
    let due = Utc::now().trunc_subsecs(0) + ChronoDuration::seconds(10);
    let starts_at = rfc3339(due + ChronoDuration::minutes(5));
    for (tenant, key) in [(TENANT, &key), ("globex", &off_key)] {
        let (status, body) = invoke_registrar(
            &app,
            fixture(
                "apigw-v2-put-schedule.json",
                &[
                    ("TENANT", tenant),
                    ("API_KEY", key),
                    ("STARTS_AT", &starts_at),
                ],
            ),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["mirrored"], true, "{body}");
        assert_eq!(body["enqueued_directly"], 0, "left to the scanner: {body}");
    }
    let depth = aws.toki.queue.depth().await.unwrap();
    assert_eq!(
        depth.messages, 0,
        "nothing enqueued before the scanner runs"
    );

    // The scheduled event, as EventBridge delivers it.
    let event: toki_scanner_lambda::ScheduledEvent =
        serde_json::from_value(fixture("scheduled-event.json", &[])).unwrap();
    assert_eq!(event.source, "aws.events");
    assert_eq!(event.detail_type, "Scheduled Event");
    let mut context = Context::default();
    context.request_id = "0d4bd4a6-2f0c-4b8e-9d3a-6c1e7f5a9b20".into();
    let summary =
        toki_scanner_lambda::handle(&aws.toki, LambdaEvent::new(event.clone(), context.clone()))
            .await
            .expect("the scan succeeds");
    assert_eq!(summary.scanned, 2, "{summary:?}");
    assert_eq!(summary.enqueued, 1, "{summary:?}");
    assert_eq!(summary.skipped_by_contract, 1, "{summary:?}");
    assert_eq!(summary.failed, 0, "{summary:?}");
    let shards = usize::from(aws.toki.config.pipeline.shards);
    assert!(
        summary.partitions >= 16 * shards && summary.partitions % shards == 0,
        "every shard of every minute of the window: {summary:?}"
    );
    // The Lambda's result is the summary as JSON.
    let result = serde_json::to_value(&summary).unwrap();
    for field in [
        "scanned",
        "pending",
        "enqueued",
        "already_claimed",
        "failed",
        "skipped_by_contract",
        "partitions",
        "duration_ms",
    ] {
        assert!(result[field].is_u64(), "{field} in {result}");
    }

    // The next minute's run finds it already enqueued: nothing is sent twice.
    let again = toki_scanner_lambda::handle(&aws.toki, LambdaEvent::new(event, context))
        .await
        .unwrap();
    assert_eq!(
        (again.scanned, again.enqueued, again.pending),
        (2, 0, 1),
        "{again:?}"
    );
    assert_eq!(aws.toki.queue.depth().await.unwrap().messages, 1);

    // The message becomes visible just before it is due (the lead), not at once.
    let lead = Duration::from_millis(aws.toki.config.pipeline.lead_ms);
    let started = StdInstant::now();
    let mut received = Vec::new();
    while received.is_empty() && started.elapsed() < Duration::from_secs(60) {
        received = aws
            .toki
            .queue
            .receive(10, Duration::from_secs(20), Duration::from_secs(30))
            .await
            .unwrap();
    }
    let arrived = Utc::now();
    assert_eq!(received.len(), 1, "one message for the one reminder due");
    let visible_from = due - ChronoDuration::from_std(lead).unwrap() - ChronoDuration::seconds(2);
    assert!(
        arrived >= visible_from,
        "delayed until its due second: arrived {arrived}, due {due}"
    );
    let reminder = message::decode(&received[0].attributes).expect("the attributes carry the row");
    assert_eq!(reminder.key.tenant.as_str(), TENANT);
    assert_eq!(reminder.key.schedule.as_str(), "design-review");
    assert_eq!(reminder.key.minutes_before, 5);
    assert_eq!(reminder.due_at.0, due);
    assert!(
        !received[0].attributes.contains_key("recipients"),
        "the message carries no recipient list"
    );
    aws.toki
        .queue
        .delete_batch(&[received[0].receipt.clone()])
        .await
        .unwrap();

    aws.drop_databases(&[TENANT, "globex"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto) and Postgres: scripts/test.sh runs it"]
async fn scanner_lambda_fails_the_invocation_when_sends_fail() {
    let aws = Aws::open().await;
    let key = aws.tenant(TENANT, true).await;
    let mut registrar_side = aws.toki.clone();
    registrar_side.config.pipeline.window_s = 1;
    registrar_side.config.pipeline.scan_interval_s = 1;
    let app = toki_registrar_lambda::app(&registrar_side);
    let (status, body) = invoke_registrar(
        &app,
        fixture(
            "apigw-v2-put-user.json",
            &[("TENANT", TENANT), ("API_KEY", &key)],
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let starts_at = Utc::now().trunc_subsecs(0) + ChronoDuration::minutes(8);
    let (status, body) = invoke_registrar(
        &app,
        fixture(
            "apigw-v2-put-schedule.json",
            &[
                ("TENANT", TENANT),
                ("API_KEY", &key),
                ("STARTS_AT", &rfc3339(starts_at)),
            ],
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["enqueued_directly"], 0, "{body}");

    // The queue is gone (deleted, or SQS failing): nothing can be sent.
    let sqs = aws_support::sqs().await;
    let url = sqs
        .get_queue_url()
        .queue_name(&aws.toki.config.aws.queue_name)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    sqs.delete_queue().queue_url(url).send().await.unwrap();

    let event: toki_scanner_lambda::ScheduledEvent =
        serde_json::from_value(fixture("scheduled-event.json", &[])).unwrap();
    let error = toki_scanner_lambda::handle(&aws.toki, LambdaEvent::new(event, Context::default()))
        .await
        .expect_err("a run whose sends fail is a failed invocation (Errors metric, alarm)");
    let message = error.to_string();
    assert!(message.contains("1 rows not enqueued"), "{message}");
    assert!(
        message.contains("\"failed\":1"),
        "the summary is in the error: {message}"
    );

    // The row is left pending for the next run.
    let items = aws.index_items().await;
    assert_eq!(items.len(), 1);
    assert_eq!(s(&items[0], "status"), "pending", "{items:?}");

    aws.drop_databases(&[TENANT]).await;
}

/// The index fails during a registration: the API answers 202 (the schedule is
/// in the tenant database with its outbox row), the repair Lambda finishes the
/// mirror on its next minute, and the reminder is still delivered, at its instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto) and Postgres: scripts/test.sh runs it"]
async fn a_registration_the_index_missed_is_repaired_and_delivered() {
    let aws = Aws::open().await;
    let key = aws.tenant(TENANT, true).await;
    // The registrar's view of the index is broken (a table that is not there).
    let mut registrar_side = aws.toki.clone();
    registrar_side.index = std::sync::Arc::new(toki_aws::DynamoReminderIndex::new(
        aws_support::dynamo().await,
        aws_support::unique("missing"),
        aws.toki.config.pipeline.shards,
        Duration::from_secs(3600),
        aws.toki.clock.clone(),
    ));
    let app = toki_registrar_lambda::app(&registrar_side);
    let (status, body) = invoke_registrar(
        &app,
        fixture(
            "apigw-v2-put-user.json",
            &[("TENANT", TENANT), ("API_KEY", &key)],
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let due = Utc::now().trunc_subsecs(0) + ChronoDuration::seconds(8);
    let (status, body) = invoke_registrar(
        &app,
        fixture(
            "apigw-v2-put-schedule.json",
            &[
                ("TENANT", TENANT),
                ("API_KEY", &key),
                ("STARTS_AT", &rfc3339(due + ChronoDuration::minutes(5))),
            ],
        ),
    )
    .await;
    assert_eq!(status, 202, "saved, mirror pending: {body}");
    assert_eq!(body["mirrored"], false, "{body}");
    assert!(aws.index_items().await.is_empty());

    // The repair Lambda's next run (EventBridge, every minute).
    let event: toki_repair_lambda::ScheduledEvent =
        serde_json::from_value(fixture("scheduled-event.json", &[])).unwrap();
    let summary =
        toki_repair_lambda::handle(&aws.toki, LambdaEvent::new(event, Context::default()))
            .await
            .expect("the repair pass succeeds");
    assert_eq!(
        (summary.repaired, summary.failed_tenants),
        (1, 0),
        "{summary:?}"
    );
    assert_eq!(aws.index_items().await.len(), 1, "mirrored now");

    // Due inside the scanned window: the repair enqueued it; the daemon delivers it.
    let daemon = aws.toki.daemon().await.unwrap();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(daemon.clone().run(shutdown));
    let s = daemon
        .stats
        .wait_for(Duration::from_secs(30), |s| s.delivered >= 2)
        .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    assert_eq!(s.delivered, 2, "mail and chat to ana: {s:?}");
    let store = toki_ports::TenantStores::open(aws.toki.stores.as_ref(), &TENANT.parse().unwrap())
        .await
        .unwrap();
    // Each for its instant and not before it; how late is printed, not
    // asserted (the bench measures it).
    for row in store.deliveries().await.unwrap() {
        assert_eq!(row.due_at.0, due, "{}", row.key);
        let late = (row.at - row.due_at.0).num_milliseconds();
        assert!(late >= 0, "{} delivered {} ms early", row.key, -late);
        eprintln!("{} delivered {late} ms after due", row.key);
    }

    aws.drop_databases(&[TENANT]).await;
}
