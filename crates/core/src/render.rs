//! Rendering a reminder for one recipient: in their time zone and language.

use chrono::Duration;

use crate::domain::{DueAt, User};
use crate::ports::ScheduleSnapshot;

/// (subject, text) for a reminder of `schedule` due at `due_at`.
pub fn reminder_text(schedule: &ScheduleSnapshot, due_at: DueAt, user: &User) -> (String, String) {
    let local = schedule.starts_at.with_timezone(&user.time_zone);
    let minutes = (schedule.starts_at - due_at.0)
        .max(Duration::zero())
        .num_minutes();
    let when = local.format("%Y-%m-%d %H:%M");
    let tz = user.time_zone.name();
    if user.locale.starts_with("ja") {
        let lead = if minutes == 0 {
            "まもなく開始します".to_string()
        } else {
            format!("{minutes}分後に開始します")
        };
        (
            format!("[リマインダー] {}", schedule.title),
            format!(
                "{}さん、「{}」が{}（{} {}）。\n{}",
                user.name, schedule.title, lead, when, tz, schedule.body
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
            format!("Reminder: {}", schedule.title),
            format!(
                "Hi {}, \"{}\" {} ({} {}).\n{}",
                user.name, schedule.title, lead, when, tz, schedule.body
            ),
        )
    }
}
