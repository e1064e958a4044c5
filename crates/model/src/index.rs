//! The reminder index's shape: which reminders a schedule yields, their shard
//! and partition (due minute + shard), their sort key, and the scan window.
//! Everything here takes `now` as an argument; nothing reads a clock.

use std::time::Duration as StdDuration;

use chrono::Duration;

use crate::domain::{
    DueAt, Instant, Occurrence, Reminder, ReminderKey, Schedule, SeriesError, TenantId,
};
use crate::time::to_chrono;

/// The reminder instances a schedule implies, one per (occurrence, rule),
/// whose due instant is in `[not_before, until]`: a series is expanded only
/// that far (the index's horizon), a one-off has at most one per rule.
pub fn reminders_for(
    tenant: &TenantId,
    schedule: &Schedule,
    not_before: Instant,
    until: Instant,
) -> Result<Vec<Reminder>, SeriesError> {
    let mut out = Vec::new();
    if schedule.participants.is_empty() || not_before > until {
        return Ok(out);
    }
    let longest = schedule
        .rules
        .iter()
        .map(|r| r.minutes_before)
        .max()
        .unwrap_or(0);
    // Occurrences whose earliest reminder can be due by `until`.
    let to = until
        .checked_add_signed(Duration::minutes(i64::from(longest)) + Duration::milliseconds(1))
        .unwrap_or(until);
    for occurrence in schedule.occurrences_between(not_before, to)? {
        for rule in &schedule.rules {
            let due_at = Reminder::due_for(Occurrence(occurrence.starts_at), rule.minutes_before);
            if due_at.0 < not_before || due_at.0 > until {
                continue;
            }
            out.push(Reminder {
                key: ReminderKey {
                    tenant: tenant.clone(),
                    schedule: schedule.id.clone(),
                    occurrence: Occurrence(occurrence.starts_at),
                    minutes_before: rule.minutes_before,
                },
                due_at,
                version: schedule.version,
                channels: rule.channels.clone(),
            });
        }
    }
    Ok(out)
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

/// Start of the minute containing `t`. By fields, not `duration_trunc`,
/// which works in nanoseconds and fails after 2262 (a schedule may be far
/// ahead; the API found one at 9999-12-31).
pub fn minute_of(t: Instant) -> Instant {
    use chrono::Timelike;
    t.with_second(0)
        .and_then(|t| t.with_nanosecond(0))
        .expect("second 0 and nanosecond 0 exist in every minute")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::*;

    #[test]
    fn the_minute_of_a_far_instant_is_found() {
        let far: Instant = "9999-12-31T23:59:59.999Z".parse().unwrap();
        assert_eq!(
            minute_of(far),
            "9999-12-31T23:59:00Z".parse::<Instant>().unwrap()
        );
        let near: Instant = "2026-11-22T09:05:07.5Z".parse().unwrap();
        assert_eq!(
            minute_of(near),
            "2026-11-22T09:05:00Z".parse::<Instant>().unwrap()
        );
    }
    use crate::domain::*;
    use chrono::TimeZone;

    fn at(s: &str) -> Instant {
        chrono::DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    fn far() -> Instant {
        at("2100-01-01T00:00:00Z")
    }

    fn schedule(starts: &str, rules: &[(u32, &[Channel])], participants: &[&str]) -> Schedule {
        Schedule {
            id: "s1".parse().unwrap(),
            title: "t".into(),
            body: String::new(),
            starts_at: at(starts),
            time_zone: chrono_tz::Asia::Tokyo,
            participants: participants.iter().map(|p| p.parse().unwrap()).collect(),
            rules: rules
                .iter()
                .map(|(m, c)| ReminderRule {
                    minutes_before: *m,
                    channels: ChannelSet::new("c", c).unwrap(),
                })
                .collect(),
            recurrence: None,
            version: 3,
        }
    }

    #[test]
    fn due_instant_is_start_minus_offset_per_rule() {
        let s = schedule(
            "2026-11-23T09:00:00+09:00",
            &[
                (5, &[Channel::Mail]),
                (60, &[Channel::Slack, Channel::Chat]),
            ],
            &["a", "b"],
        );
        let tenant: TenantId = "acme".parse().unwrap();
        let rs = reminders_for(&tenant, &s, at("2026-11-01T00:00:00Z"), far()).unwrap();
        assert_eq!(rs.len(), 2);
        assert_eq!(rs[0].due_at.0, at("2026-11-23T08:55:00+09:00"));
        assert_eq!(rs[1].due_at.0, at("2026-11-23T08:00:00+09:00"));
        assert_eq!(rs[0].version, 3);
        assert_eq!(rs[1].deliveries_to(&s.participants).count(), 4);
        assert_eq!(rs[0].key.occurrence.0, s.starts_at);
    }

    #[test]
    fn past_reminders_and_empty_schedules_yield_nothing() {
        let tenant: TenantId = "acme".parse().unwrap();
        let s = schedule(
            "2026-11-23T09:00:00Z",
            &[(5, &[Channel::Mail]), (120, &[Channel::Mail])],
            &["a"],
        );
        // 07:30 is after the 120-minute reminder (07:00) but before the 5-minute one.
        let rs = reminders_for(&tenant, &s, at("2026-11-23T07:30:00Z"), far()).unwrap();
        assert_eq!(rs.len(), 1);
        assert_eq!(rs[0].key.minutes_before, 5);
        let empty = schedule("2026-11-23T09:00:00Z", &[(5, &[Channel::Mail])], &[]);
        assert!(
            reminders_for(&tenant, &empty, at("2026-11-01T00:00:00Z"), far())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn dst_moves_the_utc_instant_of_nine_oclock_in_new_york() {
        let ny = chrono_tz::America::New_York;
        let july = ny.with_ymd_and_hms(2026, 7, 6, 9, 0, 0).unwrap().to_utc();
        let december = ny.with_ymd_and_hms(2026, 12, 7, 9, 0, 0).unwrap().to_utc();
        assert_eq!(july.format("%H:%M").to_string(), "13:00");
        assert_eq!(december.format("%H:%M").to_string(), "14:00");
    }

    #[test]
    fn shard_is_stable_in_range_and_spreads() {
        let key = |i: usize| ReminderKey {
            tenant: "acme".parse().unwrap(),
            schedule: format!("s{i}").parse().unwrap(),
            occurrence: Occurrence(at("2026-11-23T09:00:00Z")),
            minutes_before: 5,
        };
        assert_eq!(shard_of(&key(1), 16), shard_of(&key(1), 16));
        let mut counts = [0usize; 16];
        for i in 0..3000 {
            let s = shard_of(&key(i), 16);
            assert!(s < 16);
            counts[s as usize] += 1;
        }
        // 3,000 reminders due in one minute: no shard gets more than twice its share.
        assert!(
            counts
                .iter()
                .all(|&c| c > 3000 / 16 / 2 && c < 3000 / 16 * 2),
            "{counts:?}"
        );
        assert_eq!(shard_of(&key(1), 0), 0, "zero shards means one");
    }

    #[test]
    fn partition_key_names_minute_and_shard() {
        let p = Partition {
            minute: at("2026-11-23T08:55:00Z"),
            shard: 7,
        };
        assert_eq!(p.key(), "R#2026-11-23T08:55#07");
        assert_eq!(
            minute_of(at("2026-11-23T08:55:59.999Z")),
            at("2026-11-23T08:55:00Z")
        );
    }

    #[test]
    fn delay_is_due_minus_now_minus_lead_clamped_to_0_and_900s() {
        let now = at("2026-11-23T08:40:00Z");
        let lead = StdDuration::from_secs(2);
        assert_eq!(
            delay_for(DueAt(at("2026-11-23T08:41:00Z")), now, lead),
            StdDuration::from_secs(58)
        );
        assert_eq!(
            delay_for(DueAt(at("2026-11-23T08:40:01Z")), now, lead),
            StdDuration::ZERO
        );
        assert_eq!(
            delay_for(DueAt(at("2026-11-23T08:39:00Z")), now, lead),
            StdDuration::ZERO
        );
        assert_eq!(
            delay_for(DueAt(at("2026-11-23T09:10:00Z")), now, lead),
            MAX_DELAY
        );
        assert_eq!(
            delay_for(DueAt(at("2026-11-23T08:55:02Z")), now, lead),
            StdDuration::from_secs(900)
        );
    }

    #[test]
    fn window_covers_every_minute_and_shard() {
        let w = Window::at(
            at("2026-11-23T08:40:30Z"),
            StdDuration::from_secs(60),
            StdDuration::from_secs(900),
        );
        let parts = w.partitions(4);
        // 08:39 .. 08:55 inclusive = 17 minutes × 4 shards.
        assert_eq!(parts.len(), 17 * 4);
        assert_eq!(parts.first().unwrap().minute, at("2026-11-23T08:39:00Z"));
        assert_eq!(parts.last().unwrap().minute, at("2026-11-23T08:55:00Z"));
        assert!(w.contains(DueAt(at("2026-11-23T08:55:30Z"))));
        assert!(!w.contains(DueAt(at("2026-11-23T08:55:31Z"))));
        assert!(!w.contains(DueAt(at("2026-11-23T08:39:29Z"))));
    }

    #[test]
    fn sort_keys_order_by_due() {
        let tenant: TenantId = "acme".parse().unwrap();
        let a = reminders_for(
            &tenant,
            &schedule("2026-11-23T09:00:00Z", &[(5, &[Channel::Mail])], &["a"]),
            at("2026-01-01T00:00:00Z"),
            far(),
        )
        .unwrap();
        let b = reminders_for(
            &tenant,
            &schedule("2026-11-23T10:00:00Z", &[(5, &[Channel::Mail])], &["a"]),
            at("2026-01-01T00:00:00Z"),
            far(),
        )
        .unwrap();
        assert!(sort_key(&a[0]) < sort_key(&b[0]));
    }

    #[test]
    fn backoff_doubles_caps_and_spreads() {
        let (base, cap) = (StdDuration::from_secs(1), StdDuration::from_secs(60));
        assert_eq!(retry_backoff(1, base, cap, 1.0), StdDuration::from_secs(1));
        assert_eq!(retry_backoff(3, base, cap, 1.0), StdDuration::from_secs(4));
        assert_eq!(retry_backoff(30, base, cap, 1.0), cap);
        // Jitter spreads over the upper half: never less than half the step.
        assert_eq!(retry_backoff(3, base, cap, 0.0), StdDuration::from_secs(2));
        assert_eq!(retry_backoff(3, base, cap, 0.5), StdDuration::from_secs(3));
    }
}
