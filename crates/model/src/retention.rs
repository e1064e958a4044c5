//! How long a tenant's records are kept, per kind: part of its contract,
//! with defaults, each bounded between a day and ten years. The purge
//! (`toki_core::retention`) deletes what is older; nothing here does I/O.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::ValidationError;
use crate::time::Instant;

/// The kinds of record a tenant's retention covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetentionKind {
    /// Delivery rows of finished deliveries (never those pending or being sent).
    Deliveries,
    /// In-app chat messages.
    Chat,
    /// Messages the queue gave up on.
    DeadLetters,
    /// Delivery events (listed and replayable until purged).
    Events,
    /// The audit log of writes.
    Audit,
}

impl RetentionKind {
    pub const ALL: [RetentionKind; 5] = [
        RetentionKind::Deliveries,
        RetentionKind::Chat,
        RetentionKind::DeadLetters,
        RetentionKind::Events,
        RetentionKind::Audit,
    ];

    /// The setting's name, as the contract, the CLI and the metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            RetentionKind::Deliveries => "deliveries",
            RetentionKind::Chat => "chat",
            RetentionKind::DeadLetters => "dead_letters",
            RetentionKind::Events => "events",
            RetentionKind::Audit => "audit",
        }
    }
}

impl fmt::Display for RetentionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RetentionKind {
    type Err = ValidationError;
    fn from_str(s: &str) -> Result<Self, ValidationError> {
        RetentionKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                ValidationError::new(
                    format!("retention.{s}"),
                    "not a kind: deliveries, chat, dead_letters, events or audit",
                )
            })
    }
}

/// A number of days something is kept: [`RetentionDays::MIN`] to [`RetentionDays::MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RetentionDays(u32);

impl RetentionDays {
    /// A day: anything shorter would race the retries of a delivery.
    pub const MIN: u32 = 1;
    /// Ten years.
    pub const MAX: u32 = 3650;

    /// Days within the bounds; the error names `field`.
    pub fn new(field: &str, days: u64) -> Result<Self, ValidationError> {
        if !(u64::from(Self::MIN)..=u64::from(Self::MAX)).contains(&days) {
            return Err(ValidationError::new(
                field,
                format!(
                    "must be {} to {} days (ten years), got {days}",
                    Self::MIN,
                    Self::MAX
                ),
            ));
        }
        Ok(Self(days as u32))
    }

    pub fn days(self) -> u32 {
        self.0
    }

    pub fn duration(self) -> chrono::Duration {
        chrono::Duration::days(i64::from(self.0))
    }

    /// What is older than this, at `now`, is past its retention.
    pub fn cutoff(self, now: Instant) -> Instant {
        now - self.duration()
    }
}

impl fmt::Display for RetentionDays {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}d", self.0)
    }
}

/// How long each kind of a tenant's records is kept. Rows written before
/// there was a setting load with the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionSettings {
    pub deliveries: RetentionDays,
    pub chat: RetentionDays,
    pub dead_letters: RetentionDays,
    pub events: RetentionDays,
    pub audit: RetentionDays,
}

impl Default for RetentionSettings {
    /// Delivery and chat rows for a quarter (the report and a user's inbox
    /// look back that far); dead letters 14 days (what SQS keeps at most);
    /// events 7 days (the events window before there was a setting); the
    /// audit log a year.
    fn default() -> Self {
        RetentionSettings {
            deliveries: RetentionDays(90),
            chat: RetentionDays(90),
            dead_letters: RetentionDays(14),
            events: RetentionDays(7),
            audit: RetentionDays(365),
        }
    }
}

impl RetentionSettings {
    pub fn get(&self, kind: RetentionKind) -> RetentionDays {
        match kind {
            RetentionKind::Deliveries => self.deliveries,
            RetentionKind::Chat => self.chat,
            RetentionKind::DeadLetters => self.dead_letters,
            RetentionKind::Events => self.events,
            RetentionKind::Audit => self.audit,
        }
    }

