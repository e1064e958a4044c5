//! The repair passes (`toki serve` every minute; the repair Lambda on AWS):
//! each finishes tenants' unfinished index mirrors and extends their series
//! ([`Registrar::repair`]), tenants side by side, so that one slow or failing
//! tenant delays no other.
//!
//! - Each minute, a pass over the tenants whose repair mark is due
//!   ([`crate::work`]): a write marks its tenant before it begins, a failed
//!   mirror marks it now, and each repair settles the mark at the tenant's
//!   next series extension. A tenant with nothing to repair is not opened.
//! - No pass visits every tenant on a timer. A database from before the
//!   marks is marked by its migration (`toki migrate`; the embedded control
//!   database's own migration); [`Registrar::repair_pass`] over every
//!   tenant stays for an operator's or a test's one-off use.
//!
//! - At most [`RepairSettings::concurrency`] tenants at once.
//! - Each tenant cut at [`RepairSettings::tenant_deadline`]: counted as timed
//!   out and retried next pass. What it finished stays done (the mirror is
//!   marked in the tenant's database chunk by chunk).
//! - The pass begins no tenant, and cuts every one still running, once its
//!   budget (or the Lambda's deadline) is spent: those are deferred.
//! - Tenants are taken in id order from the index's repair cursor, and the
//!   cursor is left at the first tenant deferred, so the next pass continues
//!   where this one stopped; a pass that reached every tenant moves it on by
//!   one, so no tenant is always first.
//!
//! [`RepairSettings::concurrency`]: crate::settings::RepairSettings::concurrency
//! [`RepairSettings::tenant_deadline`]: crate::settings::RepairSettings::tenant_deadline

use futures::StreamExt;
use tokio::time::Instant as TokioInstant;
use tracing::{info, warn};

use crate::registrar::{Registrar, RegistrarError};
use toki_model::domain::{Instant, TenantId};
use toki_model::error::chain;
use toki_ports::{WorkKind, WorkMark};

/// One repair pass over the tenants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RepairSummary {
    /// Tenants the pass visited (every tenant, or the marked ones).
    pub tenants: usize,
    /// Writes whose mirror was finished (series extended included).
    pub repaired: usize,
    /// Tenants whose repair failed (their database or the index was unreachable).
    pub failed_tenants: usize,
    /// Tenants whose repair passed its deadline and was cut short.
    pub timed_out_tenants: usize,
    /// Tenants the pass ran out of budget for (not begun, or cut short when
    /// it ended): the next pass starts at the first of them.
    pub deferred_tenants: usize,
}

impl RepairSummary {
    /// Tenants whose repair did not finish for a reason of their own (failed
    /// or timed out), as opposed to deferred by the pass's budget.
    pub fn unfinished_tenants(&self) -> usize {
        self.failed_tenants + self.timed_out_tenants
    }

    fn of(outcomes: Vec<TenantRepair>) -> Self {
        let mut summary = RepairSummary::default();
        outcomes.into_iter().for_each(|o| summary.count(o));
        summary
    }

    fn count(&mut self, outcome: TenantRepair) {
        self.tenants += 1;
        match outcome {
            TenantRepair::Done(n) => self.repaired += n,
            TenantRepair::Failed => self.failed_tenants += 1,
            TenantRepair::TimedOut => self.timed_out_tenants += 1,
            TenantRepair::Deferred => self.deferred_tenants += 1,
        }
    }
}

/// A tenant a pass visits: every tenant in turn, or one whose mark is due
/// (settled once its repair is done).
#[derive(Debug, Clone)]
enum RepairVisit {
    Sweep(TenantId),
    Marked(WorkMark),
}

impl RepairVisit {
    fn tenant(&self) -> &TenantId {
        match self {
            RepairVisit::Sweep(t) => t,
            RepairVisit::Marked(m) => &m.tenant,
        }
    }
}

/// How one tenant's part of a pass ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantRepair {
    /// Finished, with this many writes mirrored.
    Done(usize),
    /// Failed (retried next pass).
    Failed,
    /// Cut short at its own deadline (retried next pass).
    TimedOut,
    /// Not begun, or cut short, because the pass's budget was spent.
    Deferred,
}

/// The tenants in the order a pass takes them: by id, from the first at or
/// after `cursor`, round to the one before it.
pub fn pass_order(mut tenants: Vec<TenantId>, cursor: Option<&TenantId>) -> Vec<TenantId> {
    tenants.sort();
    let start = cursor.map_or(0, |c| tenants.partition_point(|t| t < c));
    if start < tenants.len() {
        tenants.rotate_left(start);
    }
    tenants
}

