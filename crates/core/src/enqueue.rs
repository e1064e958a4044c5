//! Moving due reminders from the index into the delay queue: claim each row
//! conditionally, send in batches that respect SQS's limits, then mark the
//! sent rows enqueued and release the refused ones. Shared by the scanner and
//! the registrar's direct path.

use std::collections::HashMap;

use futures::future::join_all;
use futures::stream::{self, StreamExt};
use serde::Serialize;
use tracing::{warn, Span};

use crate::crowd::Crowds;
use crate::settings::PipelineSettings;
use crate::trace;
use toki_model::domain::{Instant, Reminder, ReminderKey};
use toki_model::error::chain;
use toki_model::time::{delay_for, to_chrono};
use toki_ports::message;
use toki_ports::{batches, Clock, DelayQueue, OutgoingMessage, ReminderIndex};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EnqueueSummary {
    /// Messages sent to the queue.
    pub enqueued: usize,
    /// Rows someone else had claimed or enqueued already.
    pub already_claimed: usize,
    /// Rows whose claim or send failed; they stay pending for the next run.
    pub failed: usize,
    /// Rows left for the next run because the deadline came first.
    pub deferred: usize,
}

impl EnqueueSummary {
    pub fn add(&mut self, o: EnqueueSummary) {
        self.enqueued += o.enqueued;
        self.already_claimed += o.already_claimed;
        self.failed += o.failed;
        self.deferred += o.deferred;
    }
}

/// The message for a reminder, to be visible `lead` before it is due.
pub(crate) fn message_for(
    r: &Reminder,
    now: Instant,
    lead: std::time::Duration,
) -> OutgoingMessage {
    OutgoingMessage {
        id: r.key.to_string(),
        body: r.key.to_string(),
        attributes: message::encode(r),
        delay: delay_for(r.due_at, now, lead),
        group: Some(r.key.tenant.to_string()),
    }
}

/// Rows claimed per call to the index; the deadline is checked between calls.
const CLAIM_CHUNK: usize = 256;

/// What [`enqueue`] did, and which reminders it sent.
#[derive(Debug, Clone, Default)]
pub struct Enqueued {
    pub summary: EnqueueSummary,
    pub sent: Vec<ReminderKey>,
}

/// Where [`enqueue`] sends, and what it knows.
pub struct Enqueuer<'a> {
    pub index: &'a dyn ReminderIndex,
    pub queue: &'a dyn DelayQueue,
    pub clock: &'a dyn Clock,
    pub settings: &'a PipelineSettings,
    /// The tenants enqueued for each instant to come ([`crate::crowd`]).
    pub crowds: &'a Crowds,
}

/// Enqueues `reminders`. No new row is claimed once `deadline` has passed
/// (a Lambda's end, less a margin): those stay pending for the next run.
/// Each message's delay is taken from `clock` when the messages are built,
/// after the claims: a slow index must not make them visible late. Each
/// tenant's messages for an instant are visible earlier the more tenants
/// were enqueued for it before ([`PipelineSettings::lead_at`]).
pub async fn enqueue(
    to: Enqueuer<'_>,
    reminders: Vec<Reminder>,
    deadline: Option<tokio::time::Instant>,
) -> Enqueued {
    let Enqueuer {
        index,
        queue,
        clock,
        settings,
        crowds,
    } = to;
    let mut summary = EnqueueSummary::default();
    let now = clock.now();
    let lease_until = now + to_chrono(settings.claim_lease);
    let mut claimed = Vec::with_capacity(reminders.len());
    for chunk in reminders.chunks(CLAIM_CHUNK) {
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            summary.deferred += chunk.len();
            continue;
        }
        for (r, c) in chunk
            .iter()
            .zip(index.claim_all(chunk, now, lease_until).await)
        {
            match c {
                Ok(true) => claimed.push(r.clone()),
                Ok(false) => summary.already_claimed += 1,
                Err(e) => {
                    warn!(reminder = %r.key, error = %chain(&e), "claim failed; left for the next run");
                    summary.failed += 1;
                }
            }
        }
    }
    claimed.sort_by_key(|r| r.due_at);

    let sent_at = clock.now();
    // One trace per reminder (none when traces are off): its span lasts
    // until the message is on the queue.
    let mut spans: HashMap<String, Span> = HashMap::new();
    let messages: Vec<OutgoingMessage> = claimed
        .iter()
        .map(|r| {
            let place = crowds.place(
                r.due_at,
                &r.key.tenant,
                sent_at,
                settings.remembered_places(),
            );
            let mut m = message_for(r, sent_at, settings.lead_at(place));
            if trace::enabled() {
                let span = trace::enqueue_span(&r.key, r.due_at);
                trace::inject(&span, &mut m.attributes);
                spans.insert(m.id.clone(), span);
            }
            m
        })
        .collect();
    let by_id: HashMap<String, &Reminder> =
        claimed.iter().map(|r| (r.key.to_string(), r)).collect();
    let results: Vec<Enqueued> = stream::iter(batches(messages))
        .map(|batch| {
            let by_id = &by_id;
            async move { send_one_batch(index, queue, batch, by_id).await }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    drop(spans);
    let mut sent = Vec::with_capacity(claimed.len());
    for r in results {
        summary.add(r.summary);
        sent.extend(r.sent);
    }
    Enqueued { summary, sent }
}

/// Sends one batch; marks what went out, releases what did not.
async fn send_one_batch(
    index: &dyn ReminderIndex,
    queue: &dyn DelayQueue,
    batch: Vec<OutgoingMessage>,
    by_id: &HashMap<String, &Reminder>,
) -> Enqueued {
    let reminders: Vec<&Reminder> = batch.iter().map(|m| by_id[&m.id]).collect();
    let refused: Vec<usize> = match queue.send_batch(&batch).await {
        Ok(sent) => {
            for r in &sent.refused {
                warn!(reminder = %reminders[r.index].key, reason = %r.reason, "the queue refused a message; released for the next run");
            }
            sent.refused.iter().map(|r| r.index).collect()
        }
        Err(e) => {
            warn!(error = %chain(&e), count = batch.len(), "send batch failed; releasing claims");
            (0..batch.len()).collect()
        }
    };
    let (gone, kept): (Vec<_>, Vec<_>) = reminders
        .into_iter()
        .enumerate()
        .partition(|(i, _)| !refused.contains(i));
    // The messages are out: a failed mark only means the row may be claimed
    // again after its lease, and the daemon's claims dedupe.
    let out: Vec<&Reminder> = gone.iter().map(|(_, r)| *r).collect();
    if let Err(e) = index.mark_all_enqueued(&out).await {
        warn!(count = out.len(), error = %chain(&e), "mark enqueued failed");
    }
    join_all(kept.iter().map(|(_, r)| async move {
        if let Err(e) = index.release(r).await {
            warn!(reminder = %r.key, error = %chain(&e), "release failed; the lease will expire");
        }
    }))
    .await;
    Enqueued {
        summary: EnqueueSummary {
            enqueued: out.len(),
            failed: kept.len(),
            ..EnqueueSummary::default()
        },
        sent: out.iter().map(|r| r.key.clone()).collect(),
    }
}
