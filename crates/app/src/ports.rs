//! What opening a backend gives: its ports.

use std::sync::Arc;

use toki_ports::DebounceStore;
use toki_ports::LeaseStore;
use toki_ports::{DelayQueue, ReminderIndex, TenantDirectory};
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
    /// Which tenants have delivery events, a repair or a purge waiting.
    pub marks: Arc<dyn toki_ports::WorkMarks>,
    /// The retention purge's part in the control store (embedded only).
    pub control_purge: Option<Arc<dyn toki_ports::ControlPurge>>,
    /// What the control stores hold of a tenant (offboarding).
    pub footprints: Vec<Arc<dyn toki_ports::TenantFootprint>>,
}
