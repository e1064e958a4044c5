//! Rendering: a tenant's templates compiled once, picked per channel and
//! locale (falling back to the defaults), and filled in for one recipient.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use chrono::Duration;
use chrono::{Datelike, Timelike};
use minijinja::value::{Enumerator, Object, Value};
use minijinja::Environment;

use super::defaults::{defaults, DEFAULT_LOCALES};
use super::limits::{classify, render_bounded, RenderError};
use super::meter::{self, RenderBudget};
use super::{environment, name, text_to_html, Part, ReminderTemplate, Texts, VARIABLES};
use crate::domain::{Channel, DueAt, Instant, Occurrence, User};
use crate::ScheduleSnapshot;

/// What a reminder's text may say, for one recipient: a minijinja object
/// whose values are made when a template asks for them (a template that does
/// not say `date` does not pay for formatting it).
#[derive(Debug)]
pub(super) struct Variables {
    name: Value,
    title: Value,
    body: Value,
    starts_at: Instant,
    /// The start in the recipient's zone.
    local: chrono::DateTime<chrono_tz::Tz>,
    minutes: i64,
}

impl Variables {
    /// The variables, as the value a template is rendered with.
    pub(super) fn value(
        title: &str,
        body: &str,
        starts_at: Instant,
        due_at: DueAt,
        user: &User,
    ) -> Value {
        Value::from_object(Self {
            name: Value::from(user.name.as_str()),
            title: Value::from(title),
            body: Value::from(body),
            starts_at,
            local: starts_at.with_timezone(&user.time_zone),
            minutes: (starts_at - due_at.0).max(Duration::zero()).num_minutes(),
        })
    }
}

impl Object for Variables {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        // A hook the render passes often: the meter reads its clock here too.
        meter::charge(1);
        let l = &self.local;
        Some(match key.as_str()? {
            "name" => self.name.clone(),
            "title" => self.title.clone(),
            "body" => self.body.clone(),
            "starts_at" => Value::from(format!(
                "{:04}-{:02}-{:02} {:02}:{:02}",
                l.year(),
                l.month(),
                l.day(),
                l.hour(),
                l.minute()
            )),
            "date" => Value::from(format!("{:04}-{:02}-{:02}", l.year(), l.month(), l.day())),
            "time" => Value::from(format!("{:02}:{:02}", l.hour(), l.minute())),
            "time_zone" => Value::from(l.timezone().name()),
            "minutes" => Value::from(self.minutes),
            "starts_at_utc" => Value::from(
                self.starts_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            ),
            _ => return None,
        })
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Str(&VARIABLES)
    }
}

/// The lookup order for a recipient's locale: `en-gb`, `en`, then `en` as the last resort.
pub(super) fn candidates(locale: &str) -> Vec<String> {
    let locale = locale.to_ascii_lowercase();
    let mut out = vec![locale.clone()];
    if let Some((lang, _)) = locale.split_once(['-', '_']) {
        out.push(lang.to_string());
    }
    if !out.iter().any(|l| l == "en") {
        out.push("en".into());
    }
    out
}

/// A part of a tenant's templates: (channel, locale, part).
type PartKey = (Channel, String, u8);

/// One tenant's templates over the defaults, compiled: what the daemon
/// renders a batch's reminders with.
pub struct Templates {
    tenant: Option<Environment<'static>>,
    /// (channel, locale, part) the tenant has.
    has: HashSet<PartKey>,
    /// What one render may spend.
    budget: RenderBudget,
    /// Parts of the tenant's that went past their instructions, work or
    /// time: not rendered again while these are kept (the daemon keeps a
    /// tenant's compiled templates a second), so a hostile template costs
    /// one over-budget render, not one per recipient.
    tripped: Mutex<HashMap<PartKey, RenderError>>,
}

impl Templates {
    /// The defaults only.
    pub fn defaults() -> Self {
        Self {
            tenant: None,
            has: HashSet::new(),
            budget: RenderBudget::DELIVERY,
            tripped: Mutex::default(),
        }
    }

