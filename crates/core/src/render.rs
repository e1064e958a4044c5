//! Change notices for one recipient: in their time zone and language.
//! (Reminders are rendered from templates: [`toki_model::template`].)

use toki_model::domain::{Channel, User};
use toki_model::template::{escape_mrkdwn, text_to_html, Texts};

/// A change notice as `channel` sends it: escaped for Slack's mrkdwn; for
/// mail, an HTML part saying the same.
pub fn change_texts(
    change: &toki_model::change::RecipientChange,
    user: &User,
    channel: Channel,
) -> Texts {
    let (subject, text) = change_text(change, user);
    match channel {
        Channel::Slack => Texts {
            subject,
            text: escape_mrkdwn(&text),
            html: None,
        },
        Channel::Mail => Texts {
            subject,
            html: Some(text_to_html(&text)),
            text,
        },
        Channel::Chat => Texts {
            subject,
            text,
            html: None,
        },
    }
}

/// (subject, text) of a change notice for one recipient: times in their zone,
/// in their language.
pub fn change_text(change: &toki_model::change::RecipientChange, user: &User) -> (String, String) {
    use toki_model::change::RecipientChange as C;
    let tz = user.time_zone;
    let at = |t: toki_model::domain::Instant| {
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
