//! The domain: tenants, users, schedules, reminder rules, reminder instances and deliveries.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use chrono::Duration;
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::error::ValidationError;
pub use crate::time::{from_millis, DueAt, Instant, Occurrence};

macro_rules! id_type {
    ($(#[$m:meta])* $name:ident, $what:literal, $check:path) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        // Shared, not owned: every delivery, claim and record of a meeting
        // carries the same ids, and a clone is a count, not an allocation.
        pub struct $name(Arc<str>);

        impl $name {
            /// Parses and validates an identifier; `field` names it in the error.
            pub fn parse_field(field: &str, s: &str) -> Result<Self, ValidationError> {
                $check(s).map_err(|problem| ValidationError::new(field, problem))?;
                Ok(Self(s.into()))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
        impl FromStr for $name {
            type Err = ValidationError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse_field($what, s)
            }
        }
        impl TryFrom<String> for $name {
            type Error = ValidationError;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                s.parse()
            }
        }
        impl From<$name> for String {
            fn from(v: $name) -> String {
                String::from(&*v.0)
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

/// Tenant ids become database names, so they are kept to lowercase letters, digits, `_` and `-`.
fn check_tenant_id(s: &str) -> Result<(), String> {
    let mut chars = s.chars();
    match chars.next() {
        None => return Err("must not be empty".into()),
        Some(c) if !c.is_ascii_lowercase() => {
            return Err(format!("must start with a lowercase letter, got {s:?}"))
        }
        _ => {}
    }
    if s.len() > 40 {
        return Err(format!("must be at most 40 characters, got {}", s.len()));
    }
    if let Some(bad) = s
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "may contain only a-z, 0-9, '_' and '-', found {bad:?}"
        ));
    }
    Ok(())
}

/// The rule for new tenant ids (`toki tenant create`), stricter than what
/// loads: lowercase letters and digits in words joined by single hyphens,
/// starting with a letter. No `_`, so that `-` → `_` (database names) is
/// one to one among new ids.
fn check_new_tenant_id(s: &str) -> Result<(), String> {
    check_tenant_id(s)?;
    if s.contains('_') {
        return Err(format!("new tenant ids use '-', not '_', got {s:?}"));
    }
    if s.ends_with('-') || s.contains("--") {
        return Err(format!(
            "hyphens must join letters or digits (none doubled or at the end), got {s:?}"
        ));
    }
    Ok(())
}

/// Ids that have the same canonical form would share a database.
fn canonical_tenant_id(s: &str) -> String {
    s.replace('-', "_")
}

/// Entity ids travel inside `#`- and `,`-separated keys and message attributes.
fn check_entity_id(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > 128 {
        return Err(format!("must be at most 128 characters, got {}", s.len()));
    }
    if let Some(bad) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '@')))
    {
        return Err(format!(
            "may contain only letters, digits and _ - . : @, found {bad:?}"
        ));
    }
    Ok(())
}

id_type!(
    /// A customer of the SaaS; owns one database (bridge model).
    TenantId, "tenant", check_tenant_id
);
/// A tenant id's canonical form: what names its database
/// (`toki_{tenant}`) and what two tenants must not share. `acme-corp` and
/// `acme_corp` are both `acme_corp`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CanonicalTenantId(String);

impl CanonicalTenantId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CanonicalTenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TenantId {
    /// Parses an id for a new tenant: [`check_new_tenant_id`]'s rule. Ids
    /// that loaded before it (with `_`, `--`) still parse with `parse`.
    pub fn parse_new(s: &str) -> Result<Self, ValidationError> {
        check_new_tenant_id(s).map_err(|problem| ValidationError::new("tenant", problem))?;
        Ok(Self(s.into()))
    }

    /// Whether this id would be accepted for a new tenant.
    pub fn check_new(&self) -> Result<(), ValidationError> {
        Self::parse_new(&self.0).map(drop)
    }

    pub fn canonical(&self) -> CanonicalTenantId {
        CanonicalTenantId(canonical_tenant_id(&self.0))
    }

    /// The first of `existing` that is not `self` but has its canonical form.
    pub fn collides_with<'a>(
        &self,
        existing: impl IntoIterator<Item = &'a TenantId>,
    ) -> Option<&'a TenantId> {
        let mine = self.canonical();
        existing
            .into_iter()
            .find(|t| *t != self && t.canonical() == mine)
    }
}

/// Key names are shown in `toki tenant key list` and typed in `revoke`.
fn check_key_name(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 40 {
        return Err(format!("must be 1 to 40 characters, got {}", s.len()));
    }
    if let Some(bad) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(format!(
            "may contain only letters, digits and _ - ., found {bad:?}"
        ));
    }
    Ok(())
}

