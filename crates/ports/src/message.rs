//! The delay-queue message: everything the daemon needs, as string attributes
//! (SQS allows at most 10 message attributes).

use std::collections::BTreeMap;

use toki_model::domain::{
    from_millis, ChannelSet, DueAt, Occurrence, Reminder, ReminderKey, ScheduleId, TenantId,
};
use toki_model::error::ValidationError;

pub const ATTR_TENANT: &str = "tenant";
pub const ATTR_SCHEDULE: &str = "schedule";
pub const ATTR_OCCURRENCE: &str = "occurrence";
pub const ATTR_MINUTES_BEFORE: &str = "minutes_before";
pub const ATTR_DUE: &str = "due";
pub const ATTR_VERSION: &str = "version";
pub const ATTR_CHANNELS: &str = "channels";
/// The W3C trace context of the reminder's enqueue (only when traces are on;
/// see [`toki_core::trace`]).
pub const ATTR_TRACEPARENT: &str = "traceparent";

/// SQS's limit on message attributes.
pub const MAX_ATTRIBUTES: usize = 10;

/// Message attributes: name → string value.
pub type Attributes = BTreeMap<String, String>;

/// Encodes a reminder into message attributes.
pub fn encode(reminder: &Reminder) -> Attributes {
    let k = &reminder.key;
    let mut a = Attributes::new();
    a.insert(ATTR_TENANT.into(), k.tenant.to_string());
    a.insert(ATTR_SCHEDULE.into(), k.schedule.to_string());
    a.insert(ATTR_OCCURRENCE.into(), k.occurrence.millis().to_string());
    a.insert(ATTR_MINUTES_BEFORE.into(), k.minutes_before.to_string());
    a.insert(ATTR_DUE.into(), reminder.due_at.millis().to_string());
    a.insert(ATTR_VERSION.into(), reminder.version.to_string());
    a.insert(ATTR_CHANNELS.into(), reminder.channels.encode());
    debug_assert!(a.len() <= MAX_ATTRIBUTES);
    a
}

fn get<'a>(a: &'a Attributes, name: &str) -> Result<&'a str, ValidationError> {
    a.get(name)
        .map(String::as_str)
        .ok_or_else(|| ValidationError::new(name, "attribute is missing"))
}

fn int<T: std::str::FromStr>(a: &Attributes, name: &str) -> Result<T, ValidationError> {
    let s = get(a, name)?;
    s.parse()
        .map_err(|_| ValidationError::new(name, format!("{s:?} is not an integer")))
}

/// Decodes message attributes; the error names the attribute at fault.
pub fn decode(a: &Attributes) -> Result<Reminder, ValidationError> {
    let tenant = TenantId::parse_field(ATTR_TENANT, get(a, ATTR_TENANT)?)?;
    let schedule = ScheduleId::parse_field(ATTR_SCHEDULE, get(a, ATTR_SCHEDULE)?)?;
    let occurrence = Occurrence(from_millis(ATTR_OCCURRENCE, int(a, ATTR_OCCURRENCE)?)?);
    let minutes_before: u32 = int(a, ATTR_MINUTES_BEFORE)?;
    let due_at = DueAt(from_millis(ATTR_DUE, int(a, ATTR_DUE)?)?);
    let version: i64 = int(a, ATTR_VERSION)?;
    let channels = ChannelSet::decode(ATTR_CHANNELS, get(a, ATTR_CHANNELS)?)?;
    Ok(Reminder {
        key: ReminderKey {
            tenant,
            schedule,
            occurrence,
            minutes_before,
        },
        due_at,
        version,
        channels,
    })
}

/// Marks a message that is not a reminder; reminders carry no kind.
pub const ATTR_KIND: &str = "kind";
/// A debounce check ([`toki_model::debounce`]): `key`, `token` and `due`.
pub const KIND_DEBOUNCE_CHECK: &str = "debounce_check";
pub const ATTR_KEY: &str = "key";
pub const ATTR_TOKEN: &str = "token";

/// A debounce check, as a queue message carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebounceCheck {
    pub key: String,
    pub token: String,
    /// When the check was armed for.
    pub due: toki_model::domain::Instant,
    /// The settings of the call that armed it (None: the daemon's own).
    pub settings: Option<toki_model::debounce::DebounceSettings>,
}

