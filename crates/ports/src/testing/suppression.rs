//! A tenant's suppression list in memory, with the SQL one's semantics.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use super::store::{MemoryTenantStore, State};
use crate::error::StoreResult;
use crate::suppression::{RefusedRecipient, SuppressionList};
use toki_model::domain::{Instant, User};
use toki_model::suppression::{bounded_detail, ListUnsubscribe, ListedAddress, Suppression};
use toki_model::suppression_hash::SuppressionHashKey;

/// An erased person's entry: its reason and since when, under the keyed
/// hash of the address (the SQL stores' `erased_suppressions`).
#[derive(Debug, Clone)]
pub(super) struct ErasedEntry {
    reason: toki_model::suppression::SuppressionReason,
    at: Instant,
}

/// Replaces the entry of an erased person's `address` by its keyed hash,
/// unless another user has the address; 1 if it was replaced.
pub(super) fn erase_entry(state: &mut State, address: &ListedAddress) -> u64 {
    let shared = state.users.values().any(|u| {
        u.email
            .as_deref()
            .and_then(|e| ListedAddress::parse("email", e).ok())
            .is_some_and(|a| &a == address)
    });
    if shared {
        return 0;
    }
    let Some(entry) = state.suppressed.remove(address) else {
        return 0;
    };
    let key = state
        .suppression_hash_key
        .get_or_insert_with(SuppressionHashKey::generate);
    let digest = key.digest(address);
    let erased = ErasedEntry {
        reason: entry.reason,
        at: entry.at,
    };
    state.erased_suppressed.entry(digest).or_insert(erased);
    1
}

/// The erased entry of `address`, if any; `take` removes it.
fn erased_entry(state: &mut State, address: &ListedAddress, take: bool) -> Option<Suppression> {
    let digest = state.suppression_hash_key.as_ref()?.digest(address);
    let entry = if take {
        state.erased_suppressed.remove(&digest)?
    } else {
        state.erased_suppressed.get(&digest)?.clone()
    };
    Some(Suppression {
        address: address.clone(),
        reason: entry.reason,
        detail: None,
        at: entry.at,
    })
}

/// A user written with an address an erased entry hashes: listed again.
pub(super) fn restore_erased(state: &mut State, user: &User) {
    let listed = user
        .email
        .as_deref()
        .and_then(|e| ListedAddress::parse("email", e).ok());
    if let Some(entry) = listed.and_then(|a| erased_entry(state, &a, true)) {
        add(&mut state.suppressed, entry);
    }
}

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
        let erased = erased_entry(&mut state, address, true).is_some();
        Ok(listed || erased)
    }

    async fn suppression(&self, address: &ListedAddress) -> StoreResult<Option<Suppression>> {
        let mut state = self.enter().await?;
        match state.suppressed.get(address).cloned() {
            Some(entry) => Ok(Some(entry)),
            None => Ok(erased_entry(&mut state, address, false)),
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
