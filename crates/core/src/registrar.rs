//! The registrar: writes users and schedules to the tenant's database, then
//! mirrors the reminder instances into the index, enqueueing directly those
//! due inside the window the scanner has already covered.

mod batch;
mod erase;
mod suppression;
mod webhook;

use batch::stored_series;
pub use batch::OverBudget;
pub use erase::Erased;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;

use thiserror::Error;
use tracing::warn;

use crate::enqueue::enqueue;
use crate::render_pool::{Lane, Purpose, RenderPool};
use crate::settings::PipelineSettings;
use toki_model::domain::{
    Channel, Instant, OccurrenceException, Reminder, Schedule, ScheduleId, ScheduledOccurrence,
    TenantId, User, UserId,
};
use toki_model::error::{chain, ValidationError};
use toki_model::index::Window;
use toki_model::input::{
    instant_in, OccurrenceInput, ScheduleInput, UserInput, MAX_EXCEPTIONS, MAX_LISTED,
    MAX_LIST_DAYS,
};
use toki_model::quota::{Cap, Counted};
use toki_model::template::{default_template, parse_locale, ReminderTemplate, TemplateInput};
use toki_model::TenantRecord;
use toki_ports::error::StoreError;
use toki_ports::{
    Clock, DelayQueue, IndexWrite, MirrorWork, ReminderIndex, TenantDirectory, TenantStore,
    TenantStores,
};

/// Why a registrar call failed: the caller's input, or ours (with its source).
#[derive(Debug, Error)]
pub enum RegistrarError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error("unknown tenant {0}")]
    UnknownTenant(TenantId),
    #[error("{0} not found")]
    NotFound(String),
    /// The write would take the tenant past a cap; nothing was written.
    #[error("the tenant stores {have} {} and may store {} ({}): {adding} more would cross it; delete some or have the cap raised", .what.plural(), .cap.0, .what.cap_name())]
    CapReached {
        what: Counted,
        cap: Cap,
        have: u64,
        adding: u64,
    },
    /// A batch past its budget of work (`crate::settings::BatchBudget`);
    /// nothing was written.
    #[error(transparent)]
    OverBudget(#[from] OverBudget),
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for RegistrarError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid(v) => RegistrarError::Invalid(v),
            other => RegistrarError::Store(other),
        }
    }
}

/// One schedule's part of a mirror: its index rows, and how far a series goes.
struct MirrorPlan<'a> {
    schedule: &'a ScheduleId,
    version: i64,
    rows: Vec<Reminder>,
    /// The horizon a series is mirrored to (None: a one-off, or deleted).
    until: Option<Instant>,
}

impl<'a> MirrorPlan<'a> {
    /// The plan of `written` (as stored, with its version) from its expansion.
    fn written(written: &'a Schedule, expansion: batch::Expansion) -> Self {
        let mut rows = expansion.rows;
        rows.iter_mut().for_each(|r| r.version = written.version);
        MirrorPlan {
            schedule: &written.id,
            version: written.version,
            rows,
            until: expansion.until,
        }
    }
}

/// The most schedules one [`Registrar::put_schedules`] call takes.
pub const MAX_BATCH: usize = 1000;

/// Refuses a batch of more than [`MAX_BATCH`] items, naming `schedules`.
pub fn check_batch_len(items: usize) -> Result<(), ValidationError> {
    if items > MAX_BATCH {
        return Err(ValidationError::new(
            "schedules",
            format!("at most {MAX_BATCH} per batch, got {items}"),
        ));
    }
    Ok(())
}

/// The result of a schedule write.
#[derive(Debug, Clone)]
pub struct Registered {
    pub schedule: Schedule,
    /// Whether the index mirror is done; if not, a repair pass finishes it.
    pub mirrored: bool,
    pub enqueued_directly: usize,
}

/// The result of a schedule's deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deleted {
    /// The version the deletion took (the schedule had the one before).
    pub version: i64,
    /// Whether its reminders are withdrawn from the index; if not, a repair pass does it.
    pub mirrored: bool,
}

