//! Every port in memory: an index, a queue, tenant stores and a directory,
//! leases, debounce rows, channels that record what they send, and a clock
//! on tokio's (pausable) time. Enabled by the `testing` feature.

mod audit;
mod audit_log;
mod channel;
mod clock;
mod debounce;
mod erased_list;
mod erasure;
mod event_log;
mod events;
mod index;
mod lease;
mod marks;
mod queue;
mod report;
mod retention;
mod store;
mod suppression;

pub use channel::{RecordingChannel, SentNotification};
pub use clock::TokioClock;
pub use debounce::MemoryDebounceStore;
pub use index::{MemoryDirectory, MemoryIndex};
pub use lease::MemoryLeaseStore;
pub use marks::MemoryWorkMarks;
pub use queue::MemoryQueue;
pub use store::{MemoryTenantStore, MemoryTenantStores};

use toki_model::Instant;

/// The instant a kit's clock starts at: 08:00 UTC on a Monday.
pub fn monday_morning() -> Instant {
    chrono::DateTime::parse_from_rfc3339("2026-11-23T08:00:00Z")
        .expect("a valid instant")
        .to_utc()
}
