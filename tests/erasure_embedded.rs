//! Erasure on the embedded backend, whole: a person with a reminder already
//! on the queue is erased; the other participant gets theirs, the person
//! nothing; then every table of every database in the data folder (the
//! control store with the index, queue, debounce and lease rows, and the
//! tenant's) and every outbox file is searched for them.

use crate::common;

use std::time::Duration;

use common::erasure::{needles, person, Holdings, SqliteHoldings};
use common::pipeline::{due_in, meeting, sid, Harness};
use toki_model::input::UserInput;

/// Every `*.sqlite` file under `dir`, and every other file's text.
fn files(dir: &std::path::Path) -> (Vec<std::path::PathBuf>, Vec<(String, String)>) {
    let (mut dbs, mut texts) = (Vec::new(), Vec::new());
    for entry in walk(dir) {
        let name = entry.display().to_string();
        if name.ends_with(".sqlite") {
            dbs.push(entry);
        } else if !name.ends_with("-wal") && !name.ends_with("-shm") {
            let text = String::from_utf8_lossy(&std::fs::read(&entry).unwrap()).into_owned();
            texts.push((name, text));
        }
    }
    (dbs, texts)
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_person_is_in_no_table_and_no_outbox() {
    let h = Harness::start(|_| {}).await;
    let t = h.tenant("acme", true).await;
    let who = person();
    let input = UserInput {
        name: who.name.clone(),
        email: who.email.clone(),
        slack_user_id: who.slack_user_id.clone(),
        webhook_url: None,
        time_zone: "Europe/Paris".into(),
        locale: "en".into(),
        channels: Default::default(),
    };
    let registrar = h.toki.registrar();
    registrar.put_user(&t, &who.id, &input).await.unwrap();
    let mut review = meeting(due_in(4));
    review.participants = vec![who.id.to_string(), "u1".into()];
    let r = registrar
        .put_schedule(&t, &sid("review"), &review)
        .await
        .unwrap();
    assert!(
        r.enqueued_directly > 0,
        "the reminder is on the queue before the erasure"
    );
    let erased = registrar.erase_user(&t, &who.id).await.unwrap();
    assert_eq!((erased.report.users, erased.report.participations), (1, 1));
    assert!(erased.mirrored);

    let delivered = h.wait_delivered(&t, 2, Duration::from_secs(30)).await;
    let to: Vec<String> = delivered
        .iter()
        .map(|o| o.key.recipient.to_string())
        .collect();
    assert_eq!(to, ["u1", "u1"], "mail and Slack to u1, nothing to them");
    let dir = h.stop().await;

    let mut needles = needles(&who);
    needles.retain(|n| !n.starts_with("https://")); // no endpoint set on the embedded run
    let (dbs, texts) = files(&dir);
    assert!(
        dbs.len() >= 2,
        "the control and the tenant database: {dbs:?}"
    );
    let mut found = Vec::new();
    for db in &dbs {
        let pool = toki_sql::control::open_sqlite(db).await.unwrap();
        found.extend(common::erasure::found(&SqliteHoldings(pool), &needles).await);
    }
    for (file, text) in &texts {
        found.extend(
            needles
                .iter()
                .filter(|n| text.contains(n.as_str()))
                .map(|n| (n.clone(), file.clone())),
        );
    }
    assert!(found.is_empty(), "found after the erasure: {found:?}");
    // The search reads them: u1's address is in the outbox and the tenant's tables.
    let u1 = "u1@example.com";
    let mut seen = 0;
    for db in &dbs {
        let pool = toki_sql::control::open_sqlite(db).await.unwrap();
        seen += SqliteHoldings(pool)
            .texts()
            .await
            .iter()
            .filter(|(_, v)| v.contains(u1))
            .count();
    }
    assert!(seen > 0, "the table search finds another user's address");
    assert!(
        texts.iter().any(|(_, t)| t.contains(u1)),
        "the outbox has u1's mail"
    );
}

/// `toki user erase` does what the API does: counts as JSON, exit 1 when
/// nothing of the id is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_erases_and_then_finds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = toki_app::Config {
        data_dir: dir.path().to_path_buf(),
        ..toki_app::Config::default()
    };
    let toki = toki_app::Toki::open(config).await.unwrap();
    let t: toki_model::TenantId = "acme".parse().unwrap();
    toki.create_tenant(&t, true).await.unwrap();
    let who = person();
    let input = UserInput {
        name: who.name.clone(),
        email: who.email.clone(),
        slack_user_id: None,
        webhook_url: None,
        time_zone: "Europe/Paris".into(),
        locale: "en".into(),
        channels: Default::default(),
    };
    toki.registrar()
        .put_user(&t, &who.id, &input)
        .await
        .unwrap();
    drop(toki);
    let erase = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_toki"))
            .args([
                "user",
                "erase",
                "--tenant",
                "acme",
                who.id.as_str(),
                "--json",
                "--data-dir",
            ])
            .arg(dir.path())
            .output()
            .unwrap()
    };
    let out = erase();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["erased"]["users"], 1, "{answer}");
    let again = erase();
    assert_eq!(
        again.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
}

