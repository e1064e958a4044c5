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
    /// Shared by every notification to this user in a batch.
    pub recipient: Arc<User>,
    pub subject: String,
    /// Plain text (Slack: mrkdwn, values escaped).
    pub text: String,
    /// Mail's HTML part, when it has one.
    pub html: Option<String>,
    /// The webhook channel's endpoint and signing secrets (other channels: None).
    pub webhook: Option<toki_model::webhook::WebhookTarget>,
    /// Mail: the tenant's `List-Unsubscribe`, when it enabled one.
    pub list_unsubscribe: Option<std::sync::Arc<toki_model::suppression::ListUnsubscribe>>,
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
