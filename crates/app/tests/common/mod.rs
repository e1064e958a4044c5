//! What the app's in-process API tests share: a test kit with tenant `acme`
//! whose API key is [`KEY`].

use axum::body::Body;
use axum::http::Request;
use serde_json::Value;
use toki_core::testing::TestKit;
use toki_model::api_key::ApiKey;
use toki_model::TenantRecord;
use toki_ports::{Clock, TenantDirectory};

pub const KEY: &str = "toki_test_key";

pub async fn kit_with_tenant() -> TestKit {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    kit.directory
        .put(&TenantRecord {
            id: t,
            reminders_enabled: true,
            active: true,
            database: "memory:acme".into(),
            api_keys: vec![ApiKey::new(
                "default".parse().unwrap(),
                KEY,
                kit.clock.now(),
                None,
            )],
            change_notices: Default::default(),
            limits: Default::default(),
            retention: Default::default(),
        })
        .await
        .unwrap();
    kit
}

/// A request to the API: with `key` as a bearer token if given, `body` as
/// JSON if given.
pub fn request(method: &str, path: &str, key: Option<&str>, body: Option<Value>) -> Request<Body> {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(k) = key {
        req = req.header("authorization", format!("Bearer {k}"));
    }
    match body {
        Some(b) => req
            .header("content-type", "application/json")
            .body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    }
    .expect("a well-formed request")
}
