//! Delivering a tenant's prepared part of a batch: fire at the due instant,
//! settle, record one row per delivery (counted once stored), then dispose
//! of every message.

use std::sync::Arc;

use crate::observe::OutcomeCounts;
use tokio::sync::OwnedSemaphorePermit;
use tracing::{error, warn};

use toki_model::domain::TenantId;
use toki_model::error::chain;
use toki_model::suppression::SuppressionReason;
use toki_ports::channel::SendError;
use toki_ports::{RefusedRecipient, TenantStore};

use super::burst;
use super::plan::{PlannedMessage, Verdict};
use super::prepare::Prepared;
use super::settle::{settle, Sent};
use super::stats::Tally;
use super::work::MessageFate;
use super::{overdue, Daemon};

impl Daemon {
    /// Fires, settles and records a tenant's part of a batch, then disposes
    /// of all its messages at once.
    pub(super) async fn deliver(
        self: Arc<Self>,
        prepared: Prepared,
        held: u64,
        room: OwnedSemaphorePermit,
    ) {
        let fates = self.deliver_one(prepared).await;
        // Let go first: the heartbeat must not extend what is acked or hidden now.
        self.holdings.release(held);
        self.dispose(fates).await;
        drop(room);
    }

    /// Fires, settles and records one tenant's part; what became of its messages.
    async fn deliver_one(
        &self,
        Prepared {
            store,
            mut plan,
            spans,
            ..
        }: Prepared,
    ) -> Vec<(toki_ports::ReceivedMessage, MessageFate)> {
        let skipped = plan
            .messages
            .iter()
            .flat_map(|m| &m.deliveries)
            .filter(|d| matches!(d.verdict, Verdict::Busy | Verdict::Done))
            .count();
        self.stats.add(&self.stats.duplicates_skipped, skipped);
        let stale = plan.messages.iter().filter(|m| m.stale.is_some()).count();
        self.stats.add(&self.stats.stale_messages, stale);
        let to_send = std::mem::take(&mut plan.to_send);
        let fired = self
            .fire(&plan.tenant, &store, &plan.messages, to_send, &spans)
            .await;
        let refused = refused_recipients(&plan.messages, &fired.sent);
        let mut settlement = settle(plan.messages, fired.sent, &fired.revoked, self.clock.now());
        // Other batches of the instant send first; then the rows and deletes.
        self.burst.quiet(burst::MAX_DEFER).await;
        let outcomes = std::mem::take(&mut settlement.outcomes);
        let tally = Tally::of(&outcomes);
        // Counted once stored, like the counters below: a scrape that sees a
        // delivery finds its row.
        let counts = self.observer.as_ref().map(|_| OutcomeCounts::of(&outcomes));
        let recorded = self.recorder.record(&plan.tenant, &store, outcomes).await;
        if let (Some(o), Some(counts), true) = (&self.observer, &counts, recorded.is_ok()) {
            o.deliveries_recorded(counts);
        }
        if !refused.is_empty() {
            self.suppress(&plan.tenant, store.as_ref(), &refused).await;
        }
        // Counted once stored: whoever waits on the counters finds the rows.
        self.stats.add_tally(&tally);
        if let Err(e) = recorded {
            // Sent but not recorded: keep the messages so nothing is lost; the
            // claims expire and a redelivery may repeat a send (at-least-once).
            error!(tenant = %plan.tenant, error = %chain(&e), "recording outcomes failed; messages will come back");
            let now = self.clock.now();
            for (msg, fate) in &mut settlement.fates {
                let due = toki_ports::message::decode(&msg.attributes).map(|r| r.due_at);
                *fate = MessageFate::Unprocessed {
                    reason: format!("recording outcomes failed: {e}"),
                    overdue: due.map(|d| overdue(d, now)).unwrap_or_default(),
                };
            }
        }
        settlement.fates
    }
}

impl Daemon {
    /// Puts the addresses a mail server refused on the tenant's suppression
    /// list, after the batch's rows (their deliveries are undeliverable
    /// either way); a failure is logged, and the next refusal tries again.
    async fn suppress(
        &self,
        tenant: &TenantId,
        store: &dyn TenantStore,
        refused: &[RefusedRecipient],
    ) {
        match store.suppress_recipients(refused, self.clock.now()).await {
            Ok(n) => self.stats.add(&self.stats.suppressed, n as usize),
            Err(e) => {
                warn!(%tenant, error = %chain(&e), "refused addresses not put on the suppression list")
            }
        }
    }
}

/// The recipients whose mailbox a server refused in this batch.
fn refused_recipients(messages: &[PlannedMessage], sent: &[Sent]) -> Vec<RefusedRecipient> {
    sent.iter()
        .filter_map(|s| match &s.result {
            Err(SendError::RecipientRefused(why)) => {
                let d = messages.get(s.message)?.deliveries.get(s.delivery)?;
                Some(RefusedRecipient {
                    user: d.key.recipient.clone(),
                    reason: SuppressionReason::Refused,
                    detail: why.clone(),
                })
            }
            _ => None,
        })
        .collect()
}
