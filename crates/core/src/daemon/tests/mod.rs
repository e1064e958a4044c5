//! Unit tests of the daemon's pure decisions: intake, plan, settle, disposition.

mod plan;
mod settle;

use std::collections::BTreeSet;

use super::*;
use toki_model::domain::*;
use toki_model::ScheduleSnapshot;
use toki_ports::message;
use toki_ports::{Claims, DeliveryContext, OwnedDelivery, ReceivedMessage};

pub(super) fn at(s: &str) -> Instant {
    chrono::DateTime::parse_from_rfc3339(s).unwrap().to_utc()
}

pub(super) const DUE: &str = "2026-11-23T08:55:00Z";

pub(super) fn reminder(schedule: &str, version: i64, channels: &[Channel]) -> Reminder {
    let occurrence = Occurrence(at("2026-11-23T09:00:00Z"));
    Reminder {
        key: ReminderKey {
            tenant: "acme".parse().unwrap(),
            schedule: schedule.parse().unwrap(),
            occurrence,
            minutes_before: 5,
        },
        due_at: Reminder::due_for(occurrence, 5),
        version,
        channels: ChannelSet::new("channels", channels).unwrap(),
    }
}

pub(super) fn received(r: &Reminder, n: usize) -> ReceivedMessage {
    ReceivedMessage {
        receipt: format!("r{n}"),
        body: r.key.to_string(),
        attributes: message::encode(r),
        receive_count: 1,
    }
}

pub(super) fn work(r: &Reminder, n: usize) -> Work {
    Work {
        msg: received(r, n),
        reminder: r.clone(),
    }
}

pub(super) fn user(id: &str, email: bool, slack: bool) -> User {
    User {
        id: id.parse().unwrap(),
        name: format!("User {id}"),
        email: email.then(|| format!("{id}@example.com")),
        slack_user_id: slack.then(|| format!("U{id}")),
        time_zone: chrono_tz::Asia::Tokyo,
        locale: "en".into(),
        channels_off: Default::default(),
        webhook_url: None,
    }
}

/// Schedules (id, version, participants) and the users the store knows.
pub(super) fn context(schedules: &[(&str, i64, &[&str])], users: &[User]) -> DeliveryContext {
    DeliveryContext {
        schedules: schedules
            .iter()
            .map(|(id, v, participants)| {
                let id: ScheduleId = id.parse().unwrap();
                (
                    id.clone(),
                    ScheduleSnapshot {
                        id,
                        title: "Review".into(),
                        body: String::new(),
                        version: *v,
                        participants: participants.iter().map(|p| p.parse().unwrap()).collect(),
                        exceptions: Vec::new(),
                    },
                )
            })
            .collect(),
        users: users
            .iter()
            .map(|u| (u.id.clone(), Arc::new(u.clone())))
            .collect(),
        webhook: None,
        suppressed: Default::default(),
        list_unsubscribe: None,
    }
}

/// Every channel configured, none behind an open circuit.
pub(super) fn all_channels() -> ChannelState {
    ChannelState {
        configured: Channel::ALL.into_iter().collect(),
        open: BTreeSet::new(),
    }
}

/// Claims that own these deliveries, first claims each.
pub(super) fn owning(keys: impl IntoIterator<Item = DeliveryKey>) -> Claims {
    Claims {
        owned: keys.into_iter().map(OwnedDelivery::new).collect(),
        ..Claims::default()
    }
}

pub(super) fn verdicts(plan: &BatchPlan) -> Vec<Vec<Verdict>> {
    plan.messages
        .iter()
        .map(|m| m.deliveries.iter().map(|d| d.verdict.clone()).collect())
        .collect()
}
