//! The audit log on the embedded backend, as an operator and a tenant's
//! program use it together: writes through the `toki` CLI (as the operator
//! `TOKI_OPERATOR` names) and through the API (as the key's name) land in
//! the tenant's log in order, and `toki audit list` and `GET …/audit` show
//! exactly them.

use crate::common::process::TOKI;

use std::process::Command;
use std::sync::Arc;

use serde_json::{json, Value};
use toki_app::{Config, Toki};

fn toki(data: &std::path::Path, operator: &str, args: &[&str]) -> String {
    let out = Command::new(TOKI)
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .env("TOKI_OPERATOR", operator)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

async fn api(base: &str, key: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let method: reqwest::Method = method.parse().unwrap();
    let mut req = reqwest::Client::new()
        .request(method, format!("{base}/v1/tenants/acme/{path}"))
        .bearer_auth(key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The API over `toki`, in this process, on a free port: its base URL.
async fn serve_api(toki: &Toki) -> String {
    let router = toki_app::api::router(Arc::new(toki.registrar()));
    format!("http://{}", toki_devtools::serve_locally(router).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_and_api_writes_are_listed_with_their_actors_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let key = toki(data, "alice", &["tenant", "create", "acme"])
        .trim()
        .to_owned();
    let config = Config {
        data_dir: data.to_path_buf(),
        ..Config::default()
    };
    let t = Toki::open(config).await.unwrap();
    let base = serve_api(&t).await;
    let starts = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    let meeting = json!({"title": "Review", "starts_at": starts, "participants": ["ann"],
                         "reminders": [{"minutes_before": 5, "channels": ["chat"]}]});
    for (method, path, body, want) in [
        ("PUT", "users/ann", Some(json!({"name": "Ann"})), 200),
        ("GET", "users/ann", None, 200),
        ("PUT", "schedules/m1", Some(meeting.clone()), 200),
        ("PUT", "schedules/m1", Some(meeting), 200),
        (
            "PUT",
            "schedules/m2",
            Some(
                json!({"title": "bad start", "starts_at": "not a time", "participants": ["ann"],
                        "reminders": [{"minutes_before": 5, "channels": ["chat"]}]}),
            ),
            422,
        ),
        ("DELETE", "schedules/m1", None, 204),
        (
            "PUT",
            "templates/mail/en",
            Some(json!({"subject": "{{ title }}", "text": "soon"})),
            200,
        ),
        (
            "PUT",
            "webhook",
            Some(json!({"default_url": "https://hooks.example/w"})),
            200,
        ),
        ("POST", "webhook/secret:rotate", None, 200),
        (
            "PUT",
            "event-endpoints/ops",
            Some(json!({"url": "https://hooks.example/t"})),
            201,
        ),
    ] {
        let (status, answer) = api(&base, &key, method, path, body).await;
        assert_eq!(status, want, "{method} {path}: {answer}");
    }
    // An operator name with control characters is stored escaped.
    toki(
        data,
        "bob\nroot",
        &["tenant", "set", "acme", "--change-notices", "on"],
    );
    toki(
        data,
        "bob\u{1b}[2J",
        &["tenant", "key", "create", "acme", "ci"],
    );

    let listed = toki(
        data,
        "carol",
        &["audit", "list", "--tenant", "acme", "--json"],
    );
    let entries: Vec<Value> = listed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let got: Vec<(String, String, Value, Value, Value)> = entries
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap().to_owned();
            (
                s("actor"),
                s("action"),
                e["resource"].clone(),
                e["version_before"].clone(),
                e["version_after"].clone(),
            )
        })
        .collect();
    let n = Value::Null;
    let row = |actor: &str, action: &str, resource: Value, before: Value, after: Value| {
        (actor.to_owned(), action.to_owned(), resource, before, after)
    };
    assert_eq!(
        got,
        vec![
            row(
                "operator:alice",
                "tenant.create",
                n.clone(),
                n.clone(),
                n.clone()
            ),
            row(
                "key:default",
                "user.put",
                json!("ann"),
                n.clone(),
                n.clone()
            ),
            row(
                "key:default",
                "schedule.put",
                json!("m1"),
                n.clone(),
                json!(1)
            ),
            row(
                "key:default",
                "schedule.put",
                json!("m1"),
                json!(1),
                json!(2)
            ),
            row(
                "key:default",
                "schedule.delete",
                json!("m1"),
                json!(2),
                n.clone()
            ),
            row(
                "key:default",
                "template.put",
                json!("mail/en"),
                n.clone(),
                n.clone()
            ),
            row(
                "key:default",
                "webhook.put",
                n.clone(),
                n.clone(),
                n.clone()
            ),
            row(
                "key:default",
                "webhook.rotate_secret",
                n.clone(),
                n.clone(),
                n.clone()
            ),
            row(
                "key:default",
                "event_endpoint.put",
                json!("ops"),
                n.clone(),
                n.clone()
            ),
            row(
                "operator:bob\\u{a}root",
                "contract.set",
                n.clone(),
                n.clone(),
                n.clone()
            ),
            row(
                "operator:bob\\u{1b}[2J",
                "key.add",
                json!("ci"),
                n.clone(),
                n.clone()
            ),
        ]
    );
    let seqs: Vec<u64> = entries.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=11).collect::<Vec<_>>());

    // The API lists the same entries.
    let (status, page) = api(&base, &key, "GET", "audit?limit=1000", None).await;
    assert_eq!(status, 200);
    let api_actions: Vec<&str> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    let cli_actions: Vec<&str> = got.iter().map(|g| g.1.as_str()).collect();
    assert_eq!(api_actions, cli_actions);
}