id_type!(
    /// The name of one of a tenant's API keys (`default`, `ci-2026`).
    KeyName, "key name", check_key_name
);
id_type!(
    /// A user within a tenant.
    UserId, "user", check_entity_id
);
id_type!(
    /// A schedule (calendar event) within a tenant.
    ScheduleId, "schedule", check_entity_id
);
id_type!(
    /// One of a tenant's delivery-event endpoints, named by the tenant.
    EndpointId, "endpoint", check_entity_id
);

/// How a reminder reaches its recipient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    Mail,
    Chat,
    Slack,
    /// An HTTPS endpoint of the tenant's (per user, else the tenant's default), signed.
    Webhook,
}

impl Channel {
    pub const ALL: [Channel; 4] = [
        Channel::Mail,
        Channel::Chat,
        Channel::Slack,
        Channel::Webhook,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Mail => "mail",
            Channel::Chat => "chat",
            Channel::Slack => "slack",
            Channel::Webhook => "webhook",
        }
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Channel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "mail" => Ok(Channel::Mail),
            "chat" => Ok(Channel::Chat),
            "slack" => Ok(Channel::Slack),
            "webhook" => Ok(Channel::Webhook),
            other => Err(format!(
                "unknown channel {other:?} (expected mail, chat, slack or webhook)"
            )),
        }
    }
}

/// A non-empty, ordered, duplicate-free set of channels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChannelSet(Vec<Channel>);

impl ChannelSet {
    pub fn new(field: &str, channels: &[Channel]) -> Result<Self, ValidationError> {
        if channels.is_empty() {
            return Err(ValidationError::new(
                field,
                "must name at least one channel",
            ));
        }
        let mut v = channels.to_vec();
        v.sort();
        v.dedup();
        Ok(Self(v))
    }
    pub fn iter(&self) -> impl Iterator<Item = Channel> + '_ {
        self.0.iter().copied()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Wire form: `mail,slack`.
    pub fn encode(&self) -> String {
        self.0
            .iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
    pub fn decode(field: &str, s: &str) -> Result<Self, ValidationError> {
        let parsed: Result<Vec<Channel>, String> = s.split(',').map(str::parse).collect();
        Self::new(field, &parsed.map_err(|e| ValidationError::new(field, e))?)
    }
}

/// A person who can receive reminders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    pub id: UserId,
    pub name: String,
    pub email: Option<String>,
    pub slack_user_id: Option<String>,
    /// Where the webhook channel posts this user's reminders; none: the tenant's default endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<crate::egress::EndpointUrl>,
    pub time_zone: Tz,
    pub locale: String,
    /// Channels the user turned off: nothing is sent to them there.
    #[serde(default)]
    pub channels_off: BTreeSet<Channel>,
}

/// Stored form of a user's channels turned off: `slack,mail`, empty for none.
pub fn encode_channels_off(off: &BTreeSet<Channel>) -> String {
    off.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(",")
}

/// Reads [`encode_channels_off`]'s form back; the error names `field`.
pub fn decode_channels_off(field: &str, s: &str) -> Result<BTreeSet<Channel>, ValidationError> {
    s.split(',')
        .filter(|c| !c.is_empty())
        .map(|c| {
            c.parse()
                .map_err(|e: String| ValidationError::new(field, e))
        })
        .collect()
}

/// "Remind `minutes_before` the start, by these channels."
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReminderRule {
    pub minutes_before: u32,
    pub channels: ChannelSet,
}

/// A calendar entry with its participants and reminder rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub id: ScheduleId,
    pub title: String,
    pub body: String,
    /// The first occurrence's instant (a one-off's only one).
    pub starts_at: Instant,
    pub time_zone: Tz,
    pub participants: Vec<UserId>,
    pub rules: Vec<ReminderRule>,
    /// How it repeats; `None` for a one-off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recurrence: Option<Recurrence>,
    /// Incremented by every write; a queued reminder with an older version is stale.
    pub version: i64,
}

/// How a schedule repeats, as validated and stored: the rule text and the
/// local start, so the series is expanded again (never stored expanded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recurrence {
    /// The RRULE, normalised (`FREQ=WEEKLY;BYDAY=MO`).
    pub rrule: String,
    /// Local start times left out (`2026-12-28T09:00:00`).
    #[serde(default)]
    pub exdates: Vec<String>,
    /// The local start the rule repeats, in the schedule's zone.
    pub local_start: chrono::NaiveDateTime,
    #[serde(default)]
    pub dst: crate::recurrence::DstPolicy,
    /// Single occurrences moved, edited or cancelled, by their original instant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exceptions: Vec<OccurrenceException>,
}