/// What the registrar needs to notify participants of changes
/// ([`toki_model::change`]): the debouncer of `tenant:schedule` keys and the
/// action its edges take.
#[derive(Clone)]
pub struct ChangeNotices {
    pub debouncer: crate::debounce::Debouncer,
    pub action: Arc<dyn crate::debounce::DebounceAction>,
}

pub struct Registrar {
    pub directory: Arc<dyn TenantDirectory>,
    pub stores: Arc<dyn TenantStores>,
    pub index: Arc<dyn ReminderIndex>,
    pub queue: Arc<dyn DelayQueue>,
    pub clock: Arc<dyn Clock>,
    pub settings: PipelineSettings,
    /// None: no change notices, whatever the tenants' contracts say.
    pub notices: Option<ChangeNotices>,
    /// Marks the work a write leaves: a repair in case its mirror is never
    /// finished, rows for the retention pass ([`crate::work`]).
    pub marker: crate::work::Marker,
    /// The tenants enqueued for each instant to come, shared with the
    /// scanner in the same process ([`crate::crowd`]).
    pub crowds: Arc<crate::crowd::Crowds>,
}

impl Registrar {
    pub async fn tenant(&self, tenant: &TenantId) -> Result<TenantRecord, RegistrarError> {
        self.directory
            .get(tenant)
            .await?
            .ok_or_else(|| RegistrarError::UnknownTenant(tenant.clone()))
    }

    pub async fn put_user(
        &self,
        tenant: &TenantId,
        id: &UserId,
        input: &UserInput,
    ) -> Result<User, RegistrarError> {
        let user = input.validate(id)?;
        self.check_user_endpoint(&user)?;
        let record = self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        self.check_cap(&record, store.as_ref(), Counted::Users, 1, || async {
            Ok(u64::from(store.get_user(id).await?.is_none()))
        })
        .await?;
        store.put_user(&user, self.clock.now()).await?;
        Ok(user)
    }

    pub async fn get_user(&self, tenant: &TenantId, id: &UserId) -> Result<User, RegistrarError> {
        self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        store
            .get_user(id)
            .await?
            .ok_or_else(|| RegistrarError::NotFound(format!("user {id}")))
    }

    /// Checks `input` (it must render, within the limits: 422 naming the
    /// part if not) and stores it as the tenant's template of `channel` in
    /// `locale`. The check renders each part a few times, bounded but CPU
    /// work, so on a render thread rather than the runtime's workers, and
    /// one check of a tenant's at a time ([`RenderPool`]): a tenant sending
    /// costly templates in parallel takes one render thread, at a lower
    /// priority than the sends.
    pub async fn put_template(
        &self,
        tenant: &TenantId,
        channel: Channel,
        locale: &str,
        input: &TemplateInput,
    ) -> Result<ReminderTemplate, RegistrarError> {
        let record = self.tenant(tenant).await?;
        let (locale, input) = (locale.to_owned(), input.clone());
        let lane = Lane {
            tenant: tenant.clone(),
            purpose: Purpose::Registration,
        };
        let template = RenderPool::global()
            .run(lane, move || {
                ReminderTemplate::validate(channel, &locale, &input)
            })
            .await?;
        let store = self.stores.open(tenant).await?;
        self.check_cap(&record, store.as_ref(), Counted::Templates, 1, || async {
            let own = store.templates().await?;
            let exists = own
                .iter()
                .any(|t| t.channel == channel && t.locale == template.locale);
            Ok(u64::from(!exists))
        })
        .await?;
        store.put_template(&template, self.clock.now()).await?;
        Ok(template)
    }

    /// The tenant's own templates (the defaults not included).
    pub async fn templates(
        &self,
        tenant: &TenantId,
    ) -> Result<Vec<ReminderTemplate>, RegistrarError> {
        self.tenant(tenant).await?;
        Ok(self.stores.open(tenant).await?.templates().await?)
    }

    /// The tenant's own template of `channel` in `locale` (none: a default applies).
    pub async fn template(
        &self,
        tenant: &TenantId,
        channel: Channel,
        locale: &str,
    ) -> Result<ReminderTemplate, RegistrarError> {
        let locale = parse_locale(locale)?;
        let own = self.templates(tenant).await?;
        own.into_iter()
            .find(|t| t.channel == channel && t.locale == locale)
            .ok_or_else(|| {
                RegistrarError::NotFound(format!(
                    "{tenant} has no {channel} template for {locale}: a default applies (GET /v1/templates/{channel}/{locale})"
                ))
            })
    }

