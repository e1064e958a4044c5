//! Each tenant's share of the API and caps, in-process on the testing kit:
//! a tenant over its rate gets 429 with `Retry-After` while another goes on;
//! a wrong key spends nobody's quota; a write beyond a cap is refused naming
//! it, an update passes, and a batch crossing it writes nothing.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use toki_app::api;
use toki_core::testing::TestKit;
use toki_model::api_key::ApiKey;
use toki_model::quota::{ApiQuota, Cap, PerSecond, QuotaOverrides};
use toki_model::TenantId;
use toki_ports::TenantDirectory;
use tower::ServiceExt;

use crate::common::{kit_with_tenant, KEY};

const BETA_KEY: &str = "toki_beta_key";

struct Answer {
    status: StatusCode,
    retry_after: Option<String>,
    body: Value,
}

async fn call(router: &Router, method: &str, path: &str, key: &str, body: Option<Value>) -> Answer {
    let req = crate::common::request(method, path, Some(key), body);
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get(header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer {
        status,
        retry_after,
        body,
    }
}

/// `acme` (key [`KEY`]) with `quota` in its contract, and `beta` (key
/// [`BETA_KEY`]) with none.
async fn two_tenants(quota: QuotaOverrides) -> TestKit {
    let kit = kit_with_tenant().await;
    let acme: TenantId = "acme".parse().unwrap();
    let mut record = kit.directory.get(&acme).await.unwrap().unwrap();
    record.limits.quota = quota;
    kit.directory.put(&record).await.unwrap();
    let beta = kit.tenant("beta").await;
    let mut record = kit.directory.get(&beta).await.unwrap().unwrap();
    record.api_keys = vec![ApiKey::new(
        "default".parse().unwrap(),
        BETA_KEY,
        kit.now(),
        None,
    )];
    kit.directory.put(&record).await.unwrap();
    kit
}

fn router(kit: &TestKit, quotas: &Arc<api::ApiQuotas>) -> Router {
    api::router_with_quotas(Arc::new(kit.registrar()), quotas.clone())
}

#[tokio::test(start_paused = true)]
async fn a_tenant_over_its_rate_gets_429_while_another_gets_200() {
    let kit = two_tenants(QuotaOverrides {
        api_rate: Some(PerSecond(0.5)),
        api_burst: Some(2),
        ..Default::default()
    })
    .await;
    let quotas = Arc::new(api::ApiQuotas::new(
        ApiQuota::default(),
        Duration::from_secs(30),
    ));
    let router = router(&kit, &quotas);
    let acme = "/v1/tenants/acme/users/u0";
    let beta = "/v1/tenants/beta/users/u0";
    for _ in 0..2 {
        assert_eq!(
            call(&router, "GET", acme, KEY, None).await.status,
            StatusCode::OK
        );
    }
    let over = call(&router, "GET", acme, KEY, None).await;
    assert_eq!(over.status, StatusCode::TOO_MANY_REQUESTS, "{}", over.body);
    // Half a token a second: the next is two seconds away.
    assert_eq!(over.retry_after.as_deref(), Some("2"));
    assert_eq!(over.body["error"]["code"], "too_many_requests");
    assert_eq!(over.body["error"]["field"], "api_rate");
    for _ in 0..5 {
        let b = call(&router, "GET", beta, BETA_KEY, None).await;
        assert_eq!(b.status, StatusCode::OK, "beta is not held up: {}", b.body);
    }
    tokio::time::advance(Duration::from_secs(2)).await;
    let after = call(&router, "GET", acme, KEY, None).await;
    assert_eq!(
        after.status,
        StatusCode::OK,
        "after Retry-After: {}",
        after.body
    );
}

#[tokio::test(start_paused = true)]
async fn wrong_keys_spend_no_quota_and_leave_no_state() {
    let kit = two_tenants(QuotaOverrides {
        api_rate: Some(PerSecond(0.5)),
        api_burst: Some(2),
        ..Default::default()
    })
    .await;
    let quotas = Arc::new(api::ApiQuotas::default());
    let router = router(&kit, &quotas);
    let acme = "/v1/tenants/acme/users/u0";
    for _ in 0..10 {
        let a = call(&router, "GET", acme, "toki_wrong", None).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED);
        for unknown in ["nobody", "ghost-1", "NOT-A-TENANT"] {
            let path = format!("/v1/tenants/{unknown}/users/u0");
            let a = call(&router, "GET", &path, KEY, None).await;
            assert_eq!(a.status, StatusCode::UNAUTHORIZED);
        }
    }
    assert_eq!(
        quotas.tenants(),
        0,
        "no state for requests that did not authenticate"
    );
    for _ in 0..2 {
        let a = call(&router, "GET", acme, KEY, None).await;
        assert_eq!(
            a.status,
            StatusCode::OK,
            "acme's burst is whole: {}",
            a.body
        );
    }
    let a = call(&router, "GET", acme, KEY, None).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(quotas.tenants(), 1);
}

