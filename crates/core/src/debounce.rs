//! The debouncer shared by every instance: calls and checks over a
//! [`DebounceStore`] and a durable [`DebounceTimer`] (the rules are
//! `toki_model::debounce`).

use std::sync::Arc;

use async_trait::async_trait;
use thiserror::Error;
use tracing::debug;

use toki_model::debounce::{
    after_action, after_call, new_token, on_check, CheckVerdict, DebounceEntry, DebounceSettings,
    Edge,
};
use toki_model::time::{wait_between, MAX_DELAY};
use toki_model::Instant;
use toki_ports::message::{encode_debounce_check, DebounceCheck};
use toki_ports::{Clock, DebounceStore, DelayQueue, OutgoingMessage, StoreError, StoreResult};

/// Durable timers: a check of `key` carrying `token`, at `at`, to be run
/// with the `settings` of the call that armed it (they may differ per key:
/// per tenant for change notices).
#[async_trait]
pub trait DebounceTimer: Send + Sync {
    async fn arm(
        &self,
        key: &str,
        token: &str,
        at: Instant,
        settings: &DebounceSettings,
    ) -> StoreResult<()>;
}

/// Checks as delayed messages on the delay queue: durable across restarts
/// and shared by every instance (whichever daemon receives one runs it). A
/// check further ahead than the queue's longest delay arrives early and is
/// armed again from there ([`CheckVerdict::NotYet`]).
pub struct QueueTimer {
    pub queue: Arc<dyn DelayQueue>,
    pub clock: Arc<dyn Clock>,
}

#[async_trait]
impl DebounceTimer for QueueTimer {
    async fn arm(
        &self,
        key: &str,
        token: &str,
        at: Instant,
        settings: &DebounceSettings,
    ) -> StoreResult<()> {
        let delay = wait_between(self.clock.now(), at).min(MAX_DELAY);
        let message = OutgoingMessage {
            id: "check".into(),
            body: key.to_owned(),
            attributes: encode_debounce_check(&DebounceCheck {
                key: key.to_owned(),
                token: token.to_owned(),
                due: at,
                settings: Some(settings.clone()),
            }),
            delay,
            // Keys are any string: no tenant to group by (checks are few and small).
            group: None,
        };
        let sent = self
            .queue
            .send_batch(std::slice::from_ref(&message))
            .await?;
        match sent.refused.first() {
            None => Ok(()),
            Some(r) => Err(StoreError::unavailable(
                "arming a debounce check",
                toki_model::ValidationError::new("check", &r.reason),
            )),
        }
    }
}

/// What a debounced key does on its edges. Idempotent per (key, token): a
/// check delivered twice acts twice with the same token.
#[async_trait]
pub trait DebounceAction: Send + Sync {
    async fn act(&self, key: &str, token: &str, edge: Edge) -> Result<(), ActionError>;
}

/// An action's failure (the caller retries: a check's message comes back).
#[derive(Debug, Error)]
#[error("{0}")]
pub struct ActionError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

#[derive(Debug, Error)]
pub enum DebounceError {
    #[error("debounce state")]
    Store(#[from] StoreError),
    #[error("debounce action for {key}")]
    Action {
        key: String,
        #[source]
        source: ActionError,
    },
    /// Every attempt lost its compare-and-set to another writer.
    #[error("debounce key {0} stayed contended")]
    Contended(String),
}

/// What a call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOutcome {
    pub token: String,
    /// Acted at once (the leading edge).
    pub acted: bool,
}

/// What a check did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckOutcome {
    Superseded,
    Rearmed(Instant),
    Acted,
    Removed,
}

/// Compare-and-set attempts before a call gives up (each lost one means
/// another writer made progress).
const MAX_ATTEMPTS: usize = 64;

/// The debouncer: calls and checks on one store and timer.
#[derive(Clone)]
pub struct Debouncer {
    pub store: Arc<dyn DebounceStore>,
    pub timer: Arc<dyn DebounceTimer>,
    pub clock: Arc<dyn Clock>,
}

impl Debouncer {
    /// Records a call of `key`: acts at once if the key was quiet, else
    /// arranges the trailing check.
    pub async fn call(
        &self,
        key: &str,
        settings: &DebounceSettings,
        action: &dyn DebounceAction,
    ) -> Result<CallOutcome, DebounceError> {
        for _ in 0..MAX_ATTEMPTS {
            let previous = self.store.get(key).await?;
            let now = self.clock.now();
            let (entry, edge) = after_call(previous.as_ref(), key, now, new_token(), settings);
            let expected = previous.as_ref().map(|p| p.token.as_str());
            if !self.store.put_if(&entry, expected).await?.is_written() {
                continue;
            }
            // Armed before acting: if the action fails, the row and its check remain.
            self.timer
                .arm(key, &entry.token, entry.check_at(settings), settings)
                .await?;
            if let Some(edge) = edge {
                if let Err(source) = action.act(key, &entry.token, edge).await {
                    // Not lost: the row turns pending under the same token,
                    // so the check just armed acts on it (as a trailing edge).
                    let pending = DebounceEntry {
                        pending: true,
                        ..entry.clone()
                    };
                    // Refused: a call came meanwhile, and its own check follows.
                    let _ = self.store.put_if(&pending, Some(&entry.token)).await?;
                    return Err(DebounceError::Action {
                        key: key.to_owned(),
                        source,
                    });
                }
            }
            debug!(
                key,
                leading = edge.is_some(),
                delay_ms = entry.delay.as_millis() as u64,
                "debounce call"
            );
            return Ok(CallOutcome {
                token: entry.token,
                acted: edge.is_some(),
            });
        }
        Err(DebounceError::Contended(key.to_owned()))
    }

    /// Runs the check a timer armed with `token`.
    pub async fn check(
        &self,
        key: &str,
        token: &str,
        settings: &DebounceSettings,
        action: &dyn DebounceAction,
    ) -> Result<CheckOutcome, DebounceError> {
        let entry = self.store.get(key).await?;
        let now = self.clock.now();
        match on_check(entry.as_ref(), token, now, settings) {
            CheckVerdict::Superseded => Ok(CheckOutcome::Superseded),
            CheckVerdict::NotYet(at) => {
                self.timer.arm(key, token, at, settings).await?;
                Ok(CheckOutcome::Rearmed(at))
            }
            CheckVerdict::Remove => {
                // Refused: a call came meanwhile; the row stays for its check.
                let _ = self.store.remove_if(key, token).await?;
                Ok(CheckOutcome::Removed)
            }
            CheckVerdict::Act => {
                let entry = entry.expect("Act is only given for a row");
                action
                    .act(key, token, Edge::Trailing)
                    .await
                    .map_err(|source| DebounceError::Action {
                        key: key.to_owned(),
                        source,
                    })?;
                let now = self.clock.now();
                let quiet = after_action(&entry, now, new_token());
                // Lost: a call came during the action; its own check follows.
                if self.store.put_if(&quiet, Some(token)).await?.is_written() {
                    self.timer
                        .arm(key, &quiet.token, quiet.check_at(settings), settings)
                        .await?;
                }
                Ok(CheckOutcome::Acted)
            }
        }
    }
}

#[cfg(test)]
mod tests;
