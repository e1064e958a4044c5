//! The embedded control database: one SQLite file.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use toki_ports::StoreResult;

use crate::db_err;

pub static CONTROL_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/control");

/// Opens a SQLite file tuned for a single process with many short writes:
/// WAL, synchronous=NORMAL, one connection (SQLite serialises writers anyway,
/// and one connection rules out lock upgrades failing under contention).
pub async fn open_sqlite(path: &Path) -> StoreResult<SqlitePool> {
    let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
        .map_err(db_err)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(10))
        .foreign_keys(true);
    SqlitePoolOptions::new()
        .max_connections(1)
        .min_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_with(options)
        .await
        .map_err(db_err)
}

/// The control database, migrated.
#[derive(Clone)]
pub struct ControlDb {
    pub pool: SqlitePool,
}

impl ControlDb {
    pub async fn open(path: &Path) -> StoreResult<Self> {
        let pool = open_sqlite(path).await?;
        CONTROL_MIGRATIONS.run(&pool).await.map_err(|e| {
            toki_ports::StoreError::backend(format!("migrating {}", path.display()), e)
        })?;
        Ok(ControlDb { pool })
    }
}
