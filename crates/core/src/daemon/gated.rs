//! Sending through the gates of limited keys (flow control): one by one as
//! the gates let each notification through, refused ones back to the queue.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::join_all;

use toki_flow::Flow;
use toki_model::domain::{Channel, TenantId};
use toki_model::flow_key::{CappedChannel, FlowKey, FlowKind};
use toki_model::limits::FlowSettings;
use toki_ports::channel::{ChannelSender, Notification, SendError, SendResult};

use super::Daemon;

impl Daemon {
    /// Tells the flow which limited keys a prepared part will spend at its
    /// due instant, while there is still the lead before it: their leases
    /// are taken now, so the gates admit at the fleet's rate from the first
    /// slice (else the first refusals at the instant send most of the batch
    /// back to the queue, behind everything else in it).
    pub(super) fn expect_flow(&self, prepared: &super::prepare::Prepared) {
        let Some(flow) = &self.flow else { return };
        let (slack, mail) = (
            flow.limits_kind(FlowKind::Slack),
            flow.limits_kind(FlowKind::Smtp),
        );
        // A webhook's key is its endpoint's host: local, nothing to expect.
        if !slack && !mail {
            return;
        }
        flow.expect_tenant(prepared.plan.tenant.as_str());
        // The shared keys only (the workspace, the mail account, the
        // tenant's own cap): a recipient's key is local, with no lease to take.
        let mut spent = std::collections::BTreeSet::new();
        let mut last_due = None;
        for t in &prepared.plan.to_send {
            spent.insert((t.notification.key.channel, &prepared.plan.tenant));
            last_due = last_due.max(Some(t.notification.due_at));
        }
        // Until the last of them is due: they wait in memory till then.
        let until = tokio::time::Instant::now()
            + last_due.map_or(std::time::Duration::ZERO, |due| {
                toki_model::time::wait_between(self.clock.now(), due.0)
            });
        let limited = |channel| match channel {
            Channel::Slack => slack,
            Channel::Mail => mail,
            Channel::Chat | Channel::Webhook => false,
        };
        let keys: Vec<FlowKey> = spent
            .into_iter()
            .filter(|(channel, _)| limited(*channel))
            .flat_map(|(channel, tenant)| shared_flow_keys(flow.settings(), channel, tenant))
            .collect();
        if !keys.is_empty() {
            flow.expect(&keys.iter().collect(), until);
        }
    }

    /// Sends `which` of `notifications` one by one as the gates of their
    /// limited keys let them, from `fire_at`: those the gates have no room
    /// for within the wait come back as throttled (their messages return to
    /// the queue for that long); a throttle answer pauses the keys; a
    /// delivery whose permit is revoked (stuck past the deadline) is abandoned.
    pub(super) async fn send_gated(
        &self,
        flow: &Arc<Flow>,
        channel: Channel,
        sender: &Arc<dyn ChannelSender>,
        notifications: &[Notification],
        which: &[usize],
        fire_at: tokio::time::Instant,
    ) -> Vec<SendResult> {
        // The keys every notification of a tenant spends, made once.
        let mut shared: HashMap<&TenantId, Vec<FlowKey>> = HashMap::new();
        for i in which {
            let tenant = &notifications[*i].tenant;
            shared
                .entry(tenant)
                .or_insert_with(|| shared_flow_keys(flow.settings(), channel, tenant));
        }
        let shared = &shared;
        tokio::time::sleep_until(fire_at).await;
        let answered = join_all(which.iter().map(|i| async move {
            let n = &notifications[*i];
            let own = recipient_flow_key(flow.settings(), channel, n);
            // The recipient's key first: refused there, no shared capacity
            // is spent.
            let keys: Vec<&FlowKey> = own.iter().chain(&shared[&n.tenant]).collect();
            let grants = match flow.admit(&keys, n.tenant.as_str()).await {
                Ok(grants) => grants,
                Err(no_room) => {
                    let throttled = SendError::Throttled {
                        retry_after: no_room.retry_after,
                    };
                    return (Err(throttled), tokio::time::Instant::now());
                }
            };
            // Whichever of its permits is revoked first (none: never).
            let revoked = async {
                if grants.is_empty() {
                    std::future::pending::<()>().await;
                }
                futures::future::select_all(grants.iter().map(|g| Box::pin(g.revoked()))).await;
            };
            let result = tokio::select! {
                mut r = sender.send(std::slice::from_ref(n)) => r.pop().unwrap_or_else(|| {
                    Err(SendError::transient(format!("{channel}: no result for a notification")))
                }),
                _ = revoked => Err(SendError::transient(
                    "abandoned: held its permit past the deadline",
                )),
            };
            if let Err(SendError::Throttled { retry_after }) = &result {
                flow.throttled(&keys, *retry_after);
            }
            drop(grants);
            (result, tokio::time::Instant::now())
        }))
        .await;
        // A wait is counted from the answer: the message goes back only once
        // the batch is done, and must not come back later than it was told.
        let done = tokio::time::Instant::now();
        answered
            .into_iter()
            .map(|(result, at)| match result {
                Err(SendError::Throttled { retry_after }) => Err(SendError::Throttled {
                    retry_after: retry_after.saturating_sub(done - at),
                }),
                other => other,
            })
            .collect()
    }
}

/// The recipient's own key on `channel`, if it has one: its Slack channel
/// (a DM), its webhook endpoint's host.
pub(super) fn recipient_flow_key(
    settings: &FlowSettings,
    channel: Channel,
    n: &Notification,
) -> Option<FlowKey> {
    match channel {
        Channel::Slack => Some(FlowKey::SlackChannel {
            workspace: settings.slack_workspace.clone(),
            channel: n.address.as_deref()?.to_owned(),
        }),
        Channel::Webhook => Some(FlowKey::webhook_host(&n.webhook()?.url.host())),
        _ => None,
    }
}

/// The keys every notification of `tenant` spends on `channel`, in the
/// order they are passed: the tenant's own cap (if its contract sets one),
/// then the workspace or mail account. A key that refuses spends nothing
/// after it. Keys without a configured limit are passed freely.
pub(super) fn shared_flow_keys(
    settings: &FlowSettings,
    channel: Channel,
    tenant: &TenantId,
) -> Vec<FlowKey> {
    match channel {
        Channel::Slack => vec![
            tenant_cap(tenant.as_str(), CappedChannel::Slack),
            FlowKey::SlackWorkspace(settings.slack_workspace.clone()),
        ],
        Channel::Mail => vec![
            tenant_cap(tenant.as_str(), CappedChannel::Mail),
            FlowKey::Smtp(settings.smtp_account.clone()),
        ],
        _ => Vec::new(),
    }
}

/// The key of `tenant`'s own cap on `channel`.
fn tenant_cap(tenant: &str, channel: CappedChannel) -> FlowKey {
    FlowKey::TenantCap {
        tenant: tenant.to_owned(),
        channel,
    }
}
