//! Tenants whose database cannot be read, each reported once: the
//! dispatcher looks at every tenant each poll, and a missing or corrupt
//! database would otherwise be a warning a second, for every such tenant,
//! drowning what else the log says. A failure is logged at WARN when it
//! starts and at DEBUG while it lasts; a tenant read again is logged once
//! more (INFO), and its next failure is news again.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use toki_model::domain::TenantId;
use tracing::{debug, info, warn};

/// The tenants failing now, and how many failures were reported.
#[derive(Debug, Default)]
pub struct FailingTenants {
    now: Mutex<HashSet<TenantId>>,
    reported: AtomicU64,
}

impl FailingTenants {
    /// `tenant`'s database could not be read (`what` failed, `why`).
    pub fn failed(&self, tenant: &TenantId, what: &str, why: &str) {
        if self
            .now
            .lock()
            .expect("failing lock")
            .insert(tenant.clone())
        {
            self.reported.fetch_add(1, Ordering::Relaxed);
            warn!(%tenant, error = why, "delivery events: {what} failed; reported once until it succeeds");
        } else {
            debug!(%tenant, error = why, "delivery events: {what} still failing");
        }
    }

    /// `tenant`'s database was read.
    pub fn read(&self, tenant: &TenantId) {
        let mut now = self.now.lock().expect("failing lock");
        if !now.is_empty() && now.remove(tenant) {
            info!(%tenant, "delivery events: the tenant's database is read again");
        }
    }

    /// Tenants failing now.
    pub fn count(&self) -> usize {
        self.now.lock().expect("failing lock").len()
    }

    /// Failures reported (at WARN) since the start.
    pub fn reported(&self) -> u64 {
        self.reported.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::FailingTenants;

    #[test]
    fn a_failure_is_reported_when_it_starts_and_again_after_a_recovery() {
        let failing = FailingTenants::default();
        let (gone, fine): (toki_model::domain::TenantId, toki_model::domain::TenantId) =
            ("gone".parse().unwrap(), "fine".parse().unwrap());
        for _ in 0..60 {
            failing.failed(&gone, "opening", "no such file");
            failing.read(&fine);
        }
        assert_eq!((failing.count(), failing.reported()), (1, 1));
        failing.read(&gone);
        assert_eq!(failing.count(), 0);
        failing.failed(&gone, "opening", "no such file");
        assert_eq!((failing.count(), failing.reported()), (1, 2));
    }
}
