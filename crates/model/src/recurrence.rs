//! Recurring schedules: an RFC 5545 rule expanded on the wall clock of the
//! schedule's zone, and an explicit policy for local times that a DST change
//! skips or repeats.
//!
//! The rule is expanded by the `rrule` crate (a maintained port of
//! python-dateutil's rrule) on *naive* local date-times, which is what RFC 5545
//! means for a DTSTART with a TZID: "every Monday at 09:00" stays at 09:00
//! across the clock changes. Only then is each local time mapped to an
//! instant, by the policy. UNTIL is a UTC instant (RFC 5545 3.3.10) and is
//! applied per instant after the policy; COUNT counts rule occurrences before
//! EXDATE and before the policy (an excluded or skipped occurrence is not
//! replaced). `scripts/rrule_oracle.py` states the same semantics and
//! `tests/data/rrule_oracle.json` holds its answers, which the tests compare.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use chrono::{
    Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeZone, Utc, Weekday,
};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::error::ValidationError;
use crate::time::Instant;

/// What to do with a local time that does not exist (spring forward).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NonexistentTime {
    /// Read it with the UTC offset in force before the gap (RFC 5545 3.3.5):
    /// 02:30 on the New York spring-forward day is 03:30 EDT.
    #[default]
    ShiftForward,
    /// No occurrence that day.
    Skip,
}

/// What to do with a local time that exists twice (fall back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AmbiguousTime {
    /// The earlier instant (RFC 5545's reading).
    #[default]
    First,
    /// The later instant.
    Last,
    /// Both instants: two occurrences.
    Both,
}

/// A schedule's explicit DST policy; the defaults follow RFC 5545.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct DstPolicy {
    #[serde(default)]
    pub nonexistent: NonexistentTime,
    #[serde(default)]
    pub ambiguous: AmbiguousTime,
}

macro_rules! snake_case_names {
    ($ty:ty, $($variant:path => $name:literal),+) => {
        impl $ty {
            pub fn as_str(self) -> &'static str {
                match self { $($variant => $name),+ }
            }
        }
        impl FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($name => Ok($variant),)+
                    other => Err(format!(
                        "{other:?} is not one of {}",
                        [$($name),+].join(", ")
                    )),
                }
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
snake_case_names!(NonexistentTime, NonexistentTime::ShiftForward => "shift_forward", NonexistentTime::Skip => "skip");
snake_case_names!(AmbiguousTime, AmbiguousTime::First => "first", AmbiguousTime::Last => "last", AmbiguousTime::Both => "both");

/// The RRULE parts Toki accepts; anything else is refused, naming the part.
const SUPPORTED_PARTS: [&str; 8] = [
    "FREQ",
    "INTERVAL",
    "BYDAY",
    "BYMONTHDAY",
    "BYMONTH",
    "COUNT",
    "UNTIL",
    "WKST",
];
const SUPPORTED_FREQS: [&str; 4] = ["DAILY", "WEEKLY", "MONTHLY", "YEARLY"];

/// The period the rule steps by, `INTERVAL` of them at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Freq {
    Daily,
    Weekly,
    Monthly,
    Yearly,
}

/// What skipping ahead needs to know of a rule (the `rrule` crate keeps its
/// parsed form private).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stepping {
    freq: Freq,
    interval: u32,
    wkst: Weekday,
    /// Neither BYDAY nor BYMONTHDAY: the day comes from the start (RFC 5545).
    day_from_start: bool,
    has_bymonth: bool,
}

/// A validated recurrence rule: the RRULE without UNTIL (kept apart as an
/// instant), and the excluded local start times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecurrenceRule {
    /// The RRULE as given (normalised to upper case), UNTIL included.
    text: String,
    /// The rule handed to the expander: `text` without UNTIL.
    expand: String,
    until: Option<Instant>,
    count: Option<u32>,
    stepping: Stepping,
    /// Sorted, for a binary search per candidate.
    exdates: Vec<NaiveDateTime>,
}