    /// The built-in template of `channel` in `locale` (`en`, `ja`).
    pub fn default_template(
        channel: Channel,
        locale: &str,
    ) -> Result<ReminderTemplate, RegistrarError> {
        let locale = parse_locale(locale)?;
        default_template(channel, &locale).ok_or_else(|| {
            RegistrarError::NotFound(format!(
                "no default {channel} template for {locale} (defaults: en, ja; any other language reads en)"
            ))
        })
    }

    /// Deletes the tenant's template of `channel` in `locale` (the default applies again).
    pub async fn delete_template(
        &self,
        tenant: &TenantId,
        channel: Channel,
        locale: &str,
    ) -> Result<(), RegistrarError> {
        let locale = parse_locale(locale)?;
        self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        if store.delete_template(channel, &locale).await? {
            Ok(())
        } else {
            Err(RegistrarError::NotFound(format!(
                "template {channel}/{locale}"
            )))
        }
    }

    pub async fn put_schedule(
        &self,
        tenant: &TenantId,
        id: &ScheduleId,
        input: &ScheduleInput,
    ) -> Result<Registered, RegistrarError> {
        let schedule = self.prepare(tenant, id, input).await?;
        self.write_schedule(tenant, schedule).await
    }

    /// Writes up to [`MAX_BATCH`] schedules of one tenant: one transaction in
    /// its database, one index write, one enqueue. A result per item, in
    /// order: an item that is invalid gets its error and the others are
    /// written. The items are validated and expanded on a blocking thread,
    /// within the batch budget ([`BatchBudget`]). The call itself fails only
    /// if nothing could be written (an unknown tenant, a database down, too
    /// many items, past the budget).
    pub async fn put_schedules(
        &self,
        tenant: &TenantId,
        items: &[(ScheduleId, ScheduleInput)],
    ) -> Result<Vec<Result<Registered, RegistrarError>>, RegistrarError> {
        check_batch_len(items.len())?;
        let items = self.with_stored_series(tenant, items).await?;
        let (owner, now, settings) = (tenant.clone(), self.clock.now(), self.settings.clone());
        let planned =
            tokio::task::spawn_blocking(move || batch::plan(&owner, items, now, &settings))
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
        let mut refused = Vec::with_capacity(planned.len());
        let (mut schedules, mut expansions) = (Vec::new(), Vec::new());
        for p in planned {
            refused.push(match p {
                Ok((schedule, expansion)) => {
                    schedules.push(schedule);
                    expansions.push(expansion);
                    None
                }
                Err(e) => Some(RegistrarError::from(e)),
            });
        }
        let mut written = self
            .write_expanded(tenant, schedules, expansions)
            .await?
            .into_iter();
        Ok(refused
            .into_iter()
            .map(|r| match r {
                None => written.next().expect("a result per valid schedule"),
                Some(e) => Err(e),
            })
            .collect())
    }

    /// The batch's items, each series with the stored one it replaces.
    async fn with_stored_series(
        &self,
        tenant: &TenantId,
        items: &[(ScheduleId, ScheduleInput)],
    ) -> Result<Vec<batch::Item>, RegistrarError> {
        let mut store = None;
        let mut out = Vec::with_capacity(items.len());
        for (id, input) in items {
            let old = match input.recurrence {
                Some(_) => {
                    if store.is_none() {
                        self.tenant(tenant).await?;
                        store = Some(self.stores.open(tenant).await?);
                    }
                    let store = store.as_ref().expect("opened");
                    store.get_schedule(id).await?.and_then(|s| s.recurrence)
                }
                None => None,
            };
            out.push(batch::Item {
                id: id.clone(),
                input: input.clone(),
                old,
            });
        }
        Ok(out)
    }