/// Where the next pass starts: the first tenant of `order` this pass
/// deferred; if it deferred none, the one after this pass's first. None for
/// no tenants.
pub fn next_cursor(order: &[TenantId], outcomes: &[TenantRepair]) -> Option<TenantId> {
    let first_deferred = order
        .iter()
        .zip(outcomes)
        .find(|(_, outcome)| **outcome == TenantRepair::Deferred)
        .map(|(tenant, _)| tenant);
    first_deferred
        .or_else(|| order.get(1))
        .or_else(|| order.first())
        .cloned()
}

/// Marked tenants one pass takes at most (the earliest due first).
pub const MARKED_PER_PASS: usize = 1000;

impl Registrar {
    /// One repair pass over every tenant (see the module), ending by
    /// `deadline` if one is given, and within the settings' pass budget in
    /// any case. Fails only if the tenants cannot be listed.
    pub async fn repair_pass(
        &self,
        deadline: Option<TokioInstant>,
    ) -> Result<RepairSummary, RegistrarError> {
        let pass_end = self.repair_pass_end(deadline);
        let tenants = self.directory.list().await?;
        let cursor = self.read_repair_cursor().await;
        let order = pass_order(tenants.into_iter().map(|t| t.id).collect(), cursor.as_ref());
        let visits: Vec<RepairVisit> = order.iter().cloned().map(RepairVisit::Sweep).collect();
        let outcomes = self.repair_tenants(&visits, pass_end).await;
        if let Some(next) = next_cursor(&order, &outcomes) {
            if let Err(e) = self.index.set_repair_cursor(&next).await {
                warn!(error = %chain(&e), "recording the repair cursor failed; the next pass starts where this one did");
            }
        }
        Ok(RepairSummary::of(outcomes))
    }

    /// One repair pass over the tenants whose repair mark is due. Fails
    /// only if the marks cannot be read.
    pub async fn repair_marked(
        &self,
        deadline: Option<TokioInstant>,
    ) -> Result<RepairSummary, RegistrarError> {
        let pass_end = self.repair_pass_end(deadline);
        let marks = self.marker.marks();
        let due = marks
            .due(WorkKind::Repair, self.clock.now(), MARKED_PER_PASS)
            .await?;
        let visits: Vec<RepairVisit> = due.into_iter().map(RepairVisit::Marked).collect();
        let outcomes = self.repair_tenants(&visits, pass_end).await;
        Ok(RepairSummary::of(outcomes))
    }

    fn repair_pass_end(&self, deadline: Option<TokioInstant>) -> TokioInstant {
        let budget_end = TokioInstant::now() + self.settings.repair.pass_budget;
        deadline.map_or(budget_end, |d| d.min(budget_end))
    }

    /// Repair passes every `every` until `shutdown` turns true.
    pub async fn run_repair(
        &self,
        every: std::time::Duration,
        shutdown: tokio::sync::watch::Receiver<bool>,
        on_pass: impl Fn(&RepairSummary),
    ) {
        let on_pass = &on_pass;
        crate::periodic::run_every(every, shutdown, || async move {
            match self.repair_marked(None).await {
                Ok(summary) => on_pass(&summary),
                Err(e) => {
                    warn!(error = %chain(&e), "repair: reading the tenants or their marks failed")
                }
            }
        })
        .await
    }

    /// When `tenant` next needs the repair: its earliest series extension
    /// (None: it has no series).
    async fn next_repair(&self, tenant: &TenantId) -> Result<Option<Instant>, RegistrarError> {
        let store = self.stores.open(tenant).await?;
        let half = toki_model::time::to_chrono(self.settings.horizon / 2);
        Ok(store
            .earliest_mirrored_until()
            .await?
            .map(|until| until - half))
    }

    /// After a tenant's repair: its mark says when it is next needed.
    async fn mark_next_repair(&self, visit: &RepairVisit) {
        let tenant = visit.tenant();
        let next = match self.next_repair(tenant).await {
            Ok(next) => next,
            Err(e) => {
                warn!(%tenant, error = %chain(&e), "repair: reading the next series extension failed; the next pass looks again");
                return;
            }
        };
        let marks = self.marker.marks();
        let written = match (visit, next) {
            (RepairVisit::Marked(mark), next) => marks.settle(mark, next).await.map(|_| ()),
            (RepairVisit::Sweep(_), Some(next)) => marks.mark(WorkKind::Repair, tenant, next).await,
            (RepairVisit::Sweep(_), None) => Ok(()),
        };
        if let Err(e) = written {
            warn!(%tenant, error = %chain(&e), "repair: marking the next extension failed");
        }
    }

    /// Where the last pass left the cursor; unreadable, from the first tenant.
    async fn read_repair_cursor(&self) -> Option<TenantId> {
        self.index.repair_cursor().await.unwrap_or_else(|e| {
            warn!(error = %chain(&e), "reading the repair cursor failed; starting at the first tenant");
            None
        })
    }

