//! A worker's steps around the queue: waiting for room and a batch, and
//! holding what it received while it is worked on.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use toki_model::error::chain;
use toki_ports::error::StoreResult;
use toki_ports::{AbandonedPoll, ReceivedMessage};

use super::holdings::Held;
use super::poll_turn::Found;
use super::prepare::Prepared;
use super::Daemon;

impl Daemon {
    /// Waits for room for a full batch, then receives once (the room comes
    /// with what was received); None once `shutdown` turns true.
    pub(super) async fn receive_batch(
        &self,
        shutdown: &mut watch::Receiver<bool>,
        room: &Arc<Semaphore>,
    ) -> Option<(OwnedSemaphorePermit, StoreResult<Vec<ReceivedMessage>>)> {
        if *shutdown.borrow() {
            return None;
        }
        let batch = self.settings.batch;
        // Room for a full batch first: work beyond it stays in the queue.
        let permits = tokio::select! {
            p = room.clone().acquire_many_owned(batch as u32) => p.expect("never closed"),
            _ = shutdown.changed() => return None,
        };
        // A key refusing work: the queue keeps the rest a little longer.
        if let Some(pause) = self.flow.as_ref().and_then(|f| f.hold_off()) {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = shutdown.changed() => return None,
            }
        }
        // An idle queue is polled by one worker at a time (see poll_turn).
        let _turn = tokio::select! {
            t = self.poll_turn.take() => t,
            _ = shutdown.changed() => return None,
        };
        let receive = self
            .queue
            .receive(batch, self.settings.wait, self.settings.visibility);
        tokio::pin!(receive);
        let received = tokio::select! {
            r = &mut receive => r,
            _ = shutdown.changed() => {
                if self.queue.abandoned_poll() == AbandonedPoll::StaysOpen {
                    self.finish_abandoned_poll(receive).await;
                }
                return None;
            }
        };
        if let Ok(messages) = &received {
            self.poll_turn.found(match messages.is_empty() {
                true => Found::Nothing,
                false => Found::Messages,
            });
        }
        self.stats
            .polls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some((permits, received))
    }

    /// Lets a long poll cut short by shutdown finish, and hands back what it
    /// brings. Dropped, it would stay open at the queue (SQS and LocalStack
    /// keep a long poll whose client went away), which may still give it
    /// messages that then wait out their visibility: deliveries seconds late
    /// after every stop of a daemon. Takes at most the poll's wait.
    async fn finish_abandoned_poll(
        &self,
        receive: impl std::future::Future<Output = StoreResult<Vec<ReceivedMessage>>>,
    ) {
        let Ok(messages) = receive.await else {
            return;
        };
        let receipts: Vec<String> = messages.iter().map(|m| m.receipt.clone()).collect();
        if let Err(e) = self
            .queue
            .extend_visibility(&receipts, Duration::ZERO)
            .await
        {
            warn!(error = %chain(&e), "handing back messages at shutdown failed; they return after their visibility timeout");
        }
        if !messages.is_empty() {
            info!(
                messages = messages.len(),
                "handed back the messages of a poll that ended after shutdown"
            );
        }
    }

    /// Holds a prepared part: the heartbeat keeps its messages hidden and
    /// its claims renewed until it is released. Returns the holding's id.
    pub(super) fn hold_part(&self, prepared: &Prepared, hidden_until: tokio::time::Instant) -> u64 {
        self.holdings.hold(Held {
            receipts: prepared
                .plan
                .messages
                .iter()
                .map(|m| (m.msg.receipt.clone(), hidden_until))
                .collect(),
            // A tenant that claimed nothing (no token) has nothing to renew.
            claims: match prepared.token.is_empty() {
                true => Vec::new(),
                false => vec![(prepared.plan.tenant.clone(), prepared.token.clone())],
            },
            renewed: Some(self.lease_from(prepared, hidden_until)),
        })
    }

    /// When a held part's claims were stamped, as the heartbeat counts: the
    /// receive (not now), or its first instant if that is later
    /// ([`Daemon::claim_stamp`]).
    fn lease_from(
        &self,
        prepared: &Prepared,
        hidden_until: tokio::time::Instant,
    ) -> tokio::time::Instant {
        let received = hidden_until - self.settings.visibility;
        let first_due = prepared.plan.messages.iter().map(|m| m.due_at).min();
        first_due.map_or(received, |due| self.tokio_instant(due).max(received))
    }
}
