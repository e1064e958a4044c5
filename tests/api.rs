//! The registrar HTTP API as a client uses it: `toki serve` started as a
//! process, a tenant created with `toki tenant create`, then HTTP calls.

use crate::common;

use std::process::Command;
use std::time::Duration;

use chrono::{Duration as ChronoDuration, Utc};
use serde_json::{json, Value};

use common::process::{Process, TOKI};

struct Server {
    process: Process,
    base: String,
    data: std::path::PathBuf,
}

impl Server {
    /// SIGTERM: the server drains what is in flight and exits 0.
    async fn stop(&mut self) {
        self.process.signal("TERM");
        let status = self
            .process
            .wait_exit(Duration::from_secs(20))
            .await
            .expect("toki serve did not stop on SIGTERM");
        assert!(status.success(), "{}", self.process.log());
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

/// `toki serve` on a free port (it prints the address it bound), with a tenant.
async fn serve(env: &[(&str, &str)]) -> (Server, String) {
    let data = tempfile::tempdir().unwrap().keep();
    let key = common::process::create_tenant(&data, "acme");
    let (process, base) = common::process::serve(&data, |cmd| {
        cmd.envs(env.iter().copied());
    });
    (
        Server {
            process,
            base,
            data,
        },
        key,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_and_schedules_over_http() {
    let (server, key) = serve(&[]).await;
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
    let (standin, slack_url) =
        common::services::slack_standin(toki_devtools::slack_standin::StandinOptions::default())
            .await;
    let (mut server, key) = serve(&[
        ("TOKI_SLACK_TOKEN", "xoxb-test"),
        ("TOKI_SLACK_API_URL", &slack_url),
    ])
    .await;
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{}/v1/tenants/acme/{p}", server.base);
    http.put(url("users/ana"))
        .bearer_auth(&key)
        .json(&json!({"name": "Ana", "slack_user_id": "U01"}))
        .send()
        .await
        .unwrap();
    // Ben turned Slack off: he gets the chat reminder only.
    let r = http
        .put(url("users/ben"))
        .bearer_auth(&key)
        .json(&json!({"name": "Ben", "slack_user_id": "U02", "channels": {"slack": false}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let ben: Value = r.json().await.unwrap();
    assert_eq!(
        ben["channels"],
        json!({"chat": true, "mail": true, "slack": false, "webhook": true})
    );
    let r = http
        .put(url("users/ben"))
        .bearer_auth(&key)
        .json(&json!({"name": "Ben", "channels": {"fax": false}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["error"]["field"], "channels.fax", "{err}");
    let due = common::pipeline::due_in(3);
    let r = http
        .put(url("schedules/standup"))
        .bearer_auth(&key)
        .json(&json!({
            "title": "Stand-up", "starts_at": (due + ChronoDuration::minutes(1)).to_rfc3339(),
            "participants": ["ana", "ben"], "reminders": [{"minutes_before": 1, "channels": ["slack", "chat"]}]
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The Slack delivery reached the stand-in; the chat row goes with it.
    assert_eq!(standin.wait_unique(1, Duration::from_secs(20)).await, 1);
    // SIGTERM: the server drains and exits 0.
    server.stop().await;
    let report = toki(&server.data, &["report", "--json"]);
    let rows: Value = serde_json::from_slice(&report.stdout).unwrap();
    let count = |channel: &str, status: &str| -> u64 {
        rows["counts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["status"] == status && r["channel"] == channel)
            .map(|r| r["count"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(count("slack", "delivered"), 1, "ana's: {rows}");
    assert_eq!(count("chat", "delivered"), 2, "ana's and ben's: {rows}");
    assert_eq!(
        count("slack", "undeliverable"),
        1,
        "ben's, turned off: {rows}"
    );
    let arrivals = standin.arrivals();
    assert_eq!(arrivals.len(), 1, "nothing to Ben on Slack: {arrivals:?}");
    // For its instant, and not before it; how late is printed (the bench measures it).
    assert_eq!(arrivals[0].due_at_ms, due.timestamp_millis());
    let late = arrivals[0].arrived_ms - due.timestamp_millis();
    assert!(late >= 0, "{} ms early", -late);
    eprintln!("Slack reminder {late} ms after its instant");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_limits_are_answered_and_nothing_is_written() {
    let (server, key) = serve(&[]).await;
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{}/v1/tenants/acme/{p}", server.base);
    // The scheme is case-insensitive (RFC 9110).
    let r = http
        .put(url("users/ana"))
        .header("authorization", format!("bearer {key}"))
        .json(&json!({"name": "Ana"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let starts = (Utc::now() + ChronoDuration::days(1)).to_rfc3339();
    // Too many rules: 422 naming the field and the limit.
    let rules: Vec<Value> = (0..=toki_model::input::MAX_RULES)
        .map(|m| json!({"minutes_before": m, "channels": ["chat"]}))
        .collect();
    let r = http
        .put(url("schedules/big"))
        .bearer_auth(&key)
        .json(&json!({"title": "Big", "starts_at": starts, "participants": ["ana"], "reminders": rules}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["field"], "reminders", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 20"),
        "{body}"
    );
    // A body over 256 KiB: 413, never 500.
    let r = http
        .put(url("schedules/huge"))
        .bearer_auth(&key)
        .json(&json!({"title": "Huge", "body": "x".repeat(300_000), "starts_at": starts,
                      "participants": ["ana"], "reminders": [{"minutes_before": 5, "channels": ["chat"]}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("262144"),
        "{body}"
    );
    // Ids too long and bodies too long: 422 naming them.
    let r = http
        .put(url(&format!("schedules/{}", "s".repeat(300))))
        .bearer_auth(&key)
        .json(
            &json!({"title": "T", "starts_at": starts, "participants": ["ana"],
                      "reminders": [{"minutes_before": 5, "channels": ["chat"]}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["field"], "id");
    let r = http
        .put(url("schedules/long"))
        .bearer_auth(&key)
        .json(&json!({"title": "T", "body": "b".repeat(10_001), "starts_at": starts,
                      "participants": ["ana"], "reminders": [{"minutes_before": 5, "channels": ["chat"]}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["field"], "body");
    // Nothing of the refused ones was written.
    for id in ["big", "huge", "long"] {
        let r = http
            .get(url(&format!("schedules/{id}")))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{id}");
    }
}

/// Twenty PUTs of one schedule at once, each to another time: the index ends
/// on the newest version's rows only, and the reminder goes out once, then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_puts_of_one_schedule_leave_the_newest_version() {
    let (standin, slack_url) =
        common::services::slack_standin(toki_devtools::slack_standin::StandinOptions::default())
            .await;
    let (server, key) = serve(&[
        ("TOKI_SLACK_TOKEN", "xoxb-test"),
        ("TOKI_SLACK_API_URL", &slack_url),
    ])
    .await;
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{}/v1/tenants/acme/{p}", server.base);
    http.put(url("users/ana"))
        .bearer_auth(&key)
        .json(&json!({"name": "Ana", "slack_user_id": "U01"}))
        .send()
        .await
        .unwrap();
    let base = common::pipeline::due_in(6);
    let puts = (0..20).map(|i| {
        let http = http.clone();
        let url = url("schedules/race");
        let key = key.clone();
        let due = base + ChronoDuration::seconds(i % 5);
        async move {
            let r = http
                .put(url)
                .bearer_auth(&key)
                .json(&json!({
                    "title": format!("Race {i}"),
                    "starts_at": (due + ChronoDuration::minutes(1)).to_rfc3339(),
                    "participants": ["ana"],
                    "reminders": [{"minutes_before": 1, "channels": ["slack"]}]
                }))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "{}", r.status());
            let body: Value = r.json().await.unwrap();
            (body["version"].as_i64().unwrap(), due)
        }
    });
    let written = futures::future::join_all(puts).await;
    let (newest, due) = written.iter().max_by_key(|(v, _)| *v).copied().unwrap();
    assert_eq!(newest, 20, "versions never repeat");
    assert_eq!(standin.wait_unique(1, Duration::from_secs(30)).await, 1);
    // Past every candidate time: still one delivery, at the newest version's time.
    let last = base + ChronoDuration::seconds(5);
    if let Ok(d) = (last - Utc::now()).to_std() {
        tokio::time::sleep(d + Duration::from_secs(2)).await; // let any other time pass
    }
    let arrivals = standin.arrivals();
    assert_eq!(arrivals.len(), 1, "{arrivals:?}");
    assert_eq!(arrivals[0].copies, 1);
    assert_eq!(arrivals[0].due_at_ms, due.timestamp_millis());
    drop(server);
}

/// `POST .../schedules:batch`: a result per item in order, each what the
/// item's own PUT would answer; invalid items (bad JSON shape, a bad field,
/// an unknown participant, an id twice) are refused by name and not written,
/// the others are; the whole call is refused only for the batch itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_schedules_answers_per_item() {
    let (server, key) = serve(&[]).await;
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{}/v1/tenants/acme/{p}", server.base);
    for u in ["ana", "ben"] {
        let r = http
            .put(url(&format!("users/{u}")))
            .bearer_auth(&key)
            .json(&json!({"name": u}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let starts = (Utc::now() + ChronoDuration::days(1)).to_rfc3339();
    let item = |id: &str, participants: &[&str]| {
        json!({"id": id, "title": "Sync", "starts_at": starts, "participants": participants,
               "reminders": [{"minutes_before": 5, "channels": ["chat", "mail"]}]})
    };
    let mut bad_time = item("bad-time", &["ana"]);
    bad_time["starts_at"] = json!("tomorrow-ish");
    let mut unknown_field = item("odd", &["ana"]);
    unknown_field["colour"] = json!("blue");
    let batch = json!({"schedules": [
        item("one", &["ana", "ben"]),
        bad_time,
        item("ghost", &["ana", "nobody"]),
        unknown_field,
        json!({"title": "no id"}),
        item("one", &["ben"]),
        item("two", &["ben"]),
    ]});
    let r = http
        .post(url("schedules:batch"))
        .bearer_auth(&key)
        .json(&batch)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["written"], 2, "{body}");
    assert_eq!(body["failed"], 5, "{body}");
    let results = body["results"].as_array().unwrap();
    let statuses: Vec<u64> = results
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, vec![200, 422, 422, 422, 422, 422, 200], "{body}");
    let field = |i: usize| {
        results[i]["error"]["field"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(field(1), "schedules[1].starts_at");
    assert_eq!(field(2), "schedules[2].participants[1]");
    assert_eq!(field(3), "schedules[3].colour");
    assert_eq!(field(4), "schedules[4].id");
    assert_eq!(field(5), "schedules[5].id");
    assert_eq!(results[0]["id"], "one");
    assert_eq!(results[0]["version"], 1, "{body}");
    assert_eq!(results[6]["participants"], json!(["ben"]));
    // What was written reads back; what was refused does not exist.
    let one: Value = http
        .get(url("schedules/one"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        one["participants"],
        json!(["ana", "ben"]),
        "the first 'one' wins"
    );
    for id in ["bad-time", "ghost", "odd"] {
        let r = http
            .get(url(&format!("schedules/{id}")))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{id}");
    }
    // The batch itself: too many items, or not a batch at all.
    let too_many: Vec<Value> = (0..=toki_core::registrar::MAX_BATCH)
        .map(|i| item(&format!("m{i}"), &["ana"]))
        .collect();
    let r = http
        .post(url("schedules:batch"))
        .bearer_auth(&key)
        .json(&json!({ "schedules": too_many }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["field"],
        "schedules"
    );
    let r = http
        .get(url("schedules/m0"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "nothing of a refused batch is written");
    let r = http
        .post(url("schedules:batch"))
        .bearer_auth("toki_wrong")
        .json(&batch)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

/// `Idempotency-Key` on the embedded backend, through `toki serve`: the
/// key lives in the tenant's SQLite database (migration 0007, applied by
/// `toki tenant create`), a repeat is replayed and writes nothing, another
/// body under the key is a 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_batch_with_an_idempotency_key_writes_once_on_sqlite() {
    let (server, key) = serve(&[]).await;
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{}/v1/tenants/acme/{p}", server.base);
    let r = http
        .put(url("users/ana"))
        .bearer_auth(&key)
        .json(&json!({"name": "Ana"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let starts = (Utc::now() + ChronoDuration::days(1)).to_rfc3339();
    let batch = |id: &str| {
        json!({"schedules": [{"id": id, "title": "Sync", "starts_at": starts, "participants": ["ana"],
               "reminders": [{"minutes_before": 5, "channels": ["chat"]}]}]})
    };
    let post = |body: Value| {
        http.post(url("schedules:batch"))
            .bearer_auth(&key)
            .header("Idempotency-Key", "import-7")
            .json(&body)
            .send()
    };
    let first = post(batch("one")).await.unwrap();
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first = first.text().await.unwrap();
    let again = post(batch("one")).await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.text().await.unwrap(), first, "the first answer");
    let one: Value = http
        .get(url("schedules/one"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(one["version"], 1, "written once: {one}");
    let other = post(batch("two")).await.unwrap();
    assert_eq!(other.status(), 422);
    let error: Value = other.json().await.unwrap();
    assert_eq!(error["error"]["field"], "Idempotency-Key", "{error}");
}

/// Change notices through the API, as a tenant turns them on: a schedule
/// edited 20 times in quick succession tells each participant exactly twice
/// per channel — at the first edit and, once the edits stop, with the final
/// state. (The tenant's delays are short so the burst takes a second; the
/// same burst over a minute with the default delays runs on paused time in
/// toki-core's `tests::change_notices`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_edits_make_two_change_notices_per_participant_and_channel() {
    let data = tempfile::tempdir().unwrap().keep();
    let key = String::from_utf8(toki(&data, &["tenant", "create", "acme"]).stdout).unwrap();
    let key = key.trim().to_string();
    // A bad setting is refused by name, and nothing is changed.
    let bad = toki(
        &data,
        &[
            "tenant",
            "set",
            "acme",
            "--change-notices",
            "on",
            "--notice-min-delay-ms",
            "0",
        ],
    );
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("change_notices.min_delay_ms"));
    let set = toki(
        &data,
        &[
            "tenant",
            "set",
            "acme",
            "--change-notices",
            "on",
            // 3 s of quiet ends the burst: far beyond a PUT's time even
            // under the whole suite (with 0.5 s a loaded PUT once outlasted
            // it mid-burst, and a third notice went out, as set).
            "--notice-min-delay-ms",
            "3000",
            "--notice-max-delay-ms",
            "10000",
            "--notice-hard-cap-ms",
            "60000",
        ],
    );
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let listed = String::from_utf8(toki(&data, &["tenant", "list"]).stdout).unwrap();
    assert!(
        listed.contains("on (min 3 s, max 10 s, cap 60 s)"),
        "{listed}"
    );
    let mut cmd = Command::new(TOKI);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env(
            "RUST_LOG",
            "warn,toki_app=info,toki_core::daemon::notices=info",
        );
    let (server, line) = Process::spawn(cmd, "registrar API on http://", Duration::from_secs(30));
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_string();
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{base}/v1/tenants/acme/{p}");
    for (user, zone, locale) in [("ana", "Europe/Paris", "en"), ("bo", "Asia/Tokyo", "ja")] {
        let r = http
            .put(url(&format!("users/{user}")))
            .bearer_auth(&key)
            .json(&json!({"name": user, "email": format!("{user}@example.com"),
                          "slack_user_id": format!("U{}", user.to_uppercase()), "time_zone": zone, "locale": locale}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let starts = Utc::now() + ChronoDuration::hours(3);
    let schedule = |title: &str, starts: chrono::DateTime<Utc>| {
        json!({"title": title, "starts_at": starts.to_rfc3339(), "time_zone": "Asia/Tokyo",
               "participants": ["ana", "bo"],
               "reminders": [{"minutes_before": 10, "channels": ["mail", "slack", "chat"]}]})
    };
    let put = |body: Value| {
        let req = http
            .put(url("schedules/review"))
            .bearer_auth(&key)
            .json(&body);
        async move {
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 200);
        }
    };
    put(schedule("Design review", starts)).await;
    for i in 1..=20 {
        let moved = if i == 20 {
            starts + ChronoDuration::hours(1)
        } else {
            starts
        };
        put(schedule(&format!("Review v{i}"), moved)).await;
    }
    // Both edges' notices are out once the trailing one is logged.
    server.wait_line(
        |l| l.contains("change notice delivered") && l.contains("trailing"),
        Duration::from_secs(30),
    );
    server.signal("TERM");
    let mut server = server;
    assert!(server.wait_exit(Duration::from_secs(20)).await.is_some());
    let report = toki(&data, &["report", "--json"]);
    let rows: Value = serde_json::from_slice(&report.stdout).unwrap();
    for channel in ["mail", "slack", "chat"] {
        let delivered: u64 = rows["counts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["channel"] == channel && r["status"] == "delivered")
            .map(|r| r["count"].as_u64().unwrap())
            .sum();
        assert_eq!(
            delivered, 4,
            "2 notices x 2 participants by {channel}: {rows}"
        );
    }
    // Slack's outbox has what each was told: the trailing notice has the final state.
    let outbox = std::fs::read_to_string(data.join("outbox/slack.jsonl")).unwrap();
    let texts = |who: &str| -> Vec<String> {
        outbox
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["channel"] == format!("U{}", who.to_uppercase()))
            .map(|v| v["text"].as_str().unwrap().to_string())
            .collect()
    };
    let ana = texts("ana");
    assert_eq!(ana.len(), 2, "{ana:?}");
    assert!(
        ana[0].contains("Title: Design review → Review v"),
        "{}",
        ana[0]
    );
    assert!(ana[1].contains("→ Review v20"), "{}", ana[1]);
    // In her zone: 3 hours from now in Paris, one hour later.
    let paris = |t: chrono::DateTime<Utc>| {
        t.with_timezone(&chrono_tz::Europe::Paris)
            .format("%Y-%m-%d %H:%M")
            .to_string()
    };
    assert!(
        ana[1].contains(&format!(
            "Time: {} Europe/Paris → {} Europe/Paris",
            paris(starts),
            paris(starts + ChronoDuration::hours(1))
        )),
        "{}",
        ana[1]
    );
    let bo = texts("bo");
    assert_eq!(bo.len(), 2, "{bo:?}");
    assert!(
        bo[1].contains("が変更されました") && bo[1].contains("Asia/Tokyo"),
        "{}",
        bo[1]
    );
}

/// Templates through `toki serve`, on a daily series: the tenant's Japanese
/// Slack text reaches the Slack stand-in with the title escaped and its own
/// mention kept, in the recipient's zone; its English mail reaches the SMTP
/// capture server as plain and HTML parts, the HTML escaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the SMTP capture server (aiosmtpd): scripts/test.sh runs it"]
async fn templates_word_a_series_reminders_on_slack_and_mail() {
    let (standin, slack_url) =
        common::services::slack_standin(toki_devtools::slack_standin::StandinOptions::default())
            .await;
    let (smtp_addr, maildir) = common::services::smtp();
    let smtp_url = format!("smtp://{smtp_addr}");
    let (mut server, key) = serve(&[
        ("TOKI_SLACK_TOKEN", "xoxb-test"),
        ("TOKI_SLACK_API_URL", &slack_url),
        ("TOKI_SMTP_URL", &smtp_url),
        ("TOKI_MAIL_TRANSPORT", "smtp"),
    ])
    .await;
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{}/v1/tenants/acme/{p}", server.base);
    let put = |p: String, body: Value| {
        let r = http.put(url(&p)).bearer_auth(&key).json(&body).send();
        async move {
            let r = r.await.unwrap();
            let status = r.status();
            let body: Value = r.json().await.unwrap();
            (status.as_u16(), body)
        }
    };
    let marker = common::conformance::unique("tpl");
    let slack_user = format!("U{}", marker.to_uppercase().replace(['-', '_'], ""));
    let (s, b) = put(
        "users/hana".into(),
        json!({"name": "花子", "slack_user_id": slack_user, "time_zone": "Asia/Tokyo", "locale": "ja-JP"}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = put(
        "users/ben".into(),
        json!({"name": "Ben", "email": format!("{marker}@example.com"), "time_zone": "America/New_York"}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    // A template that does not render is refused, naming the part.
    let (s, b) = put("templates/slack/ja".into(), json!({"text": "{{ titel }}"})).await;
    assert_eq!(
        (s, b["error"]["field"].clone()),
        (422, json!("text")),
        "{b}"
    );
    let (s, b) = put(
        "templates/slack/ja".into(),
        json!({"text": "<https://example.com|予定> *{{ title }}* は {{ time }} から"}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b["example"]["text"],
        "<https://example.com|予定> *Weekly review* は 10:00 から"
    );
    let (s, b) = put(
        "templates/mail/en".into(),
        json!({
            "subject": "{{ title }} in {{ minutes }} min",
            "text": "{{ name }}: {{ title }} at {{ time }} {{ time_zone }}",
            "html": "<p>{{ name }}: <b>{{ title }}</b> at {{ time }}</p>"
        }),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    // A daily series whose first occurrence starts in 3 minutes, in Tokyo time.
    let start = common::pipeline::due_in(2) + ChronoDuration::minutes(1);
    let local = start.with_timezone(&chrono_tz::Asia::Tokyo);
    let title = format!("Q&A <{marker}>");
    let (s, b) = put(
        "schedules/daily".into(),
        json!({
            "title": title, "starts_at": local.format("%Y-%m-%dT%H:%M:%S").to_string(),
            "time_zone": "Asia/Tokyo", "recurrence": {"rrule": "FREQ=DAILY;COUNT=3"},
            "participants": ["hana", "ben"],
            "reminders": [{"minutes_before": 1, "channels": ["slack", "mail"]}]
        }),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(standin.wait_unique(1, Duration::from_secs(30)).await, 1);
    let texts = standin.texts(&slack_user);
    assert_eq!(
        texts,
        vec![format!(
            "<https://example.com|予定> *Q&amp;A &lt;{marker}&gt;* は {} から",
            local.format("%H:%M")
        )]
    );
    // SIGTERM drains what is in flight: then the mail was handed to the
    // capture server, which stores it before it answers.
    server.stop().await;
    let mails: Vec<String> = common::services::maildir_files(&maildir)
        .into_iter()
        .filter(|m| m.contains(&format!("{marker}@example.com")))
        .collect();
    assert_eq!(
        mails.len(),
        1,
        "one mail for the first occurrence: {mails:?}"
    );
    let mail = &mails[0];
    let ny = start.with_timezone(&chrono_tz::America::New_York);
    assert!(mail.contains("multipart/alternative"), "{mail}");
    assert!(mail.contains("Content-Type: text/plain"), "{mail}");
    assert!(mail.contains("Content-Type: text/html"), "{mail}");
    let plain = format!(
        "Ben: Q&A <{marker}> at {} America/New_York",
        ny.format("%H:%M")
    );
    let html = format!(
        "<p>Ben: <b>Q&amp;A &lt;{marker}&gt;</b> at {}</p>",
        ny.format("%H:%M")
    );
    let unfolded = unquote(mail);
    assert!(unfolded.contains(&plain), "{plain} in {unfolded}");
    assert!(unfolded.contains(&html), "{html} in {unfolded}");
}

/// A mail's quoted-printable soft line breaks and `=XX` escapes undone
/// (enough for the ASCII this test looks for).
fn unquote(mail: &str) -> String {
    let joined = mail.replace("=\r\n", "").replace("=\n", "");
    let mut out = String::with_capacity(joined.len());
    let mut chars = joined.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '=' {
            let hex: String = chars.clone().take(2).collect();
            if let Ok(b) = u8::from_str_radix(&hex, 16) {
                if b.is_ascii() {
                    out.push(b as char);
                    chars.next();
                    chars.next();
                    continue;
                }
            }
        }
        out.push(c);
    }
    out
}

/// The caps of issue 59 are set per tenant with `toki tenant set`, shown
/// by `toki tenant list`, and a running server refuses beyond them (422
/// naming the cap); `none` drops an override.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_set_caps_the_rows_a_tenant_creates() {
    let data = tempfile::tempdir().unwrap().keep();
    let key = common::process::create_tenant(&data, "acme");
    let caps = [
        "--max-suppressions",
        "1",
        "--max-event-endpoints",
        "3",
        "--max-idempotency-keys",
        "500",
        "--max-audit-entries",
        "1000",
        "--max-events",
        "2000",
    ];
    let set = toki(&data, &[&["tenant", "set", "acme"][..], &caps].concat());
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let listed = String::from_utf8(toki(&data, &["tenant", "list"]).stdout).unwrap();
    for part in [
        "max_suppressions=1",
        "max_event_endpoints=3",
        "max_idempotency_keys=500",
        "max_audit_entries=1000",
        "max_events=2000",
    ] {
        assert!(listed.contains(part), "{part}: {listed}");
    }
    let (_server, base) = common::process::serve(&data, |_| {});
    let http = reqwest::Client::new();
    let put = |address: &str| {
        http.put(format!("{base}/v1/tenants/acme/suppressions/{address}"))
            .bearer_auth(&key)
            .json(&json!({}))
            .send()
    };
    assert_eq!(put("a@example.com").await.unwrap().status(), 200);
    let over = put("b@example.com").await.unwrap();
    assert_eq!(over.status(), 422);
    let body: Value = over.json().await.unwrap();
    assert_eq!(body["error"]["field"], "max_suppressions", "{body}");

    let unset = toki(
        &data,
        &["tenant", "set", "acme", "--max-suppressions", "none"],
    );
    assert!(unset.status.success());
    let listed = String::from_utf8(toki(&data, &["tenant", "list"]).stdout).unwrap();
    assert!(!listed.contains("max_suppressions"), "{listed}");
}
