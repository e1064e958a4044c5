//! Toki on SQL. The embedded backend (one SQLite control database holding the
//! reminder index, the delay queue and the tenant directory) and the tenant
//! stores on SQLite and Postgres, which share one schema and one implementation.
//! Without the `sqlite` feature only the Postgres tenant stores are built (the
//! AWS family: the Lambdas).

#[macro_use]
mod row;
#[cfg(feature = "sqlite")]
pub mod control;
#[cfg(feature = "sqlite")]
pub mod control_purge;
#[cfg(feature = "sqlite")]
pub mod debounce;
#[cfg(feature = "sqlite")]
pub mod directory;
#[cfg(feature = "sqlite")]
pub mod index;
#[cfg(feature = "sqlite")]
pub mod lease;
#[cfg(feature = "sqlite")]
pub mod marks;
#[cfg(feature = "sqlite")]
pub mod offboard;
#[cfg(feature = "sqlite")]
pub mod queue;
pub mod stores;
#[cfg(feature = "sqlite")]
pub mod tenant_file;
pub mod tenant_store;

use toki_ports::StoreError;

/// How many rows a statement inserted, changed or deleted: each engine's
/// result says so in a method of its own.
pub(crate) trait RowsAffected {
    fn rows_affected(&self) -> u64;
}

impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows_affected(&self) -> u64 {
        self.rows_affected()
    }
}

#[cfg(feature = "sqlite")]
impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        self.rows_affected()
    }
}

/// How long a tenant database's connection stays open unused (SQLite: its
/// file, WAL and shared-memory descriptors; Postgres: a server connection).
pub const TENANT_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A database error as a store error: transient (worth retrying) or not, with
/// the driver's error as its source.
pub(crate) fn db_err(e: sqlx::Error) -> StoreError {
    if is_removed(&e) {
        // Its tenant was deleted while this process held it: the caller
        // asks again (the directory now says the tenant is gone, or where
        // its new database is).
        StoreError::unavailable("the tenant's database was removed", e)
    } else if is_transient(&e) {
        StoreError::unavailable("database call", e)
    } else {
        StoreError::backend("database call", e)
    }
}

/// A transaction that writes. On SQLite it takes the write lock at once
/// (`BEGIN IMMEDIATE`), so that another process writing the same file makes
/// it wait (busy timeout) instead of failing when a read inside it turns
/// into a write; on Postgres, a plain `BEGIN`.
///
/// Cancel-safe: sqlx 0.8 can hand a connection back to the pool inside a
/// `BEGIN` whose future was dropped (a shutdown `select!`, an aborted task),
/// and every later statement on it then runs in a transaction nobody commits.
/// The begin runs in a task of its own, so it always completes; if the caller
/// has gone, the finished transaction is dropped there and rolled back.
pub(crate) async fn begin_write<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
) -> toki_ports::StoreResult<sqlx::Transaction<'static, DB>> {
    let begin = if DB::NAME == "SQLite" {
        "BEGIN IMMEDIATE"
    } else {
        "BEGIN"
    };
    let pool = pool.clone();
    match tokio::spawn(async move { pool.begin_with(begin).await }).await {
        Ok(begun) => begun.map_err(db_err),
        Err(e) => Err(StoreError::unavailable("database call", e)),
    }
}

/// A write refused by a removed tenant file's fence ([`tenant_file`]).
fn is_removed(e: &sqlx::Error) -> bool {
    #[cfg(feature = "sqlite")]
    if let sqlx::Error::Database(d) = e {
        return d.message().contains(tenant_file::REMOVED);
    }
    let _ = e;
    false
}

fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(d) => {
            // SQLite: busy / locked. Postgres: serialization failure, deadlock,
            // too many connections, shutting down, cannot connect now.
            let code = d.code();
            matches!(
                code.as_deref(),
                Some(
                    "5" | "6"
                        | "517"
                        | "262"
                        | "40001"
                        | "40P01"
                        | "53300"
                        | "57P01"
                        | "57P02"
                        | "57P03"
                )
            )
        }
        _ => false,
    }
}

#[cfg(feature = "sqlite")]
pub use control::ControlDb;
#[cfg(feature = "sqlite")]
pub use control_purge::SqliteControlPurge;
#[cfg(feature = "sqlite")]
pub use debounce::SqliteDebounceStore;
#[cfg(feature = "sqlite")]
pub use directory::SqliteTenantDirectory;
#[cfg(feature = "sqlite")]
pub use index::SqliteReminderIndex;
#[cfg(feature = "sqlite")]
pub use lease::SqliteLeaseStore;
#[cfg(feature = "sqlite")]
pub use marks::SqliteWorkMarks;
#[cfg(feature = "sqlite")]
pub use offboard::SqliteControlFootprint;
#[cfg(feature = "sqlite")]
pub use queue::SqliteDelayQueue;
pub use stores::{
    create_tenant_database, database_for, drop_tenant_database, grant_runtime_role,
    CheckedDirectory, Locator, SqlTenantStores, StatementCache, DEFAULT_CONNECTION_BUDGET,
    DEFAULT_MAX_OPEN_TENANTS, SQLITE_IN_USE,
};
#[cfg(feature = "sqlite")]
pub use tenant_store::SqliteTenantStore;
pub use tenant_store::{ConnectionBudget, PostgresTenantStore, SqlTenantStore, TENANT_MIGRATIONS};
