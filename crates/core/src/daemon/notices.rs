//! Change notices arriving on the delay queue ([`crate::change`]): frozen in
//! the tenant's database, then delivered like reminders (claimed per
//! recipient and channel, one row each), at once rather than at a due
//! instant. A message received twice finds its notice frozen and its
//! deliveries claimed or final, so nobody is told twice.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures::future::join_all;
use tracing::{info, warn};

use crate::change::RecipientChange;
use crate::channel::{Notification, SendError};
use crate::domain::{
    Channel, DeliveryClaim, DeliveryOutcome, DeliveryStatus, DueAt, Instant, User, UserId,
};
use crate::error::{chain, StoreError};
use crate::message::NoticeMessage;
use crate::plan::to_chrono;
use crate::ports::{OwnedDelivery, ReceivedMessage};
use crate::render::change_text;

use super::plan::undeliverable;
use super::settle::MessageOutcome;
use super::work::MessageFate;
use super::{overdue, Daemon};

impl Daemon {
    pub(super) async fn run_notices(
        &self,
        notices: Vec<(ReceivedMessage, NoticeMessage)>,
    ) -> Vec<(ReceivedMessage, MessageFate)> {
        let fates = join_all(notices.iter().map(|(_, n)| self.deliver_notice(n))).await;
        notices
            .into_iter()
            .zip(fates)
            .map(|((msg, n), fate)| {
                let fate = fate.unwrap_or_else(|e| {
                    let reason = format!("tenant {}: {}", n.tenant, chain(&e));
                    warn!(tenant = %n.tenant, schedule = %n.schedule, %reason, "change notice not delivered; it comes back");
                    MessageFate::Unprocessed {
                        reason,
                        overdue: overdue(DueAt(n.at), self.clock.now()),
                    }
                });
                (msg, fate)
            })
            .collect()
    }

    async fn deliver_notice(&self, n: &NoticeMessage) -> Result<MessageFate, StoreError> {
        let store = self.stores.open(&n.tenant).await?;
        let now = self.clock.now();
        let Some(notice) = store
            .freeze_change_notice(&n.schedule, &n.token, n.edge, now)
            .await?
        else {
            return Ok(MessageFate::Done);
        };
        let changes: HashMap<_, RecipientChange> = notice.deliveries().into_iter().collect();
        if changes.is_empty() {
            return Ok(MessageFate::Done);
        }
        let (version, due_at) = (notice.version(), DueAt(notice.at));
        let claims: Vec<DeliveryClaim> = changes
            .keys()
            .map(|key| DeliveryClaim {
                key: key.clone(),
                version,
                due_at,
            })
            .collect();
        let takeover_before = now - to_chrono(self.settings.visibility);
        let claimed = store
            .claim_deliveries(&claims, now, takeover_before)
            .await?;
        let mut users: HashMap<UserId, Option<Arc<User>>> = HashMap::new();
        for o in &claimed.owned {
            if !users.contains_key(&o.key.recipient) {
                let user = store.get_user(&o.key.recipient).await?.map(Arc::new);
                users.insert(o.key.recipient.clone(), user);
            }
        }
        let configured: BTreeSet<Channel> = self.channels.keys().copied().collect();
        let row =
            |o: &OwnedDelivery, status, at: Instant, detail: Option<String>| DeliveryOutcome {
                key: o.key.clone(),
                version,
                due_at,
                status,
                at,
                detail,
            };
        let mut outcomes = Vec::new();
        let mut by_channel: BTreeMap<Channel, Vec<(&OwnedDelivery, Notification)>> =
            BTreeMap::new();
        for o in &claimed.owned {
            let user = users.get(&o.key.recipient).cloned().flatten();
            let why = undeliverable(&o.key, user.as_deref(), &configured);
            match (why, user, changes.get(&o.key)) {
                (None, Some(user), Some(change)) => {
                    let (subject, text) = change_text(change, &user);
                    let notification = Notification {
                        tenant: n.tenant.clone(),
                        key: o.key.clone(),
                        version,
                        due_at,
                        recipient: user,
                        subject,
                        text,
                    };
                    by_channel
                        .entry(o.key.channel)
                        .or_default()
                        .push((o, notification));
                }
                (why, _, _) => outcomes.push(row(
                    o,
                    DeliveryStatus::Undeliverable,
                    now,
                    Some(why.unwrap_or_else(|| "recipient missing".into())),
                )),
            }
        }
        let sent = join_all(by_channel.into_iter().map(|(channel, batch)| async move {
            let notifications: Vec<Notification> = batch.iter().map(|(_, n)| n.clone()).collect();
            let results = self.channels[&channel].send(&notifications).await;
            (batch, results)
        }))
        .await;
        let mut message = MessageOutcome::default();
        message.busy = !claimed.busy.is_empty();
        let now = self.clock.now();
        let mut delivered = 0;
        for (batch, results) in sent {
            for ((o, _), result) in batch.into_iter().zip(results) {
                outcomes.push(match result {
                    Ok(at) => {
                        delivered += 1;
                        row(o, DeliveryStatus::Delivered, at, None)
                    }
                    Err(SendError::Permanent(why)) => {
                        row(o, DeliveryStatus::Undeliverable, now, Some(why))
                    }
                    Err(SendError::Throttled { retry_after }) => {
                        message.throttled = message.throttled.max(Some(retry_after));
                        let why = format!("throttled: retry after {} s", retry_after.as_secs());
                        row(o, DeliveryStatus::Throttled, now, Some(why))
                    }
                    Err(SendError::Transient(reason)) => {
                        message.failed(o.key.channel, reason.clone(), o.failures + 1);
                        row(o, DeliveryStatus::Failed, now, Some(reason))
                    }
                });
            }
        }
        store.record_outcomes(&outcomes).await?;
        self.stats.add(&self.stats.notices_delivered, delivered);
        info!(tenant = %n.tenant, schedule = %n.schedule, edge = n.edge.as_str(), delivered, "change notice delivered");
        Ok(message.fate())
    }
}
