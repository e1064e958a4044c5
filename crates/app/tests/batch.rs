//! A batch past its budget of work, over HTTP in process: 422 naming the
//! row budget, 503 naming the time budget, `field` `schedules`, nothing
//! written.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use toki_app::api;
use toki_core::registrar::Registrar;
use toki_core::testing::TestKit;
use tower::ServiceExt;

use crate::common::{kit_with_tenant, request, KEY};

/// Two schedules of two reminders each (four index rows).
fn batch(kit: &TestKit) -> Value {
    let starts = (kit.now() + chrono::Duration::days(2)).to_rfc3339();
    let item = |id: &str| {
        json!({"id": id, "title": "Review", "starts_at": starts, "participants": ["u0"],
               "reminders": [{"minutes_before": 5, "channels": ["chat"]},
                             {"minutes_before": 60, "channels": ["chat"]}]})
    };
    json!({"schedules": [item("a"), item("b")]})
}

async fn post(registrar: Registrar, body: Value) -> (StatusCode, Value) {
    let resp = api::router(Arc::new(registrar))
        .oneshot(request(
            "POST",
            "/v1/tenants/acme/schedules:batch",
            Some(KEY),
            Some(body),
        ))
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

async fn written(kit: &TestKit) -> bool {
    let resp = api::router(Arc::new(kit.registrar()))
        .oneshot(request(
            "GET",
            "/v1/tenants/acme/schedules/a",
            Some(KEY),
            None,
        ))
        .await
        .unwrap();
    resp.status() == StatusCode::OK
}

#[tokio::test(start_paused = true)]
async fn a_batch_past_its_budget_is_refused_naming_it() {
    let kit = kit_with_tenant().await;
    let mut rows = kit.registrar();
    rows.settings.batch.rows = 3;
    let (status, body) = post(rows, batch(&kit)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["field"], "schedules");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("more than 3 reminders"),
        "{body}"
    );
    assert!(!written(&kit).await, "nothing written");

    let mut time = kit.registrar();
    time.settings.batch.time = Duration::ZERO;
    let (status, body) = post(time, batch(&kit)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["field"], "schedules");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("budget (0 ms)"),
        "{body}"
    );
    assert!(!written(&kit).await, "nothing written");

    let (status, body) = post(kit.registrar(), batch(&kit)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["written"], 2);
}
