//! The daemon's vocabulary: a message being worked on, and what became of it.

use std::time::Duration;

use toki_model::domain::{Channel, Reminder};
use toki_ports::ReceivedMessage;

/// A received message and the reminder it carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Work {
    pub msg: ReceivedMessage,
    pub reminder: Reminder,
}

/// What happened to a message, whatever the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageFate {
    /// Every delivery is final (sent, stale, undeliverable, or already done).
    Done,
    /// Arrived before its time; it may be received again in `wait`.
    Early { wait: Duration },
    /// A send failed; `failures` is the most failed attempts any of its
    /// deliveries has had, this one included (its budget is counted in them),
    /// and `channel` and `reason` are that delivery's.
    Failed {
        channel: Channel,
        reason: String,
        failures: u32,
        /// The other channels that failed in the same attempt: channel,
        /// reason and that delivery's failed attempts (each is logged).
        others: Vec<(Channel, String, u32)>,
        /// A channel of the same message was throttled: the retry waits at
        /// least this long, so that service's Retry-After is honoured.
        throttled: Option<Duration>,
    },
    /// The service asked to slow down: again after `retry_after` (not a failure).
    Throttled { retry_after: Duration },
    /// Deliveries wait for channels whose circuit is open (not a failure).
    Parked { channels: Vec<Channel> },
    /// Another holder is still sending some of its deliveries.
    Busy,
    /// Can never be worked on (its attributes do not decode): dead-lettered
    /// at once, retrying cannot help.
    Poison(String),
    /// Could not be worked on now: its tenant database could not be read or
    /// written. Comes back with backoff until it is `overdue` by more than
    /// the policy allows (an outage of minutes loses nothing).
    Unprocessed { reason: String, overdue: Duration },
    /// Its tenant was deleted (offboarded): deleted from the queue, counted
    /// and logged with that reason, never retried nor dead-lettered.
    TenantDeleted,
}
