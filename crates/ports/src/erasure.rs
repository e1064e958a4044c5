//! The erasure port: a person removed from a tenant's database, everywhere
//! it holds them, at once (docs/erasure.md).

use async_trait::async_trait;

use toki_model::domain::{Instant, UserId};
use toki_model::erasure::ErasureReport;

use crate::error::StoreResult;

#[async_trait]
pub trait Erasure: Send + Sync {
    /// Erases `user`, all or nothing (one transaction): deletes their user
    /// row; takes them out of every schedule (each such schedule gets its
    /// next version and is left to mirror, so queued reminders of the old
    /// version turn stale); deletes their unfinished deliveries (so none is
    /// sent), their chat messages and the kept answers that quote them;
    /// rewrites their finished deliveries and delivery events under
    /// `pseudonym` with free texts scrubbed; and drops them from change
    /// notice baselines and notices. Also run for an id with no user row, it
    /// removes what a delivery in flight at the first erasure recorded after it.
    async fn erase_user(
        &self,
        user: &UserId,
        pseudonym: &UserId,
        now: Instant,
    ) -> StoreResult<ErasureReport>;
}