fn schedule(kit: &TestKit) -> Value {
    let starts = (kit.now() + chrono::Duration::hours(2)).to_rfc3339();
    json!({
        "title": "Kick-off", "starts_at": starts, "time_zone": "Europe/Paris",
        "participants": ["u0"],
        "reminders": [{"minutes_before": 10, "channels": ["mail"]}]
    })
}

#[tokio::test(start_paused = true)]
async fn a_cap_refuses_new_ones_naming_it_but_not_updates_and_a_batch_whole() {
    let kit = two_tenants(QuotaOverrides {
        max_schedules: Some(Cap(2)),
        ..Default::default()
    })
    .await;
    let quotas = Arc::new(api::ApiQuotas::default());
    let router = router(&kit, &quotas);
    let base = "/v1/tenants/acme/schedules";
    let s = schedule(&kit);
    let a = call(&router, "PUT", &format!("{base}/s1"), KEY, Some(s.clone())).await;
    assert!(a.status.is_success(), "{}", a.body);
    let mut batch = Vec::new();
    for id in ["s1", "s2", "s3"] {
        let mut item = s.clone();
        item["id"] = json!(id);
        batch.push(item);
    }
    let a = call(
        &router,
        "POST",
        &format!("{base}:batch"),
        KEY,
        Some(json!({ "schedules": batch })),
    )
    .await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
    assert_eq!(a.body["error"]["code"], "cap_reached");
    assert_eq!(a.body["error"]["field"], "max_schedules");
    for id in ["s2", "s3"] {
        let a = call(&router, "GET", &format!("{base}/{id}"), KEY, None).await;
        assert_eq!(
            a.status,
            StatusCode::NOT_FOUND,
            "{id}: the batch wrote nothing"
        );
    }
    let a = call(&router, "GET", &format!("{base}/s1"), KEY, None).await;
    assert_eq!(a.body["version"], 1, "s1 was not written again: {}", a.body);
    let a = call(&router, "PUT", &format!("{base}/s2"), KEY, Some(s.clone())).await;
    assert!(a.status.is_success(), "{}", a.body);
    let a = call(&router, "PUT", &format!("{base}/s3"), KEY, Some(s.clone())).await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
    assert_eq!(a.body["error"]["field"], "max_schedules");
    let a = call(&router, "PUT", &format!("{base}/s2"), KEY, Some(s)).await;
    assert!(a.status.is_success(), "an update at the cap: {}", a.body);
    // Another tenant's cap is its own.
    let a = call(
        &router,
        "PUT",
        "/v1/tenants/beta/schedules/s3",
        BETA_KEY,
        Some(schedule(&kit)),
    )
    .await;
    assert!(a.status.is_success(), "{}", a.body);
}

#[tokio::test(start_paused = true)]
async fn every_tenant_route_documents_429_with_retry_after() {
    let kit = kit_with_tenant().await;
    let router = api::router(Arc::new(kit.registrar()));
    let req = Request::get("/openapi.json").body(Body::empty()).unwrap();
    let resp = router.oneshot(req).await.unwrap();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let r429 = &op["responses"]["429"];
            if path.starts_with("/v1/tenants/") {
                assert!(
                    r429["headers"]["Retry-After"].is_object(),
                    "{method} {path}"
                );
                checked += 1;
            } else {
                assert!(r429.is_null(), "{method} {path} has no quota");
            }
        }
    }
    assert!(checked >= 10, "{checked}");
}

/// `req` with an `Idempotency-Key`.
fn keyed(method: &str, path: &str, key: &str, body: Value) -> Request<Body> {
    let mut req = crate::common::request(method, path, Some(KEY), Some(body));
    req.headers_mut()
        .insert("idempotency-key", key.parse().unwrap());
    req
}

