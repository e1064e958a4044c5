//! In-app chat: a message row in the tenant's own database.

use async_trait::async_trait;
use chrono::Utc;
use toki_core::channel::{ChannelSender, Notification, SendError};
use toki_core::ports::{ChatMessage, TenantStore};
use toki_core::{Channel, Instant};

#[derive(Debug, Default)]
pub struct ChatChannel;

#[async_trait]
impl ChannelSender for ChatChannel {
    fn channel(&self) -> Channel {
        Channel::Chat
    }

    async fn send(
        &self,
        store: &dyn TenantStore,
        batch: &[Notification],
    ) -> Vec<Result<Instant, SendError>> {
        let now = Utc::now();
        let rows: Vec<ChatMessage> = batch
            .iter()
            .map(|n| ChatMessage {
                key: n.key.clone(),
                user: n.recipient.id.clone(),
                text: n.text.clone(),
                created_at: now,
            })
            .collect();
        // One statement for the whole batch.
        match store.insert_chat_messages(&rows).await {
            Ok(()) => {
                let at = Utc::now();
                vec![Ok(at); batch.len()]
            }
            Err(e) => vec![
                Err(SendError::Transient {
                    reason: format!("chat insert: {e}"),
                    retry_after: None,
                });
                batch.len()
            ],
        }
    }
}
