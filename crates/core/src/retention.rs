//! The retention purge: a periodic pass that deletes each tenant's records
//! older than its retention settings, in small batches with a pause between
//! them and a cap per pass, so that it never holds up deliveries. It never
//! deletes a delivery row that is pending or being sent, nor anything
//! younger than its retention. `toki serve` runs it every few minutes; on
//! AWS the repair Lambda runs it (`lambdas/repair`).

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
use toki_model::{Instant, TenantRecord};
use toki_ports::retention::{ControlPurge, PurgeRecord, TenantRows, Trimmed, MAX_PURGE_BATCH};
use toki_ports::{Clock, StoreResult, TenantDirectory, TenantStore, TenantStores};

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

pub struct Purger {
    pub directory: Arc<dyn TenantDirectory>,
    pub stores: Arc<dyn TenantStores>,
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

    /// One pass over every tenant, starting one further along each period
    /// (so a cap reached early never starves the same tenants), ending at
    /// the cap or `deadline`.
    pub async fn pass(&self, deadline: Option<tokio::time::Instant>) -> PurgeSummary {
        let now = self.clock.now();
        let mut summary = PurgeSummary::default();
        let mut budget = Budget {
            rows: self.settings.per_pass,
            deadline,
        };
        let mut tenants = match self.directory.list().await {
            Ok(tenants) => tenants,
            Err(e) => {
                warn!(error = %chain(&e), "retention: reading the tenants failed");
                return summary;
            }
        };
        if !tenants.is_empty() {
            let period = self.settings.period.as_secs().max(1) as i64;
            let start = (now.timestamp() / period).rem_euclid(tenants.len() as i64);
            tenants.rotate_left(start as usize);
        }
        for tenant in &tenants {
            summary.tenants += 1;
            if budget.spent() {
                summary.deferred_tenants += 1;
                continue;
            }
            if let Err(e) = self
                .tenant_pass(tenant, now, &mut budget, &mut summary)
                .await
            {
                warn!(tenant = %tenant.id, error = %chain(&e), "retention: purging failed");
                summary.failed_tenants += 1;
            }
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
    ) -> StoreResult<()> {
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
