//! The registrar API router in-process (`tower::ServiceExt::oneshot`), on the
//! testing kit's in-memory ports: routes, status codes, errors naming fields,
//! nothing written on a 4xx.

use std::sync::Arc;

use axum::http::StatusCode;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use toki_app::api;
use toki_core::testing::TestKit;
use toki_ports::TenantStore;
use tower::ServiceExt;

use crate::common::{kit_with_tenant, KEY};

async fn call(
    kit: &TestKit,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let req = crate::common::request(method, path, key, body);
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

/// A Slack channel's id would let a tenant post into any channel the
/// operator's bot is in: 422 naming `slack_user_id`, the user not written.
#[tokio::test(start_paused = true)]
async fn a_slack_conversation_id_is_422_and_a_user_id_is_taken() {
    let kit = kit_with_tenant().await;
    let path = "/v1/tenants/acme/users/ana";
    for (id, says) in [
        ("C024BE91L", "channel id"),
        ("G024BE91L", "group id"),
        ("D024BE91L", "direct-message"),
        ("#general", "channel name"),
        ("@ana", "mention"),
    ] {
        let body = json!({"name": "Ana", "slack_user_id": id});
        let (status, body) = call(&kit, "PUT", path, Some(KEY), Some(body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{id}: {body}");
        assert_eq!(body["error"]["field"], "slack_user_id", "{id}: {body}");
        let problem = body["error"]["message"].as_str().unwrap_or_default();
        assert!(problem.contains(says), "{id}: {body}");
        let (status, _) = call(&kit, "GET", path, Some(KEY), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{id}: nothing written");
    }
    let body = json!({"name": "Ana", "slack_user_id": "W012A3CDE"});
    let (status, body) = call(&kit, "PUT", path, Some(KEY), Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["slack_user_id"], "W012A3CDE");
}

/// A tenant endpoint on a port other than 443 (the operator allows none
/// here) is a 422 naming the field, for a user's and the tenant's.
#[tokio::test(start_paused = true)]
async fn an_endpoint_on_another_port_than_443_is_422_naming_the_field() {
    let kit = kit_with_tenant().await;
    for (path, field, body) in [
        (
            "/v1/tenants/acme/users/ana",
            "webhook_url",
            json!({"name": "Ana", "webhook_url": "https://hooks.example.com:6379/"}),
        ),
        (
            "/v1/tenants/acme/webhook",
            "default_url",
            json!({"default_url": "https://hooks.example.com:8443/toki"}),
        ),
    ] {
        let (status, answer) = call(&kit, "PUT", path, Some(KEY), Some(body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("port"), "{answer}");
    }
    let body = json!({"name": "Ana", "webhook_url": "https://hooks.example.com:443/"});
    let (status, answer) = call(
        &kit,
        "PUT",
        "/v1/tenants/acme/users/ana",
        Some(KEY),
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
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
        store.unmirrored(chrono::Utc::now()).await.unwrap().len(),
        1,
        "left for repair"
    );
}

#[tokio::test(start_paused = true)]
async fn a_series_its_occurrences_and_their_exceptions_over_http() {
    let kit = kit_with_tenant().await;
    let k = Some(KEY);
    let base = "/v1/tenants/acme/schedules/standup";
    let mut series = schedule("2026-11-23T09:30:00");
    series["recurrence"] = json!({"rrule": "FREQ=WEEKLY;BYDAY=MO,WE,FR"});
    let (status, body) = call(&kit, "PUT", base, k, Some(series.clone())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["recurrence"]["rrule"], "FREQ=WEEKLY;BYDAY=MO,WE,FR");
    assert_eq!(body["starts_at"], "2026-11-23T09:30:00");
    // Move Wednesday's (named by its local time), cancel Friday's (by its instant).
    let (status, body) = call(
        &kit,
        "PUT",
        &format!("{base}/occurrences/2026-11-25T09:30:00"),
        k,
        Some(json!({"starts_at": "2026-11-25T11:00:00", "title": "Stand-up (late)"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["version"], 2);
    let (status, body) = call(
        &kit,
        "DELETE",
        &format!("{base}/occurrences/2026-11-27T08:30:00Z"),
        k,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["exceptions"].as_array().unwrap().len(), 2);
    let (status, body) = call(
        &kit,
        "GET",
        &format!("{base}/occurrences?from=2026-11-23T00:00:00Z&to=2026-12-01T00:00:00Z"),
        k,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let list: Vec<(String, String, bool)> = body["occurrences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["local_start"].as_str().unwrap().to_owned(),
                o["title"].as_str().unwrap().to_owned(),
                o["exception"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        list,
        vec![
            ("2026-11-23T09:30:00+01:00".into(), "Kick-off".into(), false),
            (
                "2026-11-25T11:00:00+01:00".into(),
                "Stand-up (late)".into(),
                true
            ),
            ("2026-11-30T09:30:00+01:00".into(), "Kick-off".into(), false),
        ]
    );
    // Not an occurrence of the rule: 404; a bad rule part: 422 naming it, nothing written.
    let (status, _) = call(
        &kit,
        "DELETE",
        &format!("{base}/occurrences/2026-11-24T09:30:00"),
        k,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let mut bad = series.clone();
    bad["recurrence"] = json!({"rrule": "FREQ=WEEKLY;BYSETPOS=1"});
    let (status, body) = call(&kit, "PUT", base, k, Some(bad)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["error"]["field"], "recurrence.rrule.BYSETPOS");
    let (_, body) = call(&kit, "GET", base, k, None).await;
    assert_eq!(body["version"], 3);
    // This and following: from 2 December on, afternoons, as another schedule.
    let mut following = series.clone();
    following["starts_at"] = json!("2026-12-02T14:00:00");
    let (status, body) = call(
        &kit,
        "PUT",
        &format!("{base}/occurrences/2026-12-02T09:30:00/following"),
        k,
        Some(json!({"new_id": "standup-pm", "schedule": following})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["ended"]["recurrence"]["rrule"],
        "FREQ=WEEKLY;BYDAY=MO,WE,FR;UNTIL=20261202T082959Z"
    );
    assert_eq!(body["following"]["id"], "standup-pm");
}

/// Issue 33: a series from 1900 is refused naming `starts_at`, nothing
/// written; one from the earliest allowed start lists a week at year 9998
/// (the work bounded by the window is asserted in toki-model).
#[tokio::test(start_paused = true)]
async fn calendar_bounds_over_http() {
    let kit = kit_with_tenant().await;
    let k = Some(KEY);
    let base = "/v1/tenants/acme/schedules/old";
    let mut old = schedule("1900-01-01T09:00:00");
    old["recurrence"] = json!({"rrule": "FREQ=DAILY"});
    let (status, body) = call(&kit, "PUT", base, k, Some(old.clone())).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["field"], "starts_at");
    let (status, _) = call(&kit, "GET", base, k, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing written");
    old["starts_at"] = json!("2000-01-01T09:00:00");
    let (status, body) = call(&kit, "PUT", base, k, Some(old)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let list = |window: &'static str| {
        let kit = &kit;
        async move {
            let path = format!("{base}/occurrences?{window}");
            call(kit, "GET", &path, k, None).await
        }
    };
    let (status, body) = list("from=9998-06-01T00:00:00Z&to=9998-06-08T00:00:00Z").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let listed = body["occurrences"].as_array().unwrap();
    assert_eq!(listed.len(), 7, "{body}");
    // The window is bounded: 401 days is a 422 naming `to`.
    let (status, body) = list("from=9998-01-01T00:00:00Z&to=9999-02-06T00:00:00Z").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["field"], "to");
}

/// Issue 33's template (ten billion steps, 100 GB of output): a 422 naming
/// `text` and the limit it crossed (its ranges too long; within the range
/// limit, its output), nothing written; a template that only crosses a
/// limit with the longest inputs likewise.
#[tokio::test(start_paused = true)]
async fn a_template_over_the_render_limits_is_422_and_writes_nothing() {
    let kit = kit_with_tenant().await;
    let path = "/v1/tenants/acme/templates/chat/en";
    let bomb = "{% for a in range(100000) %}{% for b in range(100000) %}xxxxxxxxxx{% endfor %}{% endfor %}";
    let (status, body) = call(&kit, "PUT", path, Some(KEY), Some(json!({"text": bomb}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["field"], "text");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("range has more than 10000 numbers"),
        "{body}"
    );
    let bomb = bomb.replace("100000", "10000");
    let (status, body) = call(&kit, "PUT", path, Some(KEY), Some(json!({"text": bomb}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("(output limit)"), "{body}");
    let spin = "{% for c in body %}{{ c|length }}{% endfor %}{{ title }}";
    let (status, body) = call(&kit, "PUT", path, Some(KEY), Some(json!({"text": spin}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["field"], "text");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("50000 steps of work a template may take (fuel) with the largest inputs"),
        "{body}"
    );
    let (status, _) = call(&kit, "GET", path, Some(KEY), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing was written");
    let store = kit.stores.get(&"acme".parse().unwrap()).unwrap();
    assert!(store.templates().await.unwrap().is_empty());
}

/// A second key with an expiry, then revoked; the tenant then suspended:
/// expired and revoked keys get the wrong key's 401 (ids cannot be probed),
/// a suspended tenant's valid key 403 `tenant_suspended`. The expiry is
/// crossed by advancing the kit's paused clock, not by sleeping.
#[tokio::test(start_paused = true)]
async fn expired_and_revoked_keys_get_401_a_suspended_tenant_403() {
    use toki_model::api_key::ApiKey;
    use toki_ports::TenantDirectory;
    let kit = kit_with_tenant().await;
    let acme: toki_model::TenantId = "acme".parse().unwrap();
    let mut record = kit.directory.get(&acme).await.unwrap().unwrap();
    let expiry = kit.now() + chrono::Duration::minutes(10);
    let ci = ApiKey::new("ci".parse().unwrap(), "toki_ci", kit.now(), Some(expiry));
    record.add_key(ci).unwrap();
    kit.directory.put(&record).await.unwrap();
    let path = "/v1/tenants/acme/users/ana";
    let user = Some(json!({"name": "Ana"}));
    let status = |key| {
        let (kit, user) = (&kit, user.clone());
        async move { call(kit, "PUT", path, Some(key), user).await }
    };
    assert_eq!(status("toki_ci").await.0, StatusCode::OK);
    tokio::time::advance(std::time::Duration::from_secs(600)).await;
    let (code, body) = status("toki_ci").await;
    assert_eq!(
        (code, &body["error"]["code"]),
        (StatusCode::UNAUTHORIZED, &json!("unauthorized"))
    );
    assert_eq!(body["error"]["message"], "unknown tenant or wrong API key");
    assert_eq!(
        status(KEY).await.0,
        StatusCode::OK,
        "the other key still opens"
    );
    record
        .revoke_key(&"default".parse().unwrap(), kit.now())
        .unwrap();
    kit.directory.put(&record).await.unwrap();
    let (code, revoked) = status(KEY).await;
    assert_eq!((code, revoked), (StatusCode::UNAUTHORIZED, body));
    let fresh = ApiKey::new("fresh".parse().unwrap(), "toki_fresh", kit.now(), None);
    record.add_key(fresh).unwrap();
    record.active = false;
    kit.directory.put(&record).await.unwrap();
    let (code, body) = status("toki_fresh").await;
    assert_eq!(
        (code, &body["error"]["code"]),
        (StatusCode::FORBIDDEN, &json!("tenant_suspended"))
    );
    assert_eq!(
        status("toki_wrong").await.0,
        StatusCode::UNAUTHORIZED,
        "403 only with a valid key"
    );
}