pub const ATTR_MIN_DELAY_MS: &str = "min_delay_ms";
pub const ATTR_MAX_DELAY_MS: &str = "max_delay_ms";
pub const ATTR_HARD_CAP_MS: &str = "hard_cap_ms";

pub fn encode_debounce_check(check: &DebounceCheck) -> Attributes {
    let mut a = Attributes::new();
    a.insert(ATTR_KIND.into(), KIND_DEBOUNCE_CHECK.into());
    a.insert(ATTR_KEY.into(), check.key.clone());
    a.insert(ATTR_TOKEN.into(), check.token.clone());
    a.insert(ATTR_DUE.into(), check.due.timestamp_millis().to_string());
    if let Some(s) = &check.settings {
        let ms = |d: std::time::Duration| d.as_millis().to_string();
        a.insert(ATTR_MIN_DELAY_MS.into(), ms(s.min_delay));
        a.insert(ATTR_MAX_DELAY_MS.into(), ms(s.max_delay));
        a.insert(ATTR_HARD_CAP_MS.into(), ms(s.hard_cap));
    }
    a
}

/// A debounce check, if the message is one (`None`: another kind, or a reminder).
pub fn decode_debounce_check(a: &Attributes) -> Option<Result<DebounceCheck, ValidationError>> {
    if a.get(ATTR_KIND).map(String::as_str) != Some(KIND_DEBOUNCE_CHECK) {
        return None;
    }
    Some(debounce_check(a))
}

fn debounce_check(a: &Attributes) -> Result<DebounceCheck, ValidationError> {
    Ok(DebounceCheck {
        key: get(a, ATTR_KEY)?.to_owned(),
        token: get(a, ATTR_TOKEN)?.to_owned(),
        due: from_millis(ATTR_DUE, int(a, ATTR_DUE)?)?,
        settings: if a.contains_key(ATTR_MIN_DELAY_MS) {
            let ms = |name| int(a, name).map(std::time::Duration::from_millis);
            let s = toki_model::debounce::DebounceSettings {
                min_delay: ms(ATTR_MIN_DELAY_MS)?,
                max_delay: ms(ATTR_MAX_DELAY_MS)?,
                hard_cap: ms(ATTR_HARD_CAP_MS)?,
            };
            s.validate()?;
            Some(s)
        } else {
            None
        },
    })
}

/// A change notice to freeze and deliver ([`toki_model::change`]).
pub const KIND_CHANGE_NOTICE: &str = "change_notice";
pub const ATTR_EDGE: &str = "edge";

/// A change notice, as a queue message carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoticeMessage {
    pub tenant: TenantId,
    pub schedule: ScheduleId,
    pub token: String,
    pub edge: toki_model::change::NoticeEdge,
    /// When the edge happened (how overdue a notice that keeps failing is).
    pub at: toki_model::domain::Instant,
}

pub fn encode_change_notice(n: &NoticeMessage) -> Attributes {
    let mut a = Attributes::new();
    a.insert(ATTR_KIND.into(), KIND_CHANGE_NOTICE.into());
    a.insert(ATTR_TENANT.into(), n.tenant.to_string());
    a.insert(ATTR_SCHEDULE.into(), n.schedule.to_string());
    a.insert(ATTR_TOKEN.into(), n.token.clone());
    a.insert(ATTR_EDGE.into(), n.edge.as_str().into());
    a.insert(ATTR_DUE.into(), n.at.timestamp_millis().to_string());
    a
}

/// A change notice, if the message is one.
pub fn decode_change_notice(a: &Attributes) -> Option<Result<NoticeMessage, ValidationError>> {
    if a.get(ATTR_KIND).map(String::as_str) != Some(KIND_CHANGE_NOTICE) {
        return None;
    }
    Some((|| {
        Ok(NoticeMessage {
            tenant: TenantId::parse_field(ATTR_TENANT, get(a, ATTR_TENANT)?)?,
            schedule: ScheduleId::parse_field(ATTR_SCHEDULE, get(a, ATTR_SCHEDULE)?)?,
            token: get(a, ATTR_TOKEN)?.to_owned(),
            edge: get(a, ATTR_EDGE)?
                .parse()
                .map_err(|e| ValidationError::new(ATTR_EDGE, e))?,
            at: from_millis(ATTR_DUE, int(a, ATTR_DUE)?)?,
        })
    })())
}

