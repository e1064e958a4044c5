//! Preparing one tenant's part of a batch: the database's permits (if
//! limited), one round trip for the schedules and participants, one for the
//! claims, then the pure plan. Each tenant's part is prepared and sent on its
//! own (see the worker in `mod.rs`): a tenant whose database or templates
//! are slow holds up no other tenant's sends.

use std::collections::HashMap;
use std::sync::Arc;

use tracing::warn;

use toki_model::domain::{Instant, TenantId};
use toki_model::error::chain;
use toki_model::flow_key::FlowKey;
use toki_model::template::Templates;
use toki_model::time::to_chrono;
use toki_ports::error::StoreError;
use toki_ports::{Claims, DeliveryContext, TenantStore};

use super::plan::{claims_for, plan_batch, reads_for, BatchPlan, ChannelState};
use super::work::{MessageFate, Work};
use super::{overdue, Daemon};
use crate::render_pool::{Lane, Purpose, RenderPool};

/// Each message's trace span by receipt (none when traces are off).
fn message_spans(work: &[Work]) -> HashMap<String, tracing::Span> {
    if !crate::trace::enabled() {
        return HashMap::new();
    }
    work.iter()
        .map(|w| {
            let span =
                crate::trace::deliver_span(&w.reminder.key, &w.msg.attributes, w.msg.receive_count);
            (w.msg.receipt.clone(), span)
        })
        .collect()
}

/// A tenant's part of a batch, planned, with the store its rows go to.
pub(super) struct Prepared {
    pub(super) store: Arc<dyn TenantStore>,
    pub(super) plan: BatchPlan,
    /// The claim's token, renewed while held.
    pub(super) token: String,
    /// Each message's trace span, in `plan.messages` order (empty: traces off).
    pub(super) spans: Vec<tracing::Span>,
}

/// [`plan_batch`], on a render thread when the tenant has templates of its
/// own: those are bounded (`toki_model::template::RenderBudget`) but may
/// take milliseconds a recipient, which must not hold up the runtime's
/// workers (other tenants' sends, renewals) nor compete with them for the
/// CPU ([`RenderPool`]). One hop per tenant and batch, not per delivery.
/// With the built-in texts only (microseconds), the plan stays on the
/// worker: the hop cost 7 MB of peak RSS at 3,000 at once (BENCHMARKS.md).
async fn plan_off_workers(
    tenant: TenantId,
    work: Vec<Work>,
    ctx: DeliveryContext,
    claims: Claims,
    channels: ChannelState,
    templates: Arc<Templates>,
) -> BatchPlan {
    if !templates.from_tenant() {
        return plan_batch(tenant, work, &ctx, &claims, &channels, &templates);
    }
    let lane = Lane {
        tenant: tenant.clone(),
        purpose: Purpose::Delivery,
    };
    RenderPool::global()
        .run(lane, move || {
            plan_batch(tenant, work, &ctx, &claims, &channels, &templates)
        })
        .await
}

impl Daemon {
    /// What the daemon can send on now: configured, and not behind an open circuit.
    pub(super) fn channel_state(&self) -> ChannelState {
        ChannelState {
            configured: self.channels.keys().copied().collect(),
            open: self.breakers.open_channels(),
        }
    }

