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

use std::fmt;
use std::str::FromStr;

use chrono::{Duration, LocalResult, NaiveDateTime, Offset, TimeZone, Utc};
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

/// A validated recurrence rule: the RRULE without UNTIL (kept apart as an
/// instant), and the excluded local start times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecurrenceRule {
    /// The RRULE as given (normalised to upper case), UNTIL included.
    text: String,
    /// The rule handed to the expander: `text` without UNTIL.
    expand: String,
    until: Option<Instant>,
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
        let mut kept = Vec::new();
        let (mut has_freq, mut has_count) = (false, false);
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
                "COUNT" => has_count = true,
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
        if has_count && until.is_some() {
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
        let exdates = exdates
            .iter()
            .enumerate()
            .map(|(i, s)| parse_local(&format!("{field}.exdates[{i}]"), s))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            text,
            expand,
            until,
            exdates,
        })
    }

    pub fn text(&self) -> &str {
        &self.text
    }
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

impl Series {
    /// The local start times the rule itself produces (COUNT applied, not
    /// EXDATE), in order, up to and including `until_local`. A rule that
    /// matches nothing (BYMONTH=2;BYMONTHDAY=30) ends at the `rrule` crate's
    /// own search limit.
    fn rule_times(&self, until_local: NaiveDateTime) -> Result<Vec<NaiveDateTime>, ExpandError> {
        let Some(rule) = &self.rule else {
            return Ok(vec![self.start]);
        };
        // The wall clock, expanded as if it were UTC (no DST there).
        let start = rrule::Tz::UTC.from_utc_datetime(&self.start);
        let set = rule
            .expand
            .parse::<rrule::RRule<rrule::Unvalidated>>()
            .and_then(|r| r.build(start))
            .map_err(|e| ExpandError(e.to_string()))?;
        Ok(set
            .into_iter()
            .map(|t| t.naive_utc())
            .take_while(|local| *local <= until_local)
            .collect())
    }

    /// [`Self::rule_times`] without the EXDATEs.
    fn local_times(&self, until_local: NaiveDateTime) -> Result<Vec<NaiveDateTime>, ExpandError> {
        let mut times = self.rule_times(until_local)?;
        if let Some(rule) = &self.rule {
            times.retain(|t| !rule.exdates.contains(t));
        }
        Ok(times)
    }

    /// Occurrences whose instant is in `[from, to)`, in order.
    pub fn between(&self, from: Instant, to: Instant) -> Result<Vec<OccurrenceAt>, ExpandError> {
        // Offsets are within ±14 h, so a local time two days past `to` as if
        // it were UTC is past every local time that can map before `to`.
        let until_local = to.naive_utc() + Duration::days(2);
        let until = self.rule.as_ref().and_then(|r| r.until);
        let mut out: Vec<OccurrenceAt> = self
            .local_times(until_local)?
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
        let until_local = to.naive_utc() + Duration::days(2);
        Ok(self
            .local_times(until_local)?
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
        // The rule alone: an EXDATE on the start does not make it wrong.
        let first = self
            .rule_times(self.start)
            .map_err(|e| ValidationError::new(field, e.0))?;
        if first.first() != Some(&self.start) {
            return Err(ValidationError::new(
                field,
                format!(
                    "{} is not an occurrence of the rule (e.g. a Monday for BYDAY=MO)",
                    self.start.format("%Y-%m-%dT%H:%M:%S")
                ),
            ));
        }
        Ok(())
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
}
