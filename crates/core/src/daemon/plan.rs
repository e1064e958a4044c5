//! The plan (pure): given a tenant's part of a batch, what its database says
//! now and what the claim got, a verdict for every delivery.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use toki_model::suppression::{ListedAddress, Suppression};

use toki_model::domain::{
    Channel, DeliveryClaim, DeliveryKey, DueAt, Reminder, ReminderKey, ScheduleId,
    ScheduleSnapshot, TenantId, User, UserId,
};
use toki_model::template::Templates;
use toki_model::webhook::{WebhookSettings, WebhookTarget};
use toki_ports::channel::{ChannelParts, Notification};
use toki_ports::{Claims, DeliveryContext, OwnedDelivery, ReceivedMessage};

use super::work::Work;

/// What becomes of one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The schedule was moved, changed or deleted after the message was sent.
    Stale(String),
    /// Ours to send at its due instant (the notification is in `BatchPlan::to_send`).
    Live,
    /// Ours, but it can never be sent this way (no such user, no address, channel off).
    Undeliverable(String),
    /// Another holder is sending it: the message must come back, not be acknowledged.
    Busy,
    /// Its channel's circuit is open: not claimed, not sent; the message waits.
    Parked(Channel),
    /// Already final, or carried by another copy in this batch: nothing to do.
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedDelivery {
    pub key: DeliveryKey,
    pub verdict: Verdict,
    /// Failed attempts so far (its budget), when ours to send.
    pub failures: u32,
}

/// One message and the verdicts on its deliveries.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedMessage {
    pub msg: ReceivedMessage,
    pub reminder: ReminderKey,
    /// Why the message is stale, if it is (then its deliveries are too).
    pub stale: Option<String>,
    pub version: i64,
    pub due_at: DueAt,
    pub deliveries: Vec<PlannedDelivery>,
}

/// A notification to send, and the delivery it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct ToSend {
    pub message: usize,
    pub delivery: usize,
    pub notification: Notification,
    /// Taken over from a holder that stopped: ask the channel before sending.
    pub taken_over: bool,
}

/// What the daemon can send on right now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelState {
    /// Channels this daemon has a sender for.
    pub configured: BTreeSet<Channel>,
    /// Channels whose circuit breaker is open: their deliveries wait.
    pub open: BTreeSet<Channel>,
}

/// A tenant's part of a batch, decided.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchPlan {
    pub tenant: TenantId,
    pub messages: Vec<PlannedMessage>,
    /// The `Live` deliveries, rendered, in due order.
    pub to_send: Vec<ToSend>,
}

/// Whether a message is stale (its schedule is gone or at another version),
/// and whom its deliveries go to: the participants the database has now
/// (at the message's version when it is current). A deleted schedule has none.
fn standing<'a>(work: &Work, ctx: &'a DeliveryContext) -> (Option<String>, &'a [UserId]) {
    match ctx.schedules.get(&work.reminder.key.schedule) {
        None => (Some("schedule deleted".into()), &[]),
        Some(s) if s.version != work.reminder.version => (
            Some(format!(
                "schedule is at version {}, message has {}",
                s.version, work.reminder.version
            )),
            &s.participants,
        ),
        Some(s) => (None, &s.participants),
    }
}

/// The schedules a tenant's work needs from its database.
pub fn reads_for(work: &[Work]) -> Vec<ScheduleId> {
    let schedules: BTreeSet<_> = work.iter().map(|w| &w.reminder.key.schedule).collect();
    schedules.into_iter().cloned().collect()
}

/// The deliveries to claim: those of messages whose schedule is still at their
/// version, each once (the same message may arrive twice, even in one batch),
/// except on channels whose circuit is open.
pub fn claims_for(
    work: &[Work],
    ctx: &DeliveryContext,
    channels: &ChannelState,
) -> Vec<DeliveryClaim> {
    let mut seen = HashSet::new();
    let mut claims = Vec::new();
    for w in work {
        let (None, recipients) = standing(w, ctx) else {
            continue;
        };
        for key in w.reminder.deliveries_to(recipients) {
            if !channels.open.contains(&key.channel) && seen.insert(key.clone()) {
                claims.push(DeliveryClaim {
                    key,
                    version: w.reminder.version,
                    due_at: w.reminder.due_at,
                });
            }
        }
    }
    claims
}

