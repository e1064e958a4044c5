//! The debounce store in memory.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use toki_model::debounce::DebounceEntry;

use crate::DebounceStore;
use crate::{Conditional, StoreResult};

#[derive(Default)]
pub struct MemoryDebounceStore {
    rows: Mutex<HashMap<String, DebounceEntry>>,
}

impl MemoryDebounceStore {
    /// No key has a row (every burst is over and cleaned up).
    pub fn is_empty(&self) -> bool {
        self.rows.lock().expect("rows lock").is_empty()
    }
}

#[async_trait]
impl DebounceStore for MemoryDebounceStore {
    async fn get(&self, key: &str) -> StoreResult<Option<DebounceEntry>> {
        Ok(self.rows.lock().expect("rows lock").get(key).cloned())
    }

    async fn put_if(
        &self,
        entry: &DebounceEntry,
        expected: Option<&str>,
    ) -> StoreResult<Conditional> {
        let mut rows = self.rows.lock().expect("rows lock");
        let holds = rows.get(&entry.key).map(|e| e.token.as_str());
        if holds != expected {
            return Ok(Conditional::Refused);
        }
        rows.insert(entry.key.clone(), entry.clone());
        Ok(Conditional::Written)
    }

    async fn remove_if(&self, key: &str, token: &str) -> StoreResult<Conditional> {
        let mut rows = self.rows.lock().expect("rows lock");
        if rows.get(key).is_some_and(|e| e.token == token) {
            rows.remove(key);
            return Ok(Conditional::Written);
        }
        Ok(Conditional::Refused)
    }
}

// Offboarding: the tenant's rows.
#[async_trait]
impl crate::offboard::TenantFootprint for MemoryDebounceStore {
    async fn holdings(
        &self,
        tenant: &toki_model::domain::TenantId,
    ) -> StoreResult<Vec<crate::offboard::Holding>> {
        let rows = self.rows.lock().expect("rows lock");
        let n = rows
            .keys()
            .filter(|k| crate::offboard::is_tenants_debounce_key(k, tenant))
            .count();
        Ok(vec![crate::offboard::Holding::new("debounce", n as u64)])
    }

    async fn delete_tenant(
        &self,
        tenant: &toki_model::domain::TenantId,
    ) -> StoreResult<Vec<crate::offboard::Holding>> {
        let held = self.holdings(tenant).await?;
        self.rows
            .lock()
            .expect("rows lock")
            .retain(|k, _| !crate::offboard::is_tenants_debounce_key(k, tenant));
        Ok(held)
    }
}
