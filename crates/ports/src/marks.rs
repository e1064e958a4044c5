//! Work marks: which tenants have work of a kind waiting, and from when, so
//! the passes that serve tenants (delivery events, repair, retention) visit
//! those and never the others. A mark lives in the control store, one row
//! per kind and tenant.
//!
//! A mark is written by whoever makes the work (an outcome whose event is
//! logged, a schedule write, rows that will age) and settled by the pass
//! that did it. Every writing bumps the mark's revision, and a settle names
//! the revision it read: work made while a pass ran is never cleared by it.

use async_trait::async_trait;

use toki_model::domain::{Instant, TenantId};

use crate::{Conditional, StoreResult};

/// What a mark says a tenant has waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkKind {
    /// Delivery events an endpoint has not had yet.
    Events,
    /// Index mirrors to finish or series to extend.
    Repair,
    /// Rows that age past their retention, or pass a cap.
    Retention,
}

impl WorkKind {
    pub const ALL: [WorkKind; 3] = [WorkKind::Events, WorkKind::Repair, WorkKind::Retention];

    /// The kind as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkKind::Events => "events",
            WorkKind::Repair => "repair",
            WorkKind::Retention => "retention",
        }
    }
}

/// A mark as read: the settle that follows names its revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkMark {
    pub kind: WorkKind,
    pub tenant: TenantId,
    /// From when the work is due.
    pub due: Instant,
    /// Bumped by every [`WorkMarks::mark`].
    pub revision: u64,
}

/// Where work marks live. One implementation per control store, one suite
/// (`tests/common/conformance.rs`); each is also a
/// [`crate::TenantFootprint`] (offboarding removes a tenant's marks).
#[async_trait]
pub trait WorkMarks: Send + Sync {
    /// Marks `tenant` as having `kind` work from `due` on. A mark due
    /// earlier stays as early; the revision is bumped either way.
    async fn mark(&self, kind: WorkKind, tenant: &TenantId, due: Instant) -> StoreResult<()>;

    /// Marks of `kind` due at `now`, earliest first, at most `limit`.
    async fn due(&self, kind: WorkKind, now: Instant, limit: usize) -> StoreResult<Vec<WorkMark>>;

    /// After the work `read` asked for: if the mark is still at `read`'s
    /// revision, it moves to `next` (None: removed) and `Written`;
    /// otherwise (marked again meanwhile) it stays, moved to `next` if that
    /// is earlier, and `Refused`. Nothing if the mark is gone.
    async fn settle(&self, read: &WorkMark, next: Option<Instant>) -> StoreResult<Conditional>;

    /// Every tenant with a mark of `kind`, due or not (a sweep finds the
    /// tenants without one).
    async fn marked(&self, kind: WorkKind) -> StoreResult<Vec<TenantId>>;
}
