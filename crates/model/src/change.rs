//! Change notifications (DESIGN: "Change notifications"): when a schedule is
//! moved, renamed, gains or loses participants, or is cancelled, its
//! participants hear about it once per burst of edits, not once per edit.
//!
//! The registrar keeps, per schedule, a *baseline*: the state participants
//! last heard of (taken just before the first edit ever, then advanced by
//! every notice). Each edit calls the [`crate::debounce`] debouncer on
//! `tenant:schedule`; its edges enqueue a notice message ([`NoticeAction`]).
//! The daemon that receives it *freezes* a [`ChangeNotice`] in the tenant
//! database (baseline → current state, keyed by the edge's token, the
//! baseline advanced in the same transaction) and delivers it through the
//! channels, with delivery rows keyed by the notice like any reminder's, so a
//! message received twice notifies once.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::debounce::{DebounceSettings, Edge};
use crate::domain::{
    Channel, DeliveryKey, DeliveryPurpose, Instant, Occurrence, Schedule, ScheduleId, TenantId,
    UserId,
};
use crate::error::ValidationError;

/// A tenant's change notifications, part of its contract. Off unless the
/// tenant turns them on: a product that already mails its own invitations
/// and updates must not find its users told twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChangeNoticeSettings {
    pub enabled: bool,
    /// The trailing notice waits at least this long after the last edit.
    pub min_delay_ms: u64,
    /// The wait grows with the gaps between edits up to this.
    pub max_delay_ms: u64,
    /// A burst that never goes quiet is notified at least this often.
    pub hard_cap_ms: u64,
}

impl Default for ChangeNoticeSettings {
    fn default() -> Self {
        let d = DebounceSettings::default();
        ChangeNoticeSettings {
            enabled: false,
            min_delay_ms: d.min_delay.as_millis() as u64,
            max_delay_ms: d.max_delay.as_millis() as u64,
            hard_cap_ms: d.hard_cap.as_millis() as u64,
        }
    }
}

impl ChangeNoticeSettings {
    pub fn debounce(&self) -> DebounceSettings {
        DebounceSettings {
            min_delay: Duration::from_millis(self.min_delay_ms),
            max_delay: Duration::from_millis(self.max_delay_ms),
            hard_cap: Duration::from_millis(self.hard_cap_ms),
        }
    }

    /// Checks the parameters; the error names the field (`change_notices.…_ms`).
    pub fn validate(&self) -> Result<(), ValidationError> {
        let field = |name: &str| format!("change_notices.{name}");
        if self.min_delay_ms == 0 {
            return Err(ValidationError::new(
                field("min_delay_ms"),
                "must be more than 0",
            ));
        }
        if self.max_delay_ms < self.min_delay_ms {
            return Err(ValidationError::new(
                field("max_delay_ms"),
                "must not be less than min_delay_ms",
            ));
        }
        if self.hard_cap_ms < self.max_delay_ms {
            return Err(ValidationError::new(
                field("hard_cap_ms"),
                "must not be less than max_delay_ms",
            ));
        }
        if self.hard_cap_ms > MAX_HARD_CAP_MS {
            return Err(ValidationError::new(
                field("hard_cap_ms"),
                format!("must be at most {MAX_HARD_CAP_MS} (one day)"),
            ));
        }
        Ok(())
    }
}

/// The longest hard cap: a day (a burst longer than that is told daily).
pub const MAX_HARD_CAP_MS: u64 = 24 * 3600 * 1000;

/// The debounce key of a schedule's change notices.
pub fn debounce_key(tenant: &TenantId, schedule: &ScheduleId) -> String {
    format!("{tenant}:{schedule}")
}

/// One notice, as frozen by the daemon: what participants were last told
/// (`before`) and the state now (`after`; None: the schedule was deleted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeNotice {
    pub schedule: ScheduleId,
    /// The debounce token of the edge that sent it: its identity.
    pub token: String,
    pub edge: NoticeEdge,
    /// When it was frozen; strictly increasing per schedule, so it names the
    /// notice in delivery keys.
    pub at: Instant,
    pub before: Option<Schedule>,
    pub after: Option<Schedule>,
}

/// [`Edge`] as stored and carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NoticeEdge {
    Leading,
    Trailing,
}

impl From<Edge> for NoticeEdge {
    fn from(e: Edge) -> Self {
        match e {
            Edge::Leading => NoticeEdge::Leading,
            Edge::Trailing => NoticeEdge::Trailing,
        }
    }
}

impl NoticeEdge {
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeEdge::Leading => "leading",
            NoticeEdge::Trailing => "trailing",
        }
    }
}

impl std::str::FromStr for NoticeEdge {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "leading" => Ok(NoticeEdge::Leading),
            "trailing" => Ok(NoticeEdge::Trailing),
            other => Err(format!("{other:?} is not leading or trailing")),
        }
    }
}

/// What one participant is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecipientChange {
    /// Newly a participant: the meeting as it is now.
    Added { title: String, starts_at: Instant },
    /// No longer a participant.
    Removed { title: String },
    /// The schedule was deleted.
    Cancelled { title: String, starts_at: Instant },
    /// Still a participant; what changed that they can see.
    Updated(Updates),
}

/// The visible differences between two states of a schedule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Updates {
    /// The current title (for the subject line).
    pub title: String,
    pub renamed: Option<(String, String)>,
    pub moved: Option<(Instant, Instant)>,
    /// The repeat rule, old → new (None: a one-off).
    pub repeats: Option<(Option<String>, Option<String>)>,
    /// Single occurrences moved, moved back or cancelled since: (original
    /// start, now starting at, None if cancelled).
    pub occurrences: Vec<(Instant, Option<Instant>)>,
    /// The description changed, or a single occurrence's title or description.
    pub details: bool,
}

