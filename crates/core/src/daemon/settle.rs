//! Settling (pure): the outcome row of every delivery, and the one place where
//! what happens to a message is decided.

use std::time::Duration;

use toki_model::domain::{Channel, DeliveryKey, DeliveryOutcome, DeliveryStatus, DueAt, Instant};
use toki_model::time::retry_backoff;
use toki_ports::channel::{SendError, SendResult};
use toki_ports::ReceivedMessage;

use super::plan::{PlannedDelivery, PlannedMessage, Verdict};
use super::work::MessageFate;

/// What the queue is told about a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// Delete it: it is done.
    Ack,
    /// Hide it for this long, then it is received again: a failure.
    Retry(Duration),
    /// Hide it for this long (its time has not come, a throttle, a holder
    /// still sending): not a failure.
    Redelay(Duration),
    /// Hide it until these channels' circuits close (they release it then).
    Park(Vec<Channel>),
    /// Out of its budget: to the dead-letter queue (never deleted), with why.
    DeadLetter(String),
}

/// When failed messages come back, and when they stop coming back.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// The first backoff; it doubles with each failure of a delivery.
    pub base: Duration,
    /// The longest backoff.
    pub cap: Duration,
    /// Failed attempts of one delivery before its message is dead-lettered.
    pub max_failures: u32,
    /// How long past its due instant a message that cannot be worked on (its
    /// tenant database unreachable) keeps coming back before it is
    /// dead-lettered: a span of time, whatever the backoff.
    pub give_up_after: Duration,
    /// How long a message waits before looking again at deliveries another
    /// holder is sending: a fraction of the claims' lease, so that a holder
    /// that stopped is taken over soon after its lease ends.
    pub busy_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
            max_failures: 10,
            give_up_after: Duration::from_secs(15 * 60),
            busy_wait: Duration::from_millis(2_500),
        }
    }
}

/// The one place a message's disposition is decided. A message that failed
/// is never deleted: it comes back with backoff and, out of its budget, goes
/// to the dead-letter queue. Throttles, open circuits, early arrivals and
/// other holders' sends never use the budget. `jitter` (0..1) spreads retries.
pub fn disposition(
    fate: &MessageFate,
    receive_count: u32,
    policy: &RetryPolicy,
    jitter: f64,
) -> Disposition {
    let backoff = |n| retry_backoff(n, policy.base, policy.cap, jitter);
    match fate {
        MessageFate::Done | MessageFate::TenantDeleted => Disposition::Ack,
        MessageFate::Early { wait } => Disposition::Redelay(*wait),
        MessageFate::Failed {
            channel,
            reason,
            failures,
            ..
        } if *failures >= policy.max_failures => Disposition::DeadLetter(format!(
            "{failures} failed attempts, the last on {channel}: {reason}"
        )),
        MessageFate::Failed {
            failures,
            throttled,
            ..
        } => Disposition::Retry(backoff(*failures).max(throttled.unwrap_or_default())),
        MessageFate::Throttled { retry_after } => Disposition::Redelay(*retry_after),
        MessageFate::Parked { channels } => Disposition::Park(channels.clone()),
        MessageFate::Busy => Disposition::Redelay(policy.busy_wait),
        MessageFate::Poison(reason) => Disposition::DeadLetter(reason.clone()),
        MessageFate::Unprocessed { reason, overdue } if *overdue >= policy.give_up_after => {
            Disposition::DeadLetter(format!(
                "unprocessable for {} s past due ({receive_count} receives), the last: {reason}",
                overdue.as_secs()
            ))
        }
        MessageFate::Unprocessed { .. } => Disposition::Retry(backoff(receive_count)),
    }
}

/// A send's result, by position in the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    pub message: usize,
    pub delivery: usize,
    pub result: SendResult,
}

/// A settled batch: the rows to record and every message's fate.
#[derive(Debug, Default)]
pub struct Settlement {
    pub outcomes: Vec<DeliveryOutcome>,
    pub fates: Vec<(ReceivedMessage, MessageFate)>,
}

/// Outcome rows for every delivery that has one, and each message's fate.
/// `revoked`: messages found stale at the last look before firing (their
/// live deliveries were not sent). `now` stamps rows that did not go out.
pub fn settle(
    messages: Vec<PlannedMessage>,
    sent: Vec<Sent>,
    revoked: &[(usize, String)],
    now: Instant,
) -> Settlement {
    let results = results_by_position(&messages, sent);
    let mut out = Settlement::default();
    for (i, (m, results)) in messages.into_iter().zip(results).enumerate() {
        let revoked_because = revoked.iter().find(|(r, _)| *r == i).map(|(_, why)| why);
        let stamp = RowStamp {
            version: m.version,
            due_at: m.due_at,
        };
        let mut message = MessageOutcome::default();
        for (d, result) in m.deliveries.into_iter().zip(results) {
            let outcome = delivery_row(stamp, d, result, revoked_because, now, &mut message);
            out.outcomes.extend(outcome);
        }
        out.fates.push((m.msg, message.fate()));
    }
    out
}

/// Each send's result in the slot of its message and delivery (None: not sent).
fn results_by_position(
    messages: &[PlannedMessage],
    sent: Vec<Sent>,
) -> Vec<Vec<Option<SendResult>>> {
    let mut results: Vec<Vec<Option<SendResult>>> = messages
        .iter()
        .map(|m| vec![None; m.deliveries.len()])
        .collect();
    for s in sent {
        if let Some(slot) = results
            .get_mut(s.message)
            .and_then(|r| r.get_mut(s.delivery))
        {
            *slot = Some(s.result);
        }
    }
    results
}

