//! Change notices on the queue: the debounce action that hands an edge to
//! the daemon as a notice message.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use toki_model::change::parse_debounce_key;
use toki_model::debounce::Edge;
use toki_model::ValidationError;
use toki_ports::message::{encode_change_notice, NoticeMessage};
use toki_ports::{Clock, DelayQueue, OutgoingMessage};

use crate::debounce::{ActionError, DebounceAction};

/// The debounce action of change notices: an edge enqueues a notice message
/// for the daemon (at once); the daemon freezes and delivers it.
pub struct NoticeAction {
    pub queue: Arc<dyn DelayQueue>,
    pub clock: Arc<dyn Clock>,
}

#[async_trait]
impl DebounceAction for NoticeAction {
    async fn act(&self, key: &str, token: &str, edge: Edge) -> Result<(), ActionError> {
        let (tenant, schedule) = parse_debounce_key(key).map_err(|e| ActionError(Box::new(e)))?;
        let message = OutgoingMessage {
            id: "notice".into(),
            body: key.to_owned(),
            attributes: encode_change_notice(&NoticeMessage {
                tenant: tenant.clone(),
                schedule,
                token: token.to_owned(),
                edge: edge.into(),
                at: self.clock.now(),
            }),
            delay: Duration::ZERO,
            group: Some(tenant.to_string()),
        };
        let sent = self
            .queue
            .send_batch(std::slice::from_ref(&message))
            .await
            .map_err(|e| ActionError(Box::new(e)))?;
        match sent.refused.into_iter().next() {
            None => Ok(()),
            Some(r) => Err(ActionError(Box::new(ValidationError::new(
                "notice", r.reason,
            )))),
        }
    }
}

#[cfg(test)]
mod tests;