    /// A schedule as it is to be stored: validated, and a series written
    /// again keeps the exceptions of occurrences it still has.
    async fn prepare(
        &self,
        tenant: &TenantId,
        id: &ScheduleId,
        input: &ScheduleInput,
    ) -> Result<Schedule, RegistrarError> {
        let old = match input.recurrence {
            Some(_) => match self.get_schedule(tenant, id).await {
                Ok(old) => old.recurrence,
                Err(RegistrarError::NotFound(_)) => None,
                Err(e) => return Err(e),
            },
            None => None,
        };
        Ok(batch::prepare(id, input, old, self.clock.now())?)
    }

    /// Stores a validated schedule (a new version) and mirrors it.
    async fn write_schedule(
        &self,
        tenant: &TenantId,
        schedule: Schedule,
    ) -> Result<Registered, RegistrarError> {
        self.write_schedules(tenant, vec![schedule])
            .await?
            .pop()
            .expect("a result per schedule")
    }

    /// Stores validated schedules (each a new version) in one transaction
    /// and mirrors them together; a result each, in order.
    async fn write_schedules(
        &self,
        tenant: &TenantId,
        schedules: Vec<Schedule>,
    ) -> Result<Vec<Result<Registered, RegistrarError>>, RegistrarError> {
        let now = self.clock.now();
        let expansions = schedules
            .iter()
            .map(|s| batch::expand(tenant, s, now, &self.settings))
            .collect::<Result<Vec<_>, StoreError>>()?;
        self.write_expanded(tenant, schedules, expansions).await
    }

    /// [`Self::write_schedules`] of schedules already expanded (`expansions`,
    /// one each, in order).
    async fn write_expanded(
        &self,
        tenant: &TenantId,
        schedules: Vec<Schedule>,
        expansions: Vec<batch::Expansion>,
    ) -> Result<Vec<Result<Registered, RegistrarError>>, RegistrarError> {
        if schedules.is_empty() {
            return Ok(Vec::new());
        }
        let record = self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        // Before anything is written (the baselines too): a batch that
        // would cross the cap is refused whole.
        self.check_schedule_cap(&record, store.as_ref(), &schedules)
            .await?;
        self.marker.repair_after_write(tenant).await?;
        let notices = self.notices_for(&record);
        let edits = match notices {
            Some(_) => {
                let ids: Vec<ScheduleId> = schedules.iter().map(|s| s.id.clone()).collect();
                store.keep_change_baselines(&ids).await?
            }
            None => HashSet::new(),
        };
        let written = store.put_schedules(&schedules, self.clock.now()).await?;
        drop(schedules);
        let planned: Vec<MirrorPlan<'_>> = written
            .iter()
            .zip(expansions)
            .filter_map(|(w, e)| Some(MirrorPlan::written(w.as_ref().ok()?, e)))
            .collect();
        let mirroring = planned.len();
        let enqueued = match self.mirror_plans(&record, planned).await {
            Ok(counts) => Some(counts),
            Err(e) => {
                warn!(%tenant, schedules = mirroring, error = %chain(&e), "mirror failed; repair will retry");
                self.marker.repair_now(tenant).await;
                None
            }
        };
        if let Some(n) = notices {
            // A key each: a batch of edits arms its keys side by side.
            let edited = written.iter().flatten().filter(|w| edits.contains(&w.id));
            futures::stream::iter(edited)
                .for_each_concurrent(16, |w| self.notify_change(n, &record, &w.id))
                .await;
        }
        Ok(written
            .into_iter()
            .map(|w| {
                let schedule = w?;
                Ok(Registered {
                    mirrored: enqueued.is_some(),
                    enqueued_directly: enqueued
                        .as_ref()
                        .and_then(|c| c.get(&schedule.id).copied())
                        .unwrap_or(0),
                    schedule,
                })
            })
            .collect())
    }

    /// Refuses schedules of which more are new than the cap leaves room for.
    async fn check_schedule_cap(
        &self,
        record: &TenantRecord,
        store: &dyn TenantStore,
        schedules: &[Schedule],
    ) -> Result<(), RegistrarError> {
        let ids: Vec<ScheduleId> = schedules
            .iter()
            .map(|s| s.id.clone())
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let at_most = ids.len() as u64;
        self.check_cap(record, store, Counted::Schedules, at_most, || async {
            let existing = store.schedule_versions(&ids).await?.len() as u64;
            Ok(at_most - existing)
        })
        .await
    }

