//! A server-side debounce shared by every instance (DESIGN: "Change
//! notifications"): the first call in a quiet period acts at once (leading
//! edge); later calls push a check back, and the action runs again once the
//! key has been quiet for its delay (trailing edge), or when the burst reaches
//! the hard cap, so a key that never goes quiet still acts.
//!
//! The delay adapts to the gaps between calls, `delay = min(max(previous
//! delay, gap), max)`, starting at `min`: tight bursts collapse after a short
//! wait, slow trickles after a longer one. A key's row stays until a full
//! delay passes with nothing to act on, so a second burst soon after the
//! first is its trailing part (the delay grows), not a new leading edge.
//!
//! One row per key, changed only by compare-and-set on its token (every write
//! puts a fresh token); the check is a [`DebounceTimer`] (a delayed queue
//! message in production), so a restart loses nothing; a check acts only if
//! the row still holds the token it carries, and the row is removed only if
//! it still holds the token of the check removing it, so a call racing the
//! removal is never lost. A check may be delivered twice: the action gets
//! the token and is idempotent per (key, token).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use thiserror::Error;
use tracing::debug;

use crate::domain::Instant;
use crate::error::StoreError;
use crate::message::{encode_debounce_check, DebounceCheck};
use crate::plan::{to_chrono, wait_between, MAX_DELAY};
use crate::ports::{Clock, DelayQueue, OutgoingMessage};
use crate::StoreResult;

/// The debounce's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebounceSettings {
    /// The delay of a new burst: its first trailing action waits this long
    /// after the last call at least.
    pub min_delay: Duration,
    /// The delay never grows beyond this.
    pub max_delay: Duration,
    /// A burst acts at the latest this long after it began (or after its last
    /// action), however busy the key stays.
    pub hard_cap: Duration,
}

impl Default for DebounceSettings {
    fn default() -> Self {
        DebounceSettings {
            min_delay: Duration::from_secs(5),
            max_delay: Duration::from_secs(300),
            // Fits one SQS delay (≤ 15 minutes): a capped check is one message.
            hard_cap: Duration::from_secs(900),
        }
    }
}

impl DebounceSettings {
    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Result<(), crate::error::ValidationError> {
        use crate::error::ValidationError;
        if self.min_delay.is_zero() {
            return Err(ValidationError::new("min_delay", "must be more than 0"));
        }
        if self.max_delay < self.min_delay {
            return Err(ValidationError::new(
                "max_delay",
                "must not be less than min_delay",
            ));
        }
        if self.hard_cap < self.max_delay {
            return Err(ValidationError::new(
                "hard_cap",
                "must not be less than max_delay",
            ));
        }
        Ok(())
    }
}

/// A key's state: one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebounceEntry {
    pub key: String,
    /// Changes at every write: a check carrying it is the latest one armed.
    pub token: String,
    /// When the burst began: its leading call, or its last action.
    pub burst_started: Instant,
    pub last_call: Instant,
    pub delay: Duration,
    /// Calls came since the last action and wait for the trailing edge.
    pub pending: bool,
}

impl DebounceEntry {
    /// When the row's check is due. Calls waiting: quiet for the delay since
    /// the last one, or the burst at its cap. None waiting: a whole delay
    /// since the burst began (its leading call or last action), then the row goes.
    pub fn check_at(&self, settings: &DebounceSettings) -> Instant {
        if !self.pending {
            return self.burst_started + to_chrono(self.delay);
        }
        let quiet = self.last_call + to_chrono(self.delay);
        let capped = self.burst_started + to_chrono(settings.hard_cap);
        quiet.min(capped)
    }
}

/// Which edge an action is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Edge {
    Leading,
    Trailing,
}

/// The row after a call at `now` (pure), and whether the call acts at once.
pub fn after_call(
    previous: Option<&DebounceEntry>,
    key: &str,
    now: Instant,
    token: String,
    settings: &DebounceSettings,
) -> (DebounceEntry, Option<Edge>) {
    match previous {
        None => (
            DebounceEntry {
                key: key.to_owned(),
                token,
                burst_started: now,
                last_call: now,
                delay: settings.min_delay,
                pending: false,
            },
            Some(Edge::Leading),
        ),
        Some(p) => {
            let gap = wait_between(p.last_call, now);
            let delay = p
                .delay
                .max(gap)
                .clamp(settings.min_delay, settings.max_delay);
            (
                DebounceEntry {
                    key: key.to_owned(),
                    token,
                    burst_started: p.burst_started,
                    last_call: now,
                    delay,
                    pending: true,
                },
                None,
            )
        }
    }
}

/// What a check carrying `token` finds to do at `now` (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckVerdict {
    /// The row moved on (a later call armed its own check) or is gone.
    Superseded,
    /// Arrived before its instant (a queue's delay is bounded): check again then.
    NotYet(Instant),
    /// Calls wait: act on the trailing edge, then keep the row for one more
    /// delay (a burst soon after is its continuation).
    Act,
    /// Nothing happened for a whole delay since the last action: remove the row.
    Remove,
}

/// How early a check may run (timers fire to the millisecond at best).
const CHECK_TOLERANCE: Duration = Duration::from_millis(50);

pub fn on_check(
    entry: Option<&DebounceEntry>,
    token: &str,
    now: Instant,
    settings: &DebounceSettings,
) -> CheckVerdict {
    let Some(e) = entry.filter(|e| e.token == token) else {
        return CheckVerdict::Superseded;
    };
    let due = e.check_at(settings);
    if now + to_chrono(CHECK_TOLERANCE) < due {
        return CheckVerdict::NotYet(due);
    }
    if e.pending {
        CheckVerdict::Act
    } else {
        CheckVerdict::Remove
    }
}

/// The row after an action at `now`: quiet again from now, a fresh token.
fn after_action(e: &DebounceEntry, now: Instant, token: String) -> DebounceEntry {
    DebounceEntry {
        token,
        burst_started: now,
        pending: false,
        ..e.clone()
    }
}

/// Where the rows live; every write is conditional.
#[async_trait]
pub trait DebounceStore: Send + Sync {
    async fn get(&self, key: &str) -> StoreResult<Option<DebounceEntry>>;
    /// Writes `entry` if the key has no row (`expected` = None) or if its row
    /// still holds the token `expected`. False: another write came first.
    async fn put_if(&self, entry: &DebounceEntry, expected: Option<&str>) -> StoreResult<bool>;
    /// Removes the key's row if it still holds `token`.
    async fn remove_if(&self, key: &str, token: &str) -> StoreResult<bool>;
}

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
                crate::ValidationError::new("check", &r.reason),
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

/// A fresh, unguessable token.
pub fn new_token() -> String {
    format!(
        "{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    )
}

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
            if !self.store.put_if(&entry, expected).await? {
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
                    self.store.put_if(&pending, Some(&entry.token)).await?;
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
                self.store.remove_if(key, token).await?;
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
                if self.store.put_if(&quiet, Some(token)).await? {
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
