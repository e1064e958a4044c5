//! The audit log over HTTP, in-process on the testing kit: a scripted
//! sequence of writes is listed exactly, in order, with actor, action,
//! resource and versions; reads, refused writes and idempotent replays are
//! not recorded; the log cannot be written through the API, and nothing a
//! request carries can choose its actor.

use std::sync::Arc;

use axum::http::StatusCode;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use toki_app::api;
use toki_core::testing::TestKit;
use toki_model::api_key::ApiKey;
use toki_model::TenantId;
use toki_ports::{Clock, TenantDirectory};
use tower::ServiceExt;

use crate::common::{kit_with_tenant, request, KEY};

const T: &str = "/v1/tenants/acme";

async fn send(kit: &TestKit, req: axum::http::Request<axum::body::Body>) -> (StatusCode, Value) {
    let resp = api::router(Arc::new(kit.registrar()))
        .oneshot(req)
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, body)
}

async fn call(kit: &TestKit, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    send(
        kit,
        request(method, &format!("{T}/{path}"), Some(KEY), body),
    )
    .await
}

/// The log as (actor, action, resource, before, after), oldest first.
async fn listed(kit: &TestKit) -> Vec<(String, String, Value, Value, Value)> {
    let (status, page) = call(kit, "GET", "audit?limit=1000", None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["actor"].as_str().unwrap().to_owned(),
                e["action"].as_str().unwrap().to_owned(),
                e["resource"].clone(),
                e["version_before"].clone(),
                e["version_after"].clone(),
            )
        })
        .collect()
}

fn meeting(starts_at: &str) -> Value {
    json!({"title": "Stand-up", "starts_at": starts_at, "time_zone": "UTC",
           "participants": ["ann"], "reminders": [{"minutes_before": 5, "channels": ["chat"]}]})
}