impl RecurrenceRule {
    /// Parses an RRULE value (`FREQ=WEEKLY;BYDAY=MO`) and EXDATEs (local
    /// date-times, `2026-12-28T09:00:00`). `field` prefixes error fields.
    pub fn parse(field: &str, rrule: &str, exdates: &[String]) -> Result<Self, ValidationError> {
        let rule_field = format!("{field}.rrule");
        let text = rrule.trim().to_ascii_uppercase();
        let text = text.strip_prefix("RRULE:").unwrap_or(&text).to_owned();
        if text.is_empty() {
            return Err(ValidationError::new(&rule_field, "must not be empty"));
        }
        let mut until = None;
        let mut count = None;
        let mut kept = Vec::new();
        let mut has_freq = false;
        for part in text.split(';') {
            let (name, value) = part.split_once('=').ok_or_else(|| {
                ValidationError::new(&rule_field, format!("{part:?} is not NAME=VALUE"))
            })?;
            if !SUPPORTED_PARTS.contains(&name) {
                return Err(ValidationError::new(
                    format!("{rule_field}.{name}"),
                    format!(
                        "is not supported (supported: {})",
                        SUPPORTED_PARTS.join(", ")
                    ),
                ));
            }
            match name {
                "FREQ" => {
                    has_freq = true;
                    if !SUPPORTED_FREQS.contains(&value) {
                        return Err(ValidationError::new(
                            format!("{rule_field}.FREQ"),
                            format!(
                                "{value:?} is not supported (supported: {})",
                                SUPPORTED_FREQS.join(", ")
                            ),
                        ));
                    }
                }
                "COUNT" => count = Some(parse_number(&format!("{rule_field}.COUNT"), value)?),
                "UNTIL" => {
                    until = Some(parse_until(&format!("{rule_field}.UNTIL"), value)?);
                    continue;
                }
                _ => {}
            }
            kept.push(part);
        }
        if !has_freq {
            return Err(ValidationError::new(
                format!("{rule_field}.FREQ"),
                "is required",
            ));
        }
        if count.is_some() && until.is_some() {
            return Err(ValidationError::new(
                &rule_field,
                "COUNT and UNTIL must not both be given (RFC 5545)",
            ));
        }
        let expand = kept.join(";");
        // Let the library check the grammar and values now, so a bad BYDAY is
        // a 422 at registration rather than an error at expansion.
        expand
            .parse::<rrule::RRule<rrule::Unvalidated>>()
            .map_err(|e| ValidationError::new(&rule_field, e.to_string()))?;
        let stepping = Stepping::of(&rule_field, &kept)?;
        let mut exdates = exdates
            .iter()
            .enumerate()
            .map(|(i, s)| parse_local(&format!("{field}.exdates[{i}]"), s))
            .collect::<Result<Vec<_>, _>>()?;
        exdates.sort();
        Ok(Self {
            text,
            expand,
            until,
            count,
            stepping,
            exdates,
        })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn until(&self) -> Option<Instant> {
        self.until
    }

    pub fn count(&self) -> Option<u32> {
        self.count
    }

    /// The EXDATEs, sorted.
    pub fn exdates(&self) -> &[NaiveDateTime] {
        &self.exdates
    }

    /// The rule to expand from a start other than the series' own: the
    /// parts RFC 5545 takes from DTSTART made explicit, so that moving
    /// DTSTART does not move them.
    fn expand_from_elsewhere(&self, start: NaiveDateTime) -> Cow<'_, str> {
        let st = self.stepping;
        if !st.day_from_start {
            return Cow::Borrowed(&self.expand);
        }
        let day = start.day();
        let extra = match st.freq {
            Freq::Daily => return Cow::Borrowed(&self.expand),
            Freq::Weekly => format!("BYDAY={}", weekday_code(start.weekday())),
            Freq::Monthly => format!("BYMONTHDAY={day}"),
            Freq::Yearly if st.has_bymonth => format!("BYMONTHDAY={day}"),
            Freq::Yearly => format!("BYMONTH={};BYMONTHDAY={day}", start.month()),
        };
        Cow::Owned(format!("{};{extra}", self.expand))
    }
}

impl Stepping {
    /// From the rule's parts (grammar not yet checked: a value this does
    /// not read is left for the `rrule` crate to refuse).
    fn of(rule_field: &str, parts: &[&str]) -> Result<Self, ValidationError> {
        let mut st = Stepping {
            freq: Freq::Daily,
            interval: 1,
            wkst: Weekday::Mon,
            day_from_start: true,
            has_bymonth: false,
        };
        for (name, value) in parts.iter().filter_map(|p| p.split_once('=')) {
            match name {
                "FREQ" => {
                    st.freq = match value {
                        "DAILY" => Freq::Daily,
                        "WEEKLY" => Freq::Weekly,
                        "MONTHLY" => Freq::Monthly,
                        _ => Freq::Yearly,
                    }
                }
                "INTERVAL" => st.interval = parse_number(&format!("{rule_field}.INTERVAL"), value)?,
                "WKST" => st.wkst = weekday_of(value).unwrap_or(Weekday::Mon),
                "BYDAY" | "BYMONTHDAY" => st.day_from_start = false,
                "BYMONTH" => st.has_bymonth = true,
                _ => {}
            }
        }
        Ok(st)
    }

    /// The first day of the period `skip` periods after the one holding
    /// `start` (weeks begin on WKST).
    fn period_start(self, start: NaiveDate, skip: u32) -> Option<NaiveDate> {
        match self.freq {
            Freq::Daily => start.checked_add_days(chrono::Days::new(skip.into())),
            Freq::Weekly => week_start(start, self.wkst)
                .checked_add_days(chrono::Days::new(u64::from(skip) * 7)),
            Freq::Monthly => start
                .with_day(1)?
                .checked_add_months(chrono::Months::new(skip)),
            Freq::Yearly => NaiveDate::from_ymd_opt(start.year().checked_add(skip as i32)?, 1, 1),
        }
    }

