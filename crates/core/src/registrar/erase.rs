//! Erasure of a person through the registrar (docs/erasure.md): the tenant
//! database erases them in one transaction, then the schedules they left
//! are mirrored again, so the index and every later message go by versions
//! that no longer name them.

use tracing::{info, warn};

use toki_model::erasure::{pseudonym, ErasureReport};
use toki_model::error::chain;
use toki_model::{TenantId, UserId};

use super::{Registrar, RegistrarError};

/// What an erasure did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Erased {
    /// Per place, the rows removed or rewritten.
    pub report: ErasureReport,
    /// Whether the schedules they left are mirrored at their new versions
    /// (if not, the repair pass finishes it; nothing is sent to them meanwhile).
    pub mirrored: bool,
}

impl Registrar {
    /// Erases a user of `tenant` everywhere its database holds them. A user
    /// the database holds nothing of is not found. A second call for the same
    /// id finds what a delivery in flight during the first recorded after it.
    pub async fn erase_user(
        &self,
        tenant: &TenantId,
        id: &UserId,
    ) -> Result<Erased, RegistrarError> {
        self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        self.marker.repair_after_write(tenant).await?;
        let report = store.erase_user(id, &pseudonym(), self.clock.now()).await?;
        if report.total() == 0 {
            return Err(RegistrarError::NotFound(format!("user {id}")));
        }
        // No user id in the log: it may be an address.
        info!(%tenant, rows = report.total(), schedules = report.schedules_changed, "user erased");
        let mirrored = report.schedules_changed == 0 || self.mirror_erasure(tenant).await;
        Ok(Erased { report, mirrored })
    }

    /// Mirrors the tenant's schedules left unmirrored (those the erasure
    /// moved among them); whether that worked.
    async fn mirror_erasure(&self, tenant: &TenantId) -> bool {
        match self.repair(tenant).await {
            Ok(_) => true,
            Err(e) => {
                warn!(%tenant, error = %chain(&e), "mirror after an erasure failed; repair will retry");
                self.marker.repair_now(tenant).await;
                false
            }
        }
    }
}
