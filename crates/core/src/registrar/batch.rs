//! A schedule's validation and expansion into index rows, and a batch's
//! ([`super::Registrar::put_schedules`]): on a blocking thread rather than
//! the runtime's workers, item by item, within the batch's budget
//! (`crate::settings::BatchBudget`) of index rows and time. Past either, the whole batch is refused before
//! anything is written.

use std::time::Duration;

use thiserror::Error;

use toki_model::domain::{Instant, Recurrence, Reminder, Schedule, ScheduleId, TenantId};
use toki_model::index::reminders_for;
use toki_model::input::ScheduleInput;
use toki_ports::error::StoreError;

use crate::settings::PipelineSettings;

/// A batch past its budget: refused whole, nothing written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum OverBudget {
    #[error("the batch's schedules would put more than {limit} reminders in the index (at most {limit} per batch); nothing was written: send them in smaller batches")]
    Rows { limit: usize },
    #[error("validating and expanding the batch took longer than its budget ({} ms); nothing was written: send it in smaller batches", .limit.as_millis())]
    Time { limit: Duration },
}

/// What a schedule's write puts in the index: its rows (their version set
/// once the schedule is written), and how far a series goes.
#[derive(Debug)]
pub(super) struct Expansion {
    pub(super) rows: Vec<Reminder>,
    pub(super) until: Option<Instant>,
}

/// A batch's item, with the stored series it replaces, if any.
pub(super) struct Item {
    pub(super) id: ScheduleId,
    pub(super) input: ScheduleInput,
    pub(super) old: Option<Recurrence>,
}

/// A stored series that no longer expands: it was valid when written, so
/// the data is corrupt, not the caller's input.
pub(super) fn stored_series(e: toki_model::domain::SeriesError) -> StoreError {
    StoreError::corrupt("schedule recurrence", e.to_string())
}

/// The index rows of `s` as of `now`: not those already past the scanner's
/// look-back, and a series only as far as the horizon.
pub(super) fn expand(
    tenant: &TenantId,
    s: &Schedule,
    now: Instant,
    settings: &PipelineSettings,
) -> Result<Expansion, StoreError> {
    let until = s
        .recurrence
        .as_ref()
        .map(|_| now + toki_model::time::to_chrono(settings.horizon));
    let rows = reminders_for(
        tenant,
        s,
        now - toki_model::time::to_chrono(settings.look_back),
        until.unwrap_or(Instant::MAX_UTC),
    )
    .map_err(stored_series)?;
    Ok(Expansion { rows, until })
}

/// A schedule as it is to be stored: validated, and a series written again
/// keeps the exceptions of occurrences it still has (of `old`, the stored one).
pub(super) fn prepare(
    id: &ScheduleId,
    input: &ScheduleInput,
    old: Option<Recurrence>,
    now: Instant,
) -> Result<Schedule, StoreError> {
    let mut schedule = input.validate(id, now)?;
    if let (Some(rec), Some(old)) = (schedule.recurrence.as_mut(), old) {
        let series = rec.series(schedule.time_zone)?;
        rec.exceptions = old
            .exceptions
            .into_iter()
            .filter(|e| series.has_occurrence_at(e.original).unwrap_or(false))
            .collect();
    }
    Ok(schedule)
}

/// An item validated and expanded, or why not (`StoreError::Invalid`
/// naming the field, for the caller's input).
pub(super) type Planned = Result<(Schedule, Expansion), StoreError>;

/// Each item validated and expanded, in order (an invalid item gets its
/// error), within `settings.batch`; past it, why. Blocking: CPU work.
pub(super) fn plan(
    tenant: &TenantId,
    items: Vec<Item>,
    now: Instant,
    settings: &PipelineSettings,
) -> Result<Vec<Planned>, OverBudget> {
    let budget = settings.batch;
    let started = std::time::Instant::now();
    let mut rows = 0usize;
    let mut planned = Vec::with_capacity(items.len());
    for item in items {
        let one = prepare(&item.id, &item.input, item.old, now).and_then(|s| {
            let expansion = expand(tenant, &s, now, settings)?;
            Ok((s, expansion))
        });
        if let Ok((_, e)) = &one {
            rows += e.rows.len();
            if rows > budget.rows {
                return Err(OverBudget::Rows { limit: budget.rows });
            }
        }
        planned.push(one);
        if started.elapsed() >= budget.time {
            return Err(OverBudget::Time { limit: budget.time });
        }
    }
    Ok(planned)
}