    /// Repairs the visits' tenants, `concurrency` at a time; an outcome
    /// each, in order. A tenant done has its next repair marked.
    async fn repair_tenants(
        &self,
        visits: &[RepairVisit],
        pass_end: TokioInstant,
    ) -> Vec<TenantRepair> {
        let mut outcomes = vec![TenantRepair::Deferred; visits.len()];
        // Owned visits: a closure over borrowed ones would make the pass's
        // future not `Send` (a limit of the compiler's lifetime inference).
        let mut finished = futures::stream::iter(visits.iter().cloned().enumerate())
            .map(|(i, visit)| async move {
                let outcome = self.repair_within(visit.tenant(), pass_end).await;
                if let TenantRepair::Done(_) = outcome {
                    self.mark_next_repair(&visit).await;
                }
                (i, outcome)
            })
            .buffer_unordered(self.settings.repair.concurrency.max(1));
        while let Some((i, outcome)) = finished.next().await {
            outcomes[i] = outcome;
        }
        outcomes
    }

    /// One tenant's repair, cut short at its deadline or the pass's end,
    /// whichever comes first; not begun once the pass has ended.
    async fn repair_within(&self, tenant: &TenantId, pass_end: TokioInstant) -> TenantRepair {
        let began = TokioInstant::now();
        if began >= pass_end {
            return TenantRepair::Deferred;
        }
        let own_deadline = began + self.settings.repair.tenant_deadline;
        match tokio::time::timeout_at(own_deadline.min(pass_end), self.repair(tenant)).await {
            Ok(Ok(0)) => TenantRepair::Done(0),
            Ok(Ok(n)) => {
                info!(%tenant, repaired = n, "repaired index mirrors");
                TenantRepair::Done(n)
            }
            Ok(Err(e)) => {
                warn!(%tenant, error = %chain(&e), "repair failed; next pass retries");
                TenantRepair::Failed
            }
            Err(_) if own_deadline <= pass_end => {
                let deadline_ms = self.settings.repair.tenant_deadline.as_millis() as u64;
                warn!(%tenant, deadline_ms, "repair passed its deadline; next pass retries");
                TenantRepair::TimedOut
            }
            Err(_) => {
                info!(%tenant, "repair cut short by the end of the pass; the next pass starts here");
                TenantRepair::Deferred
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TenantRepair::{Deferred, Done, Failed, TimedOut};

    fn ids(names: &[&str]) -> Vec<TenantId> {
        names.iter().map(|n| n.parse().unwrap()).collect()
    }

    #[test]
    fn without_a_cursor_the_pass_takes_tenants_by_id() {
        assert_eq!(
            pass_order(ids(&["c", "a", "b"]), None),
            ids(&["a", "b", "c"])
        );
    }

    #[test]
    fn the_pass_starts_at_the_cursor_and_wraps_round() {
        let cursor = "b".parse().unwrap();
        assert_eq!(
            pass_order(ids(&["c", "a", "b"]), Some(&cursor)),
            ids(&["b", "c", "a"])
        );
    }

    #[test]
    fn a_cursor_on_a_tenant_gone_starts_at_the_next_one() {
        let between = "bb".parse().unwrap();
        assert_eq!(
            pass_order(ids(&["a", "b", "c"]), Some(&between)),
            ids(&["c", "a", "b"])
        );
        let past_the_last = "z".parse().unwrap();
        assert_eq!(
            pass_order(ids(&["a", "b"]), Some(&past_the_last)),
            ids(&["a", "b"])
        );
    }

    #[test]
    fn the_next_pass_starts_at_the_first_tenant_deferred() {
        let order = ids(&["b", "c", "d", "a"]);
        let outcomes = [Done(1), TimedOut, Deferred, Deferred];
        assert_eq!(next_cursor(&order, &outcomes), Some("d".parse().unwrap()));
    }

    #[test]
    fn a_pass_that_reached_every_tenant_moves_the_start_on_by_one() {
        let order = ids(&["b", "c", "a"]);
        let outcomes = [TimedOut, Failed, Done(0)];
        assert_eq!(next_cursor(&order, &outcomes), Some("c".parse().unwrap()));
        assert_eq!(
            next_cursor(&ids(&["a"]), &[Done(0)]),
            Some("a".parse().unwrap())
        );
        assert_eq!(next_cursor(&[], &[]), None);
    }

    #[test]
    fn the_summary_counts_each_outcome() {
        let mut summary = RepairSummary::default();
        for o in [Done(2), Done(0), Failed, TimedOut, TimedOut, Deferred] {
            summary.count(o);
        }
        assert_eq!(
            summary,
            RepairSummary {
                tenants: 6,
                repaired: 2,
                failed_tenants: 1,
                timed_out_tenants: 2,
                deferred_tenants: 1,
            }
        );
        assert_eq!(summary.unfinished_tenants(), 3);
    }
}
