//! Where the fleet's rate leases live (the flow control is `toki_flow`).

use async_trait::async_trait;

use toki_model::Instant;

use crate::{Conditional, StoreResult};

/// One partition's lease row, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLease {
    pub key: String,
    pub partition: u32,
    pub holder: String,
    pub expires_at: Instant,
}

/// Where lease rows live. Every write is conditional.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Takes or renews `partition` of `key` for `holder` until `until`: only
    /// if the partition has no row, its lease expired at `now`, or `holder`
    /// holds it already. True: `holder` holds it until `until`.
    async fn acquire(
        &self,
        key: &str,
        partition: u32,
        holder: &str,
        until: Instant,
        now: Instant,
    ) -> StoreResult<Conditional>;

    /// Gives `partition` back, if `holder` still holds it (true).
    async fn release(&self, key: &str, partition: u32, holder: &str) -> StoreResult<Conditional>;

    /// Every stored lease row of `key`, live or expired, by partition.
    async fn leases(&self, key: &str) -> StoreResult<Vec<PartitionLease>>;
}
