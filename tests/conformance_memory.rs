//! The conformance suite on the testing kit's in-memory ports: the fakes the
//! paused-clock tests rely on behave like the real backends.

use crate::common;

use std::sync::Arc;

use toki_core::testing::{MemoryDirectory, MemoryIndex, MemoryQueue, MemoryTenantStore};
use toki_ports::{DelayQueue, ReminderIndex, SystemClock, TenantDirectory, TenantStore};

async fn queue(max_receives: u32) -> Arc<dyn DelayQueue> {
    Arc::new(MemoryQueue::new(Arc::new(SystemClock), max_receives))
}

async fn index(shards: u16) -> Arc<dyn ReminderIndex> {
    Arc::new(MemoryIndex::new(shards))
}

async fn directory() -> Arc<dyn TenantDirectory> {
    Arc::new(MemoryDirectory::default())
}

async fn store() -> Arc<dyn TenantStore> {
    Arc::new(MemoryTenantStore::default())
}

async fn debounce_store() -> Arc<dyn toki_ports::DebounceStore> {
    Arc::new(toki_core::testing::MemoryDebounceStore::default())
}

async fn work_marks() -> Arc<dyn toki_ports::WorkMarks> {
    Arc::new(toki_ports::testing::MemoryWorkMarks::default())
}

async fn lease_store() -> Arc<dyn toki_ports::LeaseStore> {
    Arc::new(toki_core::testing::MemoryLeaseStore::default())
}

queue_conformance!(queue);
debounce_conformance!(debounce_store);
lease_conformance!(lease_store);
marks_conformance!(work_marks);
index_conformance!(index);
directory_conformance!(directory);
store_conformance!(store);
retention_conformance!(store);
erasure_conformance!(common::erasure::memory);
