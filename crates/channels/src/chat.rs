//! In-app chat: a message row in the tenant's own database.

use std::sync::Arc;

use async_trait::async_trait;
use toki_model::error::chain;
use toki_model::Channel;
use toki_ports::channel::{ChannelSender, Notification, SendError, SendResult};
use toki_ports::{ChatMessage, Clock, TenantStores};

pub struct ChatChannel {
    stores: Arc<dyn TenantStores>,
    clock: Arc<dyn Clock>,
}

impl ChatChannel {
    /// Chat rows go to each notification's tenant database, opened through `stores`.
    pub fn new(stores: Arc<dyn TenantStores>, clock: Arc<dyn Clock>) -> Self {
        ChatChannel { stores, clock }
    }
}

#[async_trait]
impl ChannelSender for ChatChannel {
    fn channel(&self) -> Channel {
        Channel::Chat
    }

    async fn send(&self, batch: &[Notification]) -> Vec<SendResult> {
        let Some(first) = batch.first() else {
            return Vec::new();
        };
        let failed = |e: &toki_ports::StoreError| {
            vec![Err(SendError::transient(format!("chat: {}", chain(e)))); batch.len()]
        };
        // A batch is one tenant's (the daemon plans per tenant).
        let store = match self.stores.open(&first.tenant).await {
            Ok(s) => s,
            Err(e) => return failed(&e),
        };
        let now = self.clock.now();
        let rows: Vec<ChatMessage> = batch
            .iter()
            .map(|n| ChatMessage {
                key: n.key.clone(),
                version: n.version,
                user: n.key.recipient.clone(),
                text: n.text.clone(),
                created_at: now,
            })
            .collect();
        // One statement for the whole batch.
        match store.insert_chat_messages(&rows).await {
            Ok(()) => vec![Ok(self.clock.now()); batch.len()],
            Err(e) => failed(&e),
        }
    }
}
