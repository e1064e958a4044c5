//! Instants (a due instant, an occurrence's start) and time helpers: waits
//! between instants, queue delays, retry backoff.
//! Everything here takes `now` as an argument; nothing reads a clock.

use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};

use chrono::TimeZone;
use serde::{Deserialize, Serialize};

use crate::error::ValidationError;

/// An instant in UTC, stored and sent as milliseconds since the epoch.
pub type Instant = DateTime<Utc>;

pub fn from_millis(field: &str, ms: i64) -> Result<Instant, ValidationError> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| ValidationError::new(field, format!("{ms} is not a valid instant")))
}

/// The instant a reminder instance must be delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DueAt(pub Instant);

impl DueAt {
    pub fn millis(self) -> i64 {
        self.0.timestamp_millis()
    }
}

/// The start instant of one occurrence of a schedule. A one-off schedule has
/// exactly one; recurring schedules (later) have many, so it is part of every key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Occurrence(pub Instant);

impl Occurrence {
    pub fn millis(self) -> i64 {
        self.0.timestamp_millis()
    }
}

/// SQS caps DelaySeconds at 15 minutes.
pub const MAX_DELAY: StdDuration = StdDuration::from_secs(900);

/// How long the queue should hold a message so it becomes visible `lead`
/// before its due instant: clamped to 0..=900 s (the SQS limit). A message
/// that arrives early because of the clamp is re-delayed by the daemon.
pub fn delay_for(due: DueAt, now: Instant, lead: StdDuration) -> StdDuration {
    // Already past: zero, deliver now.
    wait_between(now, due.0 - to_chrono(lead)).min(MAX_DELAY)
}

/// Backoff before a failed delivery is tried again: `base` doubling with each
/// failure, capped, then spread by `jitter` (0..1, drawn by the caller) over
/// the upper half, so that a crowd that failed together does not come back
/// together.
pub fn retry_backoff(
    failures: u32,
    base: StdDuration,
    cap: StdDuration,
    jitter: f64,
) -> StdDuration {
    let exp = failures.saturating_sub(1).min(20);
    let full = base.saturating_mul(1u32 << exp).min(cap);
    full.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// The time from `from` to `to`; zero when `to` is not later (a wait that is
/// already over, an age not yet begun).
pub fn wait_between(from: DateTime<Utc>, to: DateTime<Utc>) -> StdDuration {
    (to - from).to_std().unwrap_or_default()
}

pub fn to_chrono(d: StdDuration) -> Duration {
    Duration::from_std(d).unwrap_or(Duration::MAX)
}

/// Milliseconds from `a` to `b` (negative if `b` is earlier).
pub fn millis_between(a: DateTime<Utc>, b: DateTime<Utc>) -> i64 {
    (b - a).num_milliseconds()
}
