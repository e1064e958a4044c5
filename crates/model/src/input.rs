//! What clients send to the registrar, and its validation into domain types.
//! Every error names the field at fault, with its path (`reminders[1].channels[0]`).

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Duration, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::domain::{
    Channel, ChannelSet, Instant, Recurrence, ReminderRule, Schedule, ScheduleId, User, UserId,
};
use crate::egress::EndpointUrl;
use crate::error::ValidationError;
use crate::recurrence::{
    apply_policy, parse_local, resolve_local, DstPolicy, LocalTime, OccurrenceAt, RecurrenceRule,
    Series,
};
use crate::slack::SlackUserId;

// Input limits: every one is answered with a 422 naming the field and the
// limit (README, "Input limits"); nothing past them reaches a store.

/// Participants per schedule.
pub const MAX_PARTICIPANTS: usize = 1_000;
/// Reminder rules per schedule (each is a row per occurrence in the index).
pub const MAX_RULES: usize = 20;
/// Characters of a schedule's title and body.
pub const MAX_TITLE_CHARS: usize = 500;
pub const MAX_BODY_CHARS: usize = 10_000;
/// Characters of a user's name.
pub const MAX_NAME_CHARS: usize = 200;

/// The longest offset a reminder may have: 4 weeks.
pub const MAX_MINUTES_BEFORE: i64 = 4 * 7 * 24 * 60;

// Calendar bounds: each keeps what one request can make the expander do
// proportional to what it asks for (issue 33).

/// The earliest `starts_at`, on the schedule's wall clock.
pub const EARLIEST_START: &str = "2000-01-01T00:00:00";
/// How far ahead of now `starts_at` may be: 10 years.
pub const MAX_START_AHEAD_DAYS: i64 = 3_653;
/// How long a series may last: UNTIL and every EXDATE within 100 years of
/// `starts_at`.
pub const MAX_SERIES_DAYS: i64 = 36_525;
/// The largest COUNT (a rule with COUNT is expanded from its start).
pub const MAX_COUNT: u32 = 1_000;
/// EXDATEs per series.
pub const MAX_EXDATES: usize = 500;
/// The longest window listed at once.
pub const MAX_LIST_DAYS: i64 = 400;
/// The most occurrences one listing returns.
pub const MAX_LISTED: usize = 1_000;
/// How far one occurrence may be moved from where the rule puts it: a
/// listing widens its window by the furthest move of the series, so an
/// unbounded move would make every listing of it expand that far.
pub const MAX_MOVE_DAYS: i64 = 366;
/// Occurrences moved, edited or cancelled one by one, per series: each
/// expansion and write of the series carries them all.
pub const MAX_EXCEPTIONS: usize = 500;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserInput {
    pub name: String,
    #[serde(default)]
    pub email: Option<String>,
    #[serde(default)]
    pub slack_user_id: Option<String>,
    /// The user's own endpoint for the webhook channel (https; unset: the tenant's default).
    #[serde(default)]
    pub webhook_url: Option<String>,
    #[serde(default = "default_tz")]
    pub time_zone: String,
    #[serde(default = "default_locale")]
    pub locale: String,
    /// Channels turned on or off: `{"slack": false}`; a channel not named
    /// (or null, like the map itself) is on.
    #[serde(default, deserialize_with = "channel_switches")]
    pub channels: BTreeMap<String, bool>,
}

