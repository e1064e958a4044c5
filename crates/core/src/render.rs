//! Rendering a reminder for one recipient: in their time zone and language.

use chrono::Duration;

use crate::domain::{DueAt, Occurrence, User};
use crate::ports::ScheduleSnapshot;

/// (subject, text) for a reminder of the occurrence of `schedule` starting
/// at `occurrence`, due at `due_at`.
pub fn reminder_text(
    schedule: &ScheduleSnapshot,
    occurrence: Occurrence,
    due_at: DueAt,
    user: &User,
) -> (String, String) {
    let starts_at = occurrence.0;
    let (title, body) = schedule.texts_at(starts_at);
    let local = starts_at.with_timezone(&user.time_zone);
    let minutes = (starts_at - due_at.0).max(Duration::zero()).num_minutes();
    let when = local.format("%Y-%m-%d %H:%M");
    let tz = user.time_zone.name();
    if user.locale.starts_with("ja") {
        let lead = if minutes == 0 {
            "まもなく開始します".to_string()
        } else {
            format!("{minutes}分後に開始します")
        };
        (
            format!("[リマインダー] {}", title),
            format!(
                "{}さん、「{}」が{}（{} {}）。\n{}",
                user.name, title, lead, when, tz, body
            ),
        )
    } else {
        let lead = if minutes == 0 {
            "is starting now".to_string()
        } else if minutes == 1 {
            "starts in 1 minute".to_string()
        } else {
            format!("starts in {minutes} minutes")
        };
        (
            format!("Reminder: {}", title),
            format!(
                "Hi {}, \"{}\" {} ({} {}).\n{}",
                user.name, title, lead, when, tz, body
            ),
        )
    }
}