    /// Whole periods from the one holding `start` to the one holding `day`.
    fn periods_between(self, start: NaiveDate, day: NaiveDate) -> i64 {
        match self.freq {
            Freq::Daily => (day - start).num_days(),
            Freq::Weekly => {
                (week_start(day, self.wkst) - week_start(start, self.wkst)).num_days() / 7
            }
            Freq::Monthly => {
                i64::from(day.year() - start.year()) * 12 + i64::from(day.month())
                    - i64::from(start.month())
            }
            Freq::Yearly => i64::from(day.year() - start.year()),
        }
    }
}

fn week_start(day: NaiveDate, wkst: Weekday) -> NaiveDate {
    let back = (7 + day.weekday().num_days_from_monday() - wkst.num_days_from_monday()) % 7;
    day - Duration::days(back.into())
}

const WEEKDAY_CODES: [(&str, Weekday); 7] = [
    ("MO", Weekday::Mon),
    ("TU", Weekday::Tue),
    ("WE", Weekday::Wed),
    ("TH", Weekday::Thu),
    ("FR", Weekday::Fri),
    ("SA", Weekday::Sat),
    ("SU", Weekday::Sun),
];

fn weekday_of(code: &str) -> Option<Weekday> {
    WEEKDAY_CODES
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, d)| *d)
}

fn weekday_code(day: Weekday) -> &'static str {
    WEEKDAY_CODES
        .iter()
        .find(|(_, d)| *d == day)
        .map_or("MO", |(c, _)| c)
}

/// A positive whole number (COUNT, INTERVAL).
fn parse_number(field: &str, value: &str) -> Result<u32, ValidationError> {
    value
        .parse::<u32>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| {
            ValidationError::new(field, format!("{value:?} is not a whole number from 1"))
        })
}

/// `20261231T235959Z`; a date-only or floating UNTIL is refused because,
/// with a zoned start, RFC 5545 requires it in UTC.
fn parse_until(field: &str, s: &str) -> Result<Instant, ValidationError> {
    let naive = s
        .strip_suffix('Z')
        .and_then(|t| NaiveDateTime::parse_from_str(t, "%Y%m%dT%H%M%S").ok())
        .ok_or_else(|| {
            ValidationError::new(
                field,
                format!("{s:?} must be a UTC date-time like 20261231T235959Z"),
            )
        })?;
    Ok(Utc.from_utc_datetime(&naive))
}

/// A local date-time without an offset: `2026-11-23T09:00:00` (seconds optional).
pub fn parse_local(field: &str, s: &str) -> Result<NaiveDateTime, ValidationError> {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S")
        .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M"))
        .map_err(|_| {
            ValidationError::new(
                field,
                format!("{s:?} is not a local date-time like 2026-11-23T09:00:00"),
            )
        })
}

/// The DST decision taken for one occurrence, for `toki preview` and the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DstDecision {
    /// The local time did not exist; it was read with the offset before the gap.
    ShiftedForward,
    /// The local time existed twice; this is its earlier instant.
    FirstOfTwo,
    /// The local time existed twice; this is its later instant.
    LastOfTwo,
}

/// A local time the policy dropped, reported so a preview can show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DstDrop {
    /// Did not exist and the policy is `skip`.
    Skipped,
    /// Existed twice; this instant was left out by `first` or `last`.
    OtherOfTwo,
}

/// One occurrence: the local start as the rule produced it and its instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OccurrenceAt {
    pub local: NaiveDateTime,
    pub at: Instant,
    pub dst: Option<DstDecision>,
}

/// What a local time means in a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalTime {
    Single(Instant),
    /// In a gap: the instant it means when read with the offset before the gap.
    Gap {
        shifted: Instant,
    },
    Twice {
        first: Instant,
        last: Instant,
    },
}

/// Where `local` falls in `tz`.
pub fn resolve_local(tz: Tz, local: NaiveDateTime) -> LocalTime {
    match tz.from_local_datetime(&local) {
        LocalResult::Single(t) => LocalTime::Single(t.with_timezone(&Utc)),
        LocalResult::Ambiguous(a, b) => {
            let (a, b) = (a.with_timezone(&Utc), b.with_timezone(&Utc));
            LocalTime::Twice {
                first: a.min(b),
                last: a.max(b),
            }
        }
        LocalResult::None => {
            // The offset in force before the gap: that of the latest local
            // time before it that exists (gaps are at most a few hours).
            let mut probe = local;
            let offset = loop {
                probe -= Duration::minutes(15);
                match tz.from_local_datetime(&probe) {
                    LocalResult::Single(t) => break t.offset().fix(),
                    LocalResult::Ambiguous(_, later) => break later.offset().fix(),
                    LocalResult::None => {}
                }
            };
            let shifted = Utc.from_utc_datetime(&(local - offset));
            LocalTime::Gap { shifted }
        }
    }
}