    /// Reads and claims for one tenant's part of a batch, and plans it;
    /// none when its messages were disposed of instead (no room at the
    /// tenant's database, the database unavailable, the tenant deleted).
    pub(super) async fn prepare_tenant(
        &self,
        tenant: TenantId,
        work: Vec<Work>,
        channels: &ChannelState,
        now: Instant,
    ) -> Option<Prepared> {
        let mut spans = message_spans(&work);
        // The tenant database's permits (if limited), held for the round
        // trips; none free within the wait: the messages go back to the
        // queue for a while, without using any budget.
        let permit = match &self.flow {
            Some(flow) => {
                let key = [FlowKey::TenantDb(tenant.to_string())];
                match flow.admit(&key, tenant.as_str()).await {
                    Ok(grants) => grants,
                    Err(no_room) => {
                        let fate = MessageFate::Throttled {
                            retry_after: no_room.retry_after,
                        };
                        self.dispose(work.into_iter().map(|w| (w.msg, fate.clone())).collect())
                            .await;
                        return None;
                    }
                }
            }
            None => Vec::new(),
        };
        let read = self.read_and_claim(&tenant, &work, channels, now).await;
        drop(permit);
        // A fenced or dropped database: is the tenant gone?
        let suspect = match &read {
            Ok((_, ctx, _, _)) => ctx.schedules.is_empty(),
            Err(_) => true,
        };
        if suspect && self.tenant_deleted(&tenant).await {
            self.dispose_deleted(&tenant, work.into_iter().map(|w| w.msg).collect())
                .await;
            return None;
        }
        let (store, ctx, claims, templates) = match read {
            Ok(read) => read,
            Err(e) => {
                self.unavailable(&tenant, work, &e, now).await;
                return None;
            }
        };
        let token = claims.token.clone();
        let plan = plan_off_workers(tenant, work, ctx, claims, channels.clone(), templates).await;
        let spans = if spans.is_empty() {
            Vec::new()
        } else {
            plan.messages
                .iter()
                .map(|m| {
                    spans
                        .remove(&m.msg.receipt)
                        .unwrap_or_else(tracing::Span::none)
                })
                .collect()
        };
        Some(Prepared {
            store,
            token,
            plan,
            spans,
        })
    }

    /// The tenant's database failed: its messages come back later.
    async fn unavailable(&self, tenant: &TenantId, work: Vec<Work>, e: &StoreError, now: Instant) {
        warn!(%tenant, error = %chain(e), "tenant database unavailable; messages come back");
        let why = format!("tenant {tenant}: {}", chain(e));
        let fates = work
            .into_iter()
            .map(|w| {
                let fate = MessageFate::Unprocessed {
                    reason: why.clone(),
                    overdue: overdue(w.reminder.due_at, now),
                };
                (w.msg, fate)
            })
            .collect();
        self.dispose(fates).await;
    }

    /// One round trip for the schedules and participants, one for the claims.
    async fn read_and_claim(
        &self,
        tenant: &TenantId,
        work: &[Work],
        channels: &ChannelState,
        now: Instant,
    ) -> Result<
        (
            Arc<dyn TenantStore>,
            DeliveryContext,
            Claims,
            Arc<Templates>,
        ),
        StoreError,
    > {
        let store = self.stores.open(tenant).await?;
        let ctx = store.delivery_context(&reads_for(work)).await?;
        let templates = self.templates.get(tenant, store.as_ref()).await?;
        let claims = claims_for(work, &ctx, channels);
        let stamp = self.claim_stamp(work, now);
        let claimed = self.claim(store.as_ref(), &claims, now, stamp).await?;
        Ok((store, ctx, claimed, templates))
    }

    /// When the claims `work` makes at `now` are stamped: their lease runs
    /// from then. Made ahead of their instant (the lead), they are stamped
    /// at the instant, so that the heartbeat first renews them a beat after
    /// it, if they are still held. Stamped earlier, a burst's claims came
    /// due for renewal at its instant, and the beat that followed its sends
    /// (it waits for them) opened each tenant's database once more, beside
    /// the outcomes' writes: at 1,000 tenants, 968 of 1,000. A holder that
    /// dies before the instant is overtaken a lease after it
    /// (docs/failures.md).
    pub(super) fn claim_stamp(&self, work: &[Work], now: Instant) -> Instant {
        work.iter()
            .map(|w| w.reminder.due_at.0)
            .min()
            .map_or(now, |stamp| stamp.max(now))
    }

    /// Claims `claims` at `now`, stamped `stamp` (nothing to claim: no
    /// claim, no round trip). A claim not renewed for a lease is its
    /// holder's no more: it stopped.
    pub(super) async fn claim(
        &self,
        store: &dyn TenantStore,
        claims: &[toki_model::domain::DeliveryClaim],
        now: Instant,
        stamp: Instant,
    ) -> Result<Claims, StoreError> {
        if claims.is_empty() {
            return Ok(Claims::default());
        }
        let takeover_before = now - to_chrono(self.settings.visibility);
        store.claim_deliveries(claims, stamp, takeover_before).await
    }
}
