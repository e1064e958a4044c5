//! Each tenant's reminder templates, compiled, kept for a second: a batch
//! pays neither the read nor the compile, and a template written through the
//! API reaches the reminders within a second.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use toki_model::domain::TenantId;
use toki_model::template::Templates;
use toki_ports::error::StoreResult;
use toki_ports::TenantStore;

/// How long a tenant's compiled templates are used before they are read again.
const FRESH: Duration = Duration::from_secs(1);

/// Tenants kept before the stale ones are swept out (a sweep per insert
/// past it, each over the tenants of the last second).
const FORGET_ABOVE: usize = 64;

#[derive(Default)]
pub(super) struct TemplateCache {
    tenants: Mutex<HashMap<TenantId, (tokio::time::Instant, Arc<Templates>)>>,
}

impl TemplateCache {
    /// `tenant`'s templates over the defaults, read from `store` when those
    /// kept are older than a second.
    pub(super) async fn get(
        &self,
        tenant: &TenantId,
        store: &dyn TenantStore,
    ) -> StoreResult<Arc<Templates>> {
        let now = tokio::time::Instant::now();
        if let Some((read_at, templates)) = self.lock().get(tenant) {
            if now.duration_since(*read_at) < FRESH {
                return Ok(templates.clone());
            }
        }
        let templates = Arc::new(Templates::compile(&store.templates().await?));
        let mut kept = self.lock();
        // Those read over a second ago are of no use: forgotten, so the
        // cache holds the tenants sending now, not every tenant ever seen.
        if kept.len() >= FORGET_ABOVE {
            kept.retain(|_, (read_at, _)| now.duration_since(*read_at) < FRESH);
        }
        kept.insert(tenant.clone(), (now, templates.clone()));
        Ok(templates)
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<TenantId, (tokio::time::Instant, Arc<Templates>)>> {
        // A panic elsewhere cannot leave the map half-written: use it as is.
        self.tenants.lock().unwrap_or_else(|e| e.into_inner())
    }
}