/// One occurrence of a series changed on its own (RFC 5545's RECURRENCE-ID).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OccurrenceException {
    /// The instant the rule gives this occurrence: its identity.
    pub original: Instant,
    /// Cancelled: no occurrence, no reminders.
    #[serde(default)]
    pub cancelled: bool,
    /// Moved to this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<Instant>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// One occurrence as it will happen: where the rule put it, when it starts
/// (moved or not) and what it is called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledOccurrence {
    pub original: Instant,
    pub starts_at: Instant,
    pub title: String,
    pub body: String,
    pub exception: bool,
}

/// Why a stored series could not be expanded (it was valid when written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("schedule {schedule}: {reason}")]
pub struct SeriesError {
    pub schedule: ScheduleId,
    pub reason: String,
}

impl Recurrence {
    /// The series this describes in `time_zone`.
    pub fn series(&self, time_zone: Tz) -> Result<crate::recurrence::Series, ValidationError> {
        let rule =
            crate::recurrence::RecurrenceRule::parse("recurrence", &self.rrule, &self.exdates)?;
        Ok(crate::recurrence::Series {
            start: self.local_start,
            time_zone,
            rule: Some(rule),
            dst: self.dst,
        })
    }

    pub fn exception(&self, original: Instant) -> Option<&OccurrenceException> {
        self.exceptions.iter().find(|e| e.original == original)
    }
}

impl Schedule {
    /// Occurrences starting in `[from, to)`, exceptions applied, in start
    /// order: a moved occurrence counts where it now starts.
    pub fn occurrences_between(
        &self,
        from: Instant,
        to: Instant,
    ) -> Result<Vec<ScheduledOccurrence>, SeriesError> {
        let plain = |original: Instant, starts_at: Instant| ScheduledOccurrence {
            original,
            starts_at,
            title: self.title.clone(),
            body: self.body.clone(),
            exception: false,
        };
        let Some(rec) = &self.recurrence else {
            let one = plain(self.starts_at, self.starts_at);
            return Ok(if one.starts_at >= from && one.starts_at < to {
                vec![one]
            } else {
                vec![]
            });
        };
        let fail = |reason: String| SeriesError {
            schedule: self.id.clone(),
            reason,
        };
        let series = rec
            .series(self.time_zone)
            .map_err(|e| fail(e.to_string()))?;
        // A moved occurrence may come from outside the window: look a little
        // wider, by the furthest any exception moved.
        let reach = rec
            .exceptions
            .iter()
            .filter_map(|e| e.starts_at.map(|s| (s - e.original).abs()))
            .max()
            .unwrap_or_else(Duration::zero);
        let mut out = Vec::new();
        let wide = |t: Instant, d: Duration| t.checked_add_signed(d).unwrap_or(t);
        for o in series
            .between(wide(from, -reach), wide(to, reach))
            .map_err(|e| fail(e.0))?
        {
            let occurrence = match rec.exception(o.at) {
                None => plain(o.at, o.at),
                Some(e) if e.cancelled => continue,
                Some(e) => ScheduledOccurrence {
                    original: o.at,
                    starts_at: e.starts_at.unwrap_or(o.at),
                    title: e.title.clone().unwrap_or_else(|| self.title.clone()),
                    body: e.body.clone().unwrap_or_else(|| self.body.clone()),
                    exception: true,
                },
            };
            if occurrence.starts_at >= from && occurrence.starts_at < to {
                out.push(occurrence);
            }
        }
        out.sort_by_key(|o| o.starts_at);
        Ok(out)
    }
}

/// Identity of one reminder instance: (schedule, occurrence, offset) within a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ReminderKey {
    pub tenant: TenantId,
    pub schedule: ScheduleId,
    pub occurrence: Occurrence,
    pub minutes_before: u32,
}

impl fmt::Display for ReminderKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}#{}#{}#{}",
            self.tenant,
            self.schedule,
            self.occurrence.millis(),
            self.minutes_before
        )
    }
}

/// A reminder instance as mirrored into the index and carried by a queue
/// message: what the scanner and the daemon need to find it, nothing more.
/// The recipients are not here: the daemon reads the schedule's participants
/// at this version from the tenant database (a version that no longer matches
/// makes the message stale), so a message stays small however large the meeting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reminder {
    pub key: ReminderKey,
    pub due_at: DueAt,
    pub version: i64,
    pub channels: ChannelSet,
}

