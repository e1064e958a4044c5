//! Change notices for one recipient: in their time zone and language.
//! (Reminders are rendered from templates: [`toki_model::template`].)

use chrono_tz::Tz;
use toki_model::change::{RecipientChange, Updates};
use toki_model::domain::{Channel, Instant, User};
use toki_model::template::{escape_mrkdwn, text_to_html, Texts};

/// A change notice as `channel` sends it: escaped for Slack's mrkdwn; for
/// mail, an HTML part saying the same.
pub fn change_texts(change: &RecipientChange, user: &User, channel: Channel) -> Texts {
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
        Channel::Chat | Channel::Webhook => Texts {
            subject,
            text,
            html: None,
        },
    }
}

/// (subject, text) of a change notice for one recipient: times in their zone,
/// in their language.
pub fn change_text(change: &RecipientChange, user: &User) -> (String, String) {
    let reader = Reader::of(user);
    match change {
        RecipientChange::Added { title, starts_at } => added_text(&reader, title, *starts_at),
        RecipientChange::Removed { title } => removed_text(&reader, title),
        RecipientChange::Cancelled { title, starts_at } => {
            cancelled_text(&reader, title, *starts_at)
        }
        RecipientChange::Updated(u) => updated_text(&reader, u),
    }
}

/// The recipient of a change notice: their name, time zone and language.
struct Reader<'a> {
    name: &'a str,
    tz: Tz,
    ja: bool,
}

impl<'a> Reader<'a> {
    /// The reader of a notice to `user`.
    fn of(user: &'a User) -> Self {
        Reader {
            name: &user.name,
            tz: user.time_zone,
            ja: user.locale.starts_with("ja"),
        }
    }

    /// An instant as the reader's wall-clock time, with their zone's name.
    fn at(&self, t: Instant) -> String {
        format!(
            "{} {}",
            t.with_timezone(&self.tz).format("%Y-%m-%d %H:%M"),
            self.tz.name()
        )
    }
}

/// A repeat rule as shown in a notice: "-" for a one-off.
fn rule_text(r: &Option<String>) -> String {
    r.clone().unwrap_or_else(|| "-".into())
}

/// The notice to a new participant.
fn added_text(r: &Reader, title: &str, starts_at: Instant) -> (String, String) {
    if r.ja {
        (
            format!("[予定に追加] {title}"),
            format!(
                "{}さん、「{title}」（{}）に追加されました。",
                r.name,
                r.at(starts_at)
            ),
        )
    } else {
        (
            format!("Added: {title}"),
            format!(
                "Hi {}, you were added to \"{title}\" ({}).",
                r.name,
                r.at(starts_at)
            ),
        )
    }
}

/// The notice to someone no longer a participant.
fn removed_text(r: &Reader, title: &str) -> (String, String) {
    if r.ja {
        (
            format!("[予定から削除] {title}"),
            format!("{}さん、「{title}」の参加者から外れました。", r.name),
        )
    } else {
        (
            format!("Removed: {title}"),
            format!("Hi {}, you were removed from \"{title}\".", r.name),
        )
    }
}

/// The notice that a schedule was deleted.
fn cancelled_text(r: &Reader, title: &str, starts_at: Instant) -> (String, String) {
    if r.ja {
        (
            format!("[中止] {title}"),
            format!(
                "{}さん、「{title}」（{}）は中止になりました。",
                r.name,
                r.at(starts_at)
            ),
        )
    } else {
        (
            format!("Cancelled: {title}"),
            format!(
                "Hi {}, \"{title}\" ({}) was cancelled.",
                r.name,
                r.at(starts_at)
            ),
        )
    }
}

/// The notice to a participant still in a changed schedule: a line per change.
fn updated_text(r: &Reader, u: &Updates) -> (String, String) {
    let lines = update_lines(r, u).join("\n");
    if r.ja {
        (
            format!("[予定の変更] {}", u.title),
            format!(
                "{}さん、「{}」が変更されました。\n{}",
                r.name, u.title, lines
            ),
        )
    } else {
        (
            format!("Changed: {}", u.title),
            format!("Hi {}, \"{}\" changed.\n{}", r.name, u.title, lines),
        )
    }
}

/// One line per visible change, in the order the notice lists them.
fn update_lines(r: &Reader, u: &Updates) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some((old, new)) = &u.renamed {
        lines.push(if r.ja {
            format!("件名: {old} → {new}")
        } else {
            format!("Title: {old} → {new}")
        });
    }
    if let Some((old, new)) = u.moved {
        lines.push(if r.ja {
            format!("日時: {} → {}", r.at(old), r.at(new))
        } else {
            format!("Time: {} → {}", r.at(old), r.at(new))
        });
    }
    if let Some((old, new)) = &u.repeats {
        lines.push(if r.ja {
            format!("繰り返し: {} → {}", rule_text(old), rule_text(new))
        } else {
            format!("Repeats: {} → {}", rule_text(old), rule_text(new))
        });
    }
    for (original, now) in &u.occurrences {
        lines.push(occurrence_line(r, *original, *now));
    }
    if u.details {
        lines.push(if r.ja {
            "詳細が更新されました".into()
        } else {
            "The details were updated".into()
        });
    }
    lines
}

/// The line for one occurrence moved (to `now`) or cancelled (`None`).
fn occurrence_line(r: &Reader, original: Instant, now: Option<Instant>) -> String {
    match (now, r.ja) {
        (Some(n), true) => format!("{} の回: {} に変更", r.at(original), r.at(n)),
        (None, true) => format!("{} の回: 中止", r.at(original)),
        (Some(n), false) => format!("The one at {}: moved to {}", r.at(original), r.at(n)),
        (None, false) => format!("The one at {}: cancelled", r.at(original)),
    }
}