    /// Refuses a write that adds new `what`s beyond the tenant's cap (its
    /// contract's, else the configured one). One COUNT per write; only
    /// when `at_most` new ones would cross the cap is `new_ones` asked how
    /// many really are new, so that updating what exists is always allowed.
    /// Writes of one tenant racing each other may pass the cap by a few:
    /// the count is not in the write's transaction.
    async fn check_cap<F>(
        &self,
        record: &TenantRecord,
        store: &dyn TenantStore,
        what: Counted,
        at_most: u64,
        new_ones: impl FnOnce() -> F,
    ) -> Result<(), RegistrarError>
    where
        F: std::future::Future<Output = Result<u64, StoreError>>,
    {
        let cap = self.settings.caps.with(&record.limits.quota).get(what);
        let have = store.count(what).await?;
        if have.saturating_add(at_most) <= cap.0 {
            return Ok(());
        }
        let adding = new_ones().await?;
        if adding == 0 || have.saturating_add(adding) <= cap.0 {
            return Ok(());
        }
        Err(RegistrarError::CapReached {
            what,
            cap,
            have,
            adding,
        })
    }

    pub async fn get_schedule(
        &self,
        tenant: &TenantId,
        id: &ScheduleId,
    ) -> Result<Schedule, RegistrarError> {
        self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        store
            .get_schedule(id)
            .await?
            .ok_or_else(|| RegistrarError::NotFound(format!("schedule {id}")))
    }

    /// A series (404 if the schedule is not one) and the instant of its
    /// occurrence named `original` (422 if the rule has none there).
    async fn series_occurrence(
        &self,
        tenant: &TenantId,
        id: &ScheduleId,
        original: &str,
    ) -> Result<(Schedule, Instant), RegistrarError> {
        let schedule = self.get_schedule(tenant, id).await?;
        let Some(rec) = &schedule.recurrence else {
            return Err(ValidationError::new(
                "original",
                format!("schedule {id} does not repeat: change it with PUT on the schedule"),
            )
            .into());
        };
        let at = instant_in("original", original, schedule.time_zone, rec.dst)?;
        let found = rec
            .series(schedule.time_zone)?
            .has_occurrence_at(at)
            .map_err(|e| ValidationError::new("original", e.0))?;
        if !found {
            return Err(RegistrarError::NotFound(format!(
                "occurrence {original} of schedule {id} (the rule has none at {at})"
            )));
        }
        Ok((schedule, at))
    }

    /// Writes a series back with `exception` in place of any earlier one for
    /// the same occurrence: a new version, mirrored like any write.
    async fn put_exception(
        &self,
        tenant: &TenantId,
        mut schedule: Schedule,
        exception: OccurrenceException,
    ) -> Result<Registered, RegistrarError> {
        if let Some(moved_to) = exception.starts_at {
            // Two occurrences at one instant would be one reminder.
            let clash = schedule
                .occurrences_between(moved_to, moved_to + chrono::Duration::milliseconds(1))
                .map_err(stored_series)?
                .into_iter()
                .any(|o| o.original != exception.original);
            if clash {
                return Err(ValidationError::new(
                    "starts_at",
                    format!("another occurrence of the series starts at {moved_to}"),
                )
                .into());
            }
        }
        let rec = schedule
            .recurrence
            .as_mut()
            .expect("checked by series_occurrence");
        rec.exceptions.retain(|e| e.original != exception.original);
        if rec.exceptions.len() >= MAX_EXCEPTIONS {
            return Err(ValidationError::new(
                "original",
                format!("the series has {MAX_EXCEPTIONS} occurrences changed one by one already; at most {MAX_EXCEPTIONS}"),
            )
            .into());
        }
        rec.exceptions.push(exception);
        rec.exceptions.sort_by_key(|e| e.original);
        self.write_schedule(tenant, schedule).await
    }

    /// Moves or edits one occurrence of a series; its reminders go at its
    /// new time (and the old time's, not yet sent, become stale).
    pub async fn put_occurrence(
        &self,
        tenant: &TenantId,
        id: &ScheduleId,
        original: &str,
        input: &OccurrenceInput,
    ) -> Result<Registered, RegistrarError> {
        let (schedule, at) = self.series_occurrence(tenant, id, original).await?;
        let dst = schedule
            .recurrence
            .as_ref()
            .expect("checked by series_occurrence")
            .dst;
        let exception = input.validate(at, schedule.time_zone, dst)?;
        self.put_exception(tenant, schedule, exception).await
    }

