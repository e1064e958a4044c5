//! Pure scheduling logic: due instants, shards, partitions, the scan window, delays.
//! Everything here takes `now` as an argument; nothing reads a clock.

use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, DurationRound, Utc};

use crate::domain::{DueAt, Instant, Reminder, ReminderKey, Schedule, TenantId};

/// SQS caps DelaySeconds at 15 minutes.
pub const MAX_DELAY: StdDuration = StdDuration::from_secs(900);

/// The reminder instances a schedule implies, one per (occurrence, rule), for
/// occurrences whose due instant is not before `not_before`.
pub fn reminders_for(tenant: &TenantId, schedule: &Schedule, not_before: Instant) -> Vec<Reminder> {
    let mut out = Vec::new();
    if schedule.participants.is_empty() {
        return out;
    }
    for occurrence in schedule.occurrences() {
        for rule in &schedule.rules {
            let due_at = Reminder::due_for(occurrence, rule.minutes_before);
            if due_at.0 < not_before {
                continue;
            }
            out.push(Reminder {
                key: ReminderKey {
                    tenant: tenant.clone(),
                    schedule: schedule.id.clone(),
                    occurrence,
                    minutes_before: rule.minutes_before,
                },
                due_at,
                version: schedule.version,
                recipients: schedule.participants.clone(),
                channels: rule.channels.clone(),
            });
        }
    }
    out
}

/// FNV-1a: stable across processes, versions and platforms (unlike `DefaultHasher`).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The write shard of a reminder: a hash of its identity, so one busy minute
/// spreads evenly over `shards` partitions.
pub fn shard_of(key: &ReminderKey, shards: u16) -> u16 {
    let shards = shards.max(1);
    (fnv1a(key.to_string().as_bytes()) % u64::from(shards)) as u16
}

/// Start of the minute containing `t`.
pub fn minute_of(t: Instant) -> Instant {
    t.duration_trunc(Duration::minutes(1))
        .expect("truncating to a minute cannot overflow")
}

/// A partition of the index: one due minute, one shard.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Partition {
    pub minute: Instant,
    pub shard: u16,
}

impl Partition {
    pub fn of(reminder: &Reminder, shards: u16) -> Self {
        Partition {
            minute: minute_of(reminder.due_at.0),
            shard: shard_of(&reminder.key, shards),
        }
    }

    /// `R#2026-11-23T08:55#07`
    pub fn key(&self) -> String {
        format!(
            "R#{}#{:02}",
            self.minute.format("%Y-%m-%dT%H:%M"),
            self.shard
        )
    }
}

/// Sort key within a partition: orders by due instant, then identifies the reminder.
pub fn sort_key(reminder: &Reminder) -> String {
    format!("{:015}#{}", reminder.due_at.millis(), reminder.key)
}

/// A scan window: reminders due in `[from, to]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub from: Instant,
    pub to: Instant,
}

impl Window {
    /// The scanner's window at `now`: a short look back (a missed run, a slow
    /// previous run) and `ahead` forward.
    pub fn at(now: Instant, look_back: StdDuration, ahead: StdDuration) -> Self {
        Window {
            from: now - to_chrono(look_back),
            to: now + to_chrono(ahead),
        }
    }

    pub fn contains(&self, due: DueAt) -> bool {
        due.0 >= self.from && due.0 <= self.to
    }

    /// Every (minute, shard) partition the window touches, minute by minute.
    pub fn partitions(&self, shards: u16) -> Vec<Partition> {
        let mut out = Vec::new();
        let mut minute = minute_of(self.from);
        while minute <= self.to {
            for shard in 0..shards.max(1) {
                out.push(Partition { minute, shard });
            }
            minute += Duration::minutes(1);
        }
        out
    }
}

/// How long the queue should hold a message so it becomes visible `lead`
/// before its due instant: clamped to 0..=900 s (the SQS limit). A message
/// that arrives early because of the clamp is re-delayed by the daemon.
pub fn delay_for(due: DueAt, now: Instant, lead: StdDuration) -> StdDuration {
    let visible_at = due.0 - to_chrono(lead);
    match (visible_at - now).to_std() {
        Ok(d) => d.min(MAX_DELAY),
        Err(_) => StdDuration::ZERO, // already past: deliver now
    }
}

/// Backoff before a failed message is received again: 5 s doubling per receive, capped.
pub fn retry_backoff(receive_count: u32, cap: StdDuration) -> StdDuration {
    let exp = receive_count.saturating_sub(1).min(16);
    StdDuration::from_secs(5u64 << exp).min(cap)
}

pub fn to_chrono(d: StdDuration) -> Duration {
    Duration::from_std(d).unwrap_or(Duration::MAX)
}

/// Milliseconds from `a` to `b` (negative if `b` is earlier).
pub fn millis_between(a: DateTime<Utc>, b: DateTime<Utc>) -> i64 {
    (b - a).num_milliseconds()
}
