//! `toki preview`: a schedule body's next occurrences and reminder instants,
//! in UTC and in the schedule's zone, with the DST decisions marked.

use chrono::{Duration, SecondsFormat};
use serde::Serialize;
use toki_model::input::ScheduleInput;
use toki_model::recurrence::{DstDecision, DstDrop, Series};
use toki_model::{Instant, ValidationError};

use crate::table::table;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Preview {
    pub time_zone: String,
    pub rrule: Option<String>,
    pub dst: toki_model::recurrence::DstPolicy,
    pub occurrences: Vec<PreviewOccurrence>,
    /// Local start times of the rule that the DST policy dropped in the window.
    pub dropped: Vec<DroppedTime>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreviewOccurrence {
    /// The local start the rule produced (before any DST shift).
    pub local: String,
    pub utc: String,
    /// The instant as a wall-clock time in the zone, with its offset.
    pub zoned: String,
    pub dst: Option<DstDecision>,
    pub reminders: Vec<PreviewReminder>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreviewReminder {
    pub minutes_before: i64,
    pub channels: Vec<String>,
    pub utc: String,
    pub zoned: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DroppedTime {
    pub local: String,
    pub why: DstDrop,
}

fn utc(at: Instant) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The next `count` occurrences at or after `from`.
pub fn preview(
    input: &ScheduleInput,
    from: Instant,
    count: usize,
) -> Result<Preview, ValidationError> {
    // Same checks as registration, so what previews is what registers
    // (`from`, by default now, standing for the registrar's clock).
    let series: Series = input.series(from)?;
    let tz = series.time_zone;
    let zoned = |at: Instant| {
        at.with_timezone(&tz)
            .to_rfc3339_opts(SecondsFormat::Secs, false)
    };
    let expand = |e: toki_model::recurrence::ExpandError| ValidationError::new("recurrence", e.0);
    let occurrences = if series.rule.is_some() {
        series.next(from, count).map_err(expand)?
    } else {
        // A one-off as registration reads it (an offset given is kept as is).
        let one = input.one_off_at(&series)?;
        [one]
            .into_iter()
            .filter(|o| o.at >= from && count > 0)
            .collect()
    };
    let last = occurrences.last().map(|o| o.at).unwrap_or(from);
    // What the policy dropped: only where it decided (a one-off given with
    // an offset has no DST decision to report).
    let decided = series.rule.is_some() || occurrences.iter().any(|o| o.dst.is_some());
    let dropped = decided
        .then(|| series.dropped_between(from, last + Duration::seconds(1)))
        .transpose()
        .map_err(expand)?
        .unwrap_or_default()
        .into_iter()
        .map(|(local, why)| DroppedTime {
            local: local.format("%Y-%m-%dT%H:%M:%S").to_string(),
            why,
        })
        .collect();
    let occurrences = occurrences
        .into_iter()
        .map(|o| PreviewOccurrence {
            local: o.local.format("%Y-%m-%dT%H:%M:%S").to_string(),
            utc: utc(o.at),
            zoned: zoned(o.at),
            dst: o.dst,
            reminders: input
                .reminders
                .iter()
                .map(|r| {
                    // Offsets are absolute durations before the instant.
                    let at = o.at - Duration::minutes(r.minutes_before);
                    PreviewReminder {
                        minutes_before: r.minutes_before,
                        channels: r.channels.clone(),
                        utc: utc(at),
                        zoned: zoned(at),
                    }
                })
                .collect(),
        })
        .collect();
    Ok(Preview {
        time_zone: tz.to_string(),
        rrule: series.rule.as_ref().map(|r| r.text().to_owned()),
        dst: series.dst,
        occurrences,
        dropped,
    })
}

fn mark(d: Option<DstDecision>) -> &'static str {
    match d {
        None => "",
        Some(DstDecision::ShiftedForward) => "gap: shifted forward",
        Some(DstDecision::FirstOfTwo) => "repeated: first",
        Some(DstDecision::LastOfTwo) => "repeated: last",
    }
}

/// A table: one row per occurrence, then one per reminder under it.
pub fn render(p: &Preview) -> String {
    let mut rows = Vec::new();
    for (i, o) in p.occurrences.iter().enumerate() {
        rows.push(vec![
            format!("#{}", i + 1),
            o.zoned.clone(),
            o.utc.clone(),
            mark(o.dst).to_owned(),
        ]);
        for r in &o.reminders {
            rows.push(vec![
                format!("  -{} min  {}", r.minutes_before, r.channels.join(",")),
                r.zoned.clone(),
                r.utc.clone(),
                String::new(),
            ]);
        }
    }
    let mut out = format!(
        "{} in {} (DST: nonexistent {}, ambiguous {})\n",
        p.rrule.as_deref().unwrap_or("one-off"),
        p.time_zone,
        p.dst.nonexistent,
        p.dst.ambiguous
    );
    let grid = table(&["occurrence", &p.time_zone, "UTC", "DST"], &rows);
    // The DST column is mostly empty: no padding at the ends of lines.
    let grid: Vec<&str> = grid.lines().map(str::trim_end).collect();
    out.push_str(&grid.join("\n"));
    for d in &p.dropped {
        let why = match d.why {
            DstDrop::Skipped => "does not exist; skipped (dst.nonexistent = skip)",
            DstDrop::OtherOfTwo => "exists twice; one instant left out (dst.ambiguous)",
        };
        out.push_str(&format!("\n{}  {why}", d.local));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weekly_new_york(dst: &str) -> ScheduleInput {
        serde_json::from_str(&format!(
            r#"{{"title":"stand-up","starts_at":"2026-10-25T01:30:00","time_zone":"America/New_York",
               "participants":["u1"],"reminders":[{{"minutes_before":10,"channels":["slack"]}}],
               "recurrence":{{"rrule":"FREQ=WEEKLY;BYDAY=SU;COUNT=3"}},"dst":{dst}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn marks_the_repeated_hour_and_keeps_offsets_absolute() {
        let from = "2026-10-01T00:00:00Z".parse().unwrap();
        let p = preview(&weekly_new_york(r#"{"ambiguous":"both"}"#), from, 10).unwrap();
        let utcs: Vec<_> = p.occurrences.iter().map(|o| o.utc.as_str()).collect();
        // 01:30 on 1 November happens at 05:30Z (EDT) and again at 06:30Z (EST).
        assert_eq!(
            utcs,
            [
                "2026-10-25T05:30:00Z",
                "2026-11-01T05:30:00Z",
                "2026-11-01T06:30:00Z",
                "2026-11-08T06:30:00Z"
            ]
        );
        assert_eq!(p.occurrences[2].dst, Some(DstDecision::LastOfTwo));
        assert_eq!(p.occurrences[2].reminders[0].utc, "2026-11-01T06:20:00Z");
        assert!(render(&p).contains("repeated: last"));
        let first = preview(&weekly_new_york("{}"), from, 10).unwrap();
        assert_eq!(first.occurrences.len(), 3);
        assert_eq!(first.dropped.len(), 1);
    }

    #[test]
    fn a_one_off_previews_the_instant_registration_stores() {
        let from = "2026-10-01T00:00:00Z".parse().unwrap();
        // 01:30 EST, the second 01:30 of 1 November in New York.
        let input: ScheduleInput = serde_json::from_str(
            r#"{"title":"x","starts_at":"2026-11-01T01:30:00-05:00","time_zone":"America/New_York",
                "participants":["u1"],"reminders":[]}"#,
        )
        .unwrap();
        let stored = input
            .validate(&"s".parse().unwrap(), from)
            .unwrap()
            .starts_at;
        let p = preview(&input, from, 5).unwrap();
        assert_eq!(p.occurrences.len(), 1);
        assert_eq!(p.occurrences[0].utc, utc(stored));
        assert_eq!(p.occurrences[0].utc, "2026-11-01T06:30:00Z");
        assert!(p.dropped.is_empty(), "{:?}", p.dropped);
    }

    #[test]
    fn bad_policy_names_the_field() {
        let from = "2026-10-01T00:00:00Z".parse().unwrap();
        let e = preview(&weekly_new_york(r#"{"ambiguous":"twice"}"#), from, 3).unwrap_err();
        assert_eq!(e.field, "dst.ambiguous");
    }
}
