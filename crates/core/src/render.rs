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

/// (subject, text) of a change notice for one recipient: times in their zone,
/// in their language.
pub fn change_text(change: &crate::change::RecipientChange, user: &User) -> (String, String) {
    use crate::change::RecipientChange as C;
    let tz = user.time_zone;
    let at = |t: crate::domain::Instant| {
        format!(
            "{} {}",
            t.with_timezone(&tz).format("%Y-%m-%d %H:%M"),
            tz.name()
        )
    };
    let rule = |r: &Option<String>| r.clone().unwrap_or_else(|| "-".into());
    let ja = user.locale.starts_with("ja");
    match change {
        C::Added { title, starts_at } if ja => (
            format!("[予定に追加] {title}"),
            format!(
                "{}さん、「{title}」（{}）に追加されました。",
                user.name,
                at(*starts_at)
            ),
        ),
        C::Added { title, starts_at } => (
            format!("Added: {title}"),
            format!(
                "Hi {}, you were added to \"{title}\" ({}).",
                user.name,
                at(*starts_at)
            ),
        ),
        C::Removed { title } if ja => (
            format!("[予定から削除] {title}"),
            format!("{}さん、「{title}」の参加者から外れました。", user.name),
        ),
        C::Removed { title } => (
            format!("Removed: {title}"),
            format!("Hi {}, you were removed from \"{title}\".", user.name),
        ),
        C::Cancelled { title, starts_at } if ja => (
            format!("[中止] {title}"),
            format!(
                "{}さん、「{title}」（{}）は中止になりました。",
                user.name,
                at(*starts_at)
            ),
        ),
        C::Cancelled { title, starts_at } => (
            format!("Cancelled: {title}"),
            format!(
                "Hi {}, \"{title}\" ({}) was cancelled.",
                user.name,
                at(*starts_at)
            ),
        ),
        C::Updated(u) => {
            let mut lines = Vec::new();
            if let Some((old, new)) = &u.renamed {
                lines.push(if ja {
                    format!("件名: {old} → {new}")
                } else {
                    format!("Title: {old} → {new}")
                });
            }
            if let Some((old, new)) = u.moved {
                lines.push(if ja {
                    format!("日時: {} → {}", at(old), at(new))
                } else {
                    format!("Time: {} → {}", at(old), at(new))
                });
            }
            if let Some((old, new)) = &u.repeats {
                lines.push(if ja {
                    format!("繰り返し: {} → {}", rule(old), rule(new))
                } else {
                    format!("Repeats: {} → {}", rule(old), rule(new))
                });
            }
            for (original, now) in &u.occurrences {
                lines.push(match (now, ja) {
                    (Some(n), true) => format!("{} の回: {} に変更", at(*original), at(*n)),
                    (None, true) => format!("{} の回: 中止", at(*original)),
                    (Some(n), false) => {
                        format!("The one at {}: moved to {}", at(*original), at(*n))
                    }
                    (None, false) => format!("The one at {}: cancelled", at(*original)),
                });
            }
            if u.details {
                lines.push(if ja {
                    "詳細が更新されました".into()
                } else {
                    "The details were updated".into()
                });
            }
            if ja {
                (
                    format!("[予定の変更] {}", u.title),
                    format!(
                        "{}さん、「{}」が変更されました。\n{}",
                        user.name,
                        u.title,
                        lines.join("\n")
                    ),
                )
            } else {
                (
                    format!("Changed: {}", u.title),
                    format!(
                        "Hi {}, \"{}\" changed.\n{}",
                        user.name,
                        u.title,
                        lines.join("\n")
                    ),
                )
            }
        }
    }
}
