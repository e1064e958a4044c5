//! Waking this process's dispatcher when an events mark is written here.
//!
//! An outcome recorded in this process marks its tenant's events due now;
//! the dispatcher's poll alone would find the mark up to a poll (a second)
//! later, and the event's lag would be that much longer. [`WakingMarks`]
//! wraps the marks this process writes through and tells the dispatcher at
//! once ([`EventsWake`]). Marks written by other processes (another daemon,
//! the API) are still found by the poll.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Notify;

use toki_model::domain::{Instant, TenantId};
use toki_ports::{Conditional, StoreResult, WorkKind, WorkMark, WorkMarks};

/// Told when this process marks a tenant's events; the dispatcher waits on it.
#[derive(Debug, Default)]
pub struct EventsWake(Notify);

impl EventsWake {
    /// Marks were written: the next wait ends at once (one stored wake-up
    /// stands for however many marks came meanwhile).
    pub fn wake(&self) {
        self.0.notify_one();
    }

    /// Until the next [`Self::wake`] (or one made while nobody waited).
    pub async fn woken(&self) {
        self.0.notified().await;
    }
}

/// The process's marks, waking its dispatcher on each events mark.
pub struct WakingMarks {
    inner: Arc<dyn WorkMarks>,
    wake: Arc<EventsWake>,
}

impl WakingMarks {
    /// `inner` wrapped, and the wake its events marks give.
    pub fn wrap(inner: Arc<dyn WorkMarks>) -> (Arc<dyn WorkMarks>, Arc<EventsWake>) {
        let wake = Arc::new(EventsWake::default());
        let marks = Arc::new(WakingMarks {
            inner,
            wake: wake.clone(),
        });
        (marks, wake)
    }
}

#[async_trait]
impl WorkMarks for WakingMarks {
    async fn mark(&self, kind: WorkKind, tenant: &TenantId, due: Instant) -> StoreResult<()> {
        self.inner.mark(kind, tenant, due).await?;
        // Written first: the woken pass reads it.
        if kind == WorkKind::Events {
            self.wake.wake();
        }
        Ok(())
    }

    async fn due(&self, kind: WorkKind, now: Instant, limit: usize) -> StoreResult<Vec<WorkMark>> {
        self.inner.due(kind, now, limit).await
    }

    async fn settle(&self, read: &WorkMark, next: Option<Instant>) -> StoreResult<Conditional> {
        self.inner.settle(read, next).await
    }

    async fn marked(&self, kind: WorkKind) -> StoreResult<Vec<TenantId>> {
        self.inner.marked(kind).await
    }
}