/// Applies the policy to one local time: the instants it stands for, with
/// what was decided, and what was dropped.
pub fn apply_policy(
    tz: Tz,
    local: NaiveDateTime,
    policy: DstPolicy,
) -> (Vec<OccurrenceAt>, Option<DstDrop>) {
    let at = |at, dst| OccurrenceAt { local, at, dst };
    match resolve_local(tz, local) {
        LocalTime::Single(t) => (vec![at(t, None)], None),
        LocalTime::Gap { shifted } => match policy.nonexistent {
            NonexistentTime::ShiftForward => {
                (vec![at(shifted, Some(DstDecision::ShiftedForward))], None)
            }
            NonexistentTime::Skip => (vec![], Some(DstDrop::Skipped)),
        },
        LocalTime::Twice { first, last } => match policy.ambiguous {
            AmbiguousTime::First => (
                vec![at(first, Some(DstDecision::FirstOfTwo))],
                Some(DstDrop::OtherOfTwo),
            ),
            AmbiguousTime::Last => (
                vec![at(last, Some(DstDecision::LastOfTwo))],
                Some(DstDrop::OtherOfTwo),
            ),
            AmbiguousTime::Both => (
                vec![
                    at(first, Some(DstDecision::FirstOfTwo)),
                    at(last, Some(DstDecision::LastOfTwo)),
                ],
                None,
            ),
        },
    }
}

/// A series: a local start in a zone, optionally repeated by a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    pub start: NaiveDateTime,
    pub time_zone: Tz,
    pub rule: Option<RecurrenceRule>,
    pub dst: DstPolicy,
}

/// Why a series cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ExpandError(pub String);

/// Local times more than this before a window's start (read as UTC) cannot
/// map into it: offsets are within ±14 h.
fn reach() -> Duration {
    Duration::days(2)
}

impl Series {
    /// Where expansion for local times from `from_local` on may begin, and
    /// the rule to expand from there: the first day of the period (every
    /// INTERVAL-th from the start's) holding `from_local`, at the start's
    /// time. Without skipping, a listing at year 9998 of a series from 2000
    /// would step through three million days. A rule with COUNT is expanded
    /// from its start (its occurrences are capped at registration).
    fn origin<'r>(
        &self,
        rule: &'r RecurrenceRule,
        from_local: NaiveDateTime,
    ) -> (NaiveDateTime, Cow<'r, str>) {
        let own = (self.start, Cow::Borrowed(rule.expand.as_str()));
        let st = rule.stepping;
        if rule.count.is_some() || from_local <= self.start {
            return own;
        }
        let periods = st.periods_between(self.start.date(), from_local.date());
        let skip = periods - periods % i64::from(st.interval);
        let Some(day) = u32::try_from(skip)
            .ok()
            .filter(|s| *s > 0)
            .and_then(|s| st.period_start(self.start.date(), s))
        else {
            return own;
        };
        let origin = day.and_time(self.start.time());
        (origin, rule.expand_from_elsewhere(self.start))
    }

    /// The local start times the rule itself produces (COUNT applied, not
    /// EXDATE), in order, from where [`Self::origin`] puts the start for
    /// `from_local` (or the series' start when `skip` is false) up to and
    /// including `until_local`; some may be before `from_local`. A rule
    /// that matches nothing (BYMONTH=2;BYMONTHDAY=30) ends at the `rrule`
    /// crate's own search limit.
    fn rule_times(
        &self,
        from_local: NaiveDateTime,
        until_local: NaiveDateTime,
        skip: bool,
    ) -> Result<Vec<NaiveDateTime>, ExpandError> {
        let Some(rule) = &self.rule else {
            return Ok(vec![self.start]);
        };
        let (origin, expand) = match skip {
            true => self.origin(rule, from_local),
            false => (self.start, Cow::Borrowed(rule.expand.as_str())),
        };
        // The wall clock, expanded as if it were UTC (no DST there).
        let start = rrule::Tz::UTC.from_utc_datetime(&origin);
        let set = expand
            .parse::<rrule::RRule<rrule::Unvalidated>>()
            .and_then(|r| r.build(start))
            .map_err(|e| ExpandError(e.to_string()))?;
        Ok(set
            .into_iter()
            .map(|t| t.naive_utc())
            .take_while(|local| *local <= until_local)
            .collect())
    }

    /// [`Self::rule_times`] from `from_local` on, without the EXDATEs.
    fn local_times(
        &self,
        from_local: NaiveDateTime,
        until_local: NaiveDateTime,
        skip: bool,
    ) -> Result<Vec<NaiveDateTime>, ExpandError> {
        let mut times = self.rule_times(from_local, until_local, skip)?;
        times.retain(|t| *t >= from_local);
        if let Some(rule) = &self.rule {
            times.retain(|t| rule.exdates.binary_search(t).is_err());
        }
        Ok(times)
    }

    /// Occurrences whose instant is in `[from, to)`, in order.
    pub fn between(&self, from: Instant, to: Instant) -> Result<Vec<OccurrenceAt>, ExpandError> {
        self.between_with(from, to, true)
    }

    /// [`Self::between`], skipping ahead to the window or not (the tests
    /// compare the two).
    fn between_with(
        &self,
        from: Instant,
        to: Instant,
        skip: bool,
    ) -> Result<Vec<OccurrenceAt>, ExpandError> {
        let until = self.rule.as_ref().and_then(|r| r.until);
        if until.is_some_and(|u| u < from) {
            return Ok(Vec::new());
        }
        let (from_local, until_local) = (from.naive_utc() - reach(), to.naive_utc() + reach());
        let mut out: Vec<OccurrenceAt> = self
            .local_times(from_local, until_local, skip)?
            .into_iter()
            .flat_map(|local| apply_policy(self.time_zone, local, self.dst).0)
            .filter(|o| o.at >= from && o.at < to && until.is_none_or(|u| o.at <= u))
            .collect();
        out.sort_by_key(|o| o.at);
        out.dedup_by_key(|o| o.at);
        Ok(out)
    }

    /// Whether the rule (EXDATEs and the DST policy applied) has an occurrence at `at`.
    pub fn has_occurrence_at(&self, at: Instant) -> Result<bool, ExpandError> {
        Ok(!self.between(at, at + Duration::milliseconds(1))?.is_empty())
    }

    /// The first `n` occurrences at or after `from` (a bounded look: at most
    /// ten years ahead).
    pub fn next(&self, from: Instant, n: usize) -> Result<Vec<OccurrenceAt>, ExpandError> {
        let mut out = self.between(from, from + Duration::days(3660))?;
        out.truncate(n);
        Ok(out)
    }

    /// Local times of the rule that the policy dropped in `[from, to)`, with why.
    pub fn dropped_between(
        &self,
        from: Instant,
        to: Instant,
    ) -> Result<Vec<(NaiveDateTime, DstDrop)>, ExpandError> {
        let (from_local, until_local) = (from.naive_utc() - reach(), to.naive_utc() + reach());
        Ok(self
            .local_times(from_local, until_local, true)?
            .into_iter()
            .filter_map(|local| {
                let (_, dropped) = apply_policy(self.time_zone, local, self.dst);
                let near = match resolve_local(self.time_zone, local) {
                    LocalTime::Single(t) | LocalTime::Gap { shifted: t } => t,
                    LocalTime::Twice { first, .. } => first,
                };
                dropped
                    .filter(|_| near >= from && near < to)
                    .map(|d| (local, d))
            })
            .collect())
    }
}