#[cfg(test)]
mod tests {
    use super::*;
    use toki_model::domain::{Channel, Occurrence};

    fn sample() -> Reminder {
        let occurrence = Occurrence(from_millis("o", 1_795_424_400_000).unwrap());
        Reminder {
            key: ReminderKey {
                tenant: "acme".parse().unwrap(),
                schedule: "weekly:sync-1".parse().unwrap(),
                occurrence,
                minutes_before: 5,
            },
            due_at: Reminder::due_for(occurrence, 5),
            version: 12,
            channels: ChannelSet::new("c", &[Channel::Slack, Channel::Mail]).unwrap(),
        }
    }

    #[test]
    fn attributes_round_trip_within_the_sqs_limit() {
        let r = sample();
        let a = encode(&r);
        assert!(a.len() <= MAX_ATTRIBUTES);
        // Small whatever the meeting: no recipient list travels.
        let bytes: usize = a.iter().map(|(k, v)| k.len() + v.len()).sum();
        assert!(bytes < 200, "{bytes} bytes");
        assert_eq!(a[ATTR_CHANNELS], "mail,slack");
        assert_eq!(decode(&a).unwrap(), r);
    }

    #[test]
    fn debounce_checks_round_trip_and_are_not_reminders() {
        let check = DebounceCheck {
            key: "acme:weekly-sync".into(),
            token: "00ff".into(),
            due: from_millis("d", 1_795_424_400_000).unwrap(),
            settings: Some(toki_model::debounce::DebounceSettings::default()),
        };
        let a = encode_debounce_check(&check);
        assert_eq!(decode_debounce_check(&a), Some(Ok(check)));
        assert!(decode(&a).is_err(), "not a reminder");
        assert_eq!(decode_debounce_check(&encode(&sample())), None);
        let notice = NoticeMessage {
            tenant: "acme".parse().unwrap(),
            schedule: "weekly:sync-1".parse().unwrap(),
            token: "00ff".into(),
            edge: toki_model::change::NoticeEdge::Trailing,
            at: from_millis("d", 1_795_424_400_000).unwrap(),
        };
        let a = encode_change_notice(&notice);
        assert_eq!(decode_change_notice(&a), Some(Ok(notice)));
        assert_eq!(decode_debounce_check(&a), None);
        assert!(decode(&a).is_err(), "not a reminder");
        let mut bad = a.clone();
        bad.insert(ATTR_EDGE.into(), "middle".into());
        assert_eq!(
            decode_change_notice(&bad).unwrap().unwrap_err().field,
            ATTR_EDGE
        );
        let mut a = encode_debounce_check(&DebounceCheck {
            key: "k".into(),
            token: "t".into(),
            due: from_millis("d", 0).unwrap(),
            settings: None,
        });
        a.remove(ATTR_TOKEN);
        assert_eq!(
            decode_debounce_check(&a).unwrap().unwrap_err().field,
            ATTR_TOKEN
        );
    }

    #[test]
    fn decoding_names_the_bad_attribute() {
        let mut a = encode(&sample());
        a.remove(ATTR_VERSION);
        assert_eq!(decode(&a).unwrap_err().field, ATTR_VERSION);
        let mut a = encode(&sample());
        a.insert(ATTR_DUE.into(), "soon".into());
        let e = decode(&a).unwrap_err();
        assert_eq!(e.field, ATTR_DUE);
        assert!(e.problem.contains("soon"));
        let mut a = encode(&sample());
        a.insert(ATTR_CHANNELS.into(), "mail,fax".into());
        assert_eq!(decode(&a).unwrap_err().field, ATTR_CHANNELS);
        // A message of an older release still carrying its recipients decodes.
        let mut a = encode(&sample());
        a.insert("recipients".into(), "u1,u2".into());
        assert_eq!(decode(&a).unwrap(), sample());
    }
}
