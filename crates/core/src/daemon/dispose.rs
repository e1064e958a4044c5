//! Disposing: telling the queue what became of each message, and saying so
//! in the log when something failed.

use std::hash::BuildHasher;
use std::time::Duration;

use tracing::{debug, error, info, warn};

use toki_model::domain::Channel;
use toki_model::error::chain;
use toki_model::event::{EventKind, NewEvent};
use toki_ports::message::{ATTR_SCHEDULE, ATTR_TENANT};
use toki_ports::ReceivedMessage;

use super::settle::{disposition, Disposition};
use super::work::MessageFate;
use super::Daemon;

/// Queue requests in flight at once while disposing of a batch.
const IN_FLIGHT: usize = 8;

/// A parked message whose circuit closed before it could park comes back this soon.
const UNPARK: Duration = Duration::from_millis(200);
/// How long after a failed read of the queue's receive limit it is asked again.
const RECEIVE_LIMIT_RETRY: Duration = Duration::from_secs(60);

/// What a message that did not fail is waiting for (a renewal's reason).
fn waiting_for(fate: &MessageFate) -> String {
    match fate {
        MessageFate::Early { .. } => "early: waiting for its due instant".into(),
        MessageFate::Throttled { retry_after } => {
            format!(
                "throttled: the service asked for {} ms",
                retry_after.as_millis()
            )
        }
        MessageFate::Parked { channels } => {
            let names: Vec<String> = channels.iter().map(ToString::to_string).collect();
            format!("parked: circuit open on {}", names.join(", "))
        }
        MessageFate::Busy => "busy: its deliveries held by another holder".into(),
        other => format!("waiting: {other:?}"),
    }
}

/// A number in 0..1 that differs per message and per call: spreads retries
/// so that messages failed together do not come back together.
fn jitter(receipt: &str) -> f64 {
    let h = std::collections::hash_map::RandomState::new().hash_one(receipt);
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// An attribute of a message for a log line ("?" when it has none).
fn attr<'a>(msg: &'a ReceivedMessage, name: &str) -> &'a str {
    msg.attributes.get(name).map_or("?", String::as_str)
}

impl Daemon {
    /// Acknowledges finished messages in batches; hides the others until they
    /// should be received again, parks those waiting for a circuit, and moves
    /// those out of their budget to the dead-letter queue.
    pub(super) async fn dispose(&self, fates: Vec<(ReceivedMessage, MessageFate)>) {
        let policy = &self.settings.retry;
        let renew_from = self.renew_from().await;
        let mut acks = Vec::new();
        // Messages to hide, and for how long: changed together at the end.
        let mut hides: Vec<(String, Duration)> = Vec::new();
        // Waiting messages near the queue's own receive limit: put back as new.
        let mut renewals: Vec<(ReceivedMessage, Duration, String)> = Vec::new();
        for (msg, fate) in fates {
            let near_limit = renew_from.is_some_and(|from| msg.receive_count >= from);
            if fate == MessageFate::TenantDeleted {
                self.stats.add(&self.stats.tenant_deleted, 1);
            }
            match disposition(&fate, msg.receive_count, policy, jitter(&msg.receipt)) {
                Disposition::Ack => acks.push(msg.receipt),
                Disposition::Redelay(wait) if near_limit => {
                    self.note_redelay(&msg, &fate, wait);
                    renewals.push((msg, wait, waiting_for(&fate)));
                }
                Disposition::Redelay(wait) => {
                    self.note_redelay(&msg, &fate, wait);
                    hides.push((msg.receipt, wait));
                }
                Disposition::Retry(after) => {
                    self.note_retry(&msg, &fate, after);
                    self.stats.add(&self.stats.retried, 1);
                    hides.push((msg.receipt, after));
                }
                Disposition::Park(_) if near_limit => {
                    self.stats.add(&self.stats.parked, 1);
                    let wait = self.breakers.settings().park_for;
                    renewals.push((msg, wait, waiting_for(&fate)));
                }
                Disposition::Park(channels) => {
                    let wait = self.park_message(&msg, &channels);
                    hides.push((msg.receipt, wait));
                }
                Disposition::DeadLetter(reason) => {
                    if let Some(wait) = self.dead_letter_message(&msg, &reason).await {
                        hides.push((msg.receipt, wait));
                    }
                }
            }
        }
        for (receipt, wait) in self.renew_all(renewals).await {
            hides.push((receipt, wait));
        }
        self.delete_and_hide(&acks, &hides).await;
    }