/// Issue 59's fourth finding, read back from the raw files: after an
/// erasure through the API of a running `toki serve`, neither the tenant's
/// SQLite file nor its WAL holds the person's name, address or Slack id in
/// any byte, in no table and in no old page (before: deleted cells stayed
/// in pages, and the WAL kept every earlier version of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_person_is_in_no_byte_of_the_tenant_files() {
    let data = tempfile::tempdir().unwrap().keep();
    let key = common::process::create_tenant(&data, "acme");
    let (server, base) = common::process::serve(&data, |_| {});
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{base}/v1/tenants/acme/{p}");
    let name = "Wilhelmina Quuxbridge";
    let email = "wilhelmina.quuxbridge@example.com";
    let slack = "U0WQUUX1234";
    let ok = |r: reqwest::Response| {
        assert!(r.status().is_success(), "{}", r.status());
    };
    // Written twice (an edit leaves an old version of the row behind), with
    // a colleague, a schedule they share and the address suppressed.
    for n in [format!("{name} (old)"), name.to_owned()] {
        let body = serde_json::json!({"name": n, "email": email, "slack_user_id": slack});
        ok(http
            .put(url("users/w1"))
            .bearer_auth(&key)
            .json(&body)
            .send()
            .await
            .unwrap());
    }
    let colleague = serde_json::json!({"name": "Bo", "email": "bo@example.com"});
    ok(http
        .put(url("users/bo"))
        .bearer_auth(&key)
        .json(&colleague)
        .send()
        .await
        .unwrap());
    let starts = (chrono::Utc::now() + chrono::Duration::days(2)).to_rfc3339();
    let schedule = serde_json::json!({
        "title": "Sync", "starts_at": starts, "time_zone": "UTC", "participants": ["w1", "bo"],
        "reminders": [{"minutes_before": 10, "channels": ["mail", "slack"]}]
    });
    ok(http
        .put(url("schedules/sync"))
        .bearer_auth(&key)
        .json(&schedule)
        .send()
        .await
        .unwrap());
    let note = serde_json::json!({"note": "asked by phone"});
    ok(http
        .put(url(&format!("suppressions/{email}")))
        .bearer_auth(&key)
        .json(&note)
        .send()
        .await
        .unwrap());

    let erased = http
        .delete(url("users/w1?erase=true"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(erased.status(), 200);

    let file = common::process::tenant_file(&data, "acme");
    let needles = [name, email, slack, "Wilhelmina", "quuxbridge"];
    let read = common::process::assert_in_no_byte(&file, &needles);
    assert!(read > 0, "the file was read");
    // The colleague is still there, in the same file.
    let bo = http
        .get(url("users/bo"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(bo.status(), 200);
    drop(server);
}
