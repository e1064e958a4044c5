//! Delivery events: what a tenant's own system hears about its reminders
//! (delivered, failed, undeliverable, stale, dead-lettered, redriven), the
//! endpoints it registers for them, and the rules of their retries.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::domain::{Channel, DeliveryKey, DeliveryOutcome, DeliveryStatus, EndpointId, Reminder};
pub use crate::egress::EndpointUrl;
use crate::error::ValidationError;
use crate::time::Instant;
use crate::webhook_signature::WebhookSecret;

/// What happened to a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum EventKind {
    Delivered,
    /// A send failed and will be tried again (with the reason and attempt).
    Failed,
    Undeliverable,
    /// A change made the reminder moot before it went out.
    Stale,
    /// The reminder's message could not be processed and went to the dead letters.
    DeadLettered,
    /// An operator sent a dead letter back to be delivered.
    Redriven,
}

impl EventKind {
    pub const ALL: [EventKind; 6] = [
        EventKind::Delivered,
        EventKind::Failed,
        EventKind::Undeliverable,
        EventKind::Stale,
        EventKind::DeadLettered,
        EventKind::Redriven,
    ];

    /// The event's `type`, as the receiver sees it.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Delivered => "delivery.delivered",
            EventKind::Failed => "delivery.failed",
            EventKind::Undeliverable => "delivery.undeliverable",
            EventKind::Stale => "delivery.stale",
            EventKind::DeadLettered => "delivery.dead_lettered",
            EventKind::Redriven => "delivery.redriven",
        }
    }

    /// The event a recorded outcome makes, if any (claims, 429s and open
    /// circuits are steps of a delivery, not news for the tenant).
    pub fn of_status(status: DeliveryStatus) -> Option<EventKind> {
        match status {
            DeliveryStatus::Delivered => Some(EventKind::Delivered),
            DeliveryStatus::Failed => Some(EventKind::Failed),
            DeliveryStatus::Undeliverable => Some(EventKind::Undeliverable),
            DeliveryStatus::Stale => Some(EventKind::Stale),
            DeliveryStatus::Sending | DeliveryStatus::Throttled | DeliveryStatus::Deferred => None,
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
                format!("unknown event type {s:?}; known: {}", known.join(", "))
            })
    }
}

impl TryFrom<String> for EventKind {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<EventKind> for String {
    fn from(k: EventKind) -> String {
        k.as_str().to_owned()
    }
}

/// A set of event kinds (what an endpoint subscribes to).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EventKinds(u8);

impl EventKinds {
    pub const NONE: EventKinds = EventKinds(0);

    pub fn all() -> Self {
        EventKind::ALL.into_iter().collect()
    }

    pub fn contains(self, kind: EventKind) -> bool {
        self.0 & kind.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn union(self, other: EventKinds) -> EventKinds {
        EventKinds(self.0 | other.0)
    }

    pub fn iter(self) -> impl Iterator<Item = EventKind> {
        EventKind::ALL
            .into_iter()
            .filter(move |k| self.contains(*k))
    }

    /// Stored form: the types, comma-separated.
    pub fn encode(self) -> String {
        self.iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Reads [`encode`](Self::encode)'s form back; the error names `field`.
    pub fn decode(field: &str, s: &str) -> Result<Self, ValidationError> {
        s.split(',')
            .filter(|k| !k.is_empty())
            .map(|k| {
                k.parse()
                    .map_err(|e: String| ValidationError::new(field, e))
            })
            .collect()
    }
}

impl FromIterator<EventKind> for EventKinds {
    fn from_iter<I: IntoIterator<Item = EventKind>>(iter: I) -> Self {
        EventKinds(iter.into_iter().fold(0, |bits, k| bits | k.bit()))
    }
}

/// Whether an endpoint gets its events strictly one after another, in the
/// order they occurred (a failure holds back the ones after it), or several
/// at once (faster to catch up; order not kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventOrdering {
    InOrder,
    Unordered,
}

/// What a tenant says about an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSpec {
    pub url: EndpointUrl,
    pub kinds: EventKinds,
    pub ordering: EventOrdering,
}

/// The endpoint's signing secrets: the current one, and while a rotation
/// lasts the one before it (both sign, so the receiver may switch at leisure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSecrets {
    pub current: WebhookSecret,
    pub previous: Option<(WebhookSecret, Instant)>,
}

/// How long the secret before a rotation still signs.
pub const ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 3600);

impl EndpointSecrets {
    /// The secrets that sign at `now`, the current one first.
    pub fn signing(&self, now: Instant) -> Vec<&WebhookSecret> {
        let previous = self
            .previous
            .as_ref()
            .filter(|(_, until)| *until > now)
            .map(|(s, _)| s);
        std::iter::once(&self.current).chain(previous).collect()
    }