impl Series {
    /// RFC 5545 counts DTSTART as the first occurrence; python-dateutil and
    /// the `rrule` crate do not when it does not match the rule. Refusing a
    /// start the rule does not produce keeps both readings the same.
    pub fn check_start(&self, field: &str) -> Result<(), ValidationError> {
        // Refused without asking the expander when the start's month, day
        // or weekday is not the rule's: for a rule that never matches
        // (FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30) its search runs to its limit,
        // 0.2 s of CPU a request.
        if let Some(rule) = &self.rule {
            if !rule.filters_admit(self.start.date()) {
                return Err(not_an_occurrence(field, self.start));
            }
        }
        // The rule alone: an EXDATE on the start does not make it wrong.
        let first = self
            .rule_times(self.start, self.start, false)
            .map_err(|e| ValidationError::new(field, e.0))?;
        if first.first() != Some(&self.start) {
            return Err(not_an_occurrence(field, self.start));
        }
        Ok(())
    }
}

fn not_an_occurrence(field: &str, start: NaiveDateTime) -> ValidationError {
    ValidationError::new(
        field,
        format!(
            "{} is not an occurrence of the rule (e.g. a Monday for BYDAY=MO)",
            start.format("%Y-%m-%dT%H:%M:%S")
        ),
    )
}

impl RecurrenceRule {
    /// Whether `day` passes the rule's BYMONTH, BYMONTHDAY and BYDAY (an
    /// ordinal BYDAY counted in the month or in the year, either will do):
    /// every occurrence does, so a day that does not is none. Errs toward
    /// yes; the expander decides.
    fn filters_admit(&self, day: NaiveDate) -> bool {
        let Ok(rule) = self.expand.parse::<rrule::RRule<rrule::Unvalidated>>() else {
            return true;
        };
        let months = rule.get_by_month();
        let month_days = rule.get_by_month_day();
        let weekdays = rule.get_by_weekday();
        (months.is_empty() || months.contains(&(day.month() as u8)))
            && (month_days.is_empty() || month_days.iter().any(|&d| is_month_day(day, d)))
            && (weekdays.is_empty() || weekdays.iter().any(|w| is_weekday(day, w)))
    }
}

/// `day` is the month's `d`th day (from the end when negative).
fn is_month_day(day: NaiveDate, d: i8) -> bool {
    let length = days_in_month(day) as i64;
    let d = i64::from(d);
    let wanted = if d < 0 { length + 1 + d } else { d };
    wanted == i64::from(day.day())
}

fn days_in_month(day: NaiveDate) -> u32 {
    let first = day.with_day(1).expect("day 1 exists");
    let next = first + chrono::Months::new(1);
    (next - first).num_days() as u32
}