/// `channels` as the API documents it: the map and each value may be null
/// (on); the keys are kept for validation.
fn channel_switches<'de, D>(d: D) -> Result<BTreeMap<String, bool>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let map: Option<BTreeMap<String, Option<bool>>> = Deserialize::deserialize(d)?;
    Ok(map
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.unwrap_or(true)))
        .collect())
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleInput {
    pub minutes_before: i64,
    pub channels: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleInput {
    pub title: String,
    #[serde(default)]
    pub body: String,
    /// RFC 3339 with an offset, e.g. `2026-11-23T09:00:00+09:00`.
    pub starts_at: String,
    #[serde(default = "default_tz")]
    pub time_zone: String,
    pub participants: Vec<String>,
    pub reminders: Vec<RuleInput>,
    /// Repeats the schedule (RFC 5545 RRULE and EXDATEs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recurrence: Option<RecurrenceInput>,
    /// What to do with local times a DST change skips or repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<DstInput>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecurrenceInput {
    /// `FREQ=WEEKLY;BYDAY=MO,WE;UNTIL=20270101T000000Z`
    pub rrule: String,
    /// Local start times left out: `2026-12-28T09:00:00`.
    #[serde(default)]
    pub exdates: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DstInput {
    /// `shift_forward` (default) or `skip`.
    #[serde(default)]
    pub nonexistent: Option<String>,
    /// `first` (default), `last` or `both`.
    #[serde(default)]
    pub ambiguous: Option<String>,
}

fn default_tz() -> String {
    "UTC".into()
}
fn default_locale() -> String {
    "en".into()
}

fn parse_tz(field: &str, s: &str) -> Result<Tz, ValidationError> {
    s.parse::<Tz>()
        .map_err(|_| ValidationError::new(field, format!("{s:?} is not an IANA time zone")))
}

fn non_empty(field: &str, s: &str, max: usize) -> Result<String, ValidationError> {
    let t = s.trim();
    if t.is_empty() {
        return Err(ValidationError::new(field, "must not be empty"));
    }
    if t.chars().count() > max {
        return Err(ValidationError::new(
            field,
            format!("must be at most {max} characters"),
        ));
    }
    Ok(t.to_owned())
}

impl UserInput {
    pub fn validate(&self, id: &UserId) -> Result<User, ValidationError> {
        let id = id.clone();
        let name = non_empty("name", &self.name, MAX_NAME_CHARS)?;
        let email = match self.email.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(e) => {
                let ok = e.len() <= 254
                    && e.split_once('@').is_some_and(|(l, d)| {
                        !l.is_empty() && d.contains('.') && !d.starts_with('.') && !d.ends_with('.')
                    })
                    && !e.contains(char::is_whitespace);
                if !ok {
                    return Err(ValidationError::new(
                        "email",
                        format!("{e:?} is not an e-mail address"),
                    ));
                }
                Some(e.to_owned())
            }
        };
        let slack_user_id = match self.slack_user_id.as_deref().map(str::trim) {
            None | Some("") => None,
            // A user id only: a channel's would post into the channel.
            Some(s) => Some(
                SlackUserId::parse(s)
                    .map_err(|why| ValidationError::new("slack_user_id", why))?
                    .into(),
            ),
        };
        let webhook_url = EndpointUrl::parse_optional("webhook_url", self.webhook_url.as_deref())?;
        let time_zone = parse_tz("time_zone", &self.time_zone)?;
        let locale = non_empty("locale", &self.locale, 35)?;
        let mut channels_off = std::collections::BTreeSet::new();
        for (name, on) in &self.channels {
            let channel: Channel = name
                .parse()
                .map_err(|e: String| ValidationError::new(format!("channels.{name}"), e))?;
            if !on {
                channels_off.insert(channel);
            }
        }
        Ok(User {
            id,
            name,
            email,
            slack_user_id,
            webhook_url,
            time_zone,
            locale,
            channels_off,
        })
    }
}

impl DstInput {
    pub fn validate(&self) -> Result<DstPolicy, ValidationError> {
        let mut policy = DstPolicy::default();
        if let Some(s) = &self.nonexistent {
            policy.nonexistent = s
                .parse()
                .map_err(|e| ValidationError::new("dst.nonexistent", e))?;
        }
        if let Some(s) = &self.ambiguous {
            policy.ambiguous = s
                .parse()
                .map_err(|e| ValidationError::new("dst.ambiguous", e))?;
        }
        Ok(policy)
    }
}

impl ScheduleInput {
    /// The schedule's series: its local start in its zone, its rule and DST
    /// policy. `starts_at` is a local date-time (`2026-11-23T09:00:00`) read in
    /// `time_zone`, or an RFC 3339 instant; a recurring schedule's offset must
    /// be the zone's at that time, since the rule repeats the local time.
    /// `now` bounds how far ahead the start may be.
    pub fn series(&self, now: Instant) -> Result<Series, ValidationError> {
        let time_zone = parse_tz("time_zone", &self.time_zone)?;
        let dst = self.dst.clone().unwrap_or_default().validate()?;
        let start = match DateTime::parse_from_rfc3339(&self.starts_at) {
            Ok(at) => {
                let local = at.naive_local();
                if self.recurrence.is_some() {
                    let zone_offset = at.with_timezone(&time_zone).offset().fix();
                    if zone_offset != *at.offset() {
                        return Err(ValidationError::new(
                            "starts_at",
                            format!(
                                "offset {} does not agree with {time_zone} (which is at {zone_offset} then); \
                                 give a local date-time like {} or the zone's offset",
                                at.offset(),
                                local.format("%Y-%m-%dT%H:%M:%S")
                            ),
                        ));
                    }
                }
                at.with_timezone(&time_zone).naive_local()
            }
            Err(_) => parse_local("starts_at", &self.starts_at).map_err(|_| {
                ValidationError::new(
                    "starts_at",
                    format!(
                        "{:?} is neither a local date-time (2026-11-23T09:00:00) nor an RFC 3339 instant (2026-11-23T09:00:00+09:00)",
                        self.starts_at
                    ),
                )
            })?,
        };
        check_start_bounds(start, time_zone, now)?;
        if let Some(r) = &self.recurrence {
            if r.exdates.len() > MAX_EXDATES {
                return Err(ValidationError::new(
                    "recurrence.exdates",
                    format!("{} dates; at most {MAX_EXDATES}", r.exdates.len()),
                ));
            }
        }
        let rule = self
            .recurrence
            .as_ref()
            .map(|r| RecurrenceRule::parse("recurrence", &r.rrule, &r.exdates))
            .transpose()?;
        let series = Series {
            start,
            time_zone,
            rule,
            dst,
        };
        let exdates = self.recurrence.as_ref().map_or(&[][..], |r| &r.exdates[..]);
        check_rule_bounds(&series, exdates)?;
        series.check_start("starts_at")?;
        Ok(series)
    }

    /// A one-off schedule's start: the instant given when `starts_at` has an
    /// offset, else its local time under the DST policy (the first instant of
    /// a repeated time, even under `both`: a one-off happens once).
    pub fn one_off_at(&self, series: &Series) -> Result<OccurrenceAt, ValidationError> {
        time_in("starts_at", &self.starts_at, series.time_zone, series.dst)
    }

    /// Validates into a schedule at version 0 (the store assigns the real version).
    /// `now` (the caller's clock) bounds how far ahead `starts_at` may be.
    pub fn validate(&self, id: &ScheduleId, now: Instant) -> Result<Schedule, ValidationError> {
        let id = id.clone();
        let title = non_empty("title", &self.title, MAX_TITLE_CHARS)?;
        if self.body.chars().count() > MAX_BODY_CHARS {
            return Err(ValidationError::new(
                "body",
                format!("must be at most {MAX_BODY_CHARS} characters"),
            ));
        }
        if self.reminders.len() > MAX_RULES {
            return Err(ValidationError::new(
                "reminders",
                format!(
                    "{} reminder rules; at most {MAX_RULES}",
                    self.reminders.len()
                ),
            ));
        }
        let series = self.series(now)?;
        let (starts_at, recurrence) = match &self.recurrence {
            None => (self.one_off_at(&series)?.at, None),
            Some(r) => {
                let (first, recurrence) = first_of_series(&series, r)?;
                (first, Some(recurrence))
            }
        };
        // Instants are kept to the millisecond everywhere (storage and wire).
        let starts_at = crate::domain::from_millis("starts_at", starts_at.timestamp_millis())?;
        let time_zone = series.time_zone;
        let participants = self.participant_ids()?;
        let rules = self.reminder_rules()?;
        Ok(Schedule {
            id,
            title,
            body: self.body.clone(),
            starts_at,
            time_zone,
            participants,
            rules,
            recurrence,
            version: 0,
        })
    }

    /// The participants as user ids: at most [`MAX_PARTICIPANTS`], none twice.
    fn participant_ids(&self) -> Result<Vec<UserId>, ValidationError> {
        if self.participants.len() > MAX_PARTICIPANTS {
            return Err(ValidationError::new(
                "participants",
                format!(
                    "{} participants; at most {MAX_PARTICIPANTS}",
                    self.participants.len()
                ),
            ));
        }
        let mut seen = HashSet::new();
        let mut participants = Vec::with_capacity(self.participants.len());
        for (i, p) in self.participants.iter().enumerate() {
            let field = format!("participants[{i}]");
            let user = UserId::parse_field(&field, p)?;
            if !seen.insert(user.clone()) {
                return Err(ValidationError::new(
                    field,
                    format!("{p:?} is listed twice"),
                ));
            }
            participants.push(user);
        }
        Ok(participants)
    }

    /// The reminder rules: offsets in range and none twice, channels known.
    fn reminder_rules(&self) -> Result<Vec<ReminderRule>, ValidationError> {
        let mut offsets = HashSet::new();
        let mut rules = Vec::with_capacity(self.reminders.len());
        for (i, r) in self.reminders.iter().enumerate() {
            let field = format!("reminders[{i}].minutes_before");
            if !(0..=MAX_MINUTES_BEFORE).contains(&r.minutes_before) {
                return Err(ValidationError::new(
                    field,
                    format!(
                        "{} is out of range 0..={MAX_MINUTES_BEFORE}",
                        r.minutes_before
                    ),
                ));
            }
            if !offsets.insert(r.minutes_before) {
                return Err(ValidationError::new(
                    field,
                    format!("{} minutes is listed twice", r.minutes_before),
                ));
            }
            rules.push(r.validate(i)?);
        }
        Ok(rules)
    }
}

impl RuleInput {
    /// The rule at `reminders[i]`, its offset already checked; every channel
    /// must be known.
    fn validate(&self, i: usize) -> Result<ReminderRule, ValidationError> {
        let mut channels = Vec::with_capacity(self.channels.len());
        for (j, c) in self.channels.iter().enumerate() {
            channels.push(
                c.parse::<Channel>().map_err(|e| {
                    ValidationError::new(format!("reminders[{i}].channels[{j}]"), e)
                })?,
            );
        }
        Ok(ReminderRule {
            minutes_before: self.minutes_before as u32,
            channels: ChannelSet::new(&format!("reminders[{i}].channels"), &channels)?,
        })
    }
}

/// `starts_at` on the wall clock: not before [`EARLIEST_START`], at most
/// [`MAX_START_AHEAD_DAYS`] after now.
fn check_start_bounds(start: NaiveDateTime, zone: Tz, now: Instant) -> Result<(), ValidationError> {
    let earliest = parse_local("starts_at", EARLIEST_START)?;
    let latest = now.with_timezone(&zone).naive_local() + Duration::days(MAX_START_AHEAD_DAYS);
    if start < earliest || start > latest {
        return Err(ValidationError::new(
            "starts_at",
            format!(
                "{} is out of range: from {EARLIEST_START} to {} days after now ({})",
                start.format("%Y-%m-%dT%H:%M:%S"),
                MAX_START_AHEAD_DAYS,
                latest.format("%Y-%m-%dT%H:%M:%S")
            ),
        ));
    }
    Ok(())
}

/// COUNT, UNTIL and the EXDATEs within the series' range: UNTIL not before
/// the start's instant nor more than [`MAX_SERIES_DAYS`] after it; each
/// EXDATE from the start to UNTIL (or that many days).
fn check_rule_bounds(series: &Series, exdates: &[String]) -> Result<(), ValidationError> {
    let Some(rule) = &series.rule else {
        return Ok(());
    };
    if let Some(count) = rule.count().filter(|c| *c > MAX_COUNT) {
        return Err(ValidationError::new(
            "recurrence.rrule.COUNT",
            format!("{count} is more than {MAX_COUNT}"),
        ));
    }
    let earliest = |local| match resolve_local(series.time_zone, local) {
        LocalTime::Single(t) | LocalTime::Gap { shifted: t } => t,
        LocalTime::Twice { first, .. } => first,
    };
    let start = earliest(series.start);
    let longest = start + Duration::days(MAX_SERIES_DAYS);
    if let Some(until) = rule.until() {
        if until < start || until > longest {
            return Err(ValidationError::new(
                "recurrence.rrule.UNTIL",
                format!(
                    "{} must be from starts_at ({start}) to {MAX_SERIES_DAYS} days after it",
                    until.format("%Y%m%dT%H%M%SZ")
                ),
            ));
        }
    }
    let last = rule.until().unwrap_or(longest);
    for (i, exdate) in exdates.iter().enumerate() {
        let field = format!("recurrence.exdates[{i}]");
        let exdate = parse_local(&field, exdate)?;
        if exdate < series.start || earliest(exdate) > last {
            return Err(ValidationError::new(
                field,
                format!(
                    "{} is outside the series (from starts_at to {})",
                    exdate.format("%Y-%m-%dT%H:%M:%S"),
                    last.format("%Y-%m-%dT%H:%M:%SZ")
                ),
            ));
        }
    }
    Ok(())
}

/// A series' first occurrence (its start may be an EXDATE or skipped) and
/// the recurrence stored with the schedule.
fn first_of_series(
    series: &Series,
    r: &RecurrenceInput,
) -> Result<(Instant, Recurrence), ValidationError> {
    let from = Utc.from_utc_datetime(&series.start) - chrono::Duration::days(2);
    let first = series
        .next(from, 1)
        .map_err(|e| ValidationError::new("recurrence.rrule", e.0))?;
    let Some(first) = first.first() else {
        return Err(ValidationError::new(
            "recurrence",
            "the rule leaves no occurrence (every one excluded or skipped)",
        ));
    };
    let rule = series.rule.as_ref().expect("a recurring series has a rule");
    let recurrence = Recurrence {
        rrule: rule.text().to_owned(),
        exdates: r.exdates.iter().map(|e| e.trim().to_owned()).collect(),
        local_start: series.start,
        dst: series.dst,
        exceptions: Vec::new(),
    };
    Ok((first.at, recurrence))
}

/// A change to one occurrence of a series: moved (`starts_at`, an RFC 3339
/// instant or a local date-time in the schedule's zone), retitled, or both.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OccurrenceInput {
    #[serde(default)]
    pub starts_at: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub body: Option<String>,
}

