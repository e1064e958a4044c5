//! The retention purge: a periodic pass that deletes each tenant's records
//! older than its retention settings, in small batches with a pause between
//! them and a cap per pass, so that it never holds up deliveries. It never
//! deletes a delivery row that is pending or being sent, nor anything
//! younger than its retention. `toki serve` runs it every few minutes; on
//! AWS the repair Lambda runs it (`lambdas/repair`).
//!
//! A pass visits the tenants whose retention mark is due ([`crate::work`]):
//! a write marks its tenant before it writes, a few minutes ahead (caps are
//! trimmed soon after; a crash between the two leaves the mark), and each
//! visit settles the mark at the next time something of the tenant's could
//! be purged (its oldest row's age past its retention), a day at the latest
//! (none for a tenant holding no rows: its next write marks it). A database from before the marks
//! is marked by its migration.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use toki_model::error::chain;
use toki_model::quota::TenantCaps;
use toki_model::retention::{RetentionKind, RetentionSettings};
use toki_model::{Instant, TenantId, TenantRecord};
use toki_ports::retention::{ControlPurge, PurgeRecord, TenantRows, Trimmed, MAX_PURGE_BATCH};
use toki_ports::{
    Clock, StoreResult, TenantDirectory, TenantStore, TenantStores, WorkKind, WorkMark, WorkMarks,
};

#[derive(Debug, Clone)]
pub struct PurgeSettings {
    /// How often a pass runs (`toki serve`).
    pub period: Duration,
    /// Rows one statement deletes at most (capped at [`MAX_PURGE_BATCH`]).
    pub batch: u32,
    /// The pause after a full batch: other writers get the database between two.
    pub pause: Duration,
    /// Rows one pass deletes at most, all tenants and kinds together; the
    /// rest waits for the next pass.
    pub per_pass: u64,
    /// A deployment-wide cap on how long events are kept, whatever a
    /// tenant's setting (`daemon.events_window_h`).
    pub events_cap: Option<Duration>,
    /// The configured caps (a tenant's contract overrides them): audit
    /// entries and events beyond theirs are trimmed, oldest first.
    pub caps: TenantCaps,
}

