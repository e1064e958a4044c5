//! Reminder texts from templates: per tenant × locale × channel, with
//! built-in defaults in English and Japanese, rendered by minijinja.
//!
//! A value put into a text is escaped for where the text goes: HTML for a
//! mail's HTML part, Slack's mrkdwn control characters (`& < >`) for Slack,
//! nothing for plain text (a mail's plain part, a chat row, a subject). What
//! the template's author wrote is kept as written (`*bold*`, links), but no
//! Slack text may mention a whole channel: `<!here>` is refused when a
//! template is registered and made plain text at delivery.

use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::{Deserialize, Serialize};

use crate::domain::Channel;

/// A tenant's reminder text for one channel and locale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReminderTemplate {
    pub channel: Channel,
    /// Lowercase (`ja`, `en-gb`): a user whose locale is `en-GB` gets the
    /// `en-gb` template, else `en`'s, else the default.
    pub locale: String,
    /// The mail's subject; the default subject when absent.
    pub subject: Option<String>,
    pub text: String,
    /// The mail's HTML part; when absent, the text, escaped, line breaks kept.
    pub html: Option<String>,
}

/// A template as the API takes it (its channel and locale are in the path).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateInput {
    #[serde(default)]
    pub subject: Option<String>,
    pub text: String,
    #[serde(default)]
    pub html: Option<String>,
}

/// A reminder rendered for one recipient on one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Texts {
    pub subject: String,
    pub text: String,
    /// Mail only: the HTML part.
    pub html: Option<String>,
}

/// The variables a template can use, as the README lists them.
pub const VARIABLES: [&str; 9] = [
    "name",
    "title",
    "body",
    "starts_at",
    "date",
    "time",
    "time_zone",
    "minutes",
    "starts_at_utc",
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Subject,
    Text,
    Html,
}

/// A template's name in an environment; its extension picks the escaping.
fn name(channel: Channel, locale: &str, part: Part) -> String {
    let part = match (part, channel) {
        (Part::Subject, _) => "subject.txt",
        (Part::Html, _) => "html.html",
        (Part::Text, Channel::Slack) => "text.slack",
        (Part::Text, _) => "text.txt",
    };
    format!("{channel}/{locale}/{part}")
}

/// `& < >` as Slack's mrkdwn wants them in text that is not markup.
pub fn escape_mrkdwn(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    write_mrkdwn(&mut out, s).expect("writing to a String");
    out
}

/// `s` into `out`, `& < >` escaped; the runs between them written as they are.
fn write_mrkdwn(out: &mut impl std::fmt::Write, s: &str) -> std::fmt::Result {
    let mut from = 0;
    for (i, b) in s.bytes().enumerate() {
        let escaped = match b {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            _ => continue,
        };
        out.write_str(&s[from..i])?;
        out.write_str(escaped)?;
        from = i + 1;
    }
    out.write_str(&s[from..])
}

/// Plain text as an HTML fragment: escaped, each line break a `<br>`.
pub fn text_to_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 32);
    out.push_str("<p>");
    for (i, line) in s.trim_end().lines().enumerate() {
        if i > 0 {
            out.push_str("<br>\n");
        }
        for c in line.chars() {
            match c {
                '&' => out.push_str("&amp;"),
                '<' => out.push_str("&lt;"),
                '>' => out.push_str("&gt;"),
                '"' => out.push_str("&quot;"),
                '\'' => out.push_str("&#x27;"),
                c => out.push(c),
            }
        }
    }
    out.push_str("</p>\n");
    out
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    // Only what cannot build large values (language.rs).
    language::restrict(&mut env);
    // A tenant's template runs for every recipient: bounded (limits.rs).
    env.set_fuel(Some(limits::FUEL));
    env.set_recursion_limit(limits::RECURSION_LIMIT);
    // A misspelt variable is an error (caught at registration), not an empty string.
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|name| {
        if name.ends_with(".html") {
            AutoEscape::Html
        } else if name.ends_with(".slack") {
            AutoEscape::Custom("mrkdwn")
        } else {
            AutoEscape::None
        }
    });
    env.set_formatter(|out, state, value| {
        if state.auto_escape() == AutoEscape::Custom("mrkdwn") && !value.is_safe() {
            let written = match value.as_str() {
                Some(s) => write_mrkdwn(out, s),
                None => write_mrkdwn(out, &value.to_string()),
            };
            return written.map_err(|_| {
                minijinja::Error::new(minijinja::ErrorKind::WriteFailure, "writing the output")
            });
        }
        minijinja::escape_formatter(out, state, value)
    });
    env
}

mod check;
mod defaults;
mod language;
mod limits;
mod meter;
mod render;

pub use check::parse_locale;
pub use defaults::{default_template, DEFAULT_LOCALES};
pub use language::{FILTERS, MAX_RANGE, MAX_VALUE_BYTES};
pub use limits::{
    RenderError, FUEL, MAX_CHAT_OUTPUT, MAX_MAIL_OUTPUT, MAX_SUBJECT_OUTPUT, RECURSION_LIMIT,
};
pub use meter::{CpuCheck, Overrun, RenderBudget, DELIVERY_CPU, REGISTRATION_CPU, WORK};
pub use render::Templates;

#[cfg(test)]
mod tests;
