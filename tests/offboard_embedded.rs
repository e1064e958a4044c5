//! Offboarding on the embedded backend, through the `toki` binary while a
//! pipeline runs: the dry run lists, the delete leaves nothing of the tenant
//! (its file gone, no row of any control table mentioning it), and another
//! tenant still gets its reminders.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::pipeline::{due_in, meeting, sid, Harness};
use sqlx::Row;

const TOKI: &str = env!("CARGO_BIN_EXE_toki");

/// The claims' lease of the harness's daemon and of the CLI's delete, which
/// waits at least one: short, so the test waits seconds, not tens (longer
/// than the lead, the harness's 1 s, which a lease must exceed).
const LEASE_S: u64 = 3;

/// `toki ARGS --data-dir DATA`: its exit code and stdout.
fn toki(args: &[&str], data: &Path) -> (i32, String) {
    let out = Command::new(TOKI)
        .args(args)
        .env("TOKI_VISIBILITY_TIMEOUT_S", LEASE_S.to_string())
        .env("TOKI_LEAD_MS", "1000")
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "toki {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), stdout)
}

/// Every row of every table of a SQLite file, each column as text, in which
/// `needle` occurs: (table, row as text).
async fn rows_mentioning(file: &Path, needle: &str) -> Vec<(String, String)> {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=ro", file.display()))
        .await
        .unwrap();
    let tables: Vec<(String,)> =
        sqlx::query_as("SELECT name FROM sqlite_master WHERE type = 'table'")
            .fetch_all(&pool)
            .await
            .unwrap();
    let mut found = Vec::new();
    for (table,) in tables {
        let rows = sqlx::query(&format!("SELECT * FROM \"{table}\""))
            .fetch_all(&pool)
            .await
            .unwrap();
        for row in rows {
            let text: Vec<String> = (0..row.columns().len())
                .map(|i| {
                    row.try_get::<String, _>(i)
                        .or_else(|_| row.try_get::<i64, _>(i).map(|v| v.to_string()))
                        .or_else(|_| {
                            row.try_get::<Vec<u8>, _>(i)
                                .map(|v| String::from_utf8_lossy(&v).into_owned())
                        })
                        .unwrap_or_default()
                })
                .collect();
            let line = text.join(" | ");
            if line.contains(needle) {
                found.push((table.clone(), line));
            }
        }
    }
    pool.close().await;
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_delete_lists_then_leaves_nothing_and_the_other_tenant_is_served() {
    let h = Harness::start(|c| c.daemon.visibility_timeout_s = LEASE_S).await;
    let acme = h.tenant("acme", true).await;
    let globex = h.tenant("globex", true).await;
    let registrar = h.toki.registrar();
    // Due after the delete has returned (it waits at least a lease, and the
    // three CLI runs before it take a few seconds): queued at once (within
    // the scan window), and a day ahead (index only).
    let due = due_in(15);
    for (t, prefix) in [(&acme, "acme"), (&globex, "globex")] {
        for (i, at) in [due, due + chrono::Duration::days(1)]
            .into_iter()
            .enumerate()
        {
            registrar
                .put_schedule(t, &sid(&format!("{prefix}-{i}")), &meeting(at))
                .await
                .unwrap();
        }
    }
    let record = h.toki.directory.get(&acme).await.unwrap().unwrap();
    let file = std::path::PathBuf::from(&record.database);
    assert!(file.starts_with(h.dir.join("tenants")) && file.exists());

    let (code, listed) = toki(&["tenant", "delete", "acme", "--dry-run"], &h.dir);
    assert_eq!(code, 0);
    for expected in [
        "tenant.users",
        "tenant.schedules",
        "control.reminder_index",
        "control.queue_messages",
        "directory.api_keys",
    ] {
        assert!(
            listed.contains(expected),
            "dry run lists {expected}: {listed}"
        );
    }
    assert!(file.exists(), "a dry run deletes nothing");
    assert!(!rows_mentioning(&h.dir.join("control.sqlite"), "acme")
        .await
        .is_empty());

    let (code, _) = toki(&["tenant", "delete", "acme"], &h.dir);
    assert_eq!(code, 2, "refused without --yes (stdin is no terminal)");
    assert!(file.exists());

    let (code, out) = toki(&["tenant", "delete", "acme", "--yes"], &h.dir);
    assert_eq!(code, 0, "{out}");
    assert!(!file.exists(), "its database file is gone");
    assert!(!Path::new(&format!("{}-wal", record.database)).exists());
    let left = rows_mentioning(&h.dir.join("control.sqlite"), "acme").await;
    assert!(left.is_empty(), "control rows mentioning acme: {left:?}");

    // globex: 2 recipients × mail and Slack at `due`; acme: nothing.
    let delivered = h.wait_delivered(&globex, 4, Duration::from_secs(90)).await;
    assert_eq!(delivered.len(), 4);
    let sinks = h.sinks();
    let of_acme: Vec<_> = sinks.keys().filter(|k| k.starts_with("acme/")).collect();
    assert!(
        of_acme.is_empty(),
        "sent for acme after its delete: {of_acme:?}"
    );
    assert_eq!(sinks.keys().filter(|k| k.starts_with("globex/")).count(), 4);
    let (code, _) = toki(&["tenant", "delete", "acme", "--yes"], &h.dir);
    assert_ne!(code, 0, "a deleted tenant is no tenant");
    h.stop().await;
}

/// The reproduction of issue 59's third finding, as processes: `toki serve`
/// runs; `toki tenant delete gone --yes` and `toki tenant create gone` run
/// beside it. The new key's user is written where a fresh server finds it
/// (before the fix it went to the old, unlinked file: 200, then 404 after a
/// restart), and the old key opens nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_deleted_and_created_again_under_a_running_server_gets_a_fresh_store() {
    let data = tempfile::tempdir().unwrap().keep();
    let lease = |cmd: &mut Command| {
        cmd.env("TOKI_VISIBILITY_TIMEOUT_S", LEASE_S.to_string())
            .env("TOKI_LEAD_MS", "1000");
    };
    let old_key = common::process::create_tenant(&data, "gone");
    let (server, base) = common::process::serve(&data, lease);
    let http = reqwest::Client::new();
    let user = |key: &str, id: &str| {
        http.put(format!("{base}/v1/tenants/gone/users/{id}"))
            .bearer_auth(key)
            .json(&serde_json::json!({"name": "W", "email": format!("{id}@example.com")}))
    };
    assert_eq!(user(&old_key, "w0").send().await.unwrap().status(), 200);

    let (code, out) = toki(&["tenant", "delete", "gone", "--yes"], &data);
    assert_eq!(code, 0, "{out}");
    let new_key = common::process::create_tenant(&data, "gone");
    assert_eq!(
        user(&old_key, "w1").send().await.unwrap().status(),
        401,
        "the deleted tenant's key opens nothing"
    );
    assert_eq!(user(&new_key, "w1").send().await.unwrap().status(), 200);
    let get = |base: &str, id: &str| {
        http.get(format!("{base}/v1/tenants/gone/users/{id}"))
            .bearer_auth(&new_key)
            .send()
    };
    assert_eq!(get(&base, "w1").await.unwrap().status(), 200);
    assert_eq!(
        get(&base, "w0").await.unwrap().status(),
        404,
        "the new tenant starts empty"
    );

    drop(server);
    let (_again, base) = common::process::serve(&data, lease);
    assert_eq!(
        get(&base, "w1").await.unwrap().status(),
        200,
        "after a restart the new key's user is there: it was written to the new database"
    );
    assert_eq!(get(&base, "w0").await.unwrap().status(), 404);
    let files: Vec<String> = std::fs::read_dir(data.join("tenants"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sqlite"))
        .collect();
    assert_eq!(files.len(), 1, "one database, the new one: {files:?}");
}
