//! Erasure of a person (docs/erasure.md): the pseudonym their past delivery
//! rows keep, what an erasure removed per place, and the pure rewrites of
//! the stored values that name them (schedule snapshots, event data).

use rand::Rng;
use serde::Serialize;

use crate::domain::{DeliveryStatus, Schedule, User, UserId};
use crate::event::EventData;

/// What replaces an erased user's id in the rows kept for counting (past
/// deliveries, their events): `erased-` and 16 random hex digits, one per
/// erasure. Random rather than a keyed hash of the id: nobody, Toki
/// included, can recompute which rows were whose.
pub fn pseudonym() -> UserId {
    let n: u64 = rand::thread_rng().gen();
    format!("{PSEUDONYM_PREFIX}{n:016x}")
        .parse()
        .expect("a pseudonym is a valid user id")
}

/// How every pseudonym begins.
pub const PSEUDONYM_PREFIX: &str = "erased-";

/// What a kept free text (a delivery's `detail`, an event's `reason`) becomes:
/// a provider's answer may quote the address.
pub const SCRUBBED: &str = "[erased]";

/// Deliveries not finished: claimed, or waiting to be tried again. An
/// erasure removes them, so that nothing is sent to the person; a later
/// claim of the same key finds no participant to claim it for.
pub const UNFINISHED: [DeliveryStatus; 4] = [
    DeliveryStatus::Sending,
    DeliveryStatus::Failed,
    DeliveryStatus::Throttled,
    DeliveryStatus::Deferred,
];

/// What one erasure did, per place Toki holds a person. Each count is of
/// rows (or values) removed or rewritten; a place added to the erasure is a
/// field here and a term of [`ErasureReport::total`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ErasureReport {
    /// The user row (name, addresses, Slack id, webhook endpoint): 0 or 1.
    pub users: u64,
    /// Schedules they took part in, now without them.
    pub participations: u64,
    /// Schedules whose version moved (their reminders mirrored again).
    pub schedules_changed: u64,
    /// Deliveries not finished (claimed, failed, throttled, deferred): removed, never sent.
    pub deliveries_cancelled: u64,
    /// Finished deliveries kept for counting under the pseudonym, detail scrubbed.
    pub deliveries_pseudonymised: u64,
    /// Their in-app chat messages, removed.
    pub chat_messages: u64,
    /// Delivery events naming them, kept under the pseudonym, reason scrubbed.
    pub delivery_events: u64,
    /// Change-notice baselines that listed them among the participants.
    pub change_baselines: u64,
    /// Frozen change notices that listed them.
    pub change_notices: u64,
    /// Kept answers of idempotent requests that quoted them, removed.
    pub idempotency_keys: u64,
    /// Their mail address on the tenant's suppression list, replaced by a
    /// keyed hash ([`crate::suppression_hash`]): 0 or 1.
    pub suppressions: u64,
    /// Audit-log entries about their user row, kept under the pseudonym.
    pub audit_entries: u64,
}

impl ErasureReport {
    /// Every row touched, all places together (0: Toki held nothing of them).
    pub fn total(&self) -> u64 {
        self.users
            + self.participations
            + self.schedules_changed
            + self.deliveries_cancelled
            + self.deliveries_pseudonymised
            + self.chat_messages
            + self.delivery_events
            + self.change_baselines
            + self.change_notices
            + self.idempotency_keys
            + self.suppressions
            + self.audit_entries
    }
}

/// Removes `user` from a schedule snapshot's participants; whether it was there.
pub fn drop_participant(schedule: &mut Schedule, user: &UserId) -> bool {
    let before = schedule.participants.len();
    schedule.participants.retain(|p| p != user);
    schedule.participants.len() != before
}

/// Rewrites an event's data that names `user`: the recipient and the
/// delivery key become the pseudonym's, the reason is scrubbed. Whether it
/// named them.
pub fn pseudonymise_event(data: &mut EventData, user: &UserId, pseudonym: &UserId) -> bool {
    if data.recipient.as_deref() != Some(user.as_str()) {
        return false;
    }
    data.recipient = Some(pseudonym.to_string());
    // The key is `schedule#occurrence#minutes#recipient#channel`; ids hold no `#`.
    data.delivery = data.delivery.as_ref().map(|k| {
        let mut parts: Vec<&str> = k.split('#').collect();
        if let Some(r) = parts.get_mut(3) {
            *r = pseudonym.as_str();
        }
        parts.join("#")
    });
    data.reason = data.reason.as_ref().map(|_| SCRUBBED.to_owned());
    true
}

