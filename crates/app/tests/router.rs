//! The registrar API router in-process (`tower::ServiceExt::oneshot`), on the
//! testing kit's in-memory ports: routes, status codes, errors naming fields,
//! nothing written on a 4xx.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use toki_app::{api, api_key_hash};
use toki_core::ports::{TenantDirectory, TenantStore};
use toki_core::testing::TestKit;
use toki_core::TenantRecord;
use tower::ServiceExt;

const KEY: &str = "toki_test_key";

async fn kit_with_tenant() -> TestKit {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    kit.directory
        .put(&TenantRecord {
            id: t,
            reminders_enabled: true,
            active: true,
            database: "memory:acme".into(),
            api_key_sha256: api_key_hash(KEY),
        })
        .await
        .unwrap();
    kit
}

async fn call(
    kit: &TestKit,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(k) = key {
        req = req.header("authorization", format!("Bearer {k}"));
    }
    let req = match body {
        Some(b) => req
            .header("content-type", "application/json")
            .body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    }
    .unwrap();
    let router = api::router(Arc::new(kit.registrar()));
    let resp = router.oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    (status, value)
}

fn schedule(starts_at: &str) -> Value {
    json!({
        "title": "Kick-off", "starts_at": starts_at, "time_zone": "Europe/Paris",
        "participants": ["u0", "u1"],
        "reminders": [{"minutes_before": 10, "channels": ["mail", "chat"]}]
    })
}

#[tokio::test(start_paused = true)]
async fn unknown_tenant_and_wrong_key_look_the_same() {
    let kit = kit_with_tenant().await;
    let user = Some(json!({"name": "Ana"}));
    for (path, key) in [
        ("/v1/tenants/acme/users/ana", None),
        ("/v1/tenants/acme/users/ana", Some("toki_wrong")),
        ("/v1/tenants/nobody/users/ana", Some(KEY)),
        ("/v1/tenants/NOT-A-TENANT/users/ana", Some(KEY)),
    ] {
        let (status, body) = call(&kit, "PUT", path, key, user.clone()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path} {key:?}: {body}");
        assert_eq!(body["error"]["code"], "unauthorized");
    }
}

#[tokio::test(start_paused = true)]
async fn bad_input_names_the_field_and_writes_nothing() {
    let kit = kit_with_tenant().await;
    let starts = (kit.now() + chrono::Duration::hours(2)).to_rfc3339();
    let path = "/v1/tenants/acme/schedules/kickoff";
    let mut bad = schedule(&starts);
    bad["reminders"][0]["channels"][1] = json!("fax");
    let (status, body) = call(&kit, "PUT", path, Some(KEY), Some(bad)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["error"]["field"], "reminders[0].channels[1]");
    let mut ghost = schedule(&starts);
    ghost["participants"] = json!(["u0", "ghost"]);
    let (status, body) = call(&kit, "PUT", path, Some(KEY), Some(ghost)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["error"]["field"], "participants[1]");
    let (status, body) = call(
        &kit,
        "PUT",
        "/v1/tenants/acme/schedules/has%20space",
        Some(KEY),
        Some(schedule(&starts)),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["error"]["field"], "id");
    let (status, body) = call(&kit, "PUT", path, Some(KEY), Some(json!({"title": 3}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        call(&kit, "GET", path, Some(KEY), None).await.0,
        StatusCode::NOT_FOUND,
        "nothing was written"
    );
    assert!(kit.index.rows().is_empty());
}

#[tokio::test(start_paused = true)]
async fn create_read_update_delete() {
    let kit = kit_with_tenant().await;
    let starts = (kit.now() + chrono::Duration::hours(2)).to_rfc3339();
    let path = "/v1/tenants/acme/schedules/kickoff";
    let (status, created) = call(&kit, "PUT", path, Some(KEY), Some(schedule(&starts))).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    assert_eq!(
        (created["version"].clone(), created["mirrored"].clone()),
        (json!(1), json!(true))
    );
    let (status, got) = call(&kit, "GET", path, Some(KEY), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got["participants"], json!(["u0", "u1"]));
    assert_eq!(got["reminders"][0]["channels"], json!(["mail", "chat"]));
    let (_, updated) = call(&kit, "PUT", path, Some(KEY), Some(schedule(&starts))).await;
    assert_eq!(updated["version"], 2);
    assert_eq!(kit.index.rows().len(), 1);
    assert_eq!(
        call(&kit, "DELETE", path, Some(KEY), None).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        call(&kit, "GET", path, Some(KEY), None).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        call(&kit, "DELETE", path, Some(KEY), None).await.0,
        StatusCode::NOT_FOUND
    );
    assert!(kit.index.rows().is_empty());
}

#[tokio::test(start_paused = true)]
async fn users_round_trip_and_a_bad_address_is_422() {
    let kit = kit_with_tenant().await;
    let (status, body) = call(
        &kit,
        "PUT",
        "/v1/tenants/acme/users/ana",
        Some(KEY),
        Some(json!({"name": "Ana", "email": "ana@example.com", "time_zone": "Europe/Paris"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, got) = call(&kit, "GET", "/v1/tenants/acme/users/ana", Some(KEY), None).await;
    assert_eq!(got["email"], "ana@example.com");
    let (status, body) = call(
        &kit,
        "PUT",
        "/v1/tenants/acme/users/bo",
        Some(KEY),
        Some(json!({"name": "Bo", "email": "nope"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["error"]["field"], "email");
}

#[tokio::test(start_paused = true)]
async fn a_tenant_database_outage_is_503_and_an_index_outage_still_saves() {
    let kit = kit_with_tenant().await;
    let starts = (kit.now() + chrono::Duration::hours(2)).to_rfc3339();
    let path = "/v1/tenants/acme/schedules/kickoff";
    let store = kit.stores.get(&"acme".parse().unwrap()).unwrap();
    store.set_down(true);
    let (status, body) = call(&kit, "PUT", path, Some(KEY), Some(schedule(&starts))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    store.set_down(false);
    kit.index.set_down(true);
    let (status, body) = call(&kit, "PUT", path, Some(KEY), Some(schedule(&starts))).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "saved in the tenant database, the mirror left to repair: {body}"
    );
    assert_eq!(body["mirrored"], false);
    assert_eq!(
        store.unmirrored().await.unwrap().len(),
        1,
        "left for repair"
    );
}