impl Reminder {
    pub fn due_for(occurrence: Occurrence, minutes_before: u32) -> DueAt {
        DueAt(occurrence.0 - Duration::minutes(i64::from(minutes_before)))
    }

    /// Its deliveries to `recipients`: one per recipient and channel.
    pub fn deliveries_to<'a>(
        &'a self,
        recipients: &'a [UserId],
    ) -> impl Iterator<Item = DeliveryKey> + 'a {
        recipients.iter().flat_map(move |recipient| {
            self.channels.iter().map(move |channel| DeliveryKey {
                schedule: self.key.schedule.clone(),
                occurrence: self.key.occurrence,
                purpose: DeliveryPurpose::Reminder {
                    minutes_before: self.key.minutes_before,
                },
                recipient: recipient.clone(),
                channel,
            })
        })
    }
}

/// Where a reminder stands in the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IndexStatus {
    /// Waiting for the scanner.
    Pending,
    /// Claimed by a scanner or registrar until `lease_until`; then it may be claimed again.
    Enqueuing { lease_until: Instant },
    /// Sent to the delay queue.
    Enqueued,
}

/// A row of the reminder index: the reminder and its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedReminder {
    pub reminder: Reminder,
    pub status: IndexStatus,
}

/// One delivery: a reminder instance to one recipient by one channel. This is
/// its whole identity, in memory, in storage and on the wire: the schedule
/// version that sends it is an attribute of the delivery, not part of it, so
/// the same reminder to the same person by the same channel is one delivery
/// whichever version of the schedule carries it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeliveryKey {
    pub schedule: ScheduleId,
    pub occurrence: Occurrence,
    #[serde(rename = "minutes_before", with = "purpose_code")]
    pub purpose: DeliveryPurpose,
    pub recipient: UserId,
    pub channel: Channel,
}

impl DeliveryKey {
    /// A change notice's delivery, not a reminder's.
    pub fn is_change_notice(&self) -> bool {
        self.purpose == DeliveryPurpose::ChangeNotice
    }
}

/// What a delivery tells: a reminder some minutes before its occurrence, or
/// that a schedule changed (the occurrence of its key is then the notice's
/// instant). Notices and reminders share the delivery rows, claims and
/// reports without ever sharing a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeliveryPurpose {
    Reminder { minutes_before: u32 },
    ChangeNotice,
}

impl DeliveryPurpose {
    /// A change notice's code where a reminder keeps its minutes: none can
    /// have it (offsets are at most a few weeks in minutes).
    const CHANGE_NOTICE_CODE: u32 = u32::MAX;

    /// As rows, messages and key texts keep it: a reminder's minutes before,
    /// or a code no reminder can have for a change notice.
    pub fn code(self) -> u32 {
        match self {
            DeliveryPurpose::Reminder { minutes_before } => minutes_before,
            DeliveryPurpose::ChangeNotice => Self::CHANGE_NOTICE_CODE,
        }
    }

    pub fn from_code(code: u32) -> Self {
        match code {
            Self::CHANGE_NOTICE_CODE => DeliveryPurpose::ChangeNotice,
            minutes_before => DeliveryPurpose::Reminder { minutes_before },
        }
    }
}

/// A purpose in JSON as its code, as the field `minutes_before` always was.
mod purpose_code {
    use super::DeliveryPurpose;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(p: &DeliveryPurpose, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(p.code())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DeliveryPurpose, D::Error> {
        u32::deserialize(d).map(DeliveryPurpose::from_code)
    }
}

impl fmt::Display for DeliveryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}#{}#{}#{}#{}",
            self.schedule,
            self.occurrence.millis(),
            self.purpose.code(),
            self.recipient,
            self.channel
        )
    }
}

impl DeliveryKey {
    /// As logs and traces show it: the recipient as a pseudonym
    /// (crate::redact), the rest as it is.
    pub fn logged(&self) -> LoggedDelivery<'_> {
        LoggedDelivery(self)
    }
}

/// A delivery key fit for a log line (`DeliveryKey::logged`).
pub struct LoggedDelivery<'a>(&'a DeliveryKey);

impl fmt::Display for LoggedDelivery<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = self.0;
        write!(
            f,
            "{}#{}#{}#{}#{}",
            k.schedule,
            k.occurrence.millis(),
            k.purpose.code(),
            crate::redact::Pseudonym::of(k.recipient.as_str()),
            k.channel
        )
    }
}