/// A time given as an RFC 3339 instant (kept as it is), or as a local
/// date-time read in `zone` under `dst` (the first instant of a repeated
/// time; a skipped one as the policy says).
fn time_in(
    field: &str,
    s: &str,
    zone: Tz,
    dst: DstPolicy,
) -> Result<OccurrenceAt, ValidationError> {
    if let Ok(at) = DateTime::parse_from_rfc3339(s) {
        return Ok(OccurrenceAt {
            local: at.with_timezone(&zone).naive_local(),
            at: at.to_utc(),
            dst: None,
        });
    }
    let local = parse_local(field, s).map_err(|_| {
        ValidationError::new(
            field,
            format!("{s:?} is neither an RFC 3339 instant nor a local date-time like 2026-11-23T09:00:00"),
        )
    })?;
    apply_policy(zone, local, dst)
        .0
        .first()
        .copied()
        .ok_or_else(|| {
            ValidationError::new(
                field,
                format!("{s} does not exist in {zone} (a DST gap) and dst.nonexistent is skip"),
            )
        })
}

/// [`time_in`]'s instant, to the millisecond (as instants are kept everywhere).
pub fn instant_in(
    field: &str,
    s: &str,
    zone: Tz,
    dst: DstPolicy,
) -> Result<Instant, ValidationError> {
    let at = time_in(field, s, zone, dst)?.at;
    crate::domain::from_millis(field, at.timestamp_millis())
}

