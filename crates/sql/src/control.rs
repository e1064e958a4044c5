//! The embedded control database: one SQLite file.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use toki_ports::StoreResult;

use crate::db_err;

/// The control database's migrations (migrations/control), compiled in.
pub static CONTROL_MIGRATIONS: std::sync::LazyLock<sqlx::migrate::Migrator> =
    std::sync::LazyLock::new(|| crate::row::migrator(crate::row::files::CONTROL));

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

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    /// A begin dropped after its first poll (the command already sent to
    /// SQLite's worker) leaves no transaction open on the one connection:
    /// the next write transaction starts and its commit is seen elsewhere.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_begin_leaves_no_transaction_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sqlite");
        let pool = super::open_sqlite(&path).await.unwrap();
        sqlx::query("CREATE TABLE t (v INTEGER)")
            .execute(&pool)
            .await
            .unwrap();
        // Dropped after 1, 2, ... polls, the worker thread given time to
        // answer between them: one of them falls after the `BEGIN` ran and
        // before sqlx made the transaction that would roll it back.
        for polls in (1..=8).cycle().take(64) {
            let mut begun = Box::pin(crate::begin_write(&pool));
            let mut cx = Context::from_waker(Waker::noop());
            for _ in 0..polls {
                if let Poll::Ready(tx) = begun.as_mut().poll(&mut cx) {
                    drop(tx);
                    break;
                }
                // Time for SQLite's worker thread, not a synchronisation:
                // every count of polls is tried.
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            drop(begun);
        }
        let mut tx = crate::begin_write(&pool)
            .await
            .expect("a fresh transaction");
        sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let other = super::open_sqlite(&path).await.unwrap();
        let seen: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM t")
            .fetch_one(&other)
            .await
            .unwrap();
        assert_eq!(seen, 1, "the commit reached the file");
    }
}