/// The texts whose presence in a stored JSON answer means it quotes the
/// user: each identifying value as a JSON string, quotes included (`"ana"`),
/// so an id is not found inside a longer one.
pub fn json_needles(user: &User) -> Vec<String> {
    let mut values = vec![user.id.to_string(), user.name.clone()];
    values.extend(user.email.clone());
    values.extend(user.slack_user_id.clone());
    values.extend(user.webhook_url.as_ref().map(|u| u.to_string()));
    values
        .into_iter()
        .filter(|v| !v.is_empty())
        .map(|v| serde_json::to_string(&v).expect("a string serialises"))
        .collect()
}

/// The needles of a user the store no longer has (a second erasure, after
/// one that raced a delivery): the id alone.
pub fn id_needles(user: &UserId) -> Vec<String> {
    vec![serde_json::to_string(user.as_str()).expect("a string serialises")]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Channel, DeliveryKey, DeliveryPurpose, Occurrence, ScheduleId};

    fn id(s: &str) -> UserId {
        s.parse().unwrap()
    }

    #[test]
    fn pseudonyms_are_user_ids_and_differ() {
        let (a, b) = (pseudonym(), pseudonym());
        assert!(a.as_str().starts_with(PSEUDONYM_PREFIX));
        assert_eq!(a.as_str().len(), PSEUDONYM_PREFIX.len() + 16);
        assert_ne!(a, b);
    }

    #[test]
    fn an_event_naming_the_user_is_rewritten_and_others_are_not() {
        let at = chrono::DateTime::from_timestamp_millis(1_000).unwrap();
        let key = DeliveryKey {
            schedule: "s1".parse::<ScheduleId>().unwrap(),
            occurrence: Occurrence(at),
            purpose: DeliveryPurpose::Reminder { minutes_before: 5 },
            recipient: id("ana"),
            channel: Channel::Mail,
        };
        let mut data = EventData {
            delivery: Some(key.to_string()),
            schedule_id: "s1".into(),
            occurrence: at,
            recipient: Some("ana".into()),
            channel: Some(Channel::Mail),
            due_at: at,
            reason: Some("550 <ana@example.com> unknown".into()),
            attempt: None,
        };
        let mut other = data.clone();
        other.recipient = Some("bob".into());
        let p = id("erased-0123456789abcdef");
        assert!(pseudonymise_event(&mut data, &id("ana"), &p));
        assert_eq!(data.recipient.as_deref(), Some(p.as_str()));
        assert_eq!(
            data.delivery.as_deref(),
            Some("s1#1000#5#erased-0123456789abcdef#mail")
        );
        assert_eq!(data.reason.as_deref(), Some(SCRUBBED));
        let untouched = other.clone();
        assert!(!pseudonymise_event(&mut other, &id("ana"), &p));
        assert_eq!(other, untouched);
    }

    #[test]
    fn needles_are_json_strings_of_every_identifying_value() {
        let user = User {
            id: id("ana"),
            name: "Ana \"A\" Lima".into(),
            email: Some("ana@example.com".into()),
            slack_user_id: None,
            webhook_url: None,
            time_zone: chrono_tz::UTC,
            locale: "en".into(),
            channels_off: Default::default(),
        };
        assert_eq!(
            json_needles(&user),
            vec![
                "\"ana\"".to_owned(),
                "\"Ana \\\"A\\\" Lima\"".to_owned(),
                "\"ana@example.com\"".to_owned()
            ]
        );
    }

    #[test]
    fn the_total_counts_every_place() {
        let r = ErasureReport {
            users: 1,
            participations: 2,
            schedules_changed: 2,
            deliveries_cancelled: 1,
            deliveries_pseudonymised: 3,
            chat_messages: 1,
            delivery_events: 4,
            change_baselines: 1,
            change_notices: 1,
            idempotency_keys: 1,
            suppressions: 1,
            audit_entries: 2,
        };
        assert_eq!(r.total(), 20);
        assert_eq!(ErasureReport::default().total(), 0);
    }
}
