//! Change notices arriving on the delay queue ([`toki_model::change`]): frozen in
//! the tenant's database, then delivered like reminders (claimed per
//! recipient and channel, one row each), at once rather than at a due
//! instant. A message received twice finds its notice frozen and its
//! deliveries claimed or final, so nobody is told twice.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use toki_model::suppression::ListedAddress;

use futures::future::join_all;
use tracing::{info, warn};

use crate::render::change_texts;
use toki_model::change::RecipientChange;
use toki_model::domain::{
    Channel, DeliveryClaim, DeliveryKey, DeliveryOutcome, DeliveryStatus, DueAt, Instant, User,
    UserId,
};
use toki_model::error::chain;
use toki_model::webhook::WebhookSettings;
use toki_ports::channel::{ChannelParts, Notification};
use toki_ports::error::StoreError;
use toki_ports::message::NoticeMessage;
use toki_ports::{Claims, ReceivedMessage, TenantStore};

use super::holdings::Held;
use super::plan::{undeliverable, webhook_target, Suppressed, ToSend};
use super::settle::{answer_row, held_back_row, MessageOutcome, RowStamp};
use super::work::MessageFate;
use super::{overdue, Daemon};

impl Daemon {
    /// Freezes and delivers each notice; `hidden_until` is when the messages'
    /// visibility (from their receive) runs out, renewed while they are held.
    pub(super) async fn run_notices(
        &self,
        notices: Vec<(ReceivedMessage, NoticeMessage)>,
        hidden_until: tokio::time::Instant,
    ) -> Vec<(ReceivedMessage, MessageFate)> {
        let fates = join_all(
            notices
                .iter()
                .map(|(msg, n)| self.deliver_notice(msg, n, hidden_until)),
        )
        .await;
        let mut gone = HashSet::new();
        for ((_, n), fate) in notices.iter().zip(&fates) {
            if fate.is_err() && !gone.contains(&n.tenant) && self.tenant_deleted(&n.tenant).await {
                gone.insert(n.tenant.clone());
            }
        }
        notices
            .into_iter()
            .zip(fates)
            .map(|((msg, n), fate)| {
                if fate.is_err() && gone.contains(&n.tenant) {
                    warn!(tenant = %n.tenant, reason = "tenant deleted", "change notice disposed of unsent");
                    return (msg, MessageFate::TenantDeleted);
                }
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

    async fn deliver_notice(
        &self,
        msg: &ReceivedMessage,
        n: &NoticeMessage,
        hidden_until: tokio::time::Instant,
    ) -> Result<MessageFate, StoreError> {
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
        // Channels behind an open circuit are not claimed: the message waits.
        let open = self.breakers.open_channels();
        let claims: Vec<DeliveryClaim> = changes
            .keys()
            .filter(|key| !open.contains(&key.channel))
            .map(|key| DeliveryClaim {
                key: key.clone(),
                version,
                due_at,
            })
            .collect();
        let mut message = MessageOutcome::default();
        for c in changes
            .keys()
            .map(|k| k.channel)
            .filter(|c| open.contains(c))
        {
            message.parked(c);
        }
        // As the reminders' path: nothing to claim (every channel open), no claim.
        let claimed = self.claim(store.as_ref(), &claims, now, now).await?;
        // Held like a reminder batch: the heartbeat keeps the message hidden
        // and the claims renewed however long the channels take.
        let held = self.holdings.hold(Held {
            receipts: vec![(msg.receipt.clone(), hidden_until)],
            claims: Some((n.tenant.clone(), claimed.token.clone()))
                .filter(|(_, token)| !token.is_empty())
                .into_iter()
                .collect(),
            renewed: Some(tokio::time::Instant::now()),
        });
        let result = self
            .send_notice(n, &store, &changes, &claimed, version, due_at, message)
            .await;
        self.holdings.release(held);
        result
    }

    /// Sends what the claim got and records a row per delivery.
    #[allow(clippy::too_many_arguments)]
    async fn send_notice(
        &self,
        n: &NoticeMessage,
        store: &Arc<dyn TenantStore>,
        changes: &HashMap<DeliveryKey, RecipientChange>,
        claimed: &Claims,
        version: i64,
        due_at: DueAt,
        mut message: MessageOutcome,
    ) -> Result<MessageFate, StoreError> {
        let now = self.clock.now();
        let stamp = RowStamp { version, due_at };
        let users = notice_recipients(store.as_ref(), claimed).await?;
        let webhook = match claimed
            .owned
            .iter()
            .any(|o| o.key.channel == Channel::Webhook)
        {
            true => store.webhook_settings().await?.map(Arc::new),
            false => None,
        };
        let suppressed = notice_suppressions(store.as_ref(), &users, claimed).await?;
        let (group, mut outcomes) = self.notice_group(
            n,
            (&users, webhook.as_ref(), &suppressed),
            changes,
            claimed,
            stamp,
            now,
        );
        let attempted: HashSet<usize> = group.iter().map(|t| t.delivery).collect();
        // The reminders' path: open circuits respected, answers fed to the
        // breakers, a taken-over delivery looked up before it is sent again.
        let sent = self
            .send_group(group, tokio::time::Instant::now(), &[])
            .await;
        let now = self.clock.now();
        let mut answered = HashSet::new();
        let mut delivered = 0;
        for s in sent {
            answered.insert(s.delivery);
            let o = &claimed.owned[s.delivery];
            if s.result.is_ok() {
                delivered += 1;
            }
            outcomes.push(answer_row(
                stamp,
                &o.key,
                o.failures,
                s.result,
                now,
                &mut message,
            ));
        }
        // Not attempted: their circuit opened meanwhile.
        for i in attempted.difference(&answered) {
            let key = &claimed.owned[*i].key;
            outcomes.push(held_back_row(stamp, key, now, &mut message));
        }
        message.busy = !claimed.busy.is_empty();
        self.marker.activity(&n.tenant).await;
        if store.record_outcomes(&outcomes).await? > 0 {
            self.marker.events(&n.tenant).await;
        }
        self.stats.add(&self.stats.notices_delivered, delivered);
        info!(tenant = %n.tenant, schedule = %n.schedule, edge = n.edge.as_str(), delivered, "change notice delivered");
        Ok(message.fate())
    }

    /// The notifications to send for the claimed deliveries, and a row for
    /// each that cannot be delivered (`now` is its instant).
    fn notice_group(
        &self,
        n: &NoticeMessage,
        (users, webhook, suppressed): (
            &HashMap<UserId, Arc<User>>,
            Option<&Arc<WebhookSettings>>,
            &Suppressed,
        ),
        changes: &HashMap<DeliveryKey, RecipientChange>,
        claimed: &Claims,
        stamp: RowStamp,
        now: Instant,
    ) -> (Vec<ToSend>, Vec<DeliveryOutcome>) {
        let configured: BTreeSet<Channel> = self.channels.keys().copied().collect();
        let mut outcomes = Vec::new();
        let mut group = Vec::new();
        for (i, o) in claimed.owned.iter().enumerate() {
            let user = users.get(&o.key.recipient).cloned();
            let why = undeliverable(&o.key, user.as_deref(), &configured, suppressed);
            let target = user.as_deref().map(|u| webhook_target(&o.key, u, webhook));
            let (why, target) = match (why, target) {
                (None, Some(Err(e))) => (Some(e), None),
                (why, target) => (why, target.and_then(Result::ok).flatten()),
            };
            match (why, user, changes.get(&o.key)) {
                (None, Some(user), Some(change)) => {
                    let texts = change_texts(change, &user, o.key.channel);
                    let (address, recipient_name) = Notification::reach(o.key.channel, &user);
                    group.push(ToSend {
                        message: 0,
                        delivery: i,
                        notification: Notification {
                            tenant: n.tenant.clone(),
                            key: o.key.clone(),
                            version: stamp.version,
                            due_at: stamp.due_at,
                            address,
                            text: texts.text,
                            parts: ChannelParts {
                                recipient_name,
                                subject: texts.subject,
                                html: texts.html,
                                webhook: target,
                                // A notice of a change is not a list mailing.
                                list_unsubscribe: None,
                            }
                            .boxed(),
                        },
                        taken_over: o.taken_over,
                    });
                }
                (why, _, _) => outcomes.push(stamp.row(
                    &o.key,
                    DeliveryStatus::Undeliverable,
                    now,
                    Some(why.unwrap_or_else(|| "recipient missing".into())),
                )),
            }
        }
        (group, outcomes)
    }
}

/// Every recipient of the claimed deliveries (removed ones included), in
/// one round trip.
async fn notice_recipients(
    store: &dyn TenantStore,
    claimed: &Claims,
) -> Result<HashMap<UserId, Arc<User>>, StoreError> {
    let mut wanted: Vec<UserId> = claimed
        .owned
        .iter()
        .map(|o| o.key.recipient.clone())
        .collect();
    wanted.sort();
    wanted.dedup();
    Ok(store
        .get_users(&wanted)
        .await?
        .into_iter()
        .map(|(id, u)| (id, Arc::new(u)))
        .collect())
}

/// The suppression-list entries of the addresses a notice would mail: one
/// lookup per mail recipient (notices are few, debounced).
async fn notice_suppressions(
    store: &dyn TenantStore,
    users: &HashMap<UserId, Arc<User>>,
    claimed: &Claims,
) -> Result<Suppressed, StoreError> {
    let mut found = Suppressed::new();
    for o in claimed
        .owned
        .iter()
        .filter(|o| o.key.channel == Channel::Mail)
    {
        let address = users
            .get(&o.key.recipient)
            .and_then(|u| u.email.as_deref())
            .and_then(|e| ListedAddress::parse("email", e).ok());
        if let Some(address) = address {
            if let Some(entry) = store.suppression(&address).await? {
                found.insert(address, entry);
            }
        }
    }
    Ok(found)
}
