//! Marking the work a tenant has waiting ([`toki_ports::marks`]): the
//! writers' side. The passes that serve tenants (delivery events, repair,
//! retention) visit the tenants marked and no others, so an idle tenant
//! costs them nothing.
//!
//! - **Events**: marked due now each time an outcome logs an event.
//! - **Repair**: marked before a schedule write, due [`REPAIR_GRACE`]
//!   later: if the write's mirror is never finished (a crash in between),
//!   the repair pass comes for it then; a write mirrored in time leaves the
//!   pass nothing to do. The repair settles the mark at the tenant's next
//!   series extension.
//! - **Retention**: marked before rows that age or have a cap are written,
//!   due [`RETENTION_AFTER_ACTIVITY`] later; the purge settles it at the
//!   next time something of the tenant's could be purged.
//!
//! A repair or retention mark already written and not yet due is not
//! written again ([`MarkCache`]): a busy tenant costs a control-store write
//! a few minutes, not one a request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::warn;

use toki_model::domain::{Instant, TenantId};
use toki_model::error::chain;
use toki_ports::{Clock, StoreError, WorkKind, WorkMarks};

/// How long after a schedule write its repair mark falls due: longer than
/// any write and its mirror take (an API request is cut at a minute).
pub const REPAIR_GRACE: Duration = Duration::from_secs(120);

/// How long after a write the retention pass looks at the tenant: soon
/// enough that rows past a cap are trimmed within minutes.
pub const RETENTION_AFTER_ACTIVITY: Duration = Duration::from_secs(300);

/// A repair or retention mark is written again once less than this is
/// left before it falls due (a mark due soon may be taken and settled
/// before a write that relied on it is done).
const REMARK_MARGIN: Duration = Duration::from_secs(60);

/// Tenants remembered as marked, per process, before the memory is dropped
/// whole (a bound, not an eviction policy: forgetting only costs a write).
const CACHE_BOUND: usize = 10_000;

/// The marks this process wrote and that are not due yet.
#[derive(Default)]
pub struct MarkCache(Mutex<HashMap<(WorkKind, TenantId), Instant>>);

impl MarkCache {
    /// Whether a mark of `kind` for `tenant` is known to stand until past
    /// `now + REMARK_MARGIN`.
    fn covers(&self, kind: WorkKind, tenant: &TenantId, now: Instant) -> bool {
        let margin = toki_model::time::to_chrono(REMARK_MARGIN);
        let known = self.0.lock().expect("mark cache lock");
        known
            .get(&(kind, tenant.clone()))
            .is_some_and(|due| now + margin < *due)
    }

    fn remember(&self, kind: WorkKind, tenant: &TenantId, due: Instant) {
        let mut known = self.0.lock().expect("mark cache lock");
        if known.len() >= CACHE_BOUND {
            known.clear();
        }
        known.insert((kind, tenant.clone()), due);
    }
}

/// Writes marks for the work this process makes; a failed write is logged
/// (the work stays in the tenant's database, found at its next mark or
/// retention visit).
#[derive(Clone)]
pub struct Marker {
    marks: Arc<dyn WorkMarks>,
    clock: Arc<dyn Clock>,
    cache: Arc<MarkCache>,
}

impl Marker {
    pub fn new(marks: Arc<dyn WorkMarks>, clock: Arc<dyn Clock>) -> Self {
        Marker {
            marks,
            clock,
            cache: Arc::default(),
        }
    }

    pub fn marks(&self) -> &Arc<dyn WorkMarks> {
        &self.marks
    }

    /// Events were logged for `tenant`: its endpoints are looked at now.
    pub async fn events(&self, tenant: &TenantId) {
        let now = self.clock.now();
        self.write(WorkKind::Events, tenant, now).await;
    }

    /// A schedule of `tenant` is about to be written (see the module). An
    /// error means no mark could be written: the write must not begin (a
    /// mirror it then failed to finish would be found by nothing).
    pub async fn repair_after_write(&self, tenant: &TenantId) -> Result<(), StoreError> {
        let now = self.clock.now();
        if self.cache.covers(WorkKind::Repair, tenant, now) {
            return Ok(());
        }
        let due = now + toki_model::time::to_chrono(REPAIR_GRACE);
        self.marks.mark(WorkKind::Repair, tenant, due).await?;
        self.cache.remember(WorkKind::Repair, tenant, due);
        Ok(())
    }

    /// A mirror of `tenant`'s failed: the repair pass comes now.
    pub async fn repair_now(&self, tenant: &TenantId) {
        let now = self.clock.now();
        self.write(WorkKind::Repair, tenant, now).await;
    }

    /// Rows of `tenant` that age or have a cap were written.
    pub async fn activity(&self, tenant: &TenantId) {
        self.cached(WorkKind::Retention, tenant, RETENTION_AFTER_ACTIVITY)
            .await;
    }

    async fn cached(&self, kind: WorkKind, tenant: &TenantId, after: Duration) {
        let now = self.clock.now();
        if self.cache.covers(kind, tenant, now) {
            return;
        }
        let due = now + toki_model::time::to_chrono(after);
        if self.write(kind, tenant, due).await {
            self.cache.remember(kind, tenant, due);
        }
    }

    async fn write(&self, kind: WorkKind, tenant: &TenantId, due: Instant) -> bool {
        match self.marks.mark(kind, tenant, due).await {
            Ok(()) => true,
            Err(e) => {
                warn!(%tenant, kind = kind.as_str(), error = %chain(&e), "marking the tenant's work failed");
                false
            }
        }
    }
}