    /// Rendering within `budget` (the default: [`RenderBudget::DELIVERY`]).
    pub fn with_budget(mut self, budget: RenderBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Whether any text comes from the tenant's own templates (rather than
    /// only the built-in ones, whose cost is known and small).
    pub fn from_tenant(&self) -> bool {
        self.tenant.is_some()
    }

    /// `templates` over the defaults. One that does not compile (they are
    /// checked when registered, so only after a hand edit of the database)
    /// is left out with a warning: its reminders get the default text.
    pub fn compile(templates: &[ReminderTemplate]) -> Self {
        if templates.is_empty() {
            return Self::defaults();
        }
        let mut env = environment();
        let mut has = HashSet::new();
        for t in templates {
            let parts = [
                (Part::Subject, t.subject.as_deref()),
                (Part::Text, Some(t.text.as_str())),
                (Part::Html, t.html.as_deref()),
            ];
            for (part, source) in parts {
                let Some(source) = source else { continue };
                // Stored before the language was restricted: as if it did not compile.
                if let Err(problem) = super::language::check_source(source) {
                    tracing::warn!(
                        channel = %t.channel, locale = %t.locale, %problem,
                        "a tenant template uses what templates may not: the default is used"
                    );
                    continue;
                }
                match env.add_template_owned(name(t.channel, &t.locale, part), source.to_owned()) {
                    Ok(()) => {
                        has.insert((t.channel, t.locale.clone(), part as u8));
                    }
                    Err(e) => tracing::warn!(
                        channel = %t.channel, locale = %t.locale, error = %e,
                        "a tenant template does not compile: the default is used"
                    ),
                }
            }
        }
        Self {
            tenant: Some(env),
            has,
            budget: RenderBudget::DELIVERY,
            tripped: Mutex::default(),
        }
    }

    /// The environment and locale to render `part` with: the tenant's for
    /// the first candidate locale it has, else the default for the first
    /// candidate that has one.
    fn pick<'a>(
        &'a self,
        channel: Channel,
        locales: &'a [String],
        part: Part,
    ) -> (&'a Environment<'static>, &'a str, bool) {
        for l in locales {
            if let Some(env) = &self.tenant {
                if self.has.contains(&(channel, l.clone(), part as u8)) {
                    return (env, l, true);
                }
            }
            if DEFAULT_LOCALES.contains(&l.as_str()) {
                return (defaults(), l, false);
            }
        }
        (defaults(), "en", false)
    }

    /// `part` for the recipient: the tenant's template, or the default when
    /// the tenant's fails on this recipient's data. A template that crosses
    /// a limit is an error: it would on every render.
    fn render_part(
        &self,
        channel: Channel,
        locales: &[String],
        part: Part,
        vars: &Value,
    ) -> Result<String, RenderError> {
        let (env, locale, tenant) = self.pick(channel, locales, part);
        let key = (channel, locale.to_owned(), part as u8);
        if let Some(e) = tenant.then(|| self.tripped_by(&key)).flatten() {
            return Err(e);
        }
        let rendered = env
            .get_template(&name(channel, locale, part))
            .map_err(|e| classify(&e))
            .and_then(|t| render_bounded(&t, vars, channel, part, self.budget));
        match rendered {
            Ok(s) => Ok(s),
            Err(e) if e.is_limit() => {
                if tenant && e.is_work() {
                    self.trip(key, e.clone());
                }
                Err(e)
            }
            Err(e) => {
                tracing::warn!(%channel, %locale, tenant, error = %e, "a template did not render: the default is used");
                let locale = if DEFAULT_LOCALES.contains(&locale) {
                    locale
                } else {
                    "en"
                };
                Ok(defaults()
                    .get_template(&name(channel, locale, part))
                    .map_err(|e| classify(&e))
                    .and_then(|t| render_bounded(&t, vars, channel, part, self.budget))
                    .unwrap_or_default())
            }
        }
    }

    /// Why `key` is not rendered again, if it tripped.
    fn tripped_by(&self, key: &PartKey) -> Option<RenderError> {
        self.tripped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    fn trip(&self, key: PartKey, e: RenderError) {
        self.tripped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, e);
    }

    /// The reminder of the occurrence of `schedule` starting at `occurrence`,
    /// due at `due_at`, for `user` on `channel`: in their language and zone.
    /// An error names the limit the tenant's template crossed.
    pub fn reminder(
        &self,
        channel: Channel,
        schedule: &ScheduleSnapshot,
        occurrence: Occurrence,
        due_at: DueAt,
        user: &User,
    ) -> Result<Texts, RenderError> {
        let (title, body) = schedule.texts_at(occurrence.0);
        let vars = Variables::value(title, body, occurrence.0, due_at, user);
        self.render(channel, &user.locale, &vars)
    }

    pub(super) fn render(
        &self,
        channel: Channel,
        locale: &str,
        vars: &Value,
    ) -> Result<Texts, RenderError> {
        let locales = candidates(locale);
        // Only mail has a subject.
        let subject = if channel == Channel::Mail {
            one_line(&self.render_part(channel, &locales, Part::Subject, vars)?)
        } else {
            String::new()
        };
        let mut text = self.render_part(channel, &locales, Part::Text, vars)?;
        if channel == Channel::Slack {
            text = without_broadcasts(text);
        }
        let html = if channel == Channel::Mail {
            let (_, text_locale, tenant_text) = self.pick(channel, &locales, Part::Text);
            let tenant_html =
                self.has
                    .contains(&(channel, text_locale.to_owned(), Part::Html as u8));
            Some(if tenant_text && !tenant_html {
                // The tenant wrote the words: the HTML part says the same.
                text_to_html(&text)
            } else {
                self.render_part(channel, &locales, Part::Html, vars)?
            })
        } else {
            None
        };
        Ok(Texts {
            subject,
            text,
            html,
        })
    }
}

/// Slack text with its special mentions (`<!here>`, `<!channel>`,
/// `<!everyone>`, `<!subteam^…>`) made plain text: a reminder goes to one
/// person, and a tenant must not be able to page a whole channel, whatever
/// its template or data put together.
pub(super) fn without_broadcasts(text: String) -> String {
    if text.contains("<!") {
        text.replace("<!", "&lt;!")
    } else {
        text
    }
}

/// A subject is one line: line breaks in it would end the mail header.
fn one_line(s: &str) -> String {
    s.split(['\r', '\n'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
