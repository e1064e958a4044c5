//! What opening a backend gives: its ports.

use std::sync::Arc;

use toki_core::debounce::DebounceStore;
use toki_core::flow::LeaseStore;
use toki_core::ports::{DelayQueue, ReminderIndex, TenantDirectory};
use toki_sql::SqlTenantStores;

/// The ports of one backend.
pub(crate) struct Ports {
    pub directory: Arc<dyn TenantDirectory>,
    pub stores: Arc<SqlTenantStores>,
    pub index: Arc<dyn ReminderIndex>,
    pub queue: Arc<dyn DelayQueue>,
    /// Change notices' debounce rows.
    pub debounce: Arc<dyn DebounceStore>,
    /// Leases on the partitions of the fleet's rate limits.
    pub leases: Arc<dyn LeaseStore>,
}