#[tokio::test(start_paused = true)]
async fn every_write_of_a_scripted_sequence_is_listed_in_order() {
    let kit = kit_with_tenant().await;
    let ok = |(s, b): (StatusCode, Value)| assert!(s.is_success(), "{s} {b}");
    ok(call(&kit, "PUT", "users/ann", Some(json!({"name": "Ann"}))).await);
    ok(call(&kit, "GET", "users/ann", None).await);
    ok(call(
        &kit,
        "PUT",
        "schedules/m1",
        Some(meeting("2026-11-24T09:00:00Z")),
    )
    .await);
    ok(call(
        &kit,
        "PUT",
        "schedules/m1",
        Some(meeting("2026-11-24T10:00:00Z")),
    )
    .await);
    ok(call(&kit, "GET", "schedules/m1", None).await);
    // Refused writes are not recorded.
    let mut unknown = meeting("2026-11-24T09:00:00Z");
    unknown["participants"] = json!(["nobody"]);
    let (status, _) = call(&kit, "PUT", "schedules/m2", Some(unknown)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = call(&kit, "DELETE", "schedules/nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    ok(call(&kit, "DELETE", "schedules/m1", None).await);
    let batch = json!({"schedules": [
        {"id": "b1", "title": "A", "starts_at": "2026-11-25T09:00:00Z", "participants": ["ann"], "reminders": []},
        {"id": "b2", "title": "B", "starts_at": "2026-11-25T09:00:00Z", "participants": ["nobody"], "reminders": []},
    ]});
    ok(call(&kit, "POST", "schedules:batch", Some(batch)).await);
    ok(call(
        &kit,
        "PUT",
        "templates/chat/en",
        Some(json!({"text": "{{ title }} soon"})),
    )
    .await);
    ok(call(
        &kit,
        "PUT",
        "webhook",
        Some(json!({"default_url": "https://hooks.example/w"})),
    )
    .await);
    ok(call(&kit, "POST", "webhook/secret:rotate", None).await);
    let endpoint = json!({"url": "https://hooks.example/toki"});
    ok(call(&kit, "PUT", "event-endpoints/ops", Some(endpoint)).await);
    ok(call(&kit, "GET", "event-endpoints", None).await);
    ok(call(&kit, "GET", "audit", None).await);

    let k = "key:default".to_owned();
    let s = |v: &str| json!(v);
    let n = Value::Null;
    assert_eq!(
        listed(&kit).await,
        vec![
            (k.clone(), "user.put".into(), s("ann"), n.clone(), n.clone()),
            (
                k.clone(),
                "schedule.put".into(),
                s("m1"),
                n.clone(),
                json!(1)
            ),
            (
                k.clone(),
                "schedule.put".into(),
                s("m1"),
                json!(1),
                json!(2)
            ),
            (
                k.clone(),
                "schedule.delete".into(),
                s("m1"),
                json!(2),
                n.clone()
            ),
            (
                k.clone(),
                "schedule.put".into(),
                s("b1"),
                n.clone(),
                json!(1)
            ),
            (
                k.clone(),
                "template.put".into(),
                s("chat/en"),
                n.clone(),
                n.clone()
            ),
            (
                k.clone(),
                "webhook.put".into(),
                n.clone(),
                n.clone(),
                n.clone()
            ),
            (
                k.clone(),
                "webhook.rotate_secret".into(),
                n.clone(),
                n.clone(),
                n.clone()
            ),
            (
                k.clone(),
                "event_endpoint.put".into(),
                s("ops"),
                n.clone(),
                n.clone()
            ),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn entries_are_paged_and_carry_the_clock() {
    let kit = kit_with_tenant().await;
    for u in ["a", "b", "c"] {
        let (s, _) = call(&kit, "PUT", &format!("users/{u}"), Some(json!({"name": u}))).await;
        assert_eq!(s, StatusCode::OK);
    }
    let (_, first) = call(&kit, "GET", "audit?limit=2", None).await;
    assert_eq!(first["entries"].as_array().unwrap().len(), 2);
    assert_eq!(first["entries"][0]["seq"], 1);
    assert_eq!(first["entries"][0]["at"], json!(kit.clock.now()));
    assert_eq!(first["next_after"], 2);
    let (_, rest) = call(&kit, "GET", "audit?after=2&limit=2", None).await;
    assert_eq!(rest["entries"][0]["resource"], "c");
    assert!(rest.get("next_after").is_none(), "{rest}");
    for bad in ["audit?limit=0", "audit?limit=1001"] {
        let (status, body) = call(&kit, "GET", bad, None).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
        assert_eq!(body["error"]["field"], "limit");
    }
    let (status, _) = call(&kit, "GET", "audit?actor=x", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test(start_paused = true)]
async fn the_log_cannot_be_written_through_the_api() {
    let kit = kit_with_tenant().await;
    let forged = json!({"actor": "operator:root", "action": "key.revoke", "resource": "default"});
    for method in ["PUT", "POST", "DELETE", "PATCH"] {
        for path in ["audit", "audit/1"] {
            let (status, _) = call(&kit, method, path, Some(forged.clone())).await;
            assert!(
                status == StatusCode::METHOD_NOT_ALLOWED || status == StatusCode::NOT_FOUND,
                "{method} {path}: {status}"
            );
        }
    }
    // Without a key, not even the listing.
    let (status, _) = send(&kit, request("GET", &format!("{T}/audit"), None, None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(listed(&kit).await, vec![], "nothing recorded");
}

#[tokio::test(start_paused = true)]
async fn the_actor_is_the_authenticated_key_whatever_the_request_says() {
    let kit = kit_with_tenant().await;
    let acme: TenantId = "acme".parse().unwrap();
    let mut record = kit.directory.get(&acme).await.unwrap().unwrap();
    record
        .add_key(ApiKey::new(
            "ci-2026".parse().unwrap(),
            "toki_ci",
            kit.clock.now(),
            None,
        ))
        .unwrap();
    kit.directory.put(&record).await.unwrap();
    // A body and headers that name another actor, with control characters.
    let body = json!({"name": "Eve\n2026 key:default user.erase", "actor": "operator:root"});
    let mut req = request(
        "PUT",
        &format!("{T}/users/eve"),
        Some("toki_ci"),
        Some(body),
    );
    req.headers_mut()
        .insert("x-toki-actor", "operator:root".parse().unwrap());
    req.headers_mut()
        .insert("x-toki-operator", "root".parse().unwrap());
    let (status, answer) = send(&kit, req).await;
    assert!(
        status.is_client_error(),
        "an unknown field is refused: {answer}"
    );
    let body = json!({"name": "Eve\n2026 key:default user.erase"});
    let mut req = request(
        "PUT",
        &format!("{T}/users/eve"),
        Some("toki_ci"),
        Some(body),
    );
    req.headers_mut()
        .insert("x-toki-actor", "operator:root".parse().unwrap());
    let (status, answer) = send(&kit, req).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let log = listed(&kit).await;
    assert_eq!(
        log,
        vec![(
            "key:ci-2026".into(),
            "user.put".into(),
            json!("eve"),
            Value::Null,
            Value::Null
        )]
    );
}

#[tokio::test(start_paused = true)]
async fn an_idempotent_replay_is_not_recorded_again() {
    let kit = kit_with_tenant().await;
    let (s, _) = call(&kit, "PUT", "users/ann", Some(json!({"name": "Ann"}))).await;
    assert_eq!(s, StatusCode::OK);
    let batch = json!({"schedules": [{"id": "b1", "title": "A",
        "starts_at": "2026-11-25T09:00:00Z", "participants": ["ann"], "reminders": []}]});
    for _ in 0..2 {
        let mut req = request(
            "POST",
            &format!("{T}/schedules:batch"),
            Some(KEY),
            Some(batch.clone()),
        );
        req.headers_mut()
            .insert("idempotency-key", "k-1".parse().unwrap());
        let (s, body) = send(&kit, req).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        assert_eq!(body["written"], 1, "{body}");
    }
    let actions: Vec<String> = listed(&kit).await.into_iter().map(|e| e.1).collect();
    assert_eq!(actions, ["user.put", "schedule.put"]);
}

/// An erasure's entry names nobody however the query spells `erase=true`:
/// the audit log decodes it as the handler does (before, `erase=%74rue`
/// erased and the entry recorded the person's id as a `user.delete`).
#[tokio::test(start_paused = true)]
async fn an_erasure_entry_names_nobody_in_every_spelling() {
    let kit = kit_with_tenant().await;
    for (i, query) in [
        "erase=true",
        "erase=%74rue",
        "%65rase=true",
        "erase=%74%72%75%65",
    ]
    .iter()
    .enumerate()
    {
        let who = format!("erased-person-{i}");
        let (s, b) = call(
            &kit,
            "PUT",
            &format!("users/{who}"),
            Some(json!({"name": "P"})),
        )
        .await;
        assert!(s.is_success(), "{s} {b}");
        let (s, b) = call(&kit, "DELETE", &format!("users/{who}?{query}"), None).await;
        assert_eq!(s, StatusCode::OK, "{query}: {b}");
        let log = listed(&kit).await;
        let (_, action, resource, _, _) = log.last().unwrap();
        assert_eq!(action, "user.erase", "{query}");
        assert_eq!(resource, &Value::Null, "{query}: the entry names nobody");
        let named: Vec<_> = log
            .iter()
            .filter(|(_, a, r, _, _)| a != "user.put" && r.as_str() == Some(who.as_str()))
            .collect();
        assert!(named.is_empty(), "{query}: {named:?}");
    }
}
