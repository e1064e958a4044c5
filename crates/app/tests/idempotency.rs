//! `Idempotency-Key` in-process (`tower::ServiceExt::oneshot`) on the testing kit's in-memory ports: on the batch route a repeat writes once and answers the same, another body is a 422, a bad key a 400, a key in progress a 409, keys are per tenant and expire after a day; a key never widens a route's body limit, and a route whose answer is a secret refuses it.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use toki_app::api;
use toki_core::testing::TestKit;
use toki_model::api_key::ApiKey;
use toki_model::idempotency::{IdempotencyKey, RequestDigest};
use toki_model::TenantRecord;
use toki_ports::{Clock, IdempotentStart, KeyedRequest, TenantDirectory, TenantStores};
use tower::ServiceExt;

use crate::common::{kit_with_tenant, KEY};

const BATCH: &str = "/v1/tenants/acme/schedules:batch";

/// An answer: status, whether it was replayed, the body's bytes.
struct Answer {
    status: StatusCode,
    replayed: bool,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// POSTs `body` to `path` with `key` as the tenant's API key and
/// `idem` as `Idempotency-Key` values (none: no header).
async fn post(kit: &TestKit, path: &str, key: &str, idem: &[&[u8]], body: &Value) -> Answer {
    let mut req = Request::builder()
        .method("POST")
        .uri(path)
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json");
    for v in idem {
        req = req.header("idempotency-key", HeaderValue::from_bytes(v).unwrap());
    }
    let req = req.body(Body::from(body.to_string())).unwrap();
    let resp = api::router(Arc::new(kit.registrar()))
        .oneshot(req)
        .await
        .unwrap();
    let replayed = match resp.headers().get("idempotent-replayed") {
        None => false,
        Some(v) => {
            assert_eq!(v, "true");
            true
        }
    };
    Answer {
        status: resp.status(),
        replayed,
        body: resp
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    }
}

/// The version of schedule `id` of `tenant` (its API key `key`), None if absent.
async fn version(kit: &TestKit, tenant: &str, key: &str, id: &str) -> Option<i64> {
    let req = crate::common::request(
        "GET",
        &format!("/v1/tenants/{tenant}/schedules/{id}"),
        Some(key),
        None,
    );
    let resp = api::router(Arc::new(kit.registrar()))
        .oneshot(req)
        .await
        .unwrap();
    if resp.status() == StatusCode::NOT_FOUND {
        return None;
    }
    assert_eq!(resp.status(), StatusCode::OK);
    let body: Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    body["version"].as_i64()
}

/// A batch of one schedule, `id`, a month ahead (still ahead after the
/// tests' day-long waits).
fn batch(kit: &TestKit, id: &str) -> Value {
    let starts = (kit.now() + chrono::Duration::days(30)).to_rfc3339();
    json!({"schedules": [{
        "id": id, "title": "Kick-off", "starts_at": starts, "time_zone": "Europe/Paris",
        "participants": ["u0", "u1"],
        "reminders": [{"minutes_before": 10, "channels": ["mail"]}]
    }]})
}

#[tokio::test(start_paused = true)]
async fn a_repeated_batch_with_the_same_key_writes_once() {
    let kit = kit_with_tenant().await;
    let body = batch(&kit, "kickoff");
    let first = post(&kit, BATCH, KEY, &[b"batch-1"], &body).await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(!first.replayed);
    assert_eq!(first.json()["written"], 1);
    assert_eq!(version(&kit, "acme", KEY, "kickoff").await, Some(1));

    let again = post(&kit, BATCH, KEY, &[b"batch-1"], &body).await;
    assert_eq!(again.status, StatusCode::OK);
    assert!(again.replayed, "the repeat is marked replayed");
    assert_eq!(again.body, first.body, "the first answer, byte for byte");
    assert_eq!(
        version(&kit, "acme", KEY, "kickoff").await,
        Some(1),
        "written once"
    );

    // Without the header, as before: each request writes.
    for expected in [2, 3] {
        let plain = post(&kit, BATCH, KEY, &[], &body).await;
        assert_eq!((plain.status, plain.replayed), (StatusCode::OK, false));
        assert_eq!(version(&kit, "acme", KEY, "kickoff").await, Some(expected));
    }
}

#[tokio::test(start_paused = true)]
async fn the_same_key_with_another_body_is_a_422() {
    let kit = kit_with_tenant().await;
    let first = post(&kit, BATCH, KEY, &[b"k"], &batch(&kit, "one")).await;
    assert_eq!(first.status, StatusCode::OK);
    let other = post(&kit, BATCH, KEY, &[b"k"], &batch(&kit, "two")).await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    let error = &other.json()["error"];
    assert_eq!(error["code"], "idempotency_key_reused");
    assert_eq!(error["field"], "Idempotency-Key");
    assert!(!other.replayed);
    assert_eq!(
        version(&kit, "acme", KEY, "two").await,
        None,
        "nothing written"
    );
    assert_eq!(version(&kit, "acme", KEY, "one").await, Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_bad_key_is_a_400_naming_the_header() {
    let kit = kit_with_tenant().await;
    let long = vec![b'k'; 256];
    let bad: [&[&[u8]]; 5] = [
        &[b""],
        &[&long],
        &["clé".as_bytes()],
        &[b"tab\there"],
        &[b"a", b"b"],
    ];
    for idem in bad {
        let answer = post(&kit, BATCH, KEY, idem, &batch(&kit, "s")).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{idem:?}");
        let error = &answer.json()["error"];
        assert_eq!(error["code"], "bad_header", "{idem:?}");
        assert_eq!(error["field"], "Idempotency-Key", "{idem:?}");
    }
    assert_eq!(
        version(&kit, "acme", KEY, "s").await,
        None,
        "nothing written"
    );
    let ok = post(&kit, BATCH, KEY, &[&long[..255]], &batch(&kit, "s")).await;
    assert_eq!(ok.status, StatusCode::OK, "255 characters are fine");
}

#[tokio::test(start_paused = true)]
async fn a_key_in_progress_is_a_409_until_abandoned() {
    let kit = kit_with_tenant().await;
    let body = batch(&kit, "s");
    // Another process is running this very request under the key.
    let store = kit.stores.open(&"acme".parse().unwrap()).await.unwrap();
    let key: IdempotencyKey = "busy".parse().unwrap();
    let digest = RequestDigest::of("POST", BATCH, body.to_string().as_bytes());
    let now = kit.clock.now();
    let start = IdempotentStart {
        key: &key,
        digest: &digest,
        now,
        expired_before: now - chrono::Duration::hours(24),
        abandoned_before: now - chrono::Duration::minutes(5),
    };
    store.start_idempotent(&start).await.unwrap();

    let answer = post(&kit, BATCH, KEY, &[b"busy"], &body).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    let error = &answer.json()["error"];
    assert_eq!(
        (error["code"].clone(), error["field"].clone()),
        (json!("in_progress"), json!("Idempotency-Key"))
    );
    assert_eq!(
        version(&kit, "acme", KEY, "s").await,
        None,
        "nothing written"
    );

    // Five minutes on, the first is taken to have died: the repeat runs.
    tokio::time::advance(Duration::from_secs(301)).await;
    let answer = post(&kit, BATCH, KEY, &[b"busy"], &body).await;
    assert_eq!((answer.status, answer.replayed), (StatusCode::OK, false));
    assert_eq!(version(&kit, "acme", KEY, "s").await, Some(1));
}

#[tokio::test(start_paused = true)]
async fn another_tenant_with_the_same_key_writes_its_own() {
    let kit = kit_with_tenant().await;
    add_tenant(&kit, "beta", "toki_beta_key").await;
    let acme = post(&kit, BATCH, KEY, &[b"shared"], &batch(&kit, "s")).await;
    assert_eq!(acme.status, StatusCode::OK);
    let beta_batch = "/v1/tenants/beta/schedules:batch";
    let beta = post(
        &kit,
        beta_batch,
        "toki_beta_key",
        &[b"shared"],
        &batch(&kit, "s"),
    )
    .await;
    assert_eq!((beta.status, beta.replayed), (StatusCode::OK, false));
    assert_eq!(version(&kit, "beta", "toki_beta_key", "s").await, Some(1));
    assert_eq!(version(&kit, "acme", KEY, "s").await, Some(1));
    // And each tenant's repeat replays its own answer.
    let again = post(
        &kit,
        beta_batch,
        "toki_beta_key",
        &[b"shared"],
        &batch(&kit, "s"),
    )
    .await;
    assert!(again.replayed);
    assert_eq!(again.body, beta.body);
}

#[tokio::test(start_paused = true)]
async fn keys_expire_after_a_day_and_are_purged() {
    let kit = kit_with_tenant().await;
    let body = batch(&kit, "s");
    let older = batch(&kit, "t");
    assert_eq!(
        post(&kit, BATCH, KEY, &[b"old"], &body).await.status,
        StatusCode::OK
    );
    assert_eq!(
        post(&kit, BATCH, KEY, &[b"older"], &older).await.status,
        StatusCode::OK
    );
    tokio::time::advance(Duration::from_secs(24 * 3600 - 1)).await;
    assert!(
        post(&kit, BATCH, KEY, &[b"old"], &body).await.replayed,
        "within the day"
    );
    assert_eq!(version(&kit, "acme", KEY, "s").await, Some(1));
    tokio::time::advance(Duration::from_secs(2)).await;

    // A day on, the key is forgotten: the repeat writes again.
    let later = post(&kit, BATCH, KEY, &[b"old"], &body).await;
    assert_eq!((later.status, later.replayed), (StatusCode::OK, false));
    assert_eq!(version(&kit, "acme", KEY, "s").await, Some(2));
    // And that new start purged the other expired key: its row is gone
    // (a start that would still count it live starts afresh).
    let store = kit.stores.open(&"acme".parse().unwrap()).await.unwrap();
    let key: IdempotencyKey = "older".parse().unwrap();
    let digest = RequestDigest::of("POST", BATCH, older.to_string().as_bytes());
    let now = kit.clock.now();
    let long_ago = now - chrono::Duration::days(10);
    let start = IdempotentStart {
        key: &key,
        digest: &digest,
        now,
        expired_before: long_ago,
        abandoned_before: long_ago,
    };
    assert_eq!(
        store.start_idempotent(&start).await.unwrap(),
        KeyedRequest::Started
    );
}

/// Tenant `id` (users u0..u9) whose API key is `key`.
async fn add_tenant(kit: &TestKit, id: &str, key: &str) {
    let tenant = kit.tenant(id).await;
    kit.directory
        .put(&TenantRecord {
            id: tenant,
            reminders_enabled: true,
            active: true,
            database: format!("memory:{id}"),
            api_keys: vec![ApiKey::new(
                "default".parse().unwrap(),
                key,
                kit.clock.now(),
                None,
            )],
            change_notices: Default::default(),
            limits: Default::default(),
            retention: Default::default(),
        })
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_document_describes_the_header_and_its_answers() {
    let kit = kit_with_tenant().await;
    let req = crate::common::request("GET", "/openapi.json", None, None);
    let resp = api::router(Arc::new(kit.registrar()))
        .oneshot(req)
        .await
        .unwrap();
    let doc: Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let op = &doc["paths"]["/v1/tenants/{tenant}/schedules:batch"]["post"];
    let header = op["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "Idempotency-Key")
        .expect("the header is a parameter");
    assert_eq!(header["in"], "header");
    assert_ne!(header["required"], true);
    assert_eq!(header["schema"]["maxLength"], 255);
    for status in ["400", "409", "422"] {
        let description = op["responses"][status]["description"].as_str().unwrap();
        assert!(
            description.contains("Idempotency-Key"),
            "{status}: {description}"
        );
    }
    assert!(op["responses"]["200"]["headers"]["Idempotent-Replayed"].is_object());
}

/// How many bytes of a request body the server pulled.
fn counted_body(total: usize, pulled: Arc<std::sync::atomic::AtomicUsize>) -> Body {
    const CHUNK: usize = 16 * 1024;
    let chunks = (0..total.div_ceil(CHUNK)).map(move |_| {
        pulled.fetch_add(CHUNK, std::sync::atomic::Ordering::SeqCst);
        Ok::<_, std::io::Error>(axum::body::Bytes::from(vec![b' '; CHUNK]))
    });
    Body::from_stream(futures::stream::iter(chunks))
}

#[tokio::test(start_paused = true)]
async fn a_key_does_not_widen_a_routes_body_limit() {
    let kit = kit_with_tenant().await;
    let ops = json!({"url": "https://hooks.example/toki"});
    let created = api::router(Arc::new(kit.registrar()))
        .oneshot(crate::common::request(
            "PUT",
            "/v1/tenants/acme/event-endpoints/ops",
            Some(KEY),
            Some(ops),
        ))
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    // A replay takes 256 KiB; 4 MiB is sent with a key (the batch's 8 MiB
    // is what the key used to allow on every route).
    let pulled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let req = Request::builder()
        .method("POST")
        .uri("/v1/tenants/acme/event-endpoints/ops/replay")
        .header("authorization", format!("Bearer {KEY}"))
        .header("content-type", "application/json")
        .header("idempotency-key", "big")
        .body(counted_body(4 << 20, pulled.clone()))
        .unwrap();
    let resp = api::router(Arc::new(kit.registrar()))
        .oneshot(req)
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let limit = api::MAX_BODY_BYTES;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&limit.to_string()),
        "names the route's limit: {body}"
    );
    let pulled = pulled.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        pulled <= limit + 16 * 1024,
        "{pulled} bytes read past the route's {limit}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_route_that_answers_a_secret_refuses_a_key_and_keeps_nothing() {
    let kit = kit_with_tenant().await;
    let router = api::router(Arc::new(kit.registrar()));
    let send = |method: &str, path: &str, idem: Option<&str>, body: Option<Value>| {
        let mut req = crate::common::request(method, path, Some(KEY), body);
        if let Some(k) = idem {
            req.headers_mut()
                .insert("idempotency-key", HeaderValue::from_str(k).unwrap());
        }
        let router = router.clone();
        async move {
            let resp = router.oneshot(req).await.unwrap();
            let status = resp.status();
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            (
                status,
                serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
            )
        }
    };
    let made = send(
        "PUT",
        "/v1/tenants/acme/event-endpoints/ops",
        None,
        Some(json!({"url": "https://hooks.example/toki"})),
    )
    .await;
    assert_eq!(made.0, StatusCode::CREATED);
    let hook = send("PUT", "/v1/tenants/acme/webhook", None, Some(json!({}))).await;
    assert_eq!(hook.0, StatusCode::OK, "{}", hook.1);
    for path in [
        "/v1/tenants/acme/event-endpoints/ops/secret:rotate",
        "/v1/tenants/acme/webhook/secret:rotate",
    ] {
        let (status, body) = send("POST", path, Some("rotate-1"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(body["error"]["code"], "bad_header", "{path}");
        assert_eq!(body["error"]["field"], "Idempotency-Key", "{path}");
        assert!(body.get("secret").is_none(), "{path}: {body}");
        // Without the header it rotates, as before.
        let (status, rotated) = send("POST", path, None, None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(rotated["secret"].as_str().unwrap().starts_with("whsec_"));
    }
    // Nothing was kept under the key: a start of it is a fresh one.
    let store = kit.stores.open(&"acme".parse().unwrap()).await.unwrap();
    let key: IdempotencyKey = "rotate-1".parse().unwrap();
    let digest = RequestDigest::of("POST", "/", b"");
    let now = kit.clock.now();
    let start = IdempotentStart {
        key: &key,
        digest: &digest,
        now,
        expired_before: now - chrono::Duration::hours(24),
        abandoned_before: now - chrono::Duration::minutes(5),
    };
    assert_eq!(
        store.start_idempotent(&start).await.unwrap(),
        KeyedRequest::Started
    );
}