    /// The receive count from which a waiting message is renewed: half the
    /// queue's own limit (SQS's maxReceiveCount counts every receive, waits
    /// included), so that only failures ever spend it. None: no limit, or
    /// the queue could not say (asked again next time).
    async fn renew_from(&self) -> Option<u32> {
        if let Some(limit) = self.receive_limit.get() {
            return limit.map(|l| (l / 2).max(1));
        }
        let now = tokio::time::Instant::now();
        let failed = *self.receive_limit_failed.lock().expect("lock");
        if failed.is_some_and(|at| now < at + RECEIVE_LIMIT_RETRY) {
            return None;
        }
        let limit = self
            .receive_limit
            .get_or_try_init(|| self.queue.receive_limit())
            .await;
        match limit {
            Ok(limit) => limit.map(|l| (l / 2).max(1)),
            Err(e) => {
                *self.receive_limit_failed.lock().expect("lock") = Some(now);
                warn!(error = %chain(&e), "reading the queue's receive limit failed; asked again in a minute, no renewals until then");
                None
            }
        }
    }

    /// Renews waiting messages a few at a time; returns those to hide instead
    /// (the renewal failed: they come back as they are, with the limit nearer).
    async fn renew_all(
        &self,
        renewals: Vec<(ReceivedMessage, Duration, String)>,
    ) -> Vec<(String, Duration)> {
        use futures::stream::{self, StreamExt};
        stream::iter(renewals)
            .map(|(msg, wait, why)| async move {
                let tenant = attr(&msg, ATTR_TENANT);
                let schedule = attr(&msg, ATTR_SCHEDULE);
                match self.queue.renew(&msg, wait, &why).await {
                    Ok(()) => {
                        self.stats.add(&self.stats.renewed, 1);
                        info!(tenant, schedule, receive = msg.receive_count, %why, ?wait, "message renewed: its receives neared the queue's limit while it waited");
                        None
                    }
                    Err(e) => {
                        warn!(tenant, schedule, error = %chain(&e), "renewing a waiting message failed; it comes back as it is");
                        Some((msg.receipt, wait))
                    }
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .filter_map(|hide| async move { hide })
            .collect()
            .await
    }

    /// Counts and logs a message coming back later that did not fail.
    fn note_redelay(&self, msg: &ReceivedMessage, fate: &MessageFate, wait: Duration) {
        let tenant = attr(msg, ATTR_TENANT);
        let schedule = attr(msg, ATTR_SCHEDULE);
        match fate {
            MessageFate::Throttled { .. } => {
                self.stats.add(&self.stats.throttled, 1);
                debug!(
                    tenant,
                    schedule,
                    ?wait,
                    "throttled; message comes back when the service said"
                )
            }
            MessageFate::Busy => {
                self.stats.add(&self.stats.busy, 1);
                debug!(
                    tenant,
                    schedule,
                    ?wait,
                    "deliveries held elsewhere; message comes back"
                )
            }
            _ => debug!(tenant, schedule, ?wait, "early message re-delayed"),
        }
    }

    /// Logs why a message is tried again: each failed channel, or why it
    /// could not be worked on.
    fn note_retry(&self, msg: &ReceivedMessage, fate: &MessageFate, after: Duration) {
        let policy = &self.settings.retry;
        let tenant = attr(msg, ATTR_TENANT);
        let schedule = attr(msg, ATTR_SCHEDULE);
        match fate {
            MessageFate::Failed {
                channel,
                reason,
                failures,
                others,
                ..
            } => {
                for (channel, reason, failures) in std::iter::once((channel, reason, failures))
                    .chain(others.iter().map(|(c, r, f)| (c, r, f)))
                {
                    warn!(
                        tenant,
                        schedule,
                        %channel,
                        %reason,
                        attempt = failures,
                        of = policy.max_failures,
                        next_try_in = ?after,
                        "delivery failed; trying again"
                    )
                }
            }
            MessageFate::Unprocessed { reason, overdue } => warn!(
                tenant,
                schedule,
                %reason,
                receive = msg.receive_count,
                overdue_s = overdue.as_secs(),
                gives_up_after_s = policy.give_up_after.as_secs(),
                next_try_in = ?after,
                "message could not be worked on; trying again"
            ),
            _ => {}
        }
    }

    /// Parks a message with the open circuits of `channels`; how long to hide it.
    fn park_message(&self, msg: &ReceivedMessage, channels: &[Channel]) -> Duration {
        let parked = channels
            .iter()
            .filter(|c| self.breakers.park(**c, msg.receipt.clone()))
            .count();
        if parked > 0 {
            self.stats.add(&self.stats.parked, 1);
            self.breakers.settings().park_for
        } else {
            // The circuit closed meanwhile: straight back.
            UNPARK
        }
    }

    /// Moves a message to the dead-letter queue; how long to hide it if that failed.
    async fn dead_letter_message(&self, msg: &ReceivedMessage, reason: &str) -> Option<Duration> {
        // A provider's answer can quote the recipient: the reason is kept
        // (queue, event) and logged with addresses and Slack ids as pseudonyms.
        let reason = &*toki_model::redact::scrub(reason);
        let tenant = attr(msg, ATTR_TENANT);
        let schedule = attr(msg, ATTR_SCHEDULE);
        error!(tenant, schedule, %reason, receive = msg.receive_count, "message dead-lettered; `toki redrive` sends it again");
        match self.queue.dead_letter(msg, reason).await {
            Ok(()) => {
                self.stats.add(&self.stats.dead_lettered, 1);
                self.note_dead_letter(msg, reason).await;
                None
            }
            // Never deleted: it comes back after the longest backoff,
            // and the queue's own redrive policy is the backstop.
            Err(e) => {
                error!(tenant, schedule, error = %chain(&e), "dead-lettering failed; the message stays in the queue");
                Some(self.settings.retry.cap)
            }
        }
    }

    /// The tenant's `delivery.dead_lettered` event (if some endpoint wants it).
    /// After the fact and best effort: the dead letter itself keeps the reason.
    async fn note_dead_letter(&self, msg: &ReceivedMessage, reason: &str) {
        let Ok(reminder) = toki_ports::message::decode(&msg.attributes) else {
            return;
        };
        let event = NewEvent::of_reminder(
            EventKind::DeadLettered,
            &reminder,
            Some(reason.to_owned()),
            self.clock.now(),
        );
        let tenant = &reminder.key.tenant;
        let appended = match self.stores.open(tenant).await {
            Ok(store) => store.append_events(&[event]).await,
            Err(e) => Err(e),
        };
        match appended {
            Ok(0) => {}
            Ok(_) => self.marker.events(tenant).await,
            Err(e) => {
                warn!(%tenant, error = %chain(&e), "the dead letter's event was not recorded")
            }
        }
    }

    /// Deletes the acknowledged messages and hides the others, a few requests
    /// at a time.
    async fn delete_and_hide(&self, acks: &[String], hides: &[(String, Duration)]) {
        // A few requests in flight rather than one after the other: a batch
        // that many refusals sent back is as many visibility changes.
        let mut deletes = Vec::new();
        for chunk in acks.chunks(10) {
            deletes.push(self.delete(chunk));
        }
        futures::future::join_all(deletes).await;
        for window in hides.chunks(IN_FLIGHT) {
            let mut changes = Vec::with_capacity(window.len());
            for (receipt, wait) in window {
                changes.push(self.hide(receipt, *wait));
            }
            futures::future::join_all(changes).await;
        }
    }

    async fn delete(&self, receipts: &[String]) {
        match self.queue.delete_batch(receipts).await {
            Ok(()) => self.stats.add(&self.stats.acked, receipts.len()),
            // Not deleted: it comes back and the delivery rows keep it from sending twice.
            Err(e) => warn!(error = %chain(&e), "delete failed"),
        }
    }

    async fn hide(&self, receipt: &str, wait: Duration) {
        if let Err(e) = self.queue.change_visibility(receipt, wait).await {
            warn!(error = %chain(&e), "changing visibility failed; the message returns after its visibility timeout");
        }
    }
}
