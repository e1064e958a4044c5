//! What the in-memory index holds of a tenant (offboarding).

use async_trait::async_trait;

use super::MemoryIndex;
use crate::error::StoreResult;
use crate::offboard::{Holding, TenantFootprint};
use toki_model::domain::TenantId;

impl MemoryIndex {
    fn of_tenant(&self, tenant: &TenantId, delete: bool) -> Vec<Holding> {
        let mut rows = self.rows.lock().expect("index lock");
        let before = rows.len();
        let n_rows = rows
            .values()
            .filter(|r| &r.reminder.key.tenant == tenant)
            .count();
        let mut versions = self.versions.lock().expect("index lock");
        let n_versions = versions.keys().filter(|(t, _)| t == tenant).count();
        let mut cursor = self.repair_cursor.lock().expect("index lock");
        let n_cursor = usize::from(cursor.as_ref() == Some(tenant));
        if delete {
            rows.retain(|_, r| &r.reminder.key.tenant != tenant);
            versions.retain(|(t, _), _| t != tenant);
            if n_cursor == 1 {
                *cursor = None; // the next pass starts at the first tenant
            }
            debug_assert_eq!(before - rows.len(), n_rows);
        }
        vec![
            Holding::new("index.rows", n_rows as u64),
            Holding::new("index.versions", n_versions as u64),
            Holding::new("index.repair_cursor", n_cursor as u64),
        ]
    }
}

#[async_trait]
impl TenantFootprint for MemoryIndex {
    async fn holdings(&self, tenant: &TenantId) -> StoreResult<Vec<Holding>> {
        Ok(self.of_tenant(tenant, false))
    }

    async fn delete_tenant(&self, tenant: &TenantId) -> StoreResult<Vec<Holding>> {
        Ok(self.of_tenant(tenant, true))
    }
}
