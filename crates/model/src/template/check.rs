//! A template checked when it is registered: it compiles, it renders for
//! sample recipients, its parts fit; and what it makes of a sample.

use chrono::Duration;

use minijinja::{Environment, Value};

use super::limits::{classify, render_bounded, template_problem, RenderError};
use super::meter::RenderBudget;
use super::render::{Templates, Variables};
use super::{environment, name, Part, ReminderTemplate, TemplateInput, Texts};
use crate::domain::{Channel, DueAt, Instant, User};
use crate::error::ValidationError;
use crate::input::{MAX_BODY_CHARS, MAX_MINUTES_BEFORE, MAX_NAME_CHARS, MAX_TITLE_CHARS};

/// Longest accepted sources, in bytes.
const MAX_SUBJECT: usize = 1_000;
const MAX_TEXT: usize = 8_000;
const MAX_HTML: usize = 64_000;

/// The instant the samples start at.
fn sample_start() -> Instant {
    chrono::DateTime::parse_from_rfc3339("2030-01-21T09:00:00Z")
        .expect("a sample instant")
        .to_utc()
}

/// A template's locale as stored: lowercase, `ll` or `ll-xx...`.
pub fn parse_locale(locale: &str) -> Result<String, ValidationError> {
    let l = locale.trim().to_ascii_lowercase();
    let mut parts = l.split(['-', '_']);
    let lang_ok = parts
        .next()
        .is_some_and(|p| (2..=3).contains(&p.len()) && p.chars().all(|c| c.is_ascii_lowercase()));
    let rest_ok =
        parts.all(|p| (1..=8).contains(&p.len()) && p.chars().all(|c| c.is_ascii_alphanumeric()));
    if !lang_ok || !rest_ok || l.len() > 35 {
        return Err(ValidationError::new(
            "locale",
            format!("{locale:?} is not a locale (a language code like `ja` or `en-GB`)"),
        ));
    }
    Ok(l.replace('_', "-"))
}

/// Recipients and meetings a template is tried on when registered: every
/// branch a template is likely to take (starting now, in one minute, in
/// many; with and without details).
fn samples() -> Vec<(User, &'static str, &'static str, i64)> {
    let user = |name: &str, zone: chrono_tz::Tz, locale: &str| User {
        id: "sample".parse().expect("a user id"),
        name: name.into(),
        email: Some("ana@example.com".into()),
        slack_user_id: Some("U024BE7LH".into()),
        time_zone: zone,
        locale: locale.into(),
        channels_off: Default::default(),
        webhook_url: None,
    };
    vec![
        (
            user("Ana", chrono_tz::Europe::Berlin, "en"),
            "Weekly review",
            "Agenda:\n1. Numbers <Q3> & plans",
            10,
        ),
        (
            user("花子", chrono_tz::Asia::Tokyo, "ja"),
            "定例会議",
            "",
            1,
        ),
        (user("Ben", chrono_tz::UTC, "en"), "Stand-up", "", 0),
    ]
}

/// The largest inputs a reminder can have (the longest name, title and
/// body, the most minutes ahead), of the character `part` makes longest on
/// `channel`: `'` in HTML (`&#x27;`), `&` for Slack (`&amp;`), else a
/// four-byte one.
fn largest(channel: Channel, part: Part) -> Value {
    let c = match (part, channel) {
        (Part::Html, _) => "'",
        (Part::Text, Channel::Slack) => "&",
        _ => "\u{1F5D3}",
    };
    let (user, _, _, _) = samples().swap_remove(0);
    let user = User {
        name: c.repeat(MAX_NAME_CHARS),
        ..user
    };
    let starts_at = sample_start();
    let due_at = DueAt(starts_at - Duration::minutes(MAX_MINUTES_BEFORE));
    Variables::value(
        &c.repeat(MAX_TITLE_CHARS),
        &c.repeat(MAX_BODY_CHARS),
        starts_at,
        due_at,
        &user,
    )
}

/// A template's parts: (field, part, source, longest source).
type Parts<'a> = [(&'static str, Part, Option<&'a str>, usize); 3];

