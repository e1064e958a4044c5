//! Shared helpers for the integration tests: the conformance suite and the
//! services tests need (Postgres, SMTP capture), each test with unique names.
#![allow(dead_code, unused_macros, unused_imports)]

#[macro_use]
pub mod conformance;
pub mod debounce;
pub mod faults;
pub mod pipeline;
pub mod process;
pub mod proxy;
pub mod services;

/// A notification to recipient `u{i}` (mail `u{i}@example.com`, Slack user
/// `slack`) about meeting `s{i}`, as the daemon hands it to a channel.
#[allow(dead_code)]
pub fn notification(i: usize, slack: &str) -> toki_core::channel::Notification {
    use toki_core::*;
    toki_core::channel::Notification {
        tenant: "acme".parse().unwrap(),
        key: DeliveryKey {
            schedule: format!("s{i}").parse().unwrap(),
            occurrence: Occurrence(from_millis("o", 1_800_000_000_000).unwrap()),
            minutes_before: 5,
            recipient: format!("u{i}").parse().unwrap(),
            channel: Channel::Slack,
        },
        version: 1,
        due_at: DueAt(chrono::Utc::now()),
        recipient: std::sync::Arc::new(User {
            id: format!("u{i}").parse().unwrap(),
            name: format!("User {i}"),
            email: Some(format!("u{i}@example.com")),
            slack_user_id: Some(slack.to_string()),
            time_zone: chrono_tz::UTC,
            locale: "en".into(),
        }),
        subject: "Reminder: review".into(),
        text: "review starts in 5 minutes".into(),
    }
}