impl OccurrenceInput {
    /// The exception for the occurrence at `original` of a series in `zone`
    /// (a local `starts_at` is read under the series' DST policy).
    pub fn validate(
        &self,
        original: Instant,
        zone: Tz,
        dst: DstPolicy,
    ) -> Result<crate::domain::OccurrenceException, ValidationError> {
        let title = self
            .title
            .as_deref()
            .map(|t| non_empty("title", t, MAX_TITLE_CHARS))
            .transpose()?;
        if let Some(b) = &self.body {
            if b.chars().count() > MAX_BODY_CHARS {
                return Err(ValidationError::new(
                    "body",
                    format!("must be at most {MAX_BODY_CHARS} characters"),
                ));
            }
        }
        let starts_at = self
            .starts_at
            .as_deref()
            .map(|s| instant_in("starts_at", s, zone, dst))
            .transpose()?;
        if let Some(moved) = starts_at {
            if (moved - original).abs() > chrono::Duration::days(MAX_MOVE_DAYS) {
                return Err(ValidationError::new(
                    "starts_at",
                    format!("moves the occurrence more than {MAX_MOVE_DAYS} days from where the rule puts it"),
                ));
            }
        }
        if starts_at.is_none() && title.is_none() && self.body.is_none() {
            return Err(ValidationError::new(
                "starts_at",
                "give starts_at, title or body (to cancel the occurrence, DELETE it)",
            ));
        }
        Ok(crate::domain::OccurrenceException {
            original,
            cancelled: false,
            starts_at: starts_at.filter(|s| *s != original),
            title,
            body: self.body.clone(),
        })
    }
}