impl Default for PurgeSettings {
    /// Every five minutes, 500 rows a statement with 100 ms between
    /// statements, 20,000 rows a pass: a backlog of a million rows clears in
    /// under a day, while each statement holds the database for a moment.
    fn default() -> Self {
        Self {
            period: Duration::from_secs(300),
            batch: MAX_PURGE_BATCH,
            pause: Duration::from_millis(100),
            per_pass: 20_000,
            events_cap: None,
            caps: TenantCaps::default(),
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PurgeSummary {
    pub tenants: usize,
    /// Rows deleted, per kind (kinds with none are absent).
    pub purged: BTreeMap<RetentionKind, u64>,
    /// Index rows past their expiry deleted (embedded only: DynamoDB's TTL on AWS).
    pub expired_index_rows: u64,
    /// Tenants whose purge failed (their database was unreachable).
    pub failed_tenants: usize,
    /// Tenants the pass's cap or deadline left for the next pass.
    pub deferred_tenants: usize,
}

impl PurgeSummary {
    fn add(&mut self, kind: RetentionKind, n: u64) {
        if n > 0 {
            *self.purged.entry(kind).or_default() += n;
        }
    }

    pub fn total(&self) -> u64 {
        self.purged.values().sum()
    }
}

/// Counts since the process started (`/metrics`) and the last pass.
#[derive(Debug, Default)]
pub struct PurgeStats {
    purged: [AtomicU64; RetentionKind::ALL.len()],
    pub expired_index_rows: AtomicU64,
    pub passes: AtomicU64,
    pub failed_tenants: AtomicU64,
    last: Mutex<Option<PurgeSummary>>,
}

impl PurgeStats {
    pub fn purged(&self, kind: RetentionKind) -> u64 {
        self.purged[index_of(kind)].load(Ordering::Relaxed)
    }

    pub fn last_pass(&self) -> Option<PurgeSummary> {
        self.last.lock().expect("stats lock").clone()
    }

    fn observe(&self, pass: &PurgeSummary) {
        for (kind, n) in &pass.purged {
            self.purged[index_of(*kind)].fetch_add(*n, Ordering::Relaxed);
        }
        self.expired_index_rows
            .fetch_add(pass.expired_index_rows, Ordering::Relaxed);
        self.passes.fetch_add(1, Ordering::Relaxed);
        self.failed_tenants
            .fetch_add(pass.failed_tenants as u64, Ordering::Relaxed);
        *self.last.lock().expect("stats lock") = Some(pass.clone());
    }
}

fn index_of(kind: RetentionKind) -> usize {
    RetentionKind::ALL
        .iter()
        .position(|k| *k == kind)
        .expect("every kind is in ALL")
}

/// What a pass may still delete: rows, and time (a Lambda's deadline).
struct Budget {
    rows: u64,
    deadline: Option<tokio::time::Instant>,
}

impl Budget {
    /// The next batch's limit, or None once the rows or the time are spent.
    fn next_batch(&self, batch: u32) -> Option<u32> {
        let late = self
            .deadline
            .is_some_and(|d| tokio::time::Instant::now() >= d);
        (self.rows > 0 && !late).then(|| batch.min(self.rows.min(u64::from(u32::MAX)) as u32))
    }

    fn spent(&self) -> bool {
        self.next_batch(1).is_none()
    }
}

/// A tenant visited that holds rows is looked at again within this long,
/// whatever their age: its dead letters (in the control store) age too, and
/// an events mark lost in a crash is found ([`Purger::events_behind`]).
pub const REVISIT_AT_MOST: Duration = Duration::from_secs(86_400);

/// Marked tenants one pass takes at most (the earliest due first).
pub const MARKED_PER_PASS: usize = 1000;

pub struct Purger {
    pub directory: Arc<dyn TenantDirectory>,
    pub stores: Arc<dyn TenantStores>,
    /// Which tenants have rows to look at (and events to send, found on a visit).
    pub marks: Arc<dyn WorkMarks>,
    /// The embedded control store's dead letters and index rows; None on
    /// AWS, where SQS's retention and DynamoDB's TTL expire them.
    pub control: Option<Arc<dyn ControlPurge>>,
    pub clock: Arc<dyn Clock>,
    pub settings: PurgeSettings,
    pub stats: Arc<PurgeStats>,
}

impl Purger {
    /// Runs a pass every `settings.period` until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        crate::periodic::run_every(self.settings.period, shutdown, || {
            let purger = self.clone();
            async move {
                purger.pass(None).await;
            }
        })
        .await
    }

    /// Whether a pass is due at `now` for a caller invoked every minute
    /// (the repair Lambda): at each multiple of the period.
    pub fn due(&self, now: Instant) -> bool {
        let minutes = (self.settings.period.as_secs() / 60).max(1) as i64;
        (now.timestamp() / 60).rem_euclid(minutes) == 0
    }

    /// One pass over the tenants whose mark is due, earliest first, ending
    /// at the cap or `deadline`; a tenant not finished keeps its mark.
    pub async fn pass(&self, deadline: Option<tokio::time::Instant>) -> PurgeSummary {
        let now = self.clock.now();
        let mut summary = PurgeSummary::default();
        let mut budget = Budget {
            rows: self.settings.per_pass,
            deadline,
        };
        match self
            .marks
            .due(WorkKind::Retention, now, MARKED_PER_PASS)
            .await
        {
            Ok(due) => {
                for mark in &due {
                    self.visit(mark, now, &mut budget, &mut summary).await;
                }
            }
            Err(e) => warn!(error = %chain(&e), "retention: reading the marks failed"),
        }
        if let Err(e) = self.control_pass(now, &mut budget, &mut summary).await {
            warn!(error = %chain(&e), "retention: purging the control store failed");
        }
        self.stats.observe(&summary);
        if summary.total() + summary.expired_index_rows > 0 {
            info!(
                purged = summary.total(),
                expired_index_rows = summary.expired_index_rows,
                deferred_tenants = summary.deferred_tenants,
                "retention pass"
            );
        }
        summary
    }

