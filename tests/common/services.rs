//! Real services for integration tests. `scripts/test.sh` starts them and
//! exports their addresses; run alone, the helpers fall back to local defaults.

use std::sync::Arc;

use toki_core::ports::TenantStore;
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
    let url = postgres_url_for(&unique("toki_test_"));
    create_tenant_database(&url).await.unwrap_or_else(|e| {
        panic!(
            "Postgres at {} is needed (scripts/test.sh starts one): {e}",
            postgres_base_url()
        )
    });
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    Arc::new(PostgresTenantStore::new(pool))
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
