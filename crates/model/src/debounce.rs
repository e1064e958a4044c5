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

use std::time::Duration;

use crate::time::Instant;
use crate::time::{to_chrono, wait_between};

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
pub fn after_action(e: &DebounceEntry, now: Instant, token: String) -> DebounceEntry {
    DebounceEntry {
        token,
        burst_started: now,
        pending: false,
        ..e.clone()
    }
}

/// A fresh, unguessable token.
pub fn new_token() -> String {
    format!(
        "{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    )
}