async fn send(router: &Router, req: Request<Body>) -> (StatusCode, Value) {
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn cap_reached(status: StatusCode, body: &Value, cap: &str) {
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["code"], "cap_reached", "{body}");
    assert_eq!(body["error"]["field"], cap, "{body}");
}

/// The rows a tenant creates itself beyond the caps of issue 59's sixth
/// finding: a suppression entry, an event endpoint, an idempotency key, each
/// refused with 422 naming its cap (nothing written); what exists is
/// updated or replayed at the cap; another tenant's caps are its own.
#[tokio::test(start_paused = true)]
async fn suppressions_endpoints_and_keys_stop_at_their_caps() {
    let kit = two_tenants(QuotaOverrides {
        max_suppressions: Some(Cap(2)),
        max_event_endpoints: Some(Cap(1)),
        max_idempotency_keys: Some(Cap(2)),
        ..Default::default()
    })
    .await;
    let quotas = Arc::new(api::ApiQuotas::default());
    let router = router(&kit, &quotas);
    let t = "/v1/tenants/acme";
    let note = || Some(json!({"note": "by hand"}));

    for a in ["a@example.com", "b@example.com"] {
        let r = call(
            &router,
            "PUT",
            &format!("{t}/suppressions/{a}"),
            KEY,
            note(),
        )
        .await;
        assert!(r.status.is_success(), "{}", r.body);
    }
    let r = call(
        &router,
        "PUT",
        &format!("{t}/suppressions/c@example.com"),
        KEY,
        note(),
    )
    .await;
    cap_reached(r.status, &r.body, "max_suppressions");
    let r = call(&router, "GET", &format!("{t}/suppressions"), KEY, None).await;
    let listed = r.body["suppressions"].as_array().unwrap().len();
    assert_eq!(listed, 2, "nothing written: {}", r.body);
    let r = call(
        &router,
        "PUT",
        &format!("{t}/suppressions/a@example.com"),
        KEY,
        note(),
    )
    .await;
    assert!(
        r.status.is_success(),
        "one listed already, at the cap: {}",
        r.body
    );

    let hook = || Some(json!({"url": "https://h.example/"}));
    let r = call(
        &router,
        "PUT",
        &format!("{t}/event-endpoints/e1"),
        KEY,
        hook(),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let r = call(
        &router,
        "PUT",
        &format!("{t}/event-endpoints/e2"),
        KEY,
        hook(),
    )
    .await;
    cap_reached(r.status, &r.body, "max_event_endpoints");
    let r = call(
        &router,
        "PUT",
        &format!("{t}/event-endpoints/e1"),
        KEY,
        hook(),
    )
    .await;
    assert!(r.status.is_success(), "an update at the cap: {}", r.body);

    let batch = |id: &str| {
        let mut item = schedule(&kit);
        item["id"] = json!(id);
        json!({ "schedules": [item] })
    };
    let post = |key: &str, id: &str| keyed("POST", &format!("{t}/schedules:batch"), key, batch(id));
    for (k, id) in [("k1", "s1"), ("k2", "s2")] {
        let (s, b) = send(&router, post(k, id)).await;
        assert_eq!(s, StatusCode::OK, "{b}");
    }
    let (s, b) = send(&router, post("k3", "s3")).await;
    cap_reached(s, &b, "max_idempotency_keys");
    let r = call(&router, "GET", &format!("{t}/schedules/s3"), KEY, None).await;
    assert_eq!(
        r.status,
        StatusCode::NOT_FOUND,
        "the refused request did nothing"
    );
    let (s, b) = send(&router, post("k1", "s1")).await;
    assert_eq!(s, StatusCode::OK, "a kept key replays at the cap: {b}");
    // A day later the keys have expired: purged to make room, k3 runs.
    tokio::time::advance(Duration::from_secs(25 * 3600)).await;
    let (s, b) = send(&router, post("k3", "s3")).await;
    assert_eq!(s, StatusCode::OK, "room once expired keys are purged: {b}");

    let r = call(
        &router,
        "PUT",
        "/v1/tenants/beta/suppressions/c@example.com",
        BETA_KEY,
        note(),
    )
    .await;
    assert!(r.status.is_success(), "beta's caps are its own: {}", r.body);
}
