//! Erasure of a person through the API (`DELETE …/users/{id}?erase=true`),
//! with the scanner and the daemon running on the paused clock: reminders
//! already queued and those still in the index reach the other
//! participants and never the erased one; the answer counts what went; the
//! parameter is required.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use toki_app::api;
use toki_core::testing::TestKit;
use tower::ServiceExt;

use crate::common::{kit_with_tenant, KEY};

async fn call(kit: &TestKit, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let req = crate::common::request(method, path, Some(KEY), body);
    let resp = api::router(Arc::new(kit.registrar()))
        .oneshot(req)
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, value)
}

/// The person erased: values found nowhere else.
const ZELDA: &str = "zelda-erase-7q";
const NEEDLES: [&str; 4] = [
    ZELDA,
    "Zelda Erasewright",
    "zelda.erasewright@example.com",
    "UZELDAERASE",
];

fn user(name: &str, email: &str, slack: &str) -> Value {
    json!({"name": name, "email": email, "slack_user_id": slack, "time_zone": "Europe/Paris"})
}

fn meeting(kit: &TestKit, starts_in_min: i64, participants: &[&str], channels: &[&str]) -> Value {
    json!({
        "title": "Design review", "time_zone": "Europe/Paris",
        "starts_at": (kit.now() + chrono::Duration::minutes(starts_in_min)).to_rfc3339(),
        "participants": participants,
        "reminders": [{"minutes_before": 10, "channels": channels}]
    })
}

async fn put_people(kit: &TestKit) {
    for (id, body) in [
        (ZELDA, user(NEEDLES[1], NEEDLES[2], NEEDLES[3])),
        ("bob", user("Bob", "bob@example.com", "UBOB")),
        ("carol", user("Carol", "carol@example.com", "UCAROL")),
    ] {
        let (status, b) = call(
            kit,
            "PUT",
            &format!("/v1/tenants/acme/users/{id}"),
            Some(body),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{b}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_erased_user_gets_nothing_and_the_others_get_theirs() {
    let kit = kit_with_tenant().await;
    put_people(&kit).await;
    // Due in 2 minutes: in the scanner's window, so queued at once (its
    // message names version 1). Due in 50 minutes: still in the index.
    let soon = meeting(&kit, 12, &[ZELDA, "bob"], &["mail", "chat"]);
    let later = meeting(&kit, 60, &[ZELDA, "carol"], &["mail", "slack"]);
    for (id, body) in [("soon", soon), ("later", later)] {
        let path = format!("/v1/tenants/acme/schedules/{id}");
        let (status, b) = call(&kit, "PUT", &path, Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{b}");
    }
    let running = kit.run();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(kit.sent().is_empty(), "nothing is due yet");

    let path = format!("/v1/tenants/acme/users/{ZELDA}?erase=true");
    let (status, body) = call(&kit, "DELETE", &path, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["mirrored"], true);
    let erased = &body["erased"];
    assert_eq!(
        (
            &erased["users"],
            &erased["participations"],
            &erased["schedules_changed"]
        ),
        (&json!(1), &json!(2), &json!(2))
    );
    for n in NEEDLES {
        assert!(
            !body.to_string().contains(n),
            "the answer names them: {body}"
        );
    }

    tokio::time::sleep(Duration::from_secs(60 * 60)).await;
    running.stop().await;
    let sent = kit.sent();
    let got: BTreeSet<(String, String, String)> = sent
        .iter()
        .map(|s| {
            (
                s.key.schedule.to_string(),
                s.key.recipient.to_string(),
                s.key.channel.to_string(),
            )
        })
        .collect();
    let want: BTreeSet<(String, String, String)> = [
        ("soon", "bob", "mail"),
        ("soon", "bob", "chat"),
        ("later", "carol", "mail"),
        ("later", "carol", "slack"),
    ]
    .into_iter()
    .map(|(a, b, c)| (a.into(), b.into(), c.into()))
    .collect();
    assert_eq!(got, want, "the others get theirs, the erased one nothing");
    assert_eq!(sent.len(), 4, "each once");
    no_trace(&kit, &sent).await;
}

/// Nothing Toki holds names them afterwards: the tenant store whole, the
/// index rows, what was sent.
async fn no_trace(kit: &TestKit, sent: &[toki_ports::testing::SentNotification]) {
    let store = kit.stores.get(&"acme".parse().unwrap()).unwrap();
    let held = store.dump();
    let index = format!("{:?}", kit.index.rows());
    let sends = format!("{sent:?}");
    for n in NEEDLES {
        assert!(!held.contains(n), "the tenant store still holds {n}");
        assert!(!index.contains(n), "the index still holds {n}");
        assert!(!sends.contains(n), "a send names {n}");
    }
    assert!(held.contains("Carol"), "the search reads the store: {held}");
    let (status, _) = call(kit, "GET", &format!("/v1/tenants/acme/users/{ZELDA}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(start_paused = true)]
async fn erase_is_required_and_unknown_users_are_not_found() {
    let kit = kit_with_tenant().await;
    put_people(&kit).await;
    let base = format!("/v1/tenants/acme/users/{ZELDA}");
    for query in ["", "?erase=false", "?erase=1", "?erase="] {
        let (status, body) = call(&kit, "DELETE", &format!("{base}{query}"), None).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {body}");
        assert_eq!(body["error"]["field"], "erase", "{query}");
    }
    let (status, body) = call(&kit, "DELETE", &format!("{base}?erase=true&x=1"), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = call(&kit, "GET", &base, None).await;
    assert_eq!(status, StatusCode::OK, "a refused erasure removes nothing");

    let (status, _) = call(&kit, "DELETE", &format!("{base}?erase=true"), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = call(&kit, "DELETE", &format!("{base}?erase=true"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing left: {body}");
    let (status, _) = call(
        &kit,
        "DELETE",
        "/v1/tenants/acme/users/nobody?erase=true",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = call(
        &kit,
        "DELETE",
        "/v1/tenants/acme/users/no%20such?erase=true",
        None,
    )
    .await;
    assert_eq!(
        (status, &body["error"]["field"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("id"))
    );
}
