//! Toki on SQL. The embedded backend (one SQLite control database holding the
//! reminder index, the delay queue and the tenant directory) and the tenant
//! stores on SQLite and Postgres, which share one schema and one implementation.

pub mod control;
pub mod directory;
pub mod index;
pub mod queue;
pub mod stores;
pub mod tenant_store;

use toki_core::StoreError;

pub(crate) fn db_err(e: sqlx::Error) -> StoreError {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => {
            StoreError::Unavailable(e.to_string())
        }
        other => StoreError::Backend(other.to_string()),
    }
}

pub(crate) fn now_millis() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

pub use control::ControlDb;
pub use directory::SqliteTenantDirectory;
pub use index::SqliteReminderIndex;
pub use queue::SqliteDelayQueue;
pub use stores::{
    create_tenant_database, database_for, drop_tenant_database, Locator, SqlTenantStores,
};
pub use tenant_store::{PostgresTenantStore, SqliteTenantStore};