    fn slot(&mut self, kind: RetentionKind) -> &mut RetentionDays {
        match kind {
            RetentionKind::Deliveries => &mut self.deliveries,
            RetentionKind::Chat => &mut self.chat,
            RetentionKind::DeadLetters => &mut self.dead_letters,
            RetentionKind::Events => &mut self.events,
            RetentionKind::Audit => &mut self.audit,
        }
    }

    /// Checks every setting (a stored contract is read through serde, which
    /// does not); the error names `retention.<kind>`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        for kind in RetentionKind::ALL {
            RetentionDays::new(
                &format!("retention.{kind}"),
                u64::from(self.get(kind).days()),
            )?;
        }
        Ok(())
    }

    /// `deliveries=30,chat=365` (days; `KIND=default` restores the default)
    /// applied on top of these; nothing changes unless all of it is valid.
    pub fn edit(&mut self, spec: &str) -> Result<(), ValidationError> {
        let mut edited = *self;
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (kind, value) = part.split_once('=').ok_or_else(|| {
                ValidationError::new("retention", format!("{part:?} is not KIND=DAYS"))
            })?;
            let kind: RetentionKind = kind.trim().parse()?;
            let field = format!("retention.{kind}");
            let value = value.trim();
            *edited.slot(kind) = if value == "default" {
                RetentionSettings::default().get(kind)
            } else {
                let days = value.strip_suffix('d').unwrap_or(value);
                let days: u64 = days.parse().map_err(|_| {
                    ValidationError::new(&field, format!("{value:?} is not a number of days"))
                })?;
                RetentionDays::new(&field, days)?
            };
        }
        *self = edited;
        Ok(())
    }
}

impl fmt::Display for RetentionSettings {
    /// `deliveries=90d chat=90d dead_letters=14d events=7d audit=365d`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = RetentionKind::ALL
            .iter()
            .map(|k| format!("{k}={}", self.get(*k)))
            .collect();
        f.write_str(&parts.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_within_the_bounds() {
        let d = RetentionSettings::default();
        d.validate().unwrap();
        assert_eq!(
            d.to_string(),
            "deliveries=90d chat=90d dead_letters=14d events=7d audit=365d"
        );
    }

    #[test]
    fn a_day_to_ten_years_and_nothing_else() {
        let mut s = RetentionSettings::default();
        s.edit("deliveries=1, chat=3650d").unwrap();
        assert_eq!(s.deliveries.days(), 1);
        assert_eq!(s.chat.days(), 3650);
        for (spec, field) in [
            ("deliveries=0", "retention.deliveries"),
            ("chat=3651", "retention.chat"),
            ("events=-1", "retention.events"),
            ("audit=soon", "retention.audit"),
            (
                "dead_letters=99999999999999999999",
                "retention.dead_letters",
            ),
            ("forever=3", "retention.forever"),
            ("chat", "retention"),
        ] {
            let before = s;
            let e = s.edit(&format!("events=30,{spec}")).unwrap_err();
            assert_eq!(e.field, field, "{spec}");
            assert_eq!(s, before, "{spec}: nothing half-applied");
        }
        s.edit("deliveries=default").unwrap();
        assert_eq!(s.deliveries, RetentionSettings::default().deliveries);
    }

    #[test]
    fn a_stored_setting_out_of_bounds_is_refused_by_validate() {
        let s: RetentionSettings = serde_json::from_str(r#"{"chat": 0}"#).unwrap();
        assert_eq!(s.validate().unwrap_err().field, "retention.chat");
        let partial: RetentionSettings = serde_json::from_str(r#"{"events": 3}"#).unwrap();
        assert_eq!(partial.events.days(), 3);
        assert_eq!(partial.deliveries, RetentionSettings::default().deliveries);
        assert!(serde_json::from_str::<RetentionSettings>(r#"{"forever": 3}"#).is_err());
    }

    #[test]
    fn the_cutoff_is_the_retention_before_now() {
        let now: Instant = "2026-11-28T00:00:00Z".parse().unwrap();
        let cut = RetentionDays::new("x", 7).unwrap().cutoff(now);
        assert_eq!(cut, "2026-11-21T00:00:00Z".parse::<Instant>().unwrap());
    }
}