/// The row of one planned delivery, if it gets one; what it means for its
/// message is noted on `message`.
fn delivery_row(
    stamp: RowStamp,
    d: PlannedDelivery,
    result: Option<SendResult>,
    revoked_because: Option<&String>,
    now: Instant,
    message: &mut MessageOutcome,
) -> Option<DeliveryOutcome> {
    match (d.verdict, result) {
        (Verdict::Stale(why), _) => Some(stamp.row(&d.key, DeliveryStatus::Stale, now, Some(why))),
        (Verdict::Undeliverable(why), _) => {
            Some(stamp.row(&d.key, DeliveryStatus::Undeliverable, now, Some(why)))
        }
        (Verdict::Busy, _) => {
            message.busy = true;
            None
        }
        (Verdict::Parked(channel), _) => {
            message.parked(channel);
            None
        }
        (Verdict::Done, _) => None,
        (Verdict::Live, _) if revoked_because.is_some() => {
            Some(stamp.row(&d.key, DeliveryStatus::Stale, now, revoked_because.cloned()))
        }
        (Verdict::Live, Some(result)) => {
            Some(answer_row(stamp, &d.key, d.failures, result, now, message))
        }
        // Planned but not attempted (its channel's circuit opened meanwhile).
        (Verdict::Live, None) => Some(held_back_row(stamp, &d.key, now, message)),
    }
}

/// The version and due instant every outcome row of one message carries.
#[derive(Clone, Copy)]
pub(super) struct RowStamp {
    pub(super) version: i64,
    pub(super) due_at: DueAt,
}

impl RowStamp {
    /// The outcome row of one delivery.
    pub(super) fn row(
        self,
        key: &DeliveryKey,
        status: DeliveryStatus,
        at: Instant,
        detail: Option<String>,
    ) -> DeliveryOutcome {
        DeliveryOutcome {
            key: key.clone(),
            version: self.version,
            due_at: self.due_at,
            status,
            at,
            detail,
        }
    }
}

/// The row for a channel's answer to a delivery that had failed `failures`
/// times before; a failure or a throttle is noted on its message.
pub(super) fn answer_row(
    stamp: RowStamp,
    key: &DeliveryKey,
    failures: u32,
    result: SendResult,
    now: Instant,
    message: &mut MessageOutcome,
) -> DeliveryOutcome {
    match result {
        Ok(at) => stamp.row(key, DeliveryStatus::Delivered, at, None),
        Err(SendError::Permanent(why)) => {
            stamp.row(key, DeliveryStatus::Undeliverable, now, Some(why))
        }
        Err(e @ SendError::RecipientRefused(_)) => {
            stamp.row(key, DeliveryStatus::Undeliverable, now, Some(e.to_string()))
        }
        Err(SendError::Throttled { retry_after }) => {
            message.throttled = message.throttled.max(Some(retry_after));
            let why = format!("throttled: retry after {} s", retry_after.as_secs());
            stamp.row(key, DeliveryStatus::Throttled, now, Some(why))
        }
        Err(SendError::Transient(reason)) => {
            message.failed(key.channel, reason.clone(), failures + 1);
            stamp.row(key, DeliveryStatus::Failed, now, Some(reason))
        }
    }
}

/// The row for a delivery planned but not sent because its channel's
/// circuit opened meanwhile; its message waits for that channel.
pub(super) fn held_back_row(
    stamp: RowStamp,
    key: &DeliveryKey,
    now: Instant,
    message: &mut MessageOutcome,
) -> DeliveryOutcome {
    message.parked(key.channel);
    let why = format!("held back: the {} circuit is open", key.channel);
    stamp.row(key, DeliveryStatus::Deferred, now, Some(why))
}

/// What the deliveries of one message came to, for its fate.
#[derive(Default)]
pub(super) struct MessageOutcome {
    /// Per channel: the reason and the most failed attempts of its deliveries.
    failed: Vec<(Channel, String, u32)>,
    pub(super) throttled: Option<Duration>,
    parked: Vec<Channel>,
    pub(super) busy: bool,
}

impl MessageOutcome {
    pub(super) fn failed(&mut self, channel: Channel, reason: String, failures: u32) {
        match self.failed.iter_mut().find(|(c, _, _)| *c == channel) {
            Some(known) if failures > known.2 => *known = (channel, reason, failures),
            Some(_) => {}
            None => self.failed.push((channel, reason, failures)),
        }
    }

    pub(super) fn parked(&mut self, channel: Channel) {
        if !self.parked.contains(&channel) {
            self.parked.push(channel);
        }
    }

    /// A failure decides first (it counts), then a throttle, then a parked
    /// channel, then another holder.
    pub(super) fn fate(mut self) -> MessageFate {
        // The channel with the most failed attempts speaks for the message's budget.
        if let Some(worst) = (0..self.failed.len()).max_by_key(|&i| self.failed[i].2) {
            let (channel, reason, failures) = self.failed.remove(worst);
            return MessageFate::Failed {
                channel,
                reason,
                failures,
                others: self.failed,
                throttled: self.throttled,
            };
        }
        match self {
            MessageOutcome {
                throttled: Some(retry_after),
                ..
            } => MessageFate::Throttled { retry_after },
            MessageOutcome { parked, .. } if !parked.is_empty() => {
                MessageFate::Parked { channels: parked }
            }
            MessageOutcome { busy: true, .. } => MessageFate::Busy,
            _ => MessageFate::Done,
        }
    }
}
