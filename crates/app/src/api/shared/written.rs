//! What a write of a schedule answers ([`ScheduleResponse`]), and its
//! status: shared by the schedule, batch and occurrence routes.

use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Serialize;
use toki_core::registrar::Registered;
use toki_model::input::ScheduleView;
use utoipa::ToSchema;

use super::audit::Audited;
use super::schema::ScheduleViewDoc;

/// A schedule as written.
#[derive(Serialize, ToSchema)]
#[schema(as = WrittenSchedule)]
pub(crate) struct ScheduleResponse {
    #[serde(flatten)]
    #[schema(value_type = ScheduleViewDoc)]
    schedule: ScheduleView,
    /// False (with 202) when the index mirror is left to the repair pass.
    mirrored: bool,
    /// Reminders due so soon that this write put them on the queue itself.
    enqueued_directly: usize,
}

/// 200 when the write is in the tenant database and the index; 202 when it is
/// in the tenant database only: it is saved (its outbox row says the mirror is
/// due) and the repair pass finishes the mirror within a minute.
pub(crate) fn written(mirrored: bool) -> StatusCode {
    if mirrored {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    }
}

/// A written schedule's answer: its status, its audit target and its body.
pub(crate) type ScheduleAnswer = (StatusCode, Extension<Audited>, Json<ScheduleResponse>);

/// A written schedule's answer: its status, body, and what the audit log records.
pub(crate) fn schedule_response(r: Registered) -> ScheduleAnswer {
    (
        written(r.mirrored),
        Extension(Audited::schedule(
            r.schedule.id.as_str(),
            r.schedule.version,
        )),
        Json(ScheduleResponse {
            schedule: ScheduleView::from(&r.schedule),
            mirrored: r.mirrored,
            enqueued_directly: r.enqueued_directly,
        }),
    )
}
