//! A tenant's suppression list in memory, with the SQL one's semantics.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use super::store::MemoryTenantStore;
use crate::error::StoreResult;
use crate::suppression::{RefusedRecipient, SuppressionList};
use toki_model::domain::Instant;
use toki_model::suppression::{bounded_detail, ListUnsubscribe, ListedAddress, Suppression};

fn add(list: &mut BTreeMap<ListedAddress, Suppression>, entry: Suppression) -> u64 {
    if list.contains_key(&entry.address) {
        return 0;
    }
    list.insert(entry.address.clone(), entry);
    1
}

#[async_trait]
impl SuppressionList for MemoryTenantStore {
    async fn suppress(&self, entries: &[Suppression]) -> StoreResult<u64> {
        let mut state = self.enter().await?;
        Ok(entries
            .iter()
            .map(|e| add(&mut state.suppressed, e.clone()))
            .sum())
    }

    async fn suppress_recipients(
        &self,
        refused: &[RefusedRecipient],
        at: Instant,
    ) -> StoreResult<u64> {
        let mut state = self.enter().await?;
        let mut added = 0;
        for r in refused {
            let address = state
                .users
                .get(&r.user)
                .and_then(|u| u.email.as_deref())
                .and_then(|e| ListedAddress::parse("email", e).ok());
            if let Some(address) = address {
                let entry = Suppression {
                    address,
                    reason: r.reason,
                    detail: Some(bounded_detail(&r.detail)),
                    at,
                };
                added += add(&mut state.suppressed, entry);
            }
        }
        Ok(added)
    }

    async fn unsuppress(&self, address: &ListedAddress) -> StoreResult<bool> {
        let mut state = self.enter().await?;
        let listed = state.suppressed.remove(address).is_some();
        let erased = state.erased_suppressed.entry(address, true).is_some();
        Ok(listed || erased)
    }

    async fn suppression(&self, address: &ListedAddress) -> StoreResult<Option<Suppression>> {
        let mut state = self.enter().await?;
        match state.suppressed.get(address).cloned() {
            Some(entry) => Ok(Some(entry)),
            None => Ok(state.erased_suppressed.entry(address, false)),
        }
    }

    async fn suppressions(
        &self,
        after: Option<&ListedAddress>,
        limit: usize,
    ) -> StoreResult<Vec<Suppression>> {
        let state = self.enter().await?;
        Ok(state
            .suppressed
            .values()
            .filter(|s| after.is_none_or(|a| &s.address > a))
            .take(limit)
            .cloned()
            .collect())
    }

    async fn list_unsubscribe(&self) -> StoreResult<ListUnsubscribe> {
        let state = self.enter().await?;
        Ok(state
            .list_unsubscribe
            .as_deref()
            .cloned()
            .unwrap_or_default())
    }

    async fn put_list_unsubscribe(
        &self,
        settings: &ListUnsubscribe,
        _now: Instant,
    ) -> StoreResult<()> {
        let mut state = self.enter().await?;
        state.list_unsubscribe = settings.is_enabled().then(|| Arc::new(settings.clone()));
        Ok(())
    }
}
