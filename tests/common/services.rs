//! Real services for integration tests. `scripts/test.sh` starts them and
//! exports their addresses; run alone, the helpers fall back to local defaults.

use std::sync::Arc;

use toki_ports::TenantStore;
use toki_sql::{create_tenant_database, PostgresTenantStore, SqliteTenantStore};

use super::conformance::unique;

/// The Postgres server tests create databases on: `TOKI_TEST_DATABASE_URL`,
/// then `DATABASE_URL`, then the local server.
pub fn postgres_base_url() -> String {
    std::env::var("TOKI_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A URL for a new database named `name` on the test server.
pub fn postgres_url_for(name: &str) -> String {
    let base = postgres_base_url();
    let (prefix, rest) = base.rsplit_once('/').expect("a database URL has a path");
    let query = rest
        .split_once('?')
        .map(|(_, q)| format!("?{q}"))
        .unwrap_or_default();
    format!("{prefix}/{name}{query}")
}

/// A fresh, migrated Postgres tenant database with a unique name.
pub async fn postgres_store() -> Arc<dyn TenantStore> {
    let url = postgres_database().await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    Arc::new(PostgresTenantStore::new(pool))
}

/// A fresh, migrated Postgres tenant database; its URL.
pub async fn postgres_database() -> String {
    let url = postgres_url_for(&unique("toki_test_"));
    create_tenant_database(&url).await.unwrap_or_else(|e| {
        panic!(
            "Postgres at {} is needed (scripts/test.sh starts one): {e}",
            postgres_base_url()
        )
    });
    url
}

/// A fresh, migrated SQLite tenant database in a temporary folder.
pub async fn sqlite_store() -> Arc<dyn TenantStore> {
    let dir = tempfile::tempdir().unwrap().keep();
    let path = dir.join("tenant.sqlite");
    create_tenant_database(path.to_str().unwrap())
        .await
        .unwrap();
    let pool = toki_sql::control::open_sqlite(&path).await.unwrap();
    Arc::new(SqliteTenantStore::new(pool))
}

/// The SMTP capture server: `TOKI_TEST_SMTP` as `host:port` (set by scripts/test.sh).
pub fn smtp_addr() -> Option<String> {
    std::env::var("TOKI_TEST_SMTP")
        .ok()
        .filter(|s| !s.is_empty())
}

/// A Slack stand-in served in this process; returns it and its API base URL.
pub async fn slack_standin(
    options: toki_devtools::slack_standin::StandinOptions,
) -> (toki_devtools::slack_standin::Standin, String) {
    slack_standin_on(options, Arc::new(toki_ports::SystemClock)).await
}

/// The same, its arrivals on `clock`.
pub async fn slack_standin_on(
    options: toki_devtools::slack_standin::StandinOptions,
    clock: Arc<dyn toki_ports::Clock>,
) -> (toki_devtools::slack_standin::Standin, String) {
    let standin = toki_devtools::slack_standin::Standin::with_clock(options, clock);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/api", listener.local_addr().unwrap());
    tokio::spawn(toki_devtools::slack_standin::serve(
        standin.clone(),
        listener,
    ));
    (standin, url)
}

/// The SMTP capture server (`host:port`) and the maildir it writes: the one
/// scripts/test.sh started, or one started here for this test binary.
pub fn smtp() -> (String, std::path::PathBuf) {
    static SMTP: std::sync::OnceLock<(String, std::path::PathBuf)> = std::sync::OnceLock::new();
    SMTP.get_or_init(|| {
        if let (Some(addr), Ok(dir)) = (smtp_addr(), std::env::var("TOKI_TEST_SMTP_MAILDIR")) {
            return (addr, dir.into());
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let python = root.join(".venv-tools/bin/python");
        assert!(python.exists(), "no SMTP capture server: run scripts/test.sh (it installs aiosmtpd into .venv-tools)");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap().keep();
        // The watchdog stops the server when this test process exits.
        let script = format!(
            "{} -m aiosmtpd -n -l 127.0.0.1:{port} -c aiosmtpd.handlers.Mailbox {} & p=$!; while kill -0 {} 2>/dev/null; do sleep 1; done; kill $p",
            python.display(),
            dir.join("maildir").display(),
            std::process::id()
        );
        // Deliberately not waited on: it lives as long as this test process.
        #[allow(clippy::zombie_processes)]
        std::process::Command::new("sh").arg("-c").arg(script).spawn().unwrap();
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        (format!("127.0.0.1:{port}"), dir.join("maildir"))
    })
    .clone()
}

/// The mails the SMTP capture server wrote into `dir` (a maildir).
#[allow(dead_code)]
pub fn maildir_files(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for sub in ["new", "cur"] {
        if let Ok(entries) = std::fs::read_dir(dir.join(sub)) {
            for e in entries.flatten() {
                out.push(std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
    }
    out
}