/// `day` is the weekday of `w`, and its `n`th in the month or the year if
/// `w` has an ordinal.
fn is_weekday(day: NaiveDate, w: &rrule::NWeekday) -> bool {
    let nth_of = |n: i16, ordinal: u32, length: u32| {
        let from_start = (ordinal as i16 - 1) / 7 + 1;
        let from_end = -(((length - ordinal) as i16) / 7 + 1);
        n == from_start || n == from_end
    };
    match w {
        rrule::NWeekday::Every(wd) => day.weekday() == *wd,
        rrule::NWeekday::Nth(n, wd) => {
            day.weekday() == *wd
                && (nth_of(*n, day.day(), days_in_month(day))
                    || nth_of(*n, day.ordinal(), if day.leap_year() { 366 } else { 365 }))
        }
    }
}

#[cfg(test)]
mod oracle_tests {
    //! Expansion against python-dateutil (scripts/rrule_oracle.py), every
    //! case under every one of the six policies.
    use super::*;
    use chrono::DateTime;
    use serde_json::Value;

    const ORACLE: &str = include_str!("../../../tests/data/rrule_oracle.json");

    fn instant(s: &str) -> Instant {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn expansion_matches_the_dateutil_oracle() {
        let cases: Vec<Value> = serde_json::from_str(ORACLE).unwrap();
        assert!(cases.len() >= 60, "the oracle has {} cases", cases.len());
        let mut compared = 0;
        let mut failures = Vec::new();
        for case in &cases {
            let name = case["name"].as_str().unwrap();
            let exdates: Vec<String> = case["exdates"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect();
            let rule =
                RecurrenceRule::parse("recurrence", case["rrule"].as_str().unwrap(), &exdates)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            let (from, to) = (
                instant(case["from"].as_str().unwrap()),
                instant(case["to"].as_str().unwrap()),
            );
            for (policy_name, expected) in case["expected"].as_object().unwrap() {
                let (gap, overlap) = policy_name.split_once(',').unwrap();
                let series = Series {
                    start: parse_local("dtstart", case["dtstart"].as_str().unwrap()).unwrap(),
                    time_zone: case["time_zone"].as_str().unwrap().parse().unwrap(),
                    rule: Some(rule.clone()),
                    dst: DstPolicy {
                        nonexistent: gap.parse().unwrap(),
                        ambiguous: overlap.parse().unwrap(),
                    },
                };
                series
                    .check_start("starts_at")
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                let got: Vec<Instant> = series
                    .between(from, to)
                    .unwrap()
                    .into_iter()
                    .map(|o| o.at)
                    .collect();
                let want: Vec<Instant> = expected
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| instant(v.as_str().unwrap()))
                    .collect();
                if got != want {
                    failures.push(format!(
                        "{name} [{policy_name}]:\n  got  {got:?}\n  want {want:?}"
                    ));
                }
                compared += 1;
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {compared} differ:\n{}",
            failures.len(),
            failures.join("\n")
        );
        assert_eq!(compared, cases.len() * 6);
    }

    fn weekly(policy: DstPolicy, start: &str) -> Series {
        Series {
            start: parse_local("s", start).unwrap(),
            time_zone: chrono_tz::America::New_York,
            rule: Some(RecurrenceRule::parse("r", "FREQ=DAILY;COUNT=3", &[]).unwrap()),
            dst: policy,
        }
    }

    #[test]
    fn a_repeated_hour_is_marked_and_both_gives_two() {
        // 2026-11-01 01:30 happens twice in New York.
        let both = DstPolicy {
            ambiguous: AmbiguousTime::Both,
            ..DstPolicy::default()
        };
        let s = weekly(both, "2026-10-31T01:30:00");
        let occ = s
            .between(
                instant("2026-10-30T00:00:00Z"),
                instant("2026-11-05T00:00:00Z"),
            )
            .unwrap();
        let marks: Vec<_> = occ.iter().map(|o| o.dst).collect();
        assert_eq!(
            marks,
            vec![
                None,
                Some(DstDecision::FirstOfTwo),
                Some(DstDecision::LastOfTwo),
                None
            ]
        );
        let first = weekly(DstPolicy::default(), "2026-10-31T01:30:00");
        let dropped = first
            .dropped_between(
                instant("2026-10-30T00:00:00Z"),
                instant("2026-11-05T00:00:00Z"),
            )
            .unwrap();
        assert_eq!(dropped.len(), 1);
        assert_eq!(dropped[0].1, DstDrop::OtherOfTwo);
    }

    #[test]
    fn unsupported_parts_are_refused_by_name() {
        let e = RecurrenceRule::parse("recurrence", "FREQ=WEEKLY;BYSETPOS=1", &[]).unwrap_err();
        assert_eq!(e.field, "recurrence.rrule.BYSETPOS");
        let e = RecurrenceRule::parse("recurrence", "FREQ=HOURLY", &[]).unwrap_err();
        assert_eq!(e.field, "recurrence.rrule.FREQ");
        let e = RecurrenceRule::parse("recurrence", "BYDAY=MO", &[]).unwrap_err();
        assert_eq!(e.field, "recurrence.rrule.FREQ");
        let e = RecurrenceRule::parse("recurrence", "FREQ=DAILY;UNTIL=20261231", &[]).unwrap_err();
        assert_eq!(e.field, "recurrence.rrule.UNTIL");
        let e = RecurrenceRule::parse(
            "recurrence",
            "FREQ=DAILY;COUNT=2;UNTIL=20261231T000000Z",
            &[],
        )
        .unwrap_err();
        assert_eq!(e.field, "recurrence.rrule");
        let e = RecurrenceRule::parse("recurrence", "FREQ=WEEKLY;BYDAY=XX", &[]).unwrap_err();
        assert_eq!(e.field, "recurrence.rrule");
        let e = RecurrenceRule::parse("recurrence", "FREQ=DAILY", &["monday".into()]).unwrap_err();
        assert_eq!(e.field, "recurrence.exdates[0]");
    }

    #[test]
    fn a_start_the_rule_does_not_produce_is_refused() {
        let s = Series {
            start: parse_local("s", "2026-11-24T09:00:00").unwrap(), // a Tuesday
            time_zone: chrono_tz::Asia::Tokyo,
            rule: Some(RecurrenceRule::parse("r", "FREQ=WEEKLY;BYDAY=MO", &[]).unwrap()),
            dst: DstPolicy::default(),
        };
        assert_eq!(s.check_start("starts_at").unwrap_err().field, "starts_at");
    }

    /// A random rule of every kind Toki supports (without UNTIL, COUNT).
    fn random_rule(rng: &mut impl rand::Rng) -> String {
        let codes = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"];
        let freq = ["DAILY", "WEEKLY", "MONTHLY", "YEARLY"][rng.gen_range(0..4)];
        let mut parts = vec![format!("FREQ={freq}")];
        if rng.gen_bool(0.6) {
            parts.push(format!("INTERVAL={}", rng.gen_range(1..=5)));
        }
        if rng.gen_bool(0.4) {
            let n = rng.gen_range(1..=3);
            let days: Vec<String> = (0..n)
                .map(|_| {
                    let day = codes[rng.gen_range(0..7)];
                    match (freq, rng.gen_range(0..3)) {
                        ("MONTHLY" | "YEARLY", 0) => format!("{}{day}", rng.gen_range(1..=3)),
                        ("MONTHLY" | "YEARLY", 1) => format!("-1{day}"),
                        _ => day.to_owned(),
                    }
                })
                .collect();
            parts.push(format!("BYDAY={}", days.join(",")));
        } else if freq != "WEEKLY" && rng.gen_bool(0.4) {
            let day = [1, 15, 29, 31, -1][rng.gen_range(0..5)];
            parts.push(format!("BYMONTHDAY={day}"));
        }
        if rng.gen_bool(0.3) {
            // Months of 31 days: a rule that never matches would only
            // measure the `rrule` crate's search limit.
            let (a, b) = ([1, 3, 5], [7, 8, 10, 12]);
            let months = (a[rng.gen_range(0..3)], b[rng.gen_range(0..4)]);
            parts.push(format!("BYMONTH={},{}", months.0, months.1));
        }
        if rng.gen_bool(0.3) {
            parts.push(format!("WKST={}", codes[rng.gen_range(0..7)]));
        }
        if rng.gen_bool(0.2) {
            parts.push(format!("COUNT={}", rng.gen_range(1..=60)));
        } else if rng.gen_bool(0.2) {
            let until = Utc.with_ymd_and_hms(2003, 1, 1, 0, 0, 0).unwrap()
                + Duration::days(rng.gen_range(0..3000));
            parts.push(format!("UNTIL={}", until.format("%Y%m%dT%H%M%SZ")));
        }
        parts.join(";")
    }

    /// A random series whose start is an occurrence of its rule, with
    /// EXDATEs among its first occurrences and a random policy and zone.
    fn random_series(rng: &mut impl rand::Rng) -> Option<Series> {
        let zones = [
            chrono_tz::UTC,
            chrono_tz::America::New_York,
            chrono_tz::Australia::Sydney,
            chrono_tz::Europe::London,
        ];
        let date =
            NaiveDate::from_ymd_opt(2000, 1, 1).unwrap() + Duration::days(rng.gen_range(0..3000));
        // 01:30 and 02:30 fall in the DST changes of these zones.
        let time = ["01:30:00", "02:30:00", "09:00:00"][rng.gen_range(0..3)];
        let candidate = parse_local("s", &format!("{date}T{time}")).unwrap();
        let dst = DstPolicy {
            nonexistent: [NonexistentTime::ShiftForward, NonexistentTime::Skip]
                [rng.gen_range(0..2)],
            ambiguous: [
                AmbiguousTime::First,
                AmbiguousTime::Last,
                AmbiguousTime::Both,
            ][rng.gen_range(0..3)],
        };
        let mut series = Series {
            start: candidate,
            time_zone: zones[rng.gen_range(0..zones.len())],
            rule: Some(RecurrenceRule::parse("r", &random_rule(rng), &[]).unwrap()),
            dst,
        };
        // The start: the rule's first occurrence from the candidate on.
        let later = candidate + Duration::days(800);
        series.start = *series.rule_times(candidate, later, false).ok()?.first()?;
        series.check_start("s").ok()?;
        let firsts = series.rule_times(series.start, later, false).ok()?;
        let exdates: Vec<String> = (0..rng.gen_range(0..4))
            .map(|_| {
                firsts[rng.gen_range(0..firsts.len())]
                    .format("%Y-%m-%dT%H:%M:%S")
                    .to_string()
            })
            .collect();
        let text = series.rule.as_ref().unwrap().text().to_owned();
        series.rule = Some(RecurrenceRule::parse("r", &text, &exdates).unwrap());
        Some(series)
    }

    #[test]
    fn skipping_ahead_lists_what_expanding_from_the_start_lists() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(33);
        let (mut compared, mut nonempty) = (0, 0);
        while compared < 200 {
            let Some(series) = random_series(&mut rng) else {
                continue;
            };
            let start = Utc.from_utc_datetime(&series.start);
            let from = start + Duration::hours(rng.gen_range(-48..24 * 2000));
            let to = from + Duration::hours(rng.gen_range(1..24 * 90));
            let naive = series.between_with(from, to, false).unwrap();
            let skipped = series.between_with(from, to, true).unwrap();
            let rule = series.rule.as_ref().unwrap().text();
            assert_eq!(
                skipped, naive,
                "{rule} from {} in {} [{from}, {to})",
                series.start, series.time_zone
            );
            // Every local time the rule makes passes its filters: the
            // shortcut check_start takes never refuses a real occurrence.
            let rule_of = series.rule.as_ref().unwrap();
            let (lo, hi) = (from.naive_utc() - reach(), to.naive_utc() + reach());
            for local in series.rule_times(lo, hi, true).unwrap() {
                assert!(rule_of.filters_admit(local.date()), "{rule} at {local}");
            }
            compared += 1;
            nonempty += usize::from(!naive.is_empty());
        }
        // The windows are not all empty: the comparison tested something.
        assert!(
            nonempty > 50,
            "{nonempty} of {compared} windows held occurrences"
        );
    }

    /// A start the rule's filters refuse is refused without expanding, so
    /// a rule that never matches costs nothing (the expander would walk
    /// 100,000 days for the daily one).
    #[test]
    fn a_rule_that_never_matches_is_refused_by_its_filters() {
        for rule in [
            "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30",
            "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=31",
            "FREQ=MONTHLY;BYMONTHDAY=31;BYMONTH=4",
            "FREQ=MONTHLY;BYDAY=1MO;BYMONTHDAY=20",
        ] {
            let rule = RecurrenceRule::parse("r", rule, &[]).unwrap();
            for day in 0..800 {
                let d = NaiveDate::from_ymd_opt(2027, 1, 1).unwrap() + Duration::days(day);
                assert!(!rule.filters_admit(d), "{} admits {d}", rule.text());
            }
        }
        let leap =
            RecurrenceRule::parse("r", "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=-1;BYDAY=-1TH", &[]);
        let leap = leap.unwrap();
        assert!(leap.filters_admit(NaiveDate::from_ymd_opt(2024, 2, 29).unwrap()));
        assert!(!leap.filters_admit(NaiveDate::from_ymd_opt(2024, 2, 22).unwrap()));
    }

    #[test]
    fn a_listing_at_year_9998_costs_its_window() {
        let daily = |rule: &str| Series {
            start: parse_local("s", "2000-01-01T09:00:00").unwrap(),
            time_zone: chrono_tz::Asia::Tokyo,
            rule: Some(RecurrenceRule::parse("r", rule, &[]).unwrap()),
            dst: DstPolicy::default(),
        };
        let from = instant("9998-06-01T00:00:00Z");
        let to = from + Duration::days(7);
        let window = (from.naive_utc() - reach(), to.naive_utc() + reach());
        for (rule, most) in [
            ("FREQ=DAILY", 12),
            ("FREQ=DAILY;INTERVAL=3", 5),
            ("FREQ=WEEKLY;BYDAY=MO,WE,FR", 12),
            ("FREQ=MONTHLY;BYMONTHDAY=1,-1", 3),
            ("FREQ=YEARLY;INTERVAL=7", 1),
        ] {
            let s = daily(rule);
            // Candidates the expander produced: about the window's, not
            // the 2.9 million days since 2000.
            let stepped = s.rule_times(window.0, window.1, true).unwrap().len();
            assert!(stepped <= most, "{rule}: {stepped} candidates");
        }
        let listed = daily("FREQ=DAILY").between(from, to).unwrap();
        assert_eq!(listed.len(), 7);
        assert_eq!(listed[0].at, instant("9998-06-01T00:00:00Z"));
        // With COUNT, expansion starts at the series' start but ends with the count.
        let counted = daily("FREQ=DAILY;COUNT=1000");
        let stepped = counted.rule_times(window.0, window.1, true).unwrap().len();
        assert_eq!(stepped, 1000);
        assert!(counted.between(from, to).unwrap().is_empty());
    }
}