/// A delivery to claim for sending: which one, as sent by which version, due when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryClaim {
    pub key: DeliveryKey,
    pub version: i64,
    pub due_at: DueAt,
}

/// What became of one delivery. Stored as one row per delivery, never as counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Claimed by a worker that is sending it.
    Sending,
    Delivered,
    /// The schedule changed or was deleted after the reminder was enqueued.
    Stale,
    /// Cannot ever be delivered (e.g. the recipient has no address for the channel).
    Undeliverable,
    /// Failed for now; the message comes back and it is tried again. Counts
    /// towards the delivery's failure budget.
    Failed,
    /// The service asked to slow down (429); tried again when it said, without
    /// counting towards the failure budget.
    Throttled,
    /// Not attempted: its channel's circuit was open. Tried again when it
    /// closes; not a failure.
    Deferred,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Sending => "sending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Stale => "stale",
            DeliveryStatus::Undeliverable => "undeliverable",
            DeliveryStatus::Failed => "failed",
            DeliveryStatus::Throttled => "throttled",
            DeliveryStatus::Deferred => "deferred",
        }
    }
}

impl FromStr for DeliveryStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "sending" => Self::Sending,
            "delivered" => Self::Delivered,
            "stale" => Self::Stale,
            "undeliverable" => Self::Undeliverable,
            "failed" => Self::Failed,
            "throttled" => Self::Throttled,
            "deferred" => Self::Deferred,
            other => return Err(format!("unknown delivery status {other:?}")),
        })
    }
}

impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The final word on one delivery attempt, as the daemon records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryOutcome {
    pub key: DeliveryKey,
    /// The schedule version the attempt was made for.
    pub version: i64,
    pub due_at: DueAt,
    pub status: DeliveryStatus,
    pub at: Instant,
    pub detail: Option<String>,
}

/// Counts of delivery rows for one channel and status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryCount {
    pub channel: Channel,
    pub status: DeliveryStatus,
    pub count: u64,
}

/// The current state of a schedule as the daemon needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleSnapshot {
    pub id: ScheduleId,
    pub title: String,
    pub body: String,
    pub version: i64,
    /// The participants at this version, in order.
    pub participants: Vec<UserId>,
    /// A series' occurrences moved or edited on their own.
    pub exceptions: Vec<OccurrenceException>,
}

impl ScheduleSnapshot {
    /// Title and body of the occurrence starting at `occurrence`: an edited
    /// occurrence's own, else the schedule's.
    pub fn texts_at(&self, occurrence: Instant) -> (&str, &str) {
        let edited = self
            .exceptions
            .iter()
            .find(|e| !e.cancelled && e.starts_at.unwrap_or(e.original) == occurrence);
        match edited {
            Some(e) => (
                e.title.as_deref().unwrap_or(&self.title),
                e.body.as_deref().unwrap_or(&self.body),
            ),
            None => (&self.title, &self.body),
        }
    }
}

#[cfg(test)]
mod tenant_id_tests {
    use super::TenantId;

    fn id(s: &str) -> TenantId {
        s.parse().unwrap()
    }

    #[test]
    fn new_ids_are_words_joined_by_single_hyphens() {
        for ok in ["acme", "acme-corp", "a1-b2-c3", "x"] {
            assert!(TenantId::parse_new(ok).is_ok(), "{ok}");
        }
        let too_long = "a".repeat(41);
        for bad in [
            "acme_corp",
            "acme--corp",
            "acme-",
            "-acme",
            "1acme",
            "Acme",
            "",
            &too_long,
        ] {
            assert!(TenantId::parse_new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ids_from_before_the_rule_still_load() {
        for old in ["acme_corp", "acme--corp", "acme-"] {
            assert!(old.parse::<TenantId>().is_ok(), "{old}");
            assert!(id(old).check_new().is_err(), "{old}");
        }
    }

    #[test]
    fn the_canonical_form_is_the_database_names() {
        assert_eq!(id("acme-corp").canonical(), id("acme_corp").canonical());
        assert_eq!(id("acme-corp").canonical().as_str(), "acme_corp");
        assert_ne!(id("acme-corp").canonical(), id("acmecorp").canonical());
    }

    #[test]
    fn a_collision_names_the_existing_id_but_not_the_same_id() {
        let existing = [id("acme_corp"), id("globex")];
        assert_eq!(id("acme-corp").collides_with(&existing), Some(&existing[0]));
        assert_eq!(id("acme_corp").collides_with(&existing), None);
        assert_eq!(id("initech").collides_with(&existing), None);
    }
}
