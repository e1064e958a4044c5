//! The channel port: how a notification reaches a person.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use thiserror::Error;

use crate::domain::{Channel, DeliveryKey, DueAt, Instant, TenantId, User};
use crate::ports::TenantStore;

/// A rendered reminder for one recipient on one channel, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub tenant: TenantId,
    pub key: DeliveryKey,
    pub due_at: DueAt,
    /// Shared by every notification to this user in a batch.
    pub recipient: Arc<User>,
    pub subject: String,
    pub text: String,
}

/// Why a send failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SendError {
    /// Try again later (throttled, connection failed); `retry_after` if the service said.
    #[error("transient: {reason}")]
    Transient {
        reason: String,
        retry_after: Option<Duration>,
    },
    /// Will never succeed (no address, channel not found).
    #[error("permanent: {0}")]
    Permanent(String),
}

/// A delivery channel. `send` gets a batch of one tenant's notifications and
/// returns, per notification and in order, the instant it went out or why not.
#[async_trait]
pub trait ChannelSender: Send + Sync {
    fn channel(&self) -> Channel;

    /// Gets ready to send soon (e.g. opens pooled connections), so the sends at
    /// the due instant pay no set-up. Called ahead of due; failures are ignored.
    async fn warm_up(&self) {}

    async fn send(
        &self,
        store: &dyn TenantStore,
        batch: &[Notification],
    ) -> Vec<Result<Instant, SendError>>;
}
