//! Moving due reminders from the index into the delay queue: claim each row
//! conditionally, send in batches of 10, then mark enqueued (or release on failure).
//! Shared by the scanner and by the registrar's direct path.

use futures::stream::{self, StreamExt};
use serde::Serialize;
use tracing::warn;

use crate::domain::{Instant, Reminder};
use crate::message;
use crate::plan::{delay_for, to_chrono};
use crate::ports::{DelayQueue, OutgoingMessage, ReminderIndex};
use crate::settings::PipelineSettings;

/// SQS's batch limit.
pub const SEND_BATCH: usize = 10;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EnqueueSummary {
    /// Messages sent to the queue.
    pub enqueued: usize,
    /// Rows someone else had claimed or enqueued already.
    pub already_claimed: usize,
    /// Rows whose claim or send failed; they stay pending for the next run.
    pub failed: usize,
}

impl EnqueueSummary {
    pub fn add(&mut self, o: EnqueueSummary) {
        self.enqueued += o.enqueued;
        self.already_claimed += o.already_claimed;
        self.failed += o.failed;
    }
}

pub async fn enqueue(
    index: &dyn ReminderIndex,
    queue: &dyn DelayQueue,
    reminders: Vec<Reminder>,
    now: Instant,
    settings: &PipelineSettings,
) -> EnqueueSummary {
    let mut summary = EnqueueSummary::default();
    let lease_until = now + to_chrono(settings.claim_lease);
    let claims: Vec<(Reminder, Result<bool, _>)> = stream::iter(reminders)
        .map(|r| async move {
            let c = index.claim(&r, now, lease_until).await;
            (r, c)
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let mut claimed = Vec::with_capacity(claims.len());
    for (r, c) in claims {
        match c {
            Ok(true) => claimed.push(r),
            Ok(false) => summary.already_claimed += 1,
            Err(e) => {
                warn!(reminder = %r.key, error = %e, "claim failed; left for the next run");
                summary.failed += 1;
            }
        }
    }
    claimed.sort_by_key(|r| r.due_at);

    let batches: Vec<Vec<Reminder>> = claimed.chunks(SEND_BATCH).map(<[_]>::to_vec).collect();
    let results: Vec<EnqueueSummary> = stream::iter(batches)
        .map(|batch| async move {
            let mut s = EnqueueSummary::default();
            let messages: Vec<OutgoingMessage> = batch
                .iter()
                .enumerate()
                .map(|(i, r)| OutgoingMessage {
                    id: i.to_string(),
                    body: r.key.to_string(),
                    attributes: message::encode(r),
                    delay: delay_for(r.due_at, now, settings.lead),
                    group: Some(r.key.tenant.to_string()),
                })
                .collect();
            match queue.send_batch(&messages).await {
                Ok(()) => {
                    for r in &batch {
                        // The message is out; a failed mark only means the row may be
                        // claimed again after its lease, and the daemon dedupes.
                        if let Err(e) = index.mark_enqueued(r).await {
                            warn!(reminder = %r.key, error = %e, "mark enqueued failed");
                        }
                    }
                    s.enqueued += batch.len();
                }
                Err(e) => {
                    warn!(error = %e, count = batch.len(), "send batch failed; releasing claims");
                    for r in &batch {
                        if let Err(e) = index.release(r).await {
                            warn!(reminder = %r.key, error = %e, "release failed; the lease will expire");
                        }
                    }
                    s.failed += batch.len();
                }
            }
            s
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for r in results {
        summary.add(r);
    }
    summary
}
