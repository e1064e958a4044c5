//! The built-in texts, in English and Japanese, compiled once.

use std::sync::OnceLock;

use minijinja::Environment;

use super::{environment, name, Part, ReminderTemplate};
use crate::domain::Channel;

const EN_SUBJECT: &str = "Reminder: {{ title }}";
const EN_TEXT: &str = "Hi {{ name }}, \"{{ title }}\" \
{% if minutes == 0 %}is starting now{% elif minutes == 1 %}starts in 1 minute\
{% else %}starts in {{ minutes }} minutes{% endif %} ({{ starts_at }} {{ time_zone }}).\n{{ body }}";
const EN_HTML: &str = "<p>Hi {{ name }}, <strong>{{ title }}</strong> \
{% if minutes == 0 %}is starting now{% elif minutes == 1 %}starts in 1 minute\
{% else %}starts in {{ minutes }} minutes{% endif %} ({{ starts_at }} {{ time_zone }}).</p>\
{% if body %}\n<p style=\"white-space: pre-line\">{{ body }}</p>{% endif %}\n";
const JA_SUBJECT: &str = "[リマインダー] {{ title }}";
const JA_TEXT: &str = "{{ name }}さん、「{{ title }}」が\
{% if minutes == 0 %}まもなく開始します{% else %}{{ minutes }}分後に開始します{% endif %}\
（{{ starts_at }} {{ time_zone }}）。\n{{ body }}";
const JA_HTML: &str = "<p>{{ name }}さん、「<strong>{{ title }}</strong>」が\
{% if minutes == 0 %}まもなく開始します{% else %}{{ minutes }}分後に開始します{% endif %}\
（{{ starts_at }} {{ time_zone }}）。</p>\
{% if body %}\n<p style=\"white-space: pre-line\">{{ body }}</p>{% endif %}\n";

/// The languages with built-in texts; any other falls back to English.
pub const DEFAULT_LOCALES: [&str; 2] = ["en", "ja"];

/// The built-in texts, compiled once.
pub(super) fn defaults() -> &'static Environment<'static> {
    static DEFAULTS: OnceLock<Environment<'static>> = OnceLock::new();
    DEFAULTS.get_or_init(|| {
        let mut env = environment();
        for channel in Channel::ALL {
            for (locale, subject, text, html) in [
                ("en", EN_SUBJECT, EN_TEXT, EN_HTML),
                ("ja", JA_SUBJECT, JA_TEXT, JA_HTML),
            ] {
                for (part, source) in [
                    (Part::Subject, subject),
                    (Part::Text, text),
                    (Part::Html, html),
                ] {
                    env.add_template_owned(name(channel, locale, part), source)
                        .expect("the built-in templates compile");
                }
            }
        }
        env
    })
}

/// The built-in template of `channel` in `locale` (`en` or `ja`), as the API shows it.
pub fn default_template(channel: Channel, locale: &str) -> Option<ReminderTemplate> {
    let (subject, text, html) = match locale {
        "en" => (EN_SUBJECT, EN_TEXT, EN_HTML),
        "ja" => (JA_SUBJECT, JA_TEXT, JA_HTML),
        _ => return None,
    };
    Some(ReminderTemplate {
        channel,
        locale: locale.into(),
        subject: (channel == Channel::Mail).then(|| subject.into()),
        text: text.into(),
        html: (channel == Channel::Mail).then(|| html.into()),
    })
}
