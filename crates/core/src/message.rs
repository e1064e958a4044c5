//! The delay-queue message: everything the daemon needs, as string attributes
//! (SQS allows at most 10 message attributes).

use std::collections::BTreeMap;

use crate::domain::{
    from_millis, ChannelSet, DueAt, Occurrence, Reminder, ReminderKey, ScheduleId, TenantId,
};
use crate::error::ValidationError;

pub const ATTR_TENANT: &str = "tenant";
pub const ATTR_SCHEDULE: &str = "schedule";
pub const ATTR_OCCURRENCE: &str = "occurrence";
pub const ATTR_MINUTES_BEFORE: &str = "minutes_before";
pub const ATTR_DUE: &str = "due";
pub const ATTR_VERSION: &str = "version";
pub const ATTR_CHANNELS: &str = "channels";

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
/// A debounce check ([`crate::debounce`]): `key`, `token` and `due`.
pub const KIND_DEBOUNCE_CHECK: &str = "debounce_check";
pub const ATTR_KEY: &str = "key";
pub const ATTR_TOKEN: &str = "token";

/// A debounce check, as a queue message carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebounceCheck {
    pub key: String,
    pub token: String,
    /// When the check was armed for.
    pub due: crate::domain::Instant,
}

pub fn encode_debounce_check(check: &DebounceCheck) -> Attributes {
    let mut a = Attributes::new();
    a.insert(ATTR_KIND.into(), KIND_DEBOUNCE_CHECK.into());
    a.insert(ATTR_KEY.into(), check.key.clone());
    a.insert(ATTR_TOKEN.into(), check.token.clone());
    a.insert(ATTR_DUE.into(), check.due.timestamp_millis().to_string());
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Channel, Occurrence};

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
        };
        let a = encode_debounce_check(&check);
        assert_eq!(decode_debounce_check(&a), Some(Ok(check)));
        assert!(decode(&a).is_err(), "not a reminder");
        assert_eq!(decode_debounce_check(&encode(&sample())), None);
        let mut a = encode_debounce_check(&DebounceCheck {
            key: "k".into(),
            token: "t".into(),
            due: from_millis("d", 0).unwrap(),
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