    /// One marked tenant: purged, then its mark settled at its next visit.
    async fn visit(
        &self,
        mark: &WorkMark,
        now: Instant,
        budget: &mut Budget,
        summary: &mut PurgeSummary,
    ) {
        summary.tenants += 1;
        let tenant = &mark.tenant;
        if budget.spent() {
            summary.deferred_tenants += 1;
            return;
        }
        let record = match self.directory.get(tenant).await {
            // Gone: nothing of it to purge.
            Ok(None) => return self.settle(mark, None).await,
            Ok(Some(record)) => record,
            Err(e) => {
                warn!(%tenant, error = %chain(&e), "retention: reading the tenant failed");
                summary.failed_tenants += 1;
                return;
            }
        };
        let next = match self.tenant_pass(&record, now, budget, summary).await {
            // Cut short by the pass's cap: the mark stays due.
            Ok(_) if budget.spent() => {
                summary.deferred_tenants += 1;
                return;
            }
            Ok(store) => self.next_visit(&record, store.as_ref(), now).await,
            Err(e) => {
                warn!(%tenant, error = %chain(&e), "retention: purging failed");
                summary.failed_tenants += 1;
                return;
            }
        };
        self.settle(mark, next).await;
    }

    async fn settle(&self, mark: &WorkMark, next: Option<Instant>) {
        if let Err(e) = self.marks.settle(mark, next).await {
            let tenant = &mark.tenant;
            warn!(%tenant, error = %chain(&e), "retention: settling the mark failed; the tenant is visited again");
        }
    }

    /// When something of the tenant's could next be purged: its oldest row
    /// of each kind past that kind's retention, within [`REVISIT_AT_MOST`];
    /// None if it holds none (its next write marks it again).
    async fn next_visit(
        &self,
        tenant: &TenantRecord,
        store: &dyn TenantStore,
        now: Instant,
    ) -> Option<Instant> {
        let mut oldest_due: Option<Instant> = None;
        for rows in TenantRows::ALL {
            match store.oldest_row(rows).await {
                Ok(Some(oldest)) => {
                    let age = now - self.cutoff(&tenant.retention, rows.kind(), now);
                    let due = oldest + age;
                    oldest_due = Some(oldest_due.map_or(due, |d| d.min(due)));
                }
                Ok(None) => {}
                Err(e) => {
                    warn!(tenant = %tenant.id, error = %chain(&e), "retention: reading the oldest rows failed; visited again next pass");
                    return Some(now);
                }
            }
        }
        let at_most = now + toki_model::time::to_chrono(REVISIT_AT_MOST);
        oldest_due.map(|due| due.min(at_most).max(now))
    }

    /// The cutoff for `kind` at `now`: the tenant's retention, events
    /// further capped by the deployment's window.
    pub fn cutoff(
        &self,
        retention: &RetentionSettings,
        kind: RetentionKind,
        now: Instant,
    ) -> Instant {
        let cutoff = retention.get(kind).cutoff(now);
        match (kind, self.settings.events_cap) {
            (RetentionKind::Events, Some(cap)) => {
                let capped = now - chrono::Duration::from_std(cap).unwrap_or(chrono::Duration::MAX);
                cutoff.max(capped)
            }
            _ => cutoff,
        }
    }

    /// Every kind of one tenant's records, each recorded in its purge log.
    async fn tenant_pass(
        &self,
        tenant: &TenantRecord,
        now: Instant,
        budget: &mut Budget,
        summary: &mut PurgeSummary,
    ) -> StoreResult<Arc<dyn TenantStore>> {
        let store = self.stores.open(&tenant.id).await?;
        for rows in TenantRows::ALL {
            let kind = rows.kind();
            let cutoff = self.cutoff(&tenant.retention, kind, now);
            let mut n = self
                .drain(budget, |limit| store.purge_rows(rows, cutoff, limit))
                .await?;
            n += self.trim(tenant, store.as_ref(), rows, budget).await?;
            record(store.as_ref(), kind, now, cutoff, n).await?;
            summary.add(kind, n);
        }
        if let Some(control) = &self.control {
            let kind = RetentionKind::DeadLetters;
            let cutoff = self.cutoff(&tenant.retention, kind, now);
            let n = self
                .drain(budget, |limit| {
                    control.purge_dead_letters(Some(&tenant.id), cutoff, limit)
                })
                .await?;
            record(store.as_ref(), kind, now, cutoff, n).await?;
            summary.add(kind, n);
        }
        self.events_behind(&tenant.id, store.as_ref()).await?;
        Ok(store)
    }

