//! Firing: wait for each due instant, looking at the schedules once a second
//! on the way and a last time just before it (a change answered up to the
//! cut-off is honoured; see `looks`), then send
//! every notification due at it, each channel's share as one batch, all
//! channels at once; and warm the channels up while there is time before it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tracing::{warn, Span};

use crate::trace;
use toki_model::domain::{Channel, DueAt, TenantId};
use toki_model::error::chain;
use toki_model::flow_key::FlowKind;
use toki_model::time::wait_between;
use toki_ports::channel::{ChannelSender, Notification, SendError, SendResult};
use toki_ports::TenantStore;

use super::breaker::probe_until_closed;
use super::looks::{Claimed, Versions};
use super::plan::{PlannedMessage, ToSend};
use super::prepare::Prepared;
use super::settle::Sent;
use super::Daemon;

/// One channel's share of a due group: a run of the group's notifications
/// (a sender takes them as one slice) and, at the same positions, where
/// each came from and its send span (none: traces off).
struct ChannelBatch<'a> {
    notifications: &'a [Notification],
    origins: &'a [Origin],
    spans: &'a [Span],
}

/// Where a notification of a channel batch came from. Made for every
/// delivery of the instant at once: its span is kept apart, only when
/// traces are on (beside it, 40 of its 64 bytes; 4 MB at 100,000 due).
pub(super) struct Origin {
    pub(super) message: usize,
    pub(super) delivery: usize,
    /// Taken over from a holder that stopped: ask the channel before sending.
    taken_over: bool,
}

/// What firing a tenant's part of a batch came to.
#[derive(Debug, Default)]
pub(super) struct Fired {
    pub sent: Vec<Sent>,
    /// Messages whose schedule changed after the claim (at the last look):
    /// not sent, and why.
    pub revoked: Vec<(usize, String)>,
}

/// The leading notifications of `rest` (sorted by due instant) due at `due`,
/// taken out of it. When they are all of it (one due instant a batch, the
/// usual case) the vector itself moves: a group held until its instant is
/// not a second copy of the batch.
pub(super) fn take_due_group(rest: &mut Vec<ToSend>, due: DueAt) -> Vec<ToSend> {
    let len = rest
        .iter()
        .take_while(|t| t.notification.due_at == due)
        .count();
    let later = if len < rest.len() {
        rest.split_off(len)
    } else {
        Vec::new()
    };
    std::mem::replace(rest, later)
}

/// A due group as it is sent: its notifications sorted by channel, where
/// each came from, and each one's send span (empty: traces off, `spans` is
/// empty). The notifications are collected from the group's
/// own vector, which the standard library does in place (a test checks it):
/// a group held until its instant is not copied at it (the per-channel
/// copies were 272 bytes a delivery, made at the instant).
pub(super) fn split_group(
    mut group: Vec<ToSend>,
    spans: &[Span],
) -> (Vec<Notification>, Vec<Origin>, Vec<Span>) {
    // Usually one channel, already in order: a stable sort would still
    // make its scratch copy.
    if !group.is_sorted_by_key(|t| t.notification.key.channel) {
        group.sort_by_key(|t| t.notification.key.channel);
    }
    let send_spans = match spans.is_empty() {
        true => Vec::new(),
        false => group
            .iter()
            .map(|t| match spans.get(t.message) {
                Some(parent) => trace::send_span(parent, &t.notification),
                None => Span::none(),
            })
            .collect(),
    };
    let origins = group
        .iter()
        .map(|t| Origin {
            message: t.message,
            delivery: t.delivery,
            taken_over: t.taken_over,
        })
        .collect();
    let notifications = group.into_iter().map(|t| t.notification).collect();
    (notifications, origins, send_spans)
}

/// Each channel's run in `notifications` (sorted by channel), in order.
pub(super) fn channel_runs(
    notifications: &[Notification],
) -> impl Iterator<Item = (Channel, std::ops::Range<usize>)> + '_ {
    let mut start = 0;
    notifications
        .chunk_by(|a, b| a.key.channel == b.key.channel)
        .map(move |run| {
            let range = start..start + run.len();
            start = range.end;
            (run[0].key.channel, range)
        })
}

