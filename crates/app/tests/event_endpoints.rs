//! Delivery-event endpoints over HTTP, in-process on the testing kit: the
//! secret shown once, bad input a 4xx naming its field with nothing written,
//! the cap on endpoints, rotation, enable, replay and the event log.

use std::sync::Arc;

use axum::http::StatusCode;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use toki_app::api;
use toki_core::testing::TestKit;
use toki_model::domain::{
    Channel, DeliveryKey, DeliveryOutcome, DeliveryPurpose, DeliveryStatus, DueAt, Occurrence,
};
use toki_ports::{Clock, TenantStores};
use tower::ServiceExt;

use crate::common::{kit_with_tenant, request, KEY};

const ENDPOINTS: &str = "/v1/tenants/acme/event-endpoints";

async fn call(kit: &TestKit, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let resp = api::router(Arc::new(kit.registrar()))
        .oneshot(request(method, path, Some(KEY), body))
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, body)
}

#[tokio::test]
async fn an_endpoint_is_registered_with_its_secret_shown_once() {
    let kit = kit_with_tenant().await;
    let input = json!({"url": "https://hooks.example/toki", "types": ["delivery.failed"]});
    let (status, created) = call(
        &kit,
        "PUT",
        &format!("{ENDPOINTS}/ops"),
        Some(input.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert!(created["secret"].as_str().unwrap().starts_with("whsec_"));
    assert_eq!(created["types"], json!(["delivery.failed"]));
    assert_eq!(created["ordering"], "in_order");
    assert_eq!(created["enabled"], true);

    let (status, again) = call(&kit, "PUT", &format!("{ENDPOINTS}/ops"), Some(input)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        again.get("secret").is_none(),
        "shown only when made: {again}"
    );
    let (_, read) = call(&kit, "GET", &format!("{ENDPOINTS}/ops"), None).await;
    assert!(read.get("secret").is_none());
    let (_, list) = call(&kit, "GET", ENDPOINTS, None).await;
    assert_eq!(list["endpoints"].as_array().unwrap().len(), 1);

    let (status, rotated) = call(
        &kit,
        "POST",
        &format!("{ENDPOINTS}/ops/secret:rotate"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_ne!(rotated["secret"], created["secret"]);

    let (status, _) = call(&kit, "DELETE", &format!("{ENDPOINTS}/ops"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&kit, "GET", &format!("{ENDPOINTS}/ops"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bad_input_names_the_field_and_writes_nothing() {
    let kit = kit_with_tenant().await;
    let long = format!("https://h.example/{}", "a".repeat(2100));
    let cases = [
        (json!({"url": "ftp://h.example/"}), "url"),
        (json!({"url": "https://u:p@h.example/"}), "url"),
        (json!({"url": long}), "url"),
        (
            json!({"url": "https://h.example/", "types": ["delivery.sent"]}),
            "types[0]",
        ),
        (json!({"url": "https://h.example/", "types": []}), "types"),
    ];
    for (body, field) in cases {
        let (status, answer) = call(&kit, "PUT", &format!("{ENDPOINTS}/bad"), Some(body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
    }
    let (status, answer) = call(
        &kit,
        "PUT",
        &format!("{ENDPOINTS}/bad"),
        Some(json!({"url": "https://h.example/", "extra": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let (status, answer) = call(
        &kit,
        "PUT",
        &format!("{ENDPOINTS}/a%20b"),
        Some(json!({"url": "https://h.example/"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(answer["error"]["field"], "id");
    let (_, list) = call(&kit, "GET", ENDPOINTS, None).await;
    assert_eq!(list["endpoints"], json!([]), "nothing written");

    for i in 0..toki_core::events::MAX_ENDPOINTS {
        let (status, _) = call(
            &kit,
            "PUT",
            &format!("{ENDPOINTS}/e{i}"),
            Some(json!({"url": "https://h.example/"})),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let (status, answer) = call(
        &kit,
        "PUT",
        &format!("{ENDPOINTS}/one-more"),
        Some(json!({"url": "https://h.example/"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["error"]["code"], "cap_reached", "{answer}");
    assert_eq!(answer["error"]["field"], "max_event_endpoints", "{answer}");
}

#[tokio::test]
async fn the_log_lists_in_pages_and_a_replay_rewinds() {
    let kit = kit_with_tenant().await;
    let (status, _) = call(
        &kit,
        "PUT",
        &format!("{ENDPOINTS}/hook"),
        Some(json!({"url": "https://h.example/"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let store = kit.stores.open(&"acme".parse().unwrap()).await.unwrap();
    let now = kit.clock.now();
    let outcomes: Vec<_> = (0..3)
        .map(|i| DeliveryOutcome {
            key: DeliveryKey {
                schedule: format!("s{i}").parse().unwrap(),
                occurrence: Occurrence(now),
                purpose: DeliveryPurpose::Reminder { minutes_before: 5 },
                recipient: "u0".parse().unwrap(),
                channel: Channel::Chat,
            },
            version: 1,
            due_at: DueAt(now),
            status: DeliveryStatus::Delivered,
            at: now,
            detail: None,
        })
        .collect();
    store.record_outcomes(&outcomes).await.unwrap();

    let (status, page) = call(&kit, "GET", "/v1/tenants/acme/events?limit=2", None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["events"].as_array().unwrap().len(), 2);
    assert_eq!(page["events"][0]["type"], "delivery.delivered");
    assert_eq!(page["events"][0]["id"], "evt_1");
    assert_eq!(page["next_after"], 2);
    let (_, rest) = call(&kit, "GET", "/v1/tenants/acme/events?after=2", None).await;
    assert_eq!(rest["events"].as_array().unwrap().len(), 1);
    assert!(rest.get("next_after").is_none());
    let (status, answer) = call(&kit, "GET", "/v1/tenants/acme/events?limit=0", None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(answer["error"]["field"], "limit");

    let since = (now - chrono::Duration::minutes(1)).to_rfc3339();
    let (status, rewound) = call(
        &kit,
        "POST",
        &format!("{ENDPOINTS}/hook/replay"),
        Some(json!({"since": since})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{rewound}");
    assert_eq!(rewound["delivered_through"], 0);
    let (status, enabled) = call(&kit, "POST", &format!("{ENDPOINTS}/hook/enable"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(enabled["enabled"], true);
    let (status, _) = call(&kit, "POST", &format!("{ENDPOINTS}/nope/enable"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn private_loopback_and_metadata_endpoints_are_refused() {
    let kit = kit_with_tenant().await;
    for url in [
        "https://127.0.0.1/hook",
        "https://10.0.0.7/hook",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]/hook",
        "https://[::ffff:192.168.1.1]/hook",
        "http://hooks.example/plain-http",
        // IPv6 forms that lead to an IPv4 host through a relay (issue 59).
        "https://[2002:a00:1::1]/hook",
        "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/hook",
        "https://[64:ff9b:1::a00:1]/hook",
        // A port other than 443: another service of the host.
        "https://hooks.example.com:25/hook",
        "https://hooks.example.com:8443/hook",
    ] {
        let (status, answer) = call(
            &kit,
            "PUT",
            &format!("{ENDPOINTS}/ssrf"),
            Some(json!({"url": url})),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {answer}");
        assert_eq!(answer["error"]["field"], "url", "{url}: {answer}");
    }
    let (_, list) = call(&kit, "GET", ENDPOINTS, None).await;
    assert_eq!(list["endpoints"], json!([]), "nothing written");
}