/// Why a delivery we own cannot be sent, if it cannot.
pub(super) fn undeliverable(
    key: &DeliveryKey,
    user: Option<&User>,
    configured: &BTreeSet<Channel>,
    suppressed: &Suppressed,
) -> Option<String> {
    let Some(user) = user else {
        return Some("recipient no longer exists".into());
    };
    if key.channel == Channel::Mail {
        if let Some(entry) = suppressed_entry(user, suppressed) {
            return Some(entry.why_not_sent());
        }
    }
    match key.channel {
        c if user.channels_off.contains(&c) => Some(format!("recipient turned {c} off")),
        Channel::Mail if user.email.is_none() => Some("recipient has no e-mail address".into()),
        Channel::Slack if user.slack_user_id.is_none() => {
            Some("recipient has no Slack user id".into())
        }
        c if !configured.contains(&c) => Some(format!("channel {c} is not configured")),
        _ => None,
    }
}

/// The tenant's suppression-list entries of a batch's addresses.
pub(super) type Suppressed = HashMap<ListedAddress, Suppression>;

/// `user`'s entry on the list, if their address is on it.
fn suppressed_entry<'a>(user: &User, suppressed: &'a Suppressed) -> Option<&'a Suppression> {
    let address = ListedAddress::parse("email", user.email.as_deref()?).ok()?;
    suppressed.get(&address)
}

/// Where a webhook delivery goes (the recipient's endpoint, else the
/// tenant's default) and what signs it; None on other channels; why not if
/// it has nowhere to go.
pub(super) fn webhook_target(
    key: &DeliveryKey,
    user: &User,
    settings: Option<&Arc<WebhookSettings>>,
) -> Result<Option<WebhookTarget>, String> {
    if key.channel != Channel::Webhook {
        return Ok(None);
    }
    WebhookTarget::resolve(user.webhook_url.as_ref(), settings)
        .map(Some)
        .map_err(str::to_owned)
}

/// Decides every delivery of a tenant's work.
pub fn plan_batch(
    tenant: TenantId,
    mut work: Vec<Work>,
    ctx: &DeliveryContext,
    claims: &Claims,
    channels: &ChannelState,
    templates: &Templates,
) -> BatchPlan {
    let mut planner = Planner {
        tenant: &tenant,
        ctx,
        channels,
        templates,
        // Each owned claim goes to one message only.
        owned: claims.owned.iter().map(|o| (&o.key, o)).collect(),
        busy: claims.busy.iter().collect(),
        // At most one a claim: sized once, as it is held until the instant.
        to_send: Vec::with_capacity(claims.owned.len()),
    };
    work.sort_by_key(|w| w.reminder.due_at);
    let mut messages = Vec::with_capacity(work.len());
    for (m, w) in work.into_iter().enumerate() {
        messages.push(planner.plan_message(m, w));
    }
    let to_send = planner.to_send;
    BatchPlan {
        tenant,
        messages,
        to_send,
    }
}

/// A tenant's batch being planned: what its deliveries are decided against,
/// and the notifications to send so far.
struct Planner<'a> {
    tenant: &'a TenantId,
    ctx: &'a DeliveryContext,
    channels: &'a ChannelState,
    templates: &'a Templates,
    owned: HashMap<&'a DeliveryKey, &'a OwnedDelivery>,
    busy: HashSet<&'a DeliveryKey>,
    to_send: Vec<ToSend>,
}

/// The message a delivery belongs to, as the planner sees it.
struct MessageAt<'r> {
    /// Its place in the batch.
    index: usize,
    reminder: &'r Reminder,
    /// Its schedule as the database has it now.
    snapshot: Option<&'r ScheduleSnapshot>,
    /// Why it is stale, if it is.
    stale: Option<&'r String>,
}