/// How often a held group's schedules are looked at before the last look.
/// A change made while the store is too slow for the last look is missed
/// only if it came within this long (and the store's delay) of it.
const LOOK_WHILE_HELD_EVERY: Duration = Duration::from_secs(1);

/// The schedules of `group`'s messages with the versions they were
/// claimed at (each once).
fn claimed_of(messages: &[PlannedMessage], group: &[ToSend]) -> Vec<Claimed> {
    group
        .iter()
        .map(|t| t.message)
        .collect::<BTreeSet<usize>>()
        .into_iter()
        .map(|m| Claimed {
            schedule: messages[m].reminder.schedule.clone(),
            version: messages[m].version,
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The group's messages whose schedule moved on since the claim, or is
/// gone, and why.
fn changed(
    messages: &[PlannedMessage],
    group: &[ToSend],
    versions: &Versions,
) -> Vec<(usize, String)> {
    group
        .iter()
        .map(|t| t.message)
        .collect::<BTreeSet<usize>>()
        .into_iter()
        .filter_map(|m| {
            let message = &messages[m];
            match versions.get(&message.reminder.schedule) {
                Some(v) if *v == message.version => None,
                Some(v) => Some((
                    m,
                    format!(
                        "schedule changed just before it was due (version {v}, message has {})",
                        message.version
                    ),
                )),
                None => Some((m, "schedule deleted just before it was due".to_owned())),
            }
        })
        .collect()
}

/// Takes the `revoked` messages' notifications out of `group`.
fn revoke(group: &mut Vec<ToSend>, revoked: &[(usize, String)]) {
    if !revoked.is_empty() {
        group.retain(|t| !revoked.iter().any(|(m, _)| *m == t.message));
    }
}

/// Channels are warmed again after this long (pooled connections go idle).
const WARM_EVERY: Duration = Duration::from_secs(20);

impl Daemon {
    /// The tokio instant `due` falls on by the daemon's clock.
    pub(super) fn tokio_instant(&self, due: DueAt) -> tokio::time::Instant {
        let ahead = wait_between(self.clock.now(), due.0);
        tokio::time::Instant::now() + ahead
    }

    pub(super) async fn fire(
        &self,
        tenant: &TenantId,
        store: &Arc<dyn TenantStore>,
        messages: &[PlannedMessage],
        mut to_send: Vec<ToSend>,
        spans: &[Span],
    ) -> Fired {
        to_send.sort_by_key(|t| t.notification.due_at);
        let mut fired = Fired::default();
        let mut rest = to_send;
        while let Some(first) = rest.first() {
            let due = first.notification.due_at;
            let mut group = take_due_group(&mut rest, due);
            let fire_at = self.tokio_instant(due);
            let last_look_at = fire_at - self.settings.late_change_cutoff;
            let revoked = self
                .look_while_held(tenant, store, messages, &mut group, last_look_at)
                .await;
            fired.revoked.extend(revoked);
            // Every message revoked while held: nothing to look at or send.
            if group.is_empty() {
                continue;
            }
            let _sending = self.burst.sending();
            // Past due already (a retry, a late message): the versions were
            // read with the claim a moment ago, so there is nothing to look at.
            let revoked = if tokio::time::Instant::now() < fire_at {
                self.last_look(tenant, store, messages, &group, fire_at)
                    .await
            } else {
                Vec::new()
            };
            revoke(&mut group, &revoked);
            fired.revoked.extend(revoked);
            fired
                .sent
                .extend(self.send_group(group, fire_at, spans).await);
        }
        fired
    }

    /// Holds `group` until `last_look_at`, looking at its schedules every
    /// [`LOOK_WHILE_HELD_EVERY`] on the way: a change made early in a long
    /// lead is then found even if the store is too slow to answer the last
    /// look (which sends as claimed rather than late). Returns what it
    /// revoked, taken out of `group`; a look that fails or does not answer
    /// before the next one is passed over.
    async fn look_while_held(
        &self,
        tenant: &TenantId,
        store: &Arc<dyn TenantStore>,
        messages: &[PlannedMessage],
        group: &mut Vec<ToSend>,
        last_look_at: tokio::time::Instant,
    ) -> Vec<(usize, String)> {
        let ahead = last_look_at.saturating_duration_since(tokio::time::Instant::now());
        let periods = (ahead.as_millis() / LOOK_WHILE_HELD_EVERY.as_millis()) as u32;
        let mut revoked = Vec::new();
        // On whole periods before the last look: the latest is one period
        // before it, never just before it.
        for k in (1..=periods).rev() {
            let look_at = last_look_at - LOOK_WHILE_HELD_EVERY * k;
            tokio::time::sleep_until(look_at).await;
            if group.is_empty() {
                break;
            }
            let next = look_at + LOOK_WHILE_HELD_EVERY;
            let looked = self
                .looks
                .versions(tenant, store, claimed_of(messages, group));
            if let Ok(Ok(versions)) = tokio::time::timeout_at(next, looked).await {
                let found = changed(messages, group, &versions);
                revoke(group, &found);
                revoked.extend(found);
            }
        }
        tokio::time::sleep_until(last_look_at).await;
        revoked
    }

    /// The schedules' versions now: messages whose schedule moved on since the
    /// claim are revoked. Waits no later than the due instant: a database too
    /// slow to answer by then does not make the reminder late (it is sent as claimed).
    async fn last_look(
        &self,
        tenant: &TenantId,
        store: &Arc<dyn TenantStore>,
        messages: &[PlannedMessage],
        group: &[ToSend],
        deadline: tokio::time::Instant,
    ) -> Vec<(usize, String)> {
        let looked = self
            .looks
            .versions(tenant, store, claimed_of(messages, group));
        match tokio::time::timeout_at(deadline, looked).await {
            Ok(Ok(versions)) => changed(messages, group, &versions),
            Ok(Err(e)) => {
                warn!(%tenant, error = %chain(&e), "last look before firing failed; sending as claimed");
                Vec::new()
            }
            Err(_) => {
                warn!(%tenant, "last look before firing did not answer by the due instant; sending as claimed");
                Vec::new()
            }
        }
    }

    /// Sends one due group at `fire_at`: each channel's share as one batch,
    /// all at once. A channel whose circuit is open sends nothing (its
    /// deliveries wait). `spans` are the messages' trace spans (empty: off).
    pub(super) async fn send_group(
        &self,
        group: Vec<ToSend>,
        fire_at: tokio::time::Instant,
        spans: &[Span],
    ) -> Vec<Sent> {
        let (notifications, origins, send_spans) = split_group(group, spans);
        let per_channel = channel_runs(&notifications).map(|(channel, run)| {
            (
                channel,
                ChannelBatch {
                    notifications: &notifications[run.clone()],
                    spans: send_spans.get(run.clone()).unwrap_or_default(),
                    origins: &origins[run],
                },
            )
        });
        let results = join_all(per_channel.map(|(channel, batch)| async move {
            let sender = self.channels.get(&channel).cloned();
            let results: Vec<Option<SendResult>> = match sender {
                _ if self.breakers.is_open(channel) => vec![None; batch.notifications.len()],
                Some(sender) => self.send_batch(channel, &sender, &batch, fire_at).await,
                // The plan only sends on configured channels; never panic for it.
                None => vec![
                    Some(Err(SendError::Permanent(format!(
                        "channel {channel} is not configured"
                    ))));
                    batch.notifications.len()
                ],
            };
            for (span, result) in batch.spans.iter().zip(&results) {
                trace::record_send(span, result.as_ref());
            }
            batch
                .origins
                .iter()
                .map(|o| (o.message, o.delivery))
                .zip(results)
                .collect::<Vec<_>>()
        }))
        .await;
        results
            .into_iter()
            .flatten()
            .filter_map(|((message, delivery), result)| {
                result.map(|result| Sent {
                    message,
                    delivery,
                    result,
                })
            })
            .collect()
    }

    /// One channel's batch: deliveries taken over from a holder that stopped
    /// are looked up first (it may have sent them); the rest are sent at
    /// `fire_at`. The answers feed the channel's circuit breaker.
    async fn send_batch(
        &self,
        channel: Channel,
        sender: &Arc<dyn ChannelSender>,
        batch: &ChannelBatch<'_>,
        fire_at: tokio::time::Instant,
    ) -> Vec<Option<SendResult>> {
        let n = batch.notifications.len();
        let reconcile = self.settings.reconcile_takeovers;
        let mut found = Vec::new();
        for (i, origin) in batch.origins.iter().enumerate() {
            if reconcile && origin.taken_over {
                if let Some(at) = sender.already_sent(&batch.notifications[i]).await {
                    found.push((i, at));
                }
            }
        }
        let gated = self.flow.as_ref().filter(|flow| match channel {
            Channel::Slack => flow.limits_kind(FlowKind::Slack),
            Channel::Mail => flow.limits_kind(FlowKind::Smtp),
            Channel::Webhook => flow.limits_kind(FlowKind::Webhook),
            Channel::Chat => false,
        });
        // The usual case: the answers' vector is made once they are in (at a
        // burst every batch of the instant waits for its turn, and a vector
        // made before it waited was held all that time). One answer a
        // notification: a sender that gave fewer leaves the rest unsent.
        if gated.is_none() && found.is_empty() {
            let mut results: Vec<Option<SendResult>> = sender
                .send_at(batch.notifications, fire_at)
                .await
                .into_iter()
                .map(Some)
                .collect();
            results.resize(n, None);
            self.feed_breaker(channel, sender, &results);
            return results;
        }
        let mut results: Vec<Option<SendResult>> = vec![None; n];
        for (i, at) in found {
            results[i] = Some(Ok(at));
        }
        let rest: Vec<usize> = (0..n).filter(|i| results[*i].is_none()).collect();
        if let Some(flow) = gated {
            let sent = self
                .send_gated(flow, channel, sender, batch.notifications, &rest, fire_at)
                .await;
            for (i, r) in rest.into_iter().zip(sent) {
                results[i] = Some(r);
            }
        } else {
            // Rare (a takeover): copies are fine here.
            let to_go: Vec<Notification> = rest
                .iter()
                .map(|i| batch.notifications[*i].clone())
                .collect();
            for (i, r) in rest.into_iter().zip(sender.send_at(&to_go, fire_at).await) {
                results[i] = Some(r);
            }
        }
        self.feed_breaker(channel, sender, &results);
        results
    }

    /// Feeds a batch's answers to the channel's circuit breaker, and starts
    /// probing the channel if they opened it.
    fn feed_breaker(
        &self,
        channel: Channel,
        sender: &Arc<dyn ChannelSender>,
        results: &[Option<SendResult>],
    ) {
        let failed = results
            .iter()
            .filter(|r| matches!(r, Some(Err(SendError::Transient(_)))))
            .count();
        let answered = results
            .iter()
            .filter(|r| {
                matches!(
                    r,
                    Some(Ok(_))
                        | Some(Err(SendError::Permanent(_) | SendError::RecipientRefused(_)))
                )
            })
            .count();
        if self.breakers.record(channel, answered, failed) {
            warn!(%channel, "circuit open: deliveries on this channel wait until it answers again");
            self.stats.add(&self.stats.circuits_opened, 1);
            let probe = probe_until_closed(
                channel,
                sender.clone(),
                self.breakers.clone(),
                self.queue.clone(),
            );
            self.probes.lock().expect("probes lock").spawn(probe);
        }
    }

    /// Warms the channels a batch will use, at most once per WARM_EVERY each,
    /// while there is still time before the due instant.
    pub(super) fn warm_channels(&self, prepared: &Prepared) {
        let used: BTreeSet<Channel> = prepared
            .plan
            .to_send
            .iter()
            .map(|t| t.notification.key.channel)
            .collect();
        for channel in used {
            let due_for_warming = {
                let mut warmed = self.warmed.lock().expect("warm lock");
                let now = tokio::time::Instant::now();
                match warmed.get(&channel) {
                    Some(t) if now.duration_since(*t) <= WARM_EVERY => false,
                    _ => {
                        warmed.insert(channel, now);
                        true
                    }
                }
            };
            // In the background: a channel slow to warm (a server that
            // accepts and then hangs) must not hold up the batch or the
            // other channels.
            if due_for_warming {
                if let Some(sender) = self.channels.get(&channel).cloned() {
                    tokio::spawn(async move { sender.warm_up().await });
                }
            }
        }
    }
}
