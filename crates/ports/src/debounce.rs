//! Where debounce rows live (the rules are `toki_model::debounce`).

use async_trait::async_trait;

use toki_model::debounce::DebounceEntry;

use crate::{Conditional, StoreResult};

/// Where the rows live; every write is conditional.
#[async_trait]
pub trait DebounceStore: Send + Sync {
    async fn get(&self, key: &str) -> StoreResult<Option<DebounceEntry>>;
    /// Writes `entry` if the key has no row (`expected` = None) or if its row
    /// still holds the token `expected`. False: another write came first.
    async fn put_if(
        &self,
        entry: &DebounceEntry,
        expected: Option<&str>,
    ) -> StoreResult<Conditional>;
    /// Removes the key's row if it still holds `token`.
    async fn remove_if(&self, key: &str, token: &str) -> StoreResult<Conditional>;
}
