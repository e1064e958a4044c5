//! The channel port: how a notification reaches a person.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use thiserror::Error;

use toki_model::domain::{Channel, DeliveryKey, DueAt, Instant, TenantId, User};

/// A rendered reminder for one recipient on one channel, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub tenant: TenantId,
    pub key: DeliveryKey,
    /// The schedule version it was rendered from.
    pub version: i64,
    pub due_at: DueAt,
    /// Where the channel reaches the recipient: Slack's user id, mail's
    /// address; none for chat and webhooks, which go by the user id in
    /// `key`. Copied out of the user's record when the plan renders it: the
    /// record itself (some 300 bytes) is not held until the instant.
    pub address: Option<Box<str>>,
    /// Plain text (Slack: mrkdwn, values escaped).
    pub text: String,
    /// What only mail and webhooks carry; none for the others.
    pub parts: Option<Box<ChannelParts>>,
}

/// The parts of a notification only some channels have. Apart, as a
/// notification is held from its claim to its instant: at a burst of
/// Slack or chat reminders, 80 bytes a delivery that are always empty
/// (8 MB at 100,000 due at once).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChannelParts {
    /// The recipient's name, as mail's `To` and the webhook's payload show it.
    pub recipient_name: String,
    /// Mail's subject (empty elsewhere, but for a change notice's).
    pub subject: String,
    /// Mail's HTML part, when it has one.
    pub html: Option<String>,
    /// The webhook channel's endpoint and signing secrets.
    pub webhook: Option<toki_model::webhook::WebhookTarget>,
    /// Mail: the tenant's `List-Unsubscribe`, when it enabled one.
    pub list_unsubscribe: Option<Arc<toki_model::suppression::ListUnsubscribe>>,
}

impl ChannelParts {
    /// The parts, boxed; none when every one is empty.
    pub fn boxed(self) -> Option<Box<Self>> {
        (self != Self::default()).then(|| Box::new(self))
    }
}

impl Notification {
    /// What a notification on `channel` to `user` carries of the user: its
    /// address there, and the name that mail and webhooks show.
    pub fn reach(channel: Channel, user: &User) -> (Option<Box<str>>, String) {
        match channel {
            Channel::Slack => (user.slack_user_id.as_deref().map(Into::into), String::new()),
            Channel::Mail => (user.email.as_deref().map(Into::into), user.name.clone()),
            Channel::Webhook => (None, user.name.clone()),
            Channel::Chat => (None, String::new()),
        }
    }

    /// The recipient's name; empty on channels that do not show it.
    pub fn recipient_name(&self) -> &str {
        self.parts.as_ref().map_or("", |p| &p.recipient_name)
    }

    /// Mail's subject; empty when it has none.
    pub fn subject(&self) -> &str {
        self.parts.as_ref().map_or("", |p| &p.subject)
    }

    /// Mail's HTML part, when it has one.
    pub fn html(&self) -> Option<&str> {
        self.parts.as_ref().and_then(|p| p.html.as_deref())
    }

    /// The webhook channel's target (other channels: none).
    pub fn webhook(&self) -> Option<&toki_model::webhook::WebhookTarget> {
        self.parts.as_ref().and_then(|p| p.webhook.as_ref())
    }

    /// Mail: the tenant's `List-Unsubscribe`, when it enabled one.
    pub fn list_unsubscribe(&self) -> Option<&toki_model::suppression::ListUnsubscribe> {
        self.parts
            .as_ref()
            .and_then(|p| p.list_unsubscribe.as_deref())
    }
}

/// Why a send failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SendError {
    /// Try again later (connection failed, 5xx, a 4xx SMTP reply). Counts
    /// towards the delivery's failure budget.
    #[error("transient: {0}")]
    Transient(String),
    /// The service asked to slow down (HTTP 429, Retry-After): try again after
    /// `retry_after`. Not a failure: it never uses up the budget.
    #[error("throttled: retry after {retry_after:?}")]
    Throttled { retry_after: Duration },
    /// Will never succeed (no address, channel not found).
    #[error("permanent: {0}")]
    Permanent(String),
    /// The recipient's mail server refused the mailbox (SMTP 550–553):
    /// permanent, and the address goes on the tenant's suppression list.
    #[error("refused: {0}")]
    RecipientRefused(String),
}

impl SendError {
    /// A transient failure with this reason.
    pub fn transient(reason: impl Into<String>) -> Self {
        SendError::Transient(reason.into())
    }
}

/// What one notification's send came to: the instant it went out, or why not.
pub type SendResult = Result<Instant, SendError>;

/// A delivery channel. `send` gets a batch of one tenant's notifications and
/// returns, per notification and in order, the instant it went out or why not.
#[async_trait]
pub trait ChannelSender: Send + Sync {
    fn channel(&self) -> Channel;

    /// Gets ready to send soon (e.g. opens pooled connections), so the sends at
    /// the due instant pay no set-up. Called ahead of due; failures are ignored.
    async fn warm_up(&self) {}

    async fn send(&self, batch: &[Notification]) -> Vec<SendResult>;

    /// Sends `batch` at `at`: a channel that has work to do per notification
    /// before the wire (mail: rendering MIME) does it first, then waits.
    async fn send_at(&self, batch: &[Notification], at: tokio::time::Instant) -> Vec<SendResult> {
        tokio::time::sleep_until(at).await;
        self.send(batch).await
    }

    /// Whether the service answers now (a cheap request that sends nothing):
    /// how an open circuit breaker finds out that it came back.
    async fn probe(&self) -> Result<(), SendError> {
        Ok(())
    }

    /// Whether `notification` reached its recipient already, if the channel
    /// can tell (Slack: the delivery key in a recent message's metadata).
    /// Asked before sending a delivery taken over from a holder that stopped,
    /// which may have sent it. `None`: cannot tell, send.
    async fn already_sent(&self, _notification: &Notification) -> Option<Instant> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every delivery of a burst is held as a notification from its claim
    /// to its instant: its size is memory at 100,000 due at once.
    #[test]
    fn a_notification_keeps_the_rarely_used_parts_apart() {
        assert!(
            std::mem::size_of::<Notification>() <= 144,
            "{} bytes",
            std::mem::size_of::<Notification>()
        );
        let slack = ChannelParts::default().boxed();
        assert!(slack.is_none(), "nothing to carry: nothing allocated");
        let mail = ChannelParts {
            subject: "Reminder".into(),
            ..ChannelParts::default()
        };
        assert_eq!(mail.boxed().map(|p| p.subject), Some("Reminder".into()));
    }
}