    /// Cancels one occurrence of a series: no reminders for it.
    pub async fn cancel_occurrence(
        &self,
        tenant: &TenantId,
        id: &ScheduleId,
        original: &str,
    ) -> Result<Registered, RegistrarError> {
        let (schedule, at) = self.series_occurrence(tenant, id, original).await?;
        let exception = OccurrenceException {
            original: at,
            cancelled: true,
            starts_at: None,
            title: None,
            body: None,
        };
        self.put_exception(tenant, schedule, exception).await
    }

    /// "This and following": the series `id` ends before its occurrence
    /// `original` (or is deleted if none is left before it), and `new_id`
    /// holds the series from there on as `input` describes it. Returns the
    /// old series (None if deleted) and the new one.
    pub async fn split_series(
        &self,
        tenant: &TenantId,
        id: &ScheduleId,
        original: &str,
        new_id: &ScheduleId,
        input: &ScheduleInput,
    ) -> Result<(Option<Registered>, Registered), RegistrarError> {
        if new_id == id {
            return Err(
                ValidationError::new("new_id", "must differ from the schedule split").into(),
            );
        }
        let (mut old, at) = self.series_occurrence(tenant, id, original).await?;
        // Validated before anything is written: nothing half-done on a 422.
        let new = input.validate(new_id, self.clock.now())?;
        let store = self.stores.open(tenant).await?;
        if store.get_schedule(new_id).await?.is_some() {
            return Err(ValidationError::new(
                "new_id",
                format!("schedule {new_id} exists already"),
            )
            .into());
        }
        // The old series ends one second before the split: its COUNT or
        // UNTIL becomes that UNTIL (every occurrence before `at` is within
        // the COUNT, since `at` is one of the rule's).
        let rec = old
            .recurrence
            .as_mut()
            .expect("checked by series_occurrence");
        let until = at - chrono::Duration::seconds(1);
        let kept: Vec<&str> = rec
            .rrule
            .split(';')
            .filter(|p| !p.starts_with("UNTIL=") && !p.starts_with("COUNT="))
            .collect();
        rec.rrule = format!(
            "{};UNTIL={}",
            kept.join(";"),
            until.format("%Y%m%dT%H%M%SZ")
        );
        rec.exceptions.retain(|e| e.original < at);
        let remaining = old
            .occurrences_between(old.starts_at - chrono::Duration::days(1), at)
            .map_err(stored_series)?;
        let new = self.write_schedule(tenant, new).await?;
        let old = if remaining.is_empty() {
            self.delete_schedule(tenant, id).await?;
            None
        } else {
            Some(self.write_schedule(tenant, old).await?)
        };
        Ok((old, new))
    }