/// One occurrence as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OccurrenceView {
    /// Where the rule puts it: its identity in `/occurrences/{original}`.
    pub original: String,
    pub starts_at: String,
    /// `starts_at` on the schedule's wall clock.
    pub local_start: String,
    pub title: String,
    /// Moved or edited on its own.
    pub exception: bool,
}

impl OccurrenceView {
    pub fn new(o: &crate::domain::ScheduledOccurrence, zone: Tz) -> Self {
        OccurrenceView {
            original: o
                .original
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            starts_at: o
                .starts_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            local_start: o
                .starts_at
                .with_timezone(&zone)
                .format("%Y-%m-%dT%H:%M:%S%:z")
                .to_string(),
            title: o.title.clone(),
            exception: o.exception,
        }
    }
}

/// What the registrar API returns for a schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleView {
    pub id: String,
    pub title: String,
    pub body: String,
    pub starts_at: String,
    pub time_zone: String,
    pub participants: Vec<String>,
    pub reminders: Vec<RuleInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recurrence: Option<RecurrenceInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<DstInput>,
    /// Occurrences moved, edited or cancelled on their own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exceptions: Vec<crate::domain::OccurrenceException>,
    pub version: i64,
}

impl From<&Schedule> for ScheduleView {
    fn from(s: &Schedule) -> Self {
        ScheduleView {
            id: s.id.to_string(),
            title: s.title.clone(),
            body: s.body.clone(),
            // A series repeats a local time: shown as given, so a GET can be PUT back.
            starts_at: match &s.recurrence {
                Some(r) => r.local_start.format("%Y-%m-%dT%H:%M:%S").to_string(),
                None => s.starts_at.to_rfc3339(),
            },
            time_zone: s.time_zone.name().to_owned(),
            participants: s.participants.iter().map(|p| p.to_string()).collect(),
            reminders: s
                .rules
                .iter()
                .map(|r| RuleInput {
                    minutes_before: i64::from(r.minutes_before),
                    channels: r.channels.iter().map(|c| c.to_string()).collect(),
                })
                .collect(),
            recurrence: s.recurrence.as_ref().map(|r| RecurrenceInput {
                rrule: r.rrule.clone(),
                exdates: r.exdates.clone(),
            }),
            dst: s.recurrence.as_ref().map(|r| DstInput {
                nonexistent: Some(r.dst.nonexistent.to_string()),
                ambiguous: Some(r.dst.ambiguous.to_string()),
            }),
            exceptions: s
                .recurrence
                .as_ref()
                .map(|r| r.exceptions.clone())
                .unwrap_or_default(),
            version: s.version,
        }
    }
}