impl Planner<'_> {
    /// The verdicts on one message's deliveries; `m` is its place in the batch.
    fn plan_message(&mut self, m: usize, w: Work) -> PlannedMessage {
        let ctx = self.ctx;
        let (stale, recipients) = standing(&w, ctx);
        let at = MessageAt {
            index: m,
            reminder: &w.reminder,
            snapshot: ctx.schedules.get(&w.reminder.key.schedule),
            stale: stale.as_ref(),
        };
        let mut deliveries = Vec::with_capacity(recipients.len() * w.reminder.channels.len());
        for (d, key) in w.reminder.deliveries_to(recipients).enumerate() {
            let (verdict, failures) = self.verdict(&at, d, &key);
            deliveries.push(PlannedDelivery {
                key,
                verdict,
                failures,
            });
        }
        PlannedMessage {
            stale,
            reminder: w.reminder.key,
            version: w.reminder.version,
            due_at: w.reminder.due_at,
            deliveries,
            msg: w.msg,
        }
    }

    /// The verdict on delivery `d` of a message, and its failed attempts so
    /// far when it is ours.
    fn verdict(&mut self, at: &MessageAt, d: usize, key: &DeliveryKey) -> (Verdict, u32) {
        if let Some(why) = at.stale {
            (Verdict::Stale(why.clone()), 0)
        } else if self.channels.open.contains(&key.channel) {
            (Verdict::Parked(key.channel), 0)
        } else if let Some(claim) = self.owned.remove(key) {
            (self.owned_verdict(at, d, key, claim), claim.failures)
        } else if self.busy.contains(key) {
            (Verdict::Busy, 0)
        } else {
            (Verdict::Done, 0)
        }
    }

    /// The verdict on a delivery we own: live (its notification rendered
    /// into `to_send`) or undeliverable.
    fn owned_verdict(
        &mut self,
        at: &MessageAt,
        d: usize,
        key: &DeliveryKey,
        claim: &OwnedDelivery,
    ) -> Verdict {
        let user = self.ctx.users.get(&key.recipient);
        match (
            undeliverable(
                key,
                user.map(|u| u.as_ref()),
                &self.channels.configured,
                &self.ctx.suppressed,
            ),
            at.snapshot,
            user,
        ) {
            (None, Some(schedule), Some(user)) => {
                let reminder = at.reminder;
                let rendered = self.templates.reminder(
                    key.channel,
                    schedule,
                    reminder.key.occurrence,
                    reminder.due_at,
                    user,
                );
                let webhook = match webhook_target(key, user, self.ctx.webhook.as_ref()) {
                    Ok(webhook) => webhook,
                    Err(why) => return Verdict::Undeliverable(why),
                };
                // Over a limit it would be again on every attempt: not retried.
                let texts = match rendered {
                    Ok(texts) => texts,
                    Err(e) => {
                        return Verdict::Undeliverable(format!("its {} template {e}", key.channel))
                    }
                };
                let (address, recipient_name) = Notification::reach(key.channel, user);
                self.to_send.push(ToSend {
                    message: at.index,
                    delivery: d,
                    notification: Notification {
                        tenant: self.tenant.clone(),
                        key: key.clone(),
                        version: reminder.version,
                        due_at: reminder.due_at,
                        address,
                        text: texts.text,
                        parts: ChannelParts {
                            recipient_name,
                            subject: texts.subject,
                            html: texts.html,
                            webhook,
                            list_unsubscribe: match key.channel {
                                Channel::Mail => self.ctx.list_unsubscribe.clone(),
                                _ => None,
                            },
                        }
                        .boxed(),
                    },
                    taken_over: claim.taken_over,
                });
                Verdict::Live
            }
            (Some(why), _, _) => Verdict::Undeliverable(why),
            // Not stale means the schedule is there; the user was checked above.
            _ => Verdict::Undeliverable("schedule or recipient missing".into()),
        }
    }
}
