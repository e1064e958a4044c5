//! The registrar HTTP API as a client uses it: `toki serve` started as a
//! process, a tenant created with `toki tenant create`, then HTTP calls.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use chrono::{Duration as ChronoDuration, Utc};
use serde_json::{json, Value};

const TOKI: &str = env!("CARGO_BIN_EXE_toki");

struct Server {
    child: Child,
    base: String,
    data: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

fn toki(data: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(TOKI)
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap()
}

async fn serve() -> (Server, String) {
    let data = tempfile::tempdir().unwrap().keep();
    let created = toki(&data, &["tenant", "create", "acme"]);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let key = String::from_utf8(created.stdout)
        .unwrap()
        .trim()
        .to_string();
    assert!(key.starts_with("toki_"), "the API key is printed: {key:?}");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(TOKI)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    for _ in 0..100 {
        if reqwest::get(format!("{base}/healthz")).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (Server { child, base, data }, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_and_schedules_over_http() {
    let (server, key) = serve().await;
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{}/v1/tenants/acme/{p}", server.base);

    // No key, wrong key, unknown tenant: 401.
    let r = http
        .put(url("users/ana"))
        .json(&json!({"name": "Ana"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .put(url("users/ana"))
        .bearer_auth("toki_wrong")
        .json(&json!({"name": "Ana"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .put(format!("{}/v1/tenants/nobody/users/ana", server.base))
        .bearer_auth(&key)
        .json(&json!({"name": "Ana"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // Users.
    let r = http
        .put(url("users/ana"))
        .bearer_auth(&key)
        .json(&json!({"name": "Ana", "email": "ana@example.com", "slack_user_id": "U01", "time_zone": "Europe/Paris"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = http
        .put(url("users/bo"))
        .bearer_auth(&key)
        .json(&json!({"name": "Bo", "email": "nope"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["field"], "email");

    // A schedule with a bad field: 422 naming it, nothing written.
    let starts = (Utc::now() + ChronoDuration::hours(2)).to_rfc3339();
    let good = json!({
        "title": "Kick-off", "starts_at": starts, "time_zone": "Europe/Paris",
        "participants": ["ana"], "reminders": [{"minutes_before": 10, "channels": ["mail", "chat"]}]
    });
    let mut bad = good.clone();
    bad["reminders"][0]["channels"][1] = json!("fax");
    let r = http
        .put(url("schedules/kickoff"))
        .bearer_auth(&key)
        .json(&bad)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["field"], "reminders[0].channels[1]", "{body}");
    assert_eq!(
        http.get(url("schedules/kickoff"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    let mut ghost = good.clone();
    ghost["participants"] = json!(["ana", "ghost"]);
    let body: Value = http
        .put(url("schedules/kickoff"))
        .bearer_auth(&key)
        .json(&ghost)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["error"]["field"], "participants[1]", "{body}");
    let r = http
        .put(url("schedules/kickoff"))
        .bearer_auth(&key)
        .body("{\"title\": 3}")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    // Create, read, update, delete.
    let r = http
        .put(url("schedules/kickoff"))
        .bearer_auth(&key)
        .json(&good)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let created: Value = r.json().await.unwrap();
    assert_eq!(created["version"], 1);
    assert_eq!(created["mirrored"], true);
    let got: Value = http
        .get(url("schedules/kickoff"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["participants"], json!(["ana"]));
    assert_eq!(got["reminders"][0]["channels"], json!(["mail", "chat"]));
    let updated: Value = http
        .put(url("schedules/kickoff"))
        .bearer_auth(&key)
        .json(&good)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(updated["version"], 2);
    assert_eq!(
        http.delete(url("schedules/kickoff"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(
        http.get(url("schedules/kickoff"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        http.delete(url("schedules/kickoff"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_delivers_and_stops_cleanly_on_sigterm() {
    let (mut server, key) = serve().await;
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{}/v1/tenants/acme/{p}", server.base);
    http.put(url("users/ana"))
        .bearer_auth(&key)
        .json(&json!({"name": "Ana", "slack_user_id": "U01"}))
        .send()
        .await
        .unwrap();
    let due = common::pipeline::due_in(3);
    let r = http
        .put(url("schedules/standup"))
        .bearer_auth(&key)
        .json(&json!({
            "title": "Stand-up", "starts_at": (due + ChronoDuration::minutes(1)).to_rfc3339(),
            "participants": ["ana"], "reminders": [{"minutes_before": 1, "channels": ["slack", "chat"]}]
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    tokio::time::sleep((due - Utc::now()).to_std().unwrap_or_default() + Duration::from_secs(2))
        .await;
    // SIGTERM: the server drains and exits 0.
    let pid = server.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let mut status = None;
    for _ in 0..100 {
        if let Some(s) = server.child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(status
        .expect("toki serve did not stop on SIGTERM")
        .success());
    let report = toki(&server.data, &["report", "--json"]);
    let rows: Value = serde_json::from_slice(&report.stdout).unwrap();
    let delivered: u64 = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "delivered")
        .map(|r| r["count"].as_u64().unwrap())
        .sum();
    assert_eq!(delivered, 2, "slack + chat to ana: {rows}");
}