/// What the registrar API returns for a user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserView {
    pub id: String,
    pub name: String,
    pub email: Option<String>,
    pub slack_user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<String>,
    pub time_zone: String,
    pub locale: String,
    /// Every channel, on or off for this user.
    pub channels: BTreeMap<String, bool>,
}

impl From<&User> for UserView {
    fn from(u: &User) -> Self {
        UserView {
            id: u.id.to_string(),
            name: u.name.clone(),
            email: u.email.clone(),
            slack_user_id: u.slack_user_id.clone(),
            webhook_url: u.webhook_url.as_ref().map(|w| w.to_string()),
            time_zone: u.time_zone.name().to_owned(),
            locale: u.locale.clone(),
            channels: Channel::ALL
                .iter()
                .map(|c| (c.as_str().to_owned(), !u.channels_off.contains(c)))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> ScheduleInput {
        ScheduleInput {
            title: "Stand-up".into(),
            body: String::new(),
            starts_at: "2026-11-23T09:00:00.123456+09:00".into(),
            time_zone: "Asia/Tokyo".into(),
            participants: vec!["a".into(), "b".into()],
            reminders: vec![RuleInput {
                minutes_before: 5,
                channels: vec!["mail".into(), "slack".into()],
            }],
            recurrence: None,
            dst: None,
        }
    }

    /// The clock's now in these tests.
    fn now() -> Instant {
        "2026-06-01T00:00:00Z".parse().unwrap()
    }

    fn id(s: &str) -> ScheduleId {
        s.parse().unwrap()
    }

    fn field_of(input: ScheduleInput) -> String {
        input.validate(&id("s1"), now()).unwrap_err().field
    }

    #[test]
    fn a_valid_schedule_is_kept_to_the_millisecond() {
        let s = good().validate(&id("s1"), now()).unwrap();
        assert_eq!(s.starts_at.timestamp_subsec_nanos(), 123_000_000);
        assert_eq!(s.rules[0].channels.encode(), "mail,slack");
    }

    #[test]
    fn limits_are_named() {
        let mut many = good();
        many.reminders = (0..=MAX_RULES as i64)
            .map(|m| RuleInput {
                minutes_before: m,
                channels: vec!["mail".into()],
            })
            .collect();
        let e = many.validate(&id("s1"), now()).unwrap_err();
        assert_eq!(e.field, "reminders");
        assert!(e.problem.contains("at most 20"), "{e}");
        let long = ScheduleInput {
            body: "x".repeat(MAX_BODY_CHARS + 1),
            ..good()
        };
        assert_eq!(field_of(long), "body");
        let crowd = ScheduleInput {
            participants: (0..=MAX_PARTICIPANTS).map(|i| format!("u{i}")).collect(),
            ..good()
        };
        assert_eq!(field_of(crowd), "participants");
    }

    #[test]
    fn every_error_names_its_field() {
        assert_eq!(
            field_of(ScheduleInput {
                title: " ".into(),
                ..good()
            }),
            "title"
        );
        assert_eq!(
            field_of(ScheduleInput {
                starts_at: "tomorrow".into(),
                ..good()
            }),
            "starts_at"
        );
        assert_eq!(
            field_of(ScheduleInput {
                time_zone: "Mars/Olympus".into(),
                ..good()
            }),
            "time_zone"
        );
        assert_eq!(
            field_of(ScheduleInput {
                participants: vec!["a".into(), "a".into()],
                ..good()
            }),
            "participants[1]"
        );
        assert_eq!(
            field_of(ScheduleInput {
                participants: vec!["a,b".into()],
                ..good()
            }),
            "participants[0]"
        );
        let mut bad_channel = good();
        bad_channel.reminders[0].channels = vec!["mail".into(), "pager".into()];
        assert_eq!(field_of(bad_channel), "reminders[0].channels[1]");
        let mut no_channel = good();
        no_channel.reminders[0].channels.clear();
        assert_eq!(field_of(no_channel), "reminders[0].channels");
        let mut negative = good();
        negative.reminders[0].minutes_before = -5;
        assert_eq!(field_of(negative), "reminders[0].minutes_before");
        let weekly = |starts_at: &str, zone: &str| ScheduleInput {
            starts_at: starts_at.into(),
            time_zone: zone.into(),
            recurrence: Some(RecurrenceInput {
                rrule: "FREQ=WEEKLY;BYDAY=MO".into(),
                exdates: vec![],
            }),
            ..good()
        };
        // A recurring start's offset must be its zone's.
        assert_eq!(
            field_of(weekly("2026-11-23T09:00:00+01:00", "Asia/Tokyo")),
            "starts_at"
        );
        assert!(weekly("2026-11-23T09:00:00+09:00", "Asia/Tokyo")
            .series(now())
            .is_ok());
        assert!(weekly("2026-11-23T09:00:00", "Asia/Tokyo")
            .series(now())
            .is_ok());
        // Registered as a series: the rule kept as text, the first occurrence as starts_at.
        let s = weekly("2026-11-23T09:00:00", "Asia/Tokyo")
            .validate(&id("s1"), now())
            .unwrap();
        assert_eq!(s.recurrence.as_ref().unwrap().rrule, "FREQ=WEEKLY;BYDAY=MO");
        assert_eq!(s.starts_at.to_rfc3339(), "2026-11-23T00:00:00+00:00");
        // A rule whose only occurrence is excluded leaves nothing to remind of.
        let mut none_left = weekly("2026-11-23T09:00:00", "Asia/Tokyo");
        none_left.recurrence = Some(RecurrenceInput {
            rrule: "FREQ=WEEKLY;COUNT=1".into(),
            exdates: vec!["2026-11-23T09:00:00".into()],
        });
        assert_eq!(field_of(none_left), "recurrence");
        let mut policy = good();
        policy.dst = Some(DstInput {
            nonexistent: Some("later".into()),
            ambiguous: None,
        });
        assert_eq!(field_of(policy), "dst.nonexistent");
        // A one-off at a local time a DST change skips, with `skip`: nothing to send.
        let mut gap = good();
        gap.starts_at = "2026-03-08T02:30:00".into();
        gap.time_zone = "America/New_York".into();
        assert!(gap.validate(&"s".parse().unwrap(), now()).is_ok());
        gap.dst = Some(DstInput {
            nonexistent: Some("skip".into()),
            ambiguous: None,
        });
        assert_eq!(field_of(gap), "starts_at");
        assert_eq!(
            "has space".parse::<ScheduleId>().unwrap_err().field,
            "schedule"
        );
    }

    /// A Slack recipient is a person: a conversation's id (which
    /// `chat.postMessage` would post into) is refused, saying which it is.
    #[test]
    fn slack_user_id_takes_only_a_user_id() {
        let with = |slack: &str| UserInput {
            name: "Ana".into(),
            email: None,
            slack_user_id: Some(slack.into()),
            webhook_url: None,
            time_zone: "UTC".into(),
            locale: "en".into(),
            channels: Default::default(),
        };
        let ana = "ana".parse().unwrap();
        for ok in ["U024BE7LH", "W012A3CDE", " U024BE7LH "] {
            let user = with(ok).validate(&ana).unwrap();
            assert_eq!(user.slack_user_id.as_deref(), Some(ok.trim()));
        }
        for (refused, says) in [
            ("C024BE91L", "channel id"),
            ("G024BE91L", "group id"),
            ("D024BE91L", "direct-message"),
            ("#general", "channel name"),
            ("@ana", "mention"),
            ("u024be7lh", "U or W"),
        ] {
            let err = with(refused).validate(&ana).unwrap_err();
            assert_eq!(err.field, "slack_user_id", "{refused}");
            assert!(err.problem.contains(says), "{refused}: {}", err.problem);
        }
    }

    #[test]
    fn user_validation_names_fields() {
        let u = UserInput {
            name: "Ana".into(),
            email: Some("ana@example.com".into()),
            slack_user_id: Some("U024BE7LH".into()),
            webhook_url: None,
            time_zone: "Europe/Paris".into(),
            locale: "fr".into(),
            channels: Default::default(),
        };
        assert!(u.validate(&"ana".parse().unwrap()).is_ok());
        // Channels turned off by name; an unknown one is named in the error.
        let off = UserInput {
            channels: [("slack".into(), false), ("mail".into(), true)].into(),
            ..u.clone()
        }
        .validate(&"ana".parse().unwrap())
        .unwrap();
        assert_eq!(off.channels_off, [Channel::Slack].into());
        let view = UserView::from(&off);
        assert_eq!(
            view.channels,
            [
                ("chat".into(), true),
                ("mail".into(), true),
                ("slack".into(), false),
                ("webhook".into(), true)
            ]
            .into()
        );
        // Null is on, for the map and for a value.
        let nulls: UserInput = serde_json::from_value(serde_json::json!({
            "name": "Ana", "channels": {"slack": null}
        }))
        .unwrap();
        assert_eq!(nulls.channels, [("slack".into(), true)].into());
        let none: UserInput =
            serde_json::from_value(serde_json::json!({"name": "Ana", "channels": null})).unwrap();
        assert!(none.channels.is_empty());
        assert_eq!(
            UserInput {
                channels: [("fax".into(), false)].into(),
                ..u.clone()
            }
            .validate(&"ana".parse().unwrap())
            .unwrap_err()
            .field,
            "channels.fax"
        );
        assert_eq!(
            UserInput {
                email: Some("not-an-address".into()),
                ..u.clone()
            }
            .validate(&"ana".parse().unwrap())
            .unwrap_err()
            .field,
            "email"
        );
        assert_eq!(
            UserInput {
                slack_user_id: Some("#general".into()),
                ..u.clone()
            }
            .validate(&"ana".parse().unwrap())
            .unwrap_err()
            .field,
            "slack_user_id"
        );
        assert_eq!(
            UserInput {
                webhook_url: Some("ftp://hooks.example.com/".into()),
                ..u.clone()
            }
            .validate(&"ana".parse().unwrap())
            .unwrap_err()
            .field,
            "webhook_url"
        );
        assert_eq!(
            UserInput {
                time_zone: "EST5".into(),
                ..u.clone()
            }
            .validate(&"ana".parse().unwrap())
            .unwrap_err()
            .field,
            "time_zone"
        );
    }

    fn series(starts_at: &str, rrule: &str, exdates: &[&str]) -> ScheduleInput {
        ScheduleInput {
            starts_at: starts_at.into(),
            time_zone: "Europe/Paris".into(),
            recurrence: Some(RecurrenceInput {
                rrule: rrule.into(),
                exdates: exdates.iter().map(|e| e.to_string()).collect(),
            }),
            ..good()
        }
    }

    /// Each calendar bound: just inside is accepted, just outside is a 422
    /// naming the field.
    #[test]
    fn calendar_bounds_are_named() {
        let ok = |input: ScheduleInput| input.validate(&id("s1"), now()).map(|_| ());
        // starts_at: from 2000-01-01 to 3653 days after now (2036-06-01).
        for start in [
            "1999-12-31T23:59:00",
            "1900-01-01T09:00:00",
            "2036-06-02T00:00:00",
        ] {
            assert_eq!(
                field_of(series(start, "FREQ=DAILY", &[])),
                "starts_at",
                "{start}"
            );
            let one_off = ScheduleInput {
                starts_at: start.into(),
                ..good()
            };
            assert_eq!(field_of(one_off), "starts_at", "{start}");
        }
        ok(series("2000-01-01T00:00:00", "FREQ=DAILY", &[])).unwrap();
        ok(series("2036-05-31T09:00:00", "FREQ=DAILY", &[])).unwrap();
        // COUNT at most 1000.
        ok(series("2026-06-01T09:00:00", "FREQ=DAILY;COUNT=1000", &[])).unwrap();
        let e = ok(series("2026-06-01T09:00:00", "FREQ=DAILY;COUNT=1001", &[])).unwrap_err();
        assert_eq!(e.field, "recurrence.rrule.COUNT");
        assert!(e.problem.contains("1000"), "{e}");
        // UNTIL: not before the start's instant (07:00Z), within 100 years.
        let until = |u: &str| series("2026-06-01T09:00:00", &format!("FREQ=DAILY;UNTIL={u}"), &[]);
        ok(until("20260601T070000Z")).unwrap();
        ok(until("21260501T000000Z")).unwrap();
        for u in ["20260601T065959Z", "21260701T000000Z"] {
            assert_eq!(field_of(until(u)), "recurrence.rrule.UNTIL", "{u}");
        }
        // EXDATEs: at most 500, each from the start to UNTIL, named by index.
        let start = "2026-06-01T09:00:00";
        let many: Vec<String> = (0..=MAX_EXDATES)
            .map(|d| format!("2026-06-01T{:02}:{:02}:00", 10 + d / 60 % 10, d % 60))
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            field_of(series(start, "FREQ=DAILY", &many)),
            "recurrence.exdates"
        );
        ok(series(start, "FREQ=DAILY", &many[..MAX_EXDATES])).unwrap();
        let rule = "FREQ=DAILY;UNTIL=20260610T000000Z";
        ok(series(start, rule, &["2026-06-09T09:00:00"])).unwrap();
        let early = ["2026-06-02T09:00:00", "2026-05-31T09:00:00"];
        assert_eq!(
            field_of(series(start, rule, &early)),
            "recurrence.exdates[1]"
        );
        let late = ["2026-06-10T09:00:00"];
        assert_eq!(
            field_of(series(start, rule, &late)),
            "recurrence.exdates[0]"
        );
        let far = ["2126-06-02T09:00:00"];
        assert_eq!(
            field_of(series(start, "FREQ=DAILY", &far)),
            "recurrence.exdates[0]"
        );
    }

    /// An occurrence moves at most a year from where the rule puts it.
    #[test]
    fn an_occurrence_moves_at_most_a_year() {
        let original: Instant = "2026-06-01T09:00:00Z".parse().unwrap();
        let moved = |to: &str| {
            OccurrenceInput {
                starts_at: Some(to.into()),
                ..Default::default()
            }
            .validate(original, chrono_tz::UTC, DstPolicy::default())
        };
        moved("2027-06-02T09:00:00Z").unwrap();
        moved("2025-05-31T09:00:00Z").unwrap();
        for far in ["2027-06-03T09:00:00Z", "2025-05-30T09:00:00Z"] {
            let e = moved(far).unwrap_err();
            assert_eq!(e.field, "starts_at", "{far}");
            assert!(e.problem.contains("366 days"), "{e}");
        }
    }
}