impl Updates {
    pub fn is_empty(&self) -> bool {
        self.renamed.is_none()
            && self.moved.is_none()
            && self.repeats.is_none()
            && self.occurrences.is_empty()
            && !self.details
    }
}

fn updates(before: &Schedule, after: &Schedule) -> Updates {
    let rule = |s: &Schedule| s.recurrence.as_ref().map(|r| r.rrule.clone());
    let exceptions = |s: &Schedule| -> Vec<crate::domain::OccurrenceException> {
        s.recurrence
            .as_ref()
            .map(|r| r.exceptions.clone())
            .unwrap_or_default()
    };
    let (old, new) = (exceptions(before), exceptions(after));
    let find = |list: &[crate::domain::OccurrenceException], original| {
        list.iter().find(|e| e.original == original).cloned()
    };
    // Where each single occurrence now is (None: cancelled), for every one
    // whose exception was added, changed or removed (moved back: its own time).
    let now_at = |e: &Option<crate::domain::OccurrenceException>, original: Instant| match e {
        Some(e) if e.cancelled => None,
        Some(e) => Some(e.starts_at.unwrap_or(original)),
        None => Some(original),
    };
    let texts = |e: &Option<crate::domain::OccurrenceException>| {
        e.as_ref().map(|e| (e.title.clone(), e.body.clone()))
    };
    let mut originals: Vec<Instant> = old.iter().chain(&new).map(|e| e.original).collect();
    originals.sort();
    originals.dedup();
    let mut occurrences = Vec::new();
    let mut occurrence_texts = false;
    for original in originals {
        let (was, is) = (find(&old, original), find(&new, original));
        if now_at(&was, original) != now_at(&is, original) {
            occurrences.push((original, now_at(&is, original)));
        } else if texts(&was).unwrap_or_default() != texts(&is).unwrap_or_default() {
            occurrence_texts = true;
        }
    }
    Updates {
        title: after.title.clone(),
        renamed: (before.title != after.title).then(|| (before.title.clone(), after.title.clone())),
        moved: (before.starts_at != after.starts_at).then_some((before.starts_at, after.starts_at)),
        repeats: (rule(before) != rule(after)).then(|| (rule(before), rule(after))),
        occurrences,
        details: before.body != after.body || occurrence_texts,
    }
}

impl ChangeNotice {
    /// What each participant, old or new, is told; nobody whose view did not change.
    pub fn changes(&self) -> Vec<(UserId, RecipientChange)> {
        let people = |s: &Option<Schedule>| -> Vec<UserId> {
            s.as_ref()
                .map(|s| s.participants.clone())
                .unwrap_or_default()
        };
        let (was, is) = (people(&self.before), people(&self.after));
        let mut out = Vec::new();
        match (&self.before, &self.after) {
            (Some(b), None) => {
                for p in was {
                    out.push((
                        p,
                        RecipientChange::Cancelled {
                            title: b.title.clone(),
                            starts_at: b.starts_at,
                        },
                    ));
                }
            }
            (before, Some(a)) => {
                let seen = before
                    .as_ref()
                    .map(|b| updates(b, a))
                    .filter(|u| !u.is_empty());
                for p in &is {
                    if !was.contains(p) {
                        let added = RecipientChange::Added {
                            title: a.title.clone(),
                            starts_at: a.starts_at,
                        };
                        out.push((p.clone(), added));
                    } else if let Some(u) = &seen {
                        out.push((p.clone(), RecipientChange::Updated(u.clone())));
                    }
                }
                for p in was.into_iter().filter(|p| !is.contains(p)) {
                    out.push((
                        p,
                        RecipientChange::Removed {
                            title: a.title.clone(),
                        },
                    ));
                }
            }
            (None, None) => {}
        }
        out
    }

    /// The channels it goes by: every channel a reminder of the schedule
    /// used, before or after.
    pub fn channels(&self) -> BTreeSet<Channel> {
        [&self.before, &self.after]
            .into_iter()
            .flatten()
            .flat_map(|s| s.rules.iter().flat_map(|r| r.channels.iter()))
            .collect()
    }

    /// The schedule version it reports (the deletion's, for a cancellation:
    /// one past the last seen).
    pub fn version(&self) -> i64 {
        match (&self.after, &self.before) {
            (Some(a), _) => a.version,
            (None, Some(b)) => b.version + 1,
            (None, None) => 0,
        }
    }

    /// The delivery key of its delivery to `recipient` by `channel`.
    pub fn delivery_key(&self, recipient: &UserId, channel: Channel) -> DeliveryKey {
        DeliveryKey {
            schedule: self.schedule.clone(),
            occurrence: Occurrence(self.at),
            purpose: DeliveryPurpose::ChangeNotice,
            recipient: recipient.clone(),
            channel,
        }
    }

    /// Every delivery it makes: per participant told, per channel.
    pub fn deliveries(&self) -> Vec<(DeliveryKey, RecipientChange)> {
        let channels = self.channels();
        self.changes()
            .into_iter()
            .flat_map(|(user, change)| {
                channels
                    .iter()
                    .map(move |c| (self.delivery_key(&user, *c), change.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

/// A debounce key's tenant and schedule.
pub fn parse_debounce_key(key: &str) -> Result<(TenantId, ScheduleId), ValidationError> {
    let (t, s) = key
        .split_once(':')
        .ok_or_else(|| ValidationError::new("key", format!("{key:?} is not tenant:schedule")))?;
    Ok((
        TenantId::parse_field("key", t)?,
        ScheduleId::parse_field("key", s)?,
    ))
}