    /// Marks the tenant's events if an endpoint is behind the log: an
    /// events mark lost (a crash between an outcome and its mark) is found
    /// here, at the latest a day later.
    async fn events_behind(&self, tenant: &TenantId, store: &dyn TenantStore) -> StoreResult<()> {
        let last = store.last_event_seq().await?;
        let behind = store
            .event_endpoints()
            .await?
            .iter()
            .any(|(e, _)| crate::events::is_enabled(e) && e.progress.cursor < last);
        if behind {
            self.marks
                .mark(WorkKind::Events, tenant, self.clock.now())
                .await?;
        }
        Ok(())
    }

    /// The oldest of `rows` beyond the tenant's cap on them (audit entries,
    /// events: kept because of what it does, so trimmed rather than any
    /// write refused); how many went.
    async fn trim(
        &self,
        tenant: &TenantRecord,
        store: &dyn TenantStore,
        rows: TenantRows,
        budget: &mut Budget,
    ) -> StoreResult<u64> {
        let Some(trimmed) = Trimmed::ALL.into_iter().find(|t| t.rows() == rows) else {
            return Ok(0);
        };
        let what = trimmed.counted();
        let cap = self.settings.caps.with(&tenant.limits.quota).get(what);
        let n = self
            .drain(budget, |limit| store.trim_rows(trimmed, cap.0, limit))
            .await?;
        if n > 0 {
            info!(tenant = %tenant.id, rows = n, cap = cap.0, "retention: {} beyond the cap ({}) trimmed, oldest first", what.plural(), what.cap_name());
        }
        Ok(n)
    }

    /// Dead letters naming no tenant (by the default retention) and index
    /// rows past their expiry.
    async fn control_pass(
        &self,
        now: Instant,
        budget: &mut Budget,
        summary: &mut PurgeSummary,
    ) -> StoreResult<()> {
        let Some(control) = &self.control else {
            return Ok(());
        };
        let kind = RetentionKind::DeadLetters;
        let cutoff = self.cutoff(&RetentionSettings::default(), kind, now);
        let n = self
            .drain(budget, |limit| {
                control.purge_dead_letters(None, cutoff, limit)
            })
            .await?;
        summary.add(kind, n);
        summary.expired_index_rows += self
            .drain(budget, |limit| control.purge_expired_index(now, limit))
            .await?;
        Ok(())
    }

    /// Calls `batch` with a limit until it deletes fewer than that or the
    /// budget is spent, pausing after each full batch; how many it deleted.
    async fn drain<F, Fut>(&self, budget: &mut Budget, mut batch: F) -> StoreResult<u64>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = StoreResult<u64>>,
    {
        let size = self.settings.batch.clamp(1, MAX_PURGE_BATCH);
        let mut total = 0;
        while let Some(limit) = budget.next_batch(size) {
            let n = batch(limit).await?;
            total += n;
            budget.rows = budget.rows.saturating_sub(n);
            if n < u64::from(limit) {
                break;
            }
            tokio::time::sleep(self.settings.pause).await;
        }
        Ok(total)
    }
}

async fn record(
    store: &dyn TenantStore,
    kind: RetentionKind,
    now: Instant,
    cutoff: Instant,
    purged: u64,
) -> StoreResult<()> {
    store
        .record_purge(&PurgeRecord {
            kind,
            last_pass_at: now,
            cutoff,
            last_purged: purged,
            total_purged: purged,
        })
        .await
}