impl ReminderTemplate {
    /// `input` as `channel`'s template in `locale`, checked: each part
    /// compiles and renders for sample recipients (an unknown variable is
    /// an error) and, within the limits, for the largest inputs; the text
    /// is not empty, only mail has a subject and HTML.
    pub fn validate(
        channel: Channel,
        locale: &str,
        input: &TemplateInput,
    ) -> Result<Self, ValidationError> {
        let locale = parse_locale(locale)?;
        let t = ReminderTemplate {
            channel,
            locale,
            subject: input.subject.clone(),
            text: input.text.clone(),
            html: input.html.clone(),
        };
        if channel != Channel::Mail {
            for (field, given) in [("subject", &t.subject), ("html", &t.html)] {
                if given.is_some() {
                    return Err(ValidationError::new(
                        field,
                        format!("only mail has a {field}; {channel} sends the text"),
                    ));
                }
            }
        }
        let parts = [
            ("subject", Part::Subject, t.subject.as_deref(), MAX_SUBJECT),
            ("text", Part::Text, Some(t.text.as_str()), MAX_TEXT),
            ("html", Part::Html, t.html.as_deref(), MAX_HTML),
        ];
        let env = t.compile_checked(&parts)?;
        t.try_samples(&env, &parts)?;
        t.try_largest(&env, &parts)?;
        // What the API shows is rendered the same way: it cannot fail later.
        t.example()?;
        Ok(t)
    }

    /// The parts compiled, each no longer than its longest source.
    fn compile_checked(&self, parts: &Parts) -> Result<Environment<'static>, ValidationError> {
        let mut env = environment();
        for (field, part, source, max) in parts {
            let Some(source) = source else { continue };
            if source.len() > *max {
                return Err(ValidationError::new(
                    *field,
                    format!("is {} bytes; at most {max}", source.len()),
                ));
            }
            super::language::check_source(source)
                .map_err(|problem| ValidationError::new(*field, problem))?;
            env.add_template_owned(name(self.channel, &self.locale, *part), source.to_string())
                .map_err(|e| ValidationError::new(*field, template_problem(&e)))?;
        }
        Ok(env)
    }

    /// Each part rendered for each sample recipient: it renders, and the
    /// text is not empty.
    fn try_samples(&self, env: &Environment, parts: &Parts) -> Result<(), ValidationError> {
        for (user, title, body, minutes) in samples() {
            let starts_at = sample_start();
            let due_at = DueAt(starts_at - Duration::minutes(minutes));
            let vars = Variables::value(title, body, starts_at, due_at, &user);
            for (field, part, source, _) in parts {
                if source.is_none() {
                    continue;
                }
                let out = self
                    .render_in(env, *part, &vars)
                    .map_err(|e| ValidationError::new(*field, e))?;
                if *part == Part::Text && out.trim().is_empty() {
                    return Err(ValidationError::new(
                        *field,
                        format!("renders empty (for {} with {title:?})", user.name),
                    ));
                }
                if self.channel == Channel::Slack && out.contains("<!") {
                    return Err(ValidationError::new(
                        *field,
                        "mentions a whole channel or group (`<!here>`, `<!channel>`, \
                         `<!everyone>`, `<!subteam^…>`): a reminder goes to one person",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Each part rendered for the largest inputs stays within the limits.
    /// (One that fails on their data gets the default at send time.)
    fn try_largest(&self, env: &Environment, parts: &Parts) -> Result<(), ValidationError> {
        for (field, part, source, _) in parts {
            if source.is_none() {
                continue;
            }
            let vars = largest(self.channel, *part);
            match self.render_in(env, *part, &vars) {
                Err(e) if e.is_limit() => {
                    return Err(ValidationError::new(
                        *field,
                        format!("{e} with the largest inputs"),
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn render_in(
        &self,
        env: &Environment,
        part: Part,
        vars: &Value,
    ) -> Result<String, RenderError> {
        let t = env
            .get_template(&name(self.channel, &self.locale, part))
            .map_err(|e| classify(&e))?;
        render_bounded(&t, vars, self.channel, part, RenderBudget::REGISTRATION)
    }

    /// What this template makes of a sample reminder: shown when it is
    /// registered. (A template [`validate`](Self::validate) accepted renders it.)
    pub fn example(&self) -> Result<Texts, ValidationError> {
        let templates = Templates::compile(std::slice::from_ref(self));
        let (user, title, body, minutes) = samples().swap_remove(0);
        let user = User {
            locale: self.locale.clone(),
            ..user
        };
        let starts_at = sample_start();
        let vars = Variables::value(
            title,
            body,
            starts_at,
            DueAt(starts_at - Duration::minutes(minutes)),
            &user,
        );
        templates
            .render(self.channel, &self.locale, &vars)
            .map_err(|e| ValidationError::new("text", e))
    }
}