    /// A schedule's occurrences starting in `[from, to)`, exceptions applied.
    /// `from` and `to` are RFC 3339 instants or local times in the schedule's
    /// zone; by default from now for 90 days, and at most [`MAX_LIST_DAYS`]
    /// days holding at most [`MAX_LISTED`] occurrences.
    pub async fn occurrences(
        &self,
        tenant: &TenantId,
        id: &ScheduleId,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<(Schedule, Vec<ScheduledOccurrence>), RegistrarError> {
        let schedule = self.get_schedule(tenant, id).await?;
        let (zone, dst) = (
            schedule.time_zone,
            schedule
                .recurrence
                .as_ref()
                .map(|r| r.dst)
                .unwrap_or_default(),
        );
        let from = match from {
            Some(f) => instant_in("from", f, zone, dst)?,
            None => self.clock.now(),
        };
        let to = match to {
            Some(t) => instant_in("to", t, zone, dst)?,
            None => from + chrono::Duration::days(90),
        };
        // RFC 3339 ends with year 9999, in UTC and on every wall clock: a
        // series is listed up to a day before that (a zone is at most 14 h
        // ahead), not into "+10000-01-03T09:00:00-05:00".
        let last = chrono::DateTime::parse_from_rfc3339("9999-12-31T00:00:00Z")
            .expect("a valid instant")
            .with_timezone(&chrono::Utc);
        if from >= last {
            return Err(ValidationError::new("from", "must be before 9999-12-31T00:00:00Z").into());
        }
        let to = to.min(last);
        if to <= from || to - from > chrono::Duration::days(MAX_LIST_DAYS) {
            return Err(ValidationError::new(
                "to",
                format!("must be after from, and at most {MAX_LIST_DAYS} days after it"),
            )
            .into());
        }
        let list = schedule
            .occurrences_between(from, to)
            .map_err(stored_series)?;
        // A bound on the answer, not only on the window: occurrences moved
        // in from elsewhere could crowd it.
        if list.len() > MAX_LISTED {
            return Err(ValidationError::new(
                "to",
                format!(
                    "the window holds {} occurrences, more than {MAX_LISTED}: narrow it",
                    list.len()
                ),
            )
            .into());
        }
        Ok((schedule, list))
    }

    /// Deletes a schedule; its queued reminders become stale and deliver
    /// nothing. Returns whether the index mirror is done (else repair finishes it).
    pub async fn delete_schedule(
        &self,
        tenant: &TenantId,
        id: &ScheduleId,
    ) -> Result<bool, RegistrarError> {
        Ok(self.remove_schedule(tenant, id).await?.mirrored)
    }

    /// [`Registrar::delete_schedule`], with the version the deletion took
    /// (what the audit log records).
    pub async fn remove_schedule(
        &self,
        tenant: &TenantId,
        id: &ScheduleId,
    ) -> Result<Deleted, RegistrarError> {
        let record = self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        self.marker.repair_after_write(tenant).await?;
        let notices = self.notices_for(&record);
        if notices.is_some() {
            store
                .keep_change_baselines(std::slice::from_ref(id))
                .await?;
        }
        let version = store
            .delete_schedule(id, self.clock.now())
            .await?
            .ok_or_else(|| RegistrarError::NotFound(format!("schedule {id}")))?;
        if let Some(n) = notices {
            self.notify_change(n, &record, id).await;
        }
        if let Err(e) = self
            .mirror(
                &record,
                &[MirrorWork::Delete {
                    schedule: id.clone(),
                    version,
                }],
            )
            .await
        {
            warn!(%tenant, schedule = %id, error = %chain(&e), "mirror of delete failed; repair will retry");
            self.marker.repair_now(tenant).await;
            return Ok(Deleted {
                version,
                mirrored: false,
            });
        }
        Ok(Deleted {
            version,
            mirrored: true,
        })
    }

    /// The change notices to send for this tenant, if it has them on.
    /// (Its settings are checked when set; the directory is data, so again.)
    fn notices_for(&self, record: &TenantRecord) -> Option<&ChangeNotices> {
        let settings = &record.change_notices;
        if !settings.enabled {
            return None;
        }
        if let Err(e) = settings.validate() {
            warn!(tenant = %record.id, error = %e, "change notice settings invalid; no notices");
            return None;
        }
        self.notices.as_ref()
    }

    /// Tells the debouncer that a schedule changed. The write stands whatever
    /// happens here: a failure is logged; a leading notice that could not be
    /// sent is sent by the check armed with it (the debouncer marks it pending).
    async fn notify_change(&self, notices: &ChangeNotices, record: &TenantRecord, id: &ScheduleId) {
        let key = toki_model::change::debounce_key(&record.id, id);
        let settings = record.change_notices.debounce();
        if let Err(e) = notices
            .debouncer
            .call(&key, &settings, notices.action.as_ref())
            .await
        {
            warn!(tenant = %record.id, schedule = %id, error = %chain(&e), "change notice not armed");
        }
    }

    /// Mirrors writes of one tenant into the index (one index write, one
    /// enqueue) and records them done in the tenant database. Returns how
    /// many reminders of each schedule went straight into the queue.
    async fn mirror(
        &self,
        record: &TenantRecord,
        work: &[MirrorWork],
    ) -> Result<HashMap<ScheduleId, usize>, StoreError> {
        let now = self.clock.now();
        let mut planned = Vec::with_capacity(work.len());
        for w in work {
            planned.push(self.mirror_plan(&record.id, w, now)?);
        }
        self.mirror_plans(record, planned).await
    }

    /// [`Self::mirror`] of writes already planned.
    async fn mirror_plans(
        &self,
        record: &TenantRecord,
        planned: Vec<MirrorPlan<'_>>,
    ) -> Result<HashMap<ScheduleId, usize>, StoreError> {
        let tenant = &record.id;
        let store = self.stores.open(tenant).await?;
        let writes: Vec<IndexWrite<'_>> = planned
            .iter()
            .map(|p| IndexWrite {
                schedule: p.schedule,
                version: p.version,
                rows: &p.rows,
            })
            .collect();
        // A schedule whose newer write is mirrored already loses: that one wins.
        let won = self.index.replace_schedules(tenant, &writes).await?;
        let enqueued = self.enqueue_direct(record, &planned, &won).await;
        let marks: Vec<_> = planned
            .into_iter()
            .map(|p| (p.schedule.clone(), p.version, p.until))
            .collect();
        store.mark_all_mirrored(&marks).await?;
        Ok(enqueued)
    }

    /// What one piece of mirror work writes into the index.
    fn mirror_plan<'w>(
        &self,
        tenant: &TenantId,
        work: &'w MirrorWork,
        now: Instant,
    ) -> Result<MirrorPlan<'w>, StoreError> {
        Ok(match work {
            MirrorWork::Upsert(s) | MirrorWork::Extend(s) => {
                MirrorPlan::written(s, batch::expand(tenant, s, now, &self.settings)?)
            }
            MirrorWork::Delete { schedule, version } => MirrorPlan {
                schedule,
                version: *version,
                rows: Vec::new(),
                until: None,
            },
        })
    }

    /// Enqueues the rows of the writes that won which are already in the
    /// scanner's window; how many of each schedule went in.
    async fn enqueue_direct(
        &self,
        record: &TenantRecord,
        planned: &[MirrorPlan<'_>],
        won: &[bool],
    ) -> HashMap<ScheduleId, usize> {
        let tenant = &record.id;
        // What the scanner has already covered (or will not reach in time) goes straight in.
        // A tenant whose contract is off gets nothing; its rows wait in the index
        // (the scanner holds them back too) in case the contract comes back on.
        // The window as of now: the index write may have taken a while.
        let window = Window::at(
            self.clock.now(),
            self.settings.look_back,
            self.settings.window,
        );
        let direct: Vec<_> = if record.may_receive_reminders() {
            planned
                .iter()
                .zip(won)
                .filter(|(_, won)| **won)
                .flat_map(|(p, _)| p.rows.iter().filter(|r| window.contains(r.due_at)))
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        let mut enqueued: HashMap<ScheduleId, usize> = HashMap::new();
        if !direct.is_empty() {
            let to = crate::enqueue::Enqueuer {
                index: self.index.as_ref(),
                queue: self.queue.as_ref(),
                clock: self.clock.as_ref(),
                settings: &self.settings,
                crowds: &self.crowds,
            };
            let done = enqueue(to, direct, None).await;
            if done.summary.failed > 0 {
                // They stay pending in the index; the next scan enqueues them.
                warn!(%tenant, failed = done.summary.failed, "direct enqueue failed; left to the scanner");
            }
            for key in done.sent {
                *enqueued.entry(key.schedule).or_default() += 1;
            }
        }
        enqueued
    }

    /// Finishes mirrors that failed (or were cut short) for one tenant, and
    /// extends its series whose horizon runs short. Returns how many writes
    /// were repaired. (A pass over every tenant: [`crate::repair`].)
    pub async fn repair(&self, tenant: &TenantId) -> Result<usize, RegistrarError> {
        let record = self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        let mut repaired = 0;
        // Series with less than half the horizon left are extended.
        let extend_before =
            self.clock.now() + toki_model::time::to_chrono(self.settings.horizon / 2);
        for work in store.unmirrored(extend_before).await?.chunks(MAX_BATCH) {
            self.mirror(&record, work).await?;
            repaired += work.len();
        }
        Ok(repaired)
    }
}
