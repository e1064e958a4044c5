//! The scanner: every minute, move the reminders due in the next 15 minutes
//! from the index into the delay queue.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::stream::{self, StreamExt};
use tracing::{info, warn, Instrument};

use crate::crowd::Crowds;
use crate::enqueue::{enqueue, EnqueueSummary, Enqueuer};
use crate::settings::PipelineSettings;
use toki_model::domain::{IndexStatus, IndexedReminder, Instant, Reminder, TenantId};
use toki_model::error::chain;
use toki_model::index::Window;
use toki_ports::error::StoreResult;
use toki_ports::{Clock, DelayQueue, ReminderIndex, TenantDirectory};

pub use crate::observe::ScanSummary;

pub struct Scanner {
    pub index: Arc<dyn ReminderIndex>,
    pub queue: Arc<dyn DelayQueue>,
    pub directory: Arc<dyn TenantDirectory>,
    pub clock: Arc<dyn Clock>,
    pub settings: PipelineSettings,
    /// Where each run is reported (none: nowhere).
    pub observer: Option<Arc<dyn crate::observe::Observer>>,
    /// The tenants enqueued for each instant to come, shared with the
    /// registrar's direct path in the same process ([`crate::crowd`]).
    pub crowds: Arc<Crowds>,
}

impl Scanner {
    /// Scans every `every` until `shutdown` turns true (`toki serve`; on AWS
    /// EventBridge's schedule invokes the scanner Lambda instead).
    pub async fn run_every(
        &self,
        every: std::time::Duration,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        crate::periodic::run_every(every, shutdown, || async {
            if let Err(e) = self.scan_once().await {
                warn!(error = %chain(&e), "scan failed; next run retries");
            }
        })
        .await
    }

    pub async fn scan_once(&self) -> StoreResult<ScanSummary> {
        self.scan(None).await
    }

    /// One run; nothing new is claimed once `deadline` has passed.
    pub async fn scan(&self, deadline: Option<tokio::time::Instant>) -> StoreResult<ScanSummary> {
        let started = tokio::time::Instant::now();
        let span = crate::trace::scan_span();
        let run = self.scan_window(deadline).instrument(span.clone()).await;
        if let Ok(s) = &run {
            span.record("toki.rows_seen", s.scanned);
            span.record("toki.enqueued", s.enqueued);
        }
        if let Some(o) = &self.observer {
            o.scan_finished(
                run.as_ref().ok(),
                started.elapsed().as_secs_f64(),
                self.clock.now().timestamp(),
            );
        }
        run
    }

    /// One run: the window's ready rows of tenants under contract, enqueued.
    async fn scan_window(
        &self,
        deadline: Option<tokio::time::Instant>,
    ) -> StoreResult<ScanSummary> {
        let started = tokio::time::Instant::now();
        let now = self.clock.now();
        let window = Window::at(now, self.settings.look_back, self.settings.window);
        let mut summary = ScanSummary::default();
        let rows = self.query_window(window, &mut summary).await;
        let by_tenant = ready_by_tenant(rows, now, &mut summary);
        let to_send = self.under_contract(by_tenant, &mut summary).await;
        let EnqueueSummary {
            enqueued,
            already_claimed,
            failed,
            deferred,
        } = enqueue(
            Enqueuer {
                index: self.index.as_ref(),
                queue: self.queue.as_ref(),
                clock: self.clock.as_ref(),
                settings: &self.settings,
                crowds: &self.crowds,
            },
            to_send,
            deadline,
        )
        .await
        .summary;
        summary.enqueued = enqueued;
        summary.already_claimed = already_claimed;
        summary.failed += failed;
        summary.deferred = deferred;
        summary.duration_ms = started.elapsed().as_millis() as u64;
        info!(
            scanned = summary.scanned,
            enqueued = summary.enqueued,
            skipped_by_contract = summary.skipped_by_contract,
            failed = summary.failed,
            failed_partitions = summary.failed_partitions,
            deferred = summary.deferred,
            duration_ms = summary.duration_ms,
            "scan"
        );
        Ok(summary)
    }

    /// The index rows of every partition of `window`, any status, queried
    /// 32 at a time; partitions are counted in `summary`.
    async fn query_window(
        &self,
        window: Window,
        summary: &mut ScanSummary,
    ) -> Vec<Vec<IndexedReminder>> {
        let partitions = window.partitions(self.settings.shards);
        summary.partitions = partitions.len();
        let index = &self.index;
        let results: Vec<_> = stream::iter(partitions)
            .map(|p| async move {
                let r = index.query_partition(&p, window.from, window.to).await;
                (p, r)
            })
            .buffer_unordered(32)
            .collect()
            .await;
        // One bad partition must not stop the others: skip it, count it, say so.
        let mut rows = Vec::with_capacity(results.len());
        for (p, r) in results {
            match r {
                Ok(r) => rows.push(r),
                Err(e) => {
                    warn!(partition = %p.key(), error = %chain(&e), "partition query failed; next run retries");
                    summary.failed_partitions += 1;
                }
            }
        }
        rows
    }

    /// The reminders of tenants whose contract lets them receive reminders;
    /// the others are counted in `summary`.
    async fn under_contract(
        &self,
        by_tenant: BTreeMap<TenantId, Vec<Reminder>>,
        summary: &mut ScanSummary,
    ) -> Vec<Reminder> {
        // The contract is checked once per tenant per run.
        let mut to_send = Vec::new();
        for (tenant, reminders) in by_tenant {
            match self.directory.get(&tenant).await {
                Ok(Some(t)) if t.may_receive_reminders() => to_send.extend(reminders),
                Ok(other) => {
                    if other.is_none() {
                        warn!(%tenant, "reminders for an unknown tenant");
                    }
                    summary.skipped_by_contract += reminders.len();
                }
                // Left pending: the next run looks again.
                Err(e) => {
                    warn!(%tenant, error = %chain(&e), "contract lookup failed; next run retries");
                    summary.failed += reminders.len();
                }
            }
        }
        to_send
    }
}

/// The reminders ready to enqueue (pending, or claimed by a run whose lease
/// ended before `now`), by tenant; rows seen and ready are counted in `summary`.
fn ready_by_tenant(
    rows: Vec<Vec<IndexedReminder>>,
    now: Instant,
    summary: &mut ScanSummary,
) -> BTreeMap<TenantId, Vec<Reminder>> {
    let mut by_tenant: BTreeMap<TenantId, Vec<Reminder>> = BTreeMap::new();
    for row in rows.into_iter().flatten() {
        summary.scanned += 1;
        let ready = match row.status {
            IndexStatus::Pending => true,
            IndexStatus::Enqueuing { lease_until } => lease_until < now,
            IndexStatus::Enqueued => false,
        };
        if ready {
            summary.pending += 1;
            by_tenant
                .entry(row.reminder.key.tenant.clone())
                .or_default()
                .push(row.reminder);
        }
    }
    by_tenant
}
