//! The conformance suite on the embedded backend (SQLite).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use toki_ports::{DelayQueue, ReminderIndex, TenantDirectory, TenantStore};
use toki_sql::{ControlDb, SqliteDelayQueue, SqliteReminderIndex, SqliteTenantDirectory};

async fn control() -> ControlDb {
    let dir = tempfile::tempdir().unwrap().keep();
    ControlDb::open(&dir.join("control.sqlite")).await.unwrap()
}

async fn queue(max_receives: u32) -> Arc<dyn DelayQueue> {
    Arc::new(SqliteDelayQueue::new(
        control().await.pool,
        common::conformance::unique("q"),
        max_receives,
        Arc::new(toki_ports::SystemClock),
    ))
}

async fn index(shards: u16) -> Arc<dyn ReminderIndex> {
    Arc::new(SqliteReminderIndex::new(
        control().await.pool,
        shards,
        Duration::from_secs(86_400),
    ))
}

async fn directory() -> Arc<dyn TenantDirectory> {
    Arc::new(SqliteTenantDirectory::new(control().await.pool))
}

async fn store() -> Arc<dyn TenantStore> {
    common::services::sqlite_store().await
}

async fn debounce_store() -> Arc<dyn toki_ports::DebounceStore> {
    Arc::new(toki_sql::SqliteDebounceStore::new(control().await.pool))
}

async fn work_marks() -> Arc<dyn toki_ports::WorkMarks> {
    Arc::new(toki_sql::SqliteWorkMarks::new(control().await.pool))
}

async fn lease_store() -> Arc<dyn toki_ports::LeaseStore> {
    Arc::new(toki_sql::SqliteLeaseStore::new(control().await.pool))
}

queue_conformance!(queue);
debounce_conformance!(debounce_store);
lease_conformance!(lease_store);
marks_conformance!(work_marks);
index_conformance!(index);
directory_conformance!(directory);
store_conformance!(store);
retention_conformance!(store);
erasure_conformance!(common::erasure::sqlite);
