//! The suppression port: a tenant's list of addresses not to mail again, and
//! the `List-Unsubscribe` it puts on its mail. Part of the tenant's database.

use async_trait::async_trait;

use toki_model::domain::{Instant, UserId};
use toki_model::suppression::{ListUnsubscribe, ListedAddress, Suppression, SuppressionReason};

use crate::error::StoreResult;

/// How many entries one listing returns at most.
pub const MAX_LISTED: usize = 1000;

/// A recipient whose mailbox a server refused: suppressed by their address
/// as the store holds it (the daemon knows the user, not the address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedRecipient {
    pub user: UserId,
    pub reason: SuppressionReason,
    pub detail: String,
}

#[async_trait]
pub trait SuppressionList: Send + Sync {
    /// Adds entries; an address already listed keeps its first entry. How
    /// many were added.
    async fn suppress(&self, entries: &[Suppression]) -> StoreResult<u64>;

    /// Adds each recipient's current mail address (users without one are
    /// passed over), at `at`. How many were added.
    async fn suppress_recipients(
        &self,
        refused: &[RefusedRecipient],
        at: Instant,
    ) -> StoreResult<u64>;

    /// Takes an address off the list; whether it was there.
    async fn unsuppress(&self, address: &ListedAddress) -> StoreResult<bool>;

    /// One address's entry.
    async fn suppression(&self, address: &ListedAddress) -> StoreResult<Option<Suppression>>;

    /// Up to `limit` entries after `after`, in address order.
    async fn suppressions(
        &self,
        after: Option<&ListedAddress>,
        limit: usize,
    ) -> StoreResult<Vec<Suppression>>;

    /// The tenant's `List-Unsubscribe` (default: none).
    async fn list_unsubscribe(&self) -> StoreResult<ListUnsubscribe>;

    async fn put_list_unsubscribe(
        &self,
        settings: &ListUnsubscribe,
        now: Instant,
    ) -> StoreResult<()>;
}
