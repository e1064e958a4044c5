//! Partition leases in memory (the same conditions as the stored rows).

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::{Conditional, StoreResult};
use crate::{LeaseStore, PartitionLease};
use toki_model::domain::Instant;

#[derive(Default)]
pub struct MemoryLeaseStore {
    rows: Mutex<BTreeMap<(String, u32), PartitionLease>>,
}

#[async_trait]
impl LeaseStore for MemoryLeaseStore {
    async fn acquire(
        &self,
        key: &str,
        partition: u32,
        holder: &str,
        until: Instant,
        now: Instant,
    ) -> StoreResult<Conditional> {
        let mut rows = self.rows.lock().expect("lease rows lock");
        let id = (key.to_owned(), partition);
        let free = rows
            .get(&id)
            .is_none_or(|l| l.holder == holder || l.expires_at <= now);
        if free {
            rows.insert(
                id,
                PartitionLease {
                    key: key.to_owned(),
                    partition,
                    holder: holder.to_owned(),
                    expires_at: until,
                },
            );
        }
        Ok(Conditional::of(free))
    }

    async fn release(&self, key: &str, partition: u32, holder: &str) -> StoreResult<Conditional> {
        let mut rows = self.rows.lock().expect("lease rows lock");
        let id = (key.to_owned(), partition);
        if rows.get(&id).is_some_and(|l| l.holder == holder) {
            rows.remove(&id);
            return Ok(Conditional::Written);
        }
        Ok(Conditional::Refused)
    }

    async fn leases(&self, key: &str) -> StoreResult<Vec<PartitionLease>> {
        let rows = self.rows.lock().expect("lease rows lock");
        Ok(rows.values().filter(|l| l.key == key).cloned().collect())
    }
}

// Offboarding: the tenant's rows.
#[async_trait]
impl crate::offboard::TenantFootprint for MemoryLeaseStore {
    async fn holdings(
        &self,
        tenant: &toki_model::domain::TenantId,
    ) -> StoreResult<Vec<crate::offboard::Holding>> {
        let rows = self.rows.lock().expect("rows lock");
        let n = rows
            .keys()
            .filter(|(k, _)| crate::offboard::is_tenants_lease_key(k, tenant))
            .count();
        Ok(vec![crate::offboard::Holding::new("rate_leases", n as u64)])
    }

    async fn delete_tenant(
        &self,
        tenant: &toki_model::domain::TenantId,
    ) -> StoreResult<Vec<crate::offboard::Holding>> {
        let held = self.holdings(tenant).await?;
        self.rows
            .lock()
            .expect("rows lock")
            .retain(|(k, _), _| !crate::offboard::is_tenants_lease_key(k, tenant));
        Ok(held)
    }
}