    /// `fresh` becomes current; the current one signs until `now` + the overlap.
    pub fn rotate(&self, fresh: WebhookSecret, now: Instant) -> Self {
        let until = now + chrono::Duration::from_std(ROTATION_OVERLAP).expect("fits");
        Self {
            current: fresh,
            previous: Some((self.current.clone(), until)),
        }
    }
}

/// Whether an endpoint is sent to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointStatus {
    Enabled,
    /// Turned off after repeated failures (or by the tenant); the reason says which.
    Disabled {
        reason: String,
    },
}

/// Where an endpoint's sending stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointProgress {
    pub status: EndpointStatus,
    /// The last event sequence number it has (or was skipped past).
    pub cursor: u64,
    /// Failures in a row since its last success.
    pub failures: u32,
    /// Not tried again before this.
    pub next_attempt_at: Instant,
    pub last_error: Option<String>,
    /// Events up to this sequence number are being sent again (a replay):
    /// they go out at the tenant's replay rate. 0: no replay.
    pub replay_through: u64,
}

impl EndpointProgress {
    /// A new endpoint's: it gets what occurs after `cursor`.
    pub fn starting_at(cursor: u64, now: Instant) -> Self {
        Self {
            status: EndpointStatus::Enabled,
            cursor,
            failures: 0,
            next_attempt_at: now,
            last_error: None,
            replay_through: 0,
        }
    }

    /// A replay's: events after `cursor` are sent again, those up to
    /// `through` (the last one logged) paced; a replay already under way
    /// keeps its own end if further.
    pub fn replaying(&self, cursor: u64, through: u64, now: Instant) -> Self {
        Self {
            replay_through: through.max(self.replay_through),
            ..Self::starting_at(cursor, now)
        }
    }

    /// Sending again from where it stopped (enabled after being disabled),
    /// a replay under way still paced.
    pub fn resumed(&self, now: Instant) -> Self {
        Self {
            replay_through: self.replay_through,
            ..Self::starting_at(self.cursor, now)
        }
    }

    /// Whether event `seq` is a replayed one, to be paced.
    pub fn is_replay(&self, seq: u64) -> bool {
        seq <= self.replay_through
    }

    /// After events up to `cursor` reached the endpoint (a replay ends once
    /// past its last event).
    pub fn succeeded(&self, cursor: u64, now: Instant) -> Self {
        let cursor = cursor.max(self.cursor);
        Self {
            replay_through: if cursor < self.replay_through {
                self.replay_through
            } else {
                0
            },
            ..Self::starting_at(cursor, now)
        }
    }

    /// After a failed send (events up to `cursor` got through before it):
    /// back off, and after [`DISABLE_AFTER_FAILURES`] in a row turn off.
    pub fn failed(&self, cursor: u64, error: String, now: Instant) -> Self {
        let failures = self.failures + 1;
        let status = if failures >= DISABLE_AFTER_FAILURES {
            EndpointStatus::Disabled {
                reason: format!("{failures} failed attempts in a row; the last: {error}"),
            }
        } else {
            self.status.clone()
        };
        Self {
            status,
            cursor: cursor.max(self.cursor),
            failures,
            next_attempt_at: now + chrono::Duration::from_std(retry_after(failures)).expect("fits"),
            last_error: Some(error),
            replay_through: self.replay_through,
        }
    }
}

/// A registered endpoint, whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventEndpoint {
    pub id: EndpointId,
    pub spec: EndpointSpec,
    pub secrets: EndpointSecrets,
    pub progress: EndpointProgress,
    pub created_at: Instant,
}

/// Failures in a row after which an endpoint is disabled: with the backoff
/// below, about 40 minutes of failing (an outage of minutes never disables).
pub const DISABLE_AFTER_FAILURES: u32 = 15;
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(5 * 60);

/// The wait after the `failures`-th failure in a row: 1 s, doubling, at most 5 min.
pub fn retry_after(failures: u32) -> Duration {
    let doubled = RETRY_FIRST.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    doubled.min(RETRY_MAX)
}

/// What an event says about the delivery (the body's `data`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventData {
    /// The delivery's key (`schedule#occurrence#minutes#recipient#channel`);
    /// absent from a reminder-wide event (dead-lettered, redriven).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<String>,
    pub schedule_id: String,
    pub occurrence: Instant,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipient: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<Channel>,
    pub due_at: Instant,
    /// Why it failed, was undeliverable or was dead-lettered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A failure's number for this delivery (1 for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
}

/// An event about to be appended to a tenant's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    pub kind: EventKind,
    pub occurred_at: Instant,
    pub data: EventData,
}

