//! Retention end to end on the embedded backend: `toki tenant set
//! --retention` refuses a setting out of bounds by name and shows what it
//! set; `toki serve`'s purge pass deletes what is older than the tenant's
//! settings (an old finished delivery, an old dead letter, an expired index
//! row) and nothing younger or pending, and `/metrics` and `toki report`
//! say so.

use crate::common;

use std::process::Command;
use std::time::Duration;

use chrono::{Duration as ChronoDuration, Utc};
use sqlx::sqlite::SqlitePool;

use common::process::TOKI;

fn toki(data: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(TOKI)
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap()
}

#[test]
fn tenant_set_bounds_the_retention_and_list_shows_it() {
    let data = tempfile::tempdir().unwrap();
    common::process::create_tenant(data.path(), "acme");
    for (spec, field) in [
        ("deliveries=0", "retention.deliveries"),
        ("chat=3651", "retention.chat"),
        ("forever=3", "retention.forever"),
    ] {
        let bad = toki(data.path(), &["tenant", "set", "acme", "--retention", spec]);
        assert!(!bad.status.success(), "{spec}");
        let stderr = String::from_utf8_lossy(&bad.stderr);
        assert!(stderr.contains(field), "{spec}: {stderr}");
    }
    let listed = String::from_utf8(toki(data.path(), &["tenant", "list"]).stdout).unwrap();
    assert!(
        listed.contains("deliveries=90d chat=90d dead_letters=14d events=7d audit=365d"),
        "the defaults, nothing half-set: {listed}"
    );
    let set = toki(
        data.path(),
        &[
            "tenant",
            "set",
            "acme",
            "--retention",
            "deliveries=30,chat=3650",
        ],
    );
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let listed = String::from_utf8(toki(data.path(), &["tenant", "list"]).stdout).unwrap();
    assert!(
        listed.contains("deliveries=30d chat=3650d dead_letters=14d"),
        "{listed}"
    );
}

async fn pool(path: &std::path::Path) -> SqlitePool {
    SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap()
}

/// Old and young rows of each kind, written around `toki` (as if they had
/// aged in place), and the retention mark their writes would have left.
async fn age_rows(data: &std::path::Path) {
    let control = pool(&data.join("control.sqlite")).await;
    let (database,): (String,) = sqlx::query_as("SELECT database FROM tenants WHERE id = 'acme'")
        .fetch_one(&control)
        .await
        .unwrap();
    let tenant = pool(std::path::Path::new(&database)).await;
    let days_ago = |d: i64| (Utc::now() - ChronoDuration::days(d)).timestamp_millis();
    for (recipient, status, finished) in [
        ("old", "delivered", Some(days_ago(100))),
        ("young", "delivered", Some(days_ago(1))),
        ("waiting", "throttled", Some(days_ago(100))),
        ("sending", "sending", None),
    ] {
        sqlx::query(
            "INSERT INTO deliveries (schedule_id, occurrence, minutes_before, version, recipient,
               channel, status, due_at, claimed_at, finished_at, attempts)
             VALUES ('s', 0, 5, 1, $1, 'mail', $2, $3, $3, $4, 1)",
        )
        .bind(recipient)
        .bind(status)
        .bind(days_ago(100))
        .bind(finished)
        .execute(&tenant)
        .await
        .unwrap();
    }
    for dead_at in [days_ago(20), days_ago(2)] {
        sqlx::query(
            "INSERT INTO queue_messages (queue, body, attributes, sent_at, visible_at, dead, dead_at)
             VALUES ('reminders', '{}', '{\"tenant\":\"acme\"}', 0, 0, TRUE, $1)",
        )
        .bind(dead_at)
        .execute(&control)
        .await
        .unwrap();
    }
    // Written through toki, the rows would have marked the tenant for the purge.
    sqlx::query(
        "INSERT INTO work_marks (kind, tenant, due_ms, revision) VALUES ('retention', 'acme', 0, 1)",
    )
    .execute(&control)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO reminder_index (partition, sort_key, tenant, schedule_id, occurrence,
           minutes_before, due_at, version, channels, status, expires_at)
         VALUES ('p', 'k', 'acme', 's', 0, 5, 0, 1, '', 'pending', 1)",
    )
    .execute(&control)
    .await
    .unwrap();
}

/// The value of a series in an OpenMetrics text, 0 if absent.
fn series(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_purges_what_is_past_the_retention_and_says_so() {
    let data = tempfile::tempdir().unwrap();
    common::process::create_tenant(data.path(), "acme");
    age_rows(data.path()).await;
    let (server, _, operator) = common::process::serve_operated(data.path(), |_| {});
    // The first pass runs as serve starts; its figures are on /metrics.
    let http = reqwest::Client::new();
    let mut metrics = String::new();
    for _ in 0..300 {
        metrics = http
            .get(format!("{operator}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if series(&metrics, "toki_purge_passes_total") >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(series(&metrics, "toki_purge_passes_total"), 1, "{metrics}");
    let purged = |kind: &str| {
        series(
            &metrics,
            &format!("toki_purged_rows_total{{kind=\"{kind}\"}}"),
        )
    };
    assert_eq!(purged("deliveries"), 1, "{metrics}");
    assert_eq!(purged("dead_letters"), 1, "{metrics}");
    assert_eq!(series(&metrics, "toki_purged_index_rows_total"), 1);
    drop(server);

    let control = pool(&data.path().join("control.sqlite")).await;
    let (dead,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM queue_messages WHERE dead")
        .fetch_one(&control)
        .await
        .unwrap();
    assert_eq!(dead, 1, "the younger dead letter stays");
    let report = String::from_utf8(toki(data.path(), &["report"]).stdout).unwrap();
    assert!(report.contains("purged (last pass)"), "{report}");
    for status in ["delivered", "throttled", "sending"] {
        assert!(report.contains(status), "{status} rows stay: {report}");
    }
    let json: serde_json::Value =
        serde_json::from_slice(&toki(data.path(), &["report", "--json"]).stdout).unwrap();
    let rows = json["purges"].as_array().unwrap();
    let deliveries = rows.iter().find(|r| r["kind"] == "deliveries").unwrap();
    assert_eq!(deliveries["last_purged"], 1, "{json}");
    let delivered = json["counts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["status"] == "delivered")
        .unwrap();
    assert_eq!(
        delivered["count"], 1,
        "the young delivered row stays: {json}"
    );
}