impl NewEvent {
    /// The event a recorded outcome makes; `failures` is the delivery's
    /// count of failures including this one.
    pub fn of_outcome(o: &DeliveryOutcome, failures: u32) -> Option<NewEvent> {
        let kind = EventKind::of_status(o.status)?;
        Some(NewEvent {
            kind,
            occurred_at: o.at,
            data: EventData {
                delivery: Some(o.key.to_string()),
                attempt: (kind == EventKind::Failed).then_some(failures),
                reason: o.detail.clone().filter(|_| kind != EventKind::Delivered),
                ..EventData::of_key(&o.key, o.due_at.0)
            },
        })
    }
}

impl NewEvent {
    /// A reminder-wide event (dead-lettered, redriven): no one recipient or channel.
    pub fn of_reminder(
        kind: EventKind,
        reminder: &Reminder,
        reason: Option<String>,
        at: Instant,
    ) -> NewEvent {
        NewEvent {
            kind,
            occurred_at: at,
            data: EventData {
                delivery: None,
                schedule_id: reminder.key.schedule.to_string(),
                occurrence: reminder.key.occurrence.0,
                recipient: None,
                channel: None,
                due_at: reminder.due_at.0,
                reason,
                attempt: None,
            },
        }
    }
}

impl EventData {
    fn of_key(key: &DeliveryKey, due_at: Instant) -> EventData {
        EventData {
            delivery: None,
            schedule_id: key.schedule.to_string(),
            occurrence: key.occurrence.0,
            recipient: Some(key.recipient.to_string()),
            channel: Some(key.channel),
            due_at,
            reason: None,
            attempt: None,
        }
    }
}

/// An event in a tenant's log: its place in the order of occurrence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    pub seq: u64,
    pub kind: EventKind,
    pub occurred_at: Instant,
    pub data: EventData,
}

impl StoredEvent {
    /// The `webhook-id`: the same on every attempt and every replay, so a
    /// receiver can tell a repeat.
    pub fn webhook_id(&self) -> String {
        format!("evt_{}", self.seq)
    }

    /// The body posted: the Standard Webhooks shape (`type`, `timestamp`, `data`).
    pub fn body(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Body<'a> {
            id: String,
            #[serde(rename = "type")]
            kind: &'static str,
            timestamp: &'a Instant,
            data: &'a EventData,
        }
        serde_json::to_vec(&Body {
            id: self.webhook_id(),
            kind: self.kind.as_str(),
            timestamp: &self.occurred_at,
            data: &self.data,
        })
        .expect("an event serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_unknown_types_are_named() {
        let kinds: EventKinds = [EventKind::Failed, EventKind::Redriven]
            .into_iter()
            .collect();
        assert_eq!(kinds.encode(), "delivery.failed,delivery.redriven");
        assert_eq!(EventKinds::decode("types", &kinds.encode()), Ok(kinds));
        assert!(!kinds.contains(EventKind::Delivered));
        let err = EventKinds::decode("types", "delivery.sent").unwrap_err();
        assert_eq!(err.field, "types");
        assert!(err.problem.contains("delivery.sent"), "{}", err.problem);
        assert_eq!(EventKinds::all().iter().count(), 6);
    }

    #[test]
    fn backoff_doubles_to_five_minutes_and_disables_after_the_limit() {
        assert_eq!(retry_after(1), Duration::from_secs(1));
        assert_eq!(retry_after(4), Duration::from_secs(8));
        assert_eq!(retry_after(12), Duration::from_secs(300));
        assert_eq!(retry_after(u32::MAX), Duration::from_secs(300));
        let now = Instant::default();
        let mut p = EndpointProgress::starting_at(0, now);
        // A two-minute outage is about 7 failures: never disabled.
        for _ in 0..DISABLE_AFTER_FAILURES - 1 {
            p = p.failed(0, "HTTP 503".into(), now);
        }
        assert_eq!(p.status, EndpointStatus::Enabled);
        p = p.failed(0, "HTTP 503".into(), now);
        assert!(matches!(p.status, EndpointStatus::Disabled { .. }));
        assert_eq!(p.succeeded(3, now).failures, 0);
    }

    #[test]
    fn a_rotated_secret_signs_until_the_overlap_ends() {
        let mut rng = rand::thread_rng();
        let now = Instant::default();
        let first = EndpointSecrets {
            current: WebhookSecret::generate(&mut rng),
            previous: None,
        };
        let rotated = first.rotate(WebhookSecret::generate(&mut rng), now);
        assert_eq!(rotated.signing(now).len(), 2);
        assert_eq!(rotated.signing(now)[1], &first.current);
        let later = now + chrono::Duration::hours(25);
        assert_eq!(rotated.signing(later).len(), 1);
    }
}
