//! Property-based tests (proptest) of what comes from outside: the queue
//! message decoder and the registrar API's input. Whatever arrives, the
//! answer is a value or an error naming the field — never a panic, never 500.

use crate::common;

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use serde_json::{json, Value};
use toki_model::input::ScheduleInput;
use toki_model::{ChannelSet, Occurrence, Reminder, ReminderKey, ScheduleId};
use toki_ports::message::{self, Attributes};

const ATTRS: [&str; 7] = [
    message::ATTR_TENANT,
    message::ATTR_SCHEDULE,
    message::ATTR_OCCURRENCE,
    message::ATTR_MINUTES_BEFORE,
    message::ATTR_DUE,
    message::ATTR_VERSION,
    message::ATTR_CHANNELS,
];

/// Strings that are often almost right: numbers at and past the limits,
/// channel lists, ids with odd characters, and anything at all.
fn nasty_string() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        Just(i64::MAX.to_string()),
        Just("9223372036854775808".to_string()),
        Just("-0".to_string()),
        Just(String::new()),
        "(chat|mail|slack|sms|,){0,6}",
        "[a-z][a-z0-9_-]{0,45}",
        "[A-Za-z0-9_.:@#,-]{0,140}",
        any::<String>(),
    ]
}

fn attributes() -> impl Strategy<Value = Attributes> {
    let known = proptest::sample::select(ATTRS.to_vec()).prop_map(str::to_owned);
    let name = prop_oneof![4 => known, 1 => "[a-z_]{1,12}"];
    proptest::collection::btree_map(name, nasty_string(), 0..10)
}

fn reminder() -> impl Strategy<Value = Reminder> {
    (
        "[a-z][a-z0-9_-]{0,39}",
        "[A-Za-z0-9_.:@-]{1,128}",
        // Any instant chrono can hold to the millisecond, from year 1 to 9999.
        -62_135_596_800_000i64..253_402_300_799_999,
        0u32..=40_320,
        any::<i64>(),
        proptest::sample::subsequence(vec!["chat", "mail", "slack"], 1..=3),
    )
        .prop_map(
            |(tenant, schedule, occurrence, minutes, version, channels)| {
                let occurrence =
                    Occurrence(toki_model::domain::from_millis("o", occurrence).unwrap());
                let channels: Vec<_> = channels.iter().map(|c| c.parse().unwrap()).collect();
                Reminder {
                    key: ReminderKey {
                        tenant: tenant.parse().unwrap(),
                        schedule: schedule.parse::<ScheduleId>().unwrap(),
                        occurrence,
                        minutes_before: minutes,
                    },
                    due_at: toki_model::DueAt(occurrence.0),
                    version,
                    channels: ChannelSet::new("channels", &channels).unwrap(),
                }
            },
        )
}

proptest! {
    #![proptest_config(RunnerConfig { cases: 2_000, ..RunnerConfig::default() })]

    /// Any attribute map: a reminder, or an error naming one of the attributes.
    #[test]
    fn the_decoder_never_panics_and_names_the_attribute(a in attributes()) {
        match message::decode(&a) {
            Ok(r) => {
                // What decoded re-encodes to the same known attributes.
                let again = message::encode(&r);
                for (k, v) in &again {
                    if *k != message::ATTR_CHANNELS {
                        prop_assert_eq!(Some(v), a.get(k), "{}", k);
                    }
                }
            }
            Err(e) => {
                prop_assert!(ATTRS.contains(&e.field.as_str()), "unknown field {:?}", e.field);
                prop_assert!(!e.problem.is_empty());
            }
        }
    }

    /// What the scanner encodes, the daemon decodes to the same reminder.
    #[test]
    fn encode_then_decode_is_the_identity(r in reminder()) {
        prop_assert_eq!(message::decode(&message::encode(&r)).unwrap(), r);
    }

    /// Any schedule-shaped JSON: a schedule, or an error naming a field.
    #[test]
    fn schedule_validation_never_panics(body in schedule_json(), id in "[A-Za-z0-9_.:@-]{1,20}") {
        let id: ScheduleId = id.parse().unwrap();
        if let Ok(input) = serde_json::from_value::<ScheduleInput>(body) {
            match input.validate(&id, "2026-06-01T00:00:00Z".parse().unwrap()) {
                Ok(s) => {
                    // What is accepted keeps every limit the API documents.
                    use toki_model::input::{MAX_MINUTES_BEFORE, MAX_PARTICIPANTS, MAX_RULES, MAX_TITLE_CHARS};
                    prop_assert!(s.rules.len() <= MAX_RULES);
                    prop_assert!(s.participants.len() <= MAX_PARTICIPANTS);
                    prop_assert!(!s.title.is_empty() && s.title.chars().count() <= MAX_TITLE_CHARS);
                    let offsets: std::collections::HashSet<_> =
                        s.rules.iter().map(|r| r.minutes_before).collect();
                    prop_assert_eq!(offsets.len(), s.rules.len(), "an offset twice");
                    prop_assert!(s.rules.iter().all(|r| i64::from(r.minutes_before) <= MAX_MINUTES_BEFORE));
                    let people: std::collections::HashSet<_> = s.participants.iter().collect();
                    prop_assert_eq!(people.len(), s.participants.len(), "a participant twice");
                }
                Err(e) => {
                    prop_assert!(!e.field.is_empty());
                    prop_assert!(!e.problem.is_empty());
                }
            }
        }
    }
}

/// A JSON body shaped like a schedule, with every field possibly wrong.
fn schedule_json() -> impl Strategy<Value = Value> {
    let instant = prop_oneof![
        Just("2026-11-23T09:00:00+09:00".to_string()),
        Just("0000-01-01T00:00:00+14:00".to_string()),
        Just("9999-12-31T23:59:59.999-14:00".to_string()),
        Just("2026-02-30T09:00:00Z".to_string()),
        Just("2026-11-23T09:00:00".to_string()),
        nasty_string(),
    ];
    let rule = (
        prop_oneof![
            any::<i64>(),
            -1i64..50_000,
            Just(i64::MIN),
            Just(toki_model::input::MAX_MINUTES_BEFORE)
        ],
        proptest::collection::vec(nasty_string(), 0..4),
    )
        .prop_map(|(m, c)| json!({"minutes_before": m, "channels": c}));
    (
        nasty_string(),
        proptest::option::of(nasty_string()),
        instant,
        proptest::option::of(prop_oneof![
            Just("Asia/Tokyo".to_string()),
            Just("America/New_York".to_string()),
            nasty_string()
        ]),
        proptest::collection::vec(nasty_string(), 0..6),
        proptest::collection::vec(rule, 0..25),
    )
        .prop_map(|(title, body, starts_at, tz, participants, reminders)| {
            let mut v = json!({
                "title": title, "starts_at": starts_at,
                "participants": participants, "reminders": reminders,
            });
            if let Some(b) = body {
                v["body"] = json!(b);
            }
            if let Some(z) = tz {
                v["time_zone"] = json!(z);
            }
            v
        })
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `toki serve` asked with arbitrary schedule bodies and ids: 2xx or a 4xx
/// whose JSON names the problem; never a 5xx. An accepted schedule reads back.
#[test]
fn the_api_answers_arbitrary_input_without_a_server_error() {
    let data = tempfile::tempdir().unwrap();
    let key = common::process::create_tenant(data.path(), "acme");
    let (_process, base) = common::process::serve(data.path(), |_| {});
    let rt = tokio::runtime::Runtime::new().unwrap();
    let http = reqwest::Client::new();
    // Participants the generated bodies may name.
    rt.block_on(async {
        for u in ["a", "b", "ana"] {
            let r = http
                .put(format!("{base}/v1/tenants/acme/users/{u}"))
                .bearer_auth(&key)
                .json(&json!({"name": u, "email": format!("{u}@example.com")}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
    });
    let body = prop_oneof![
        3 => schedule_json().prop_map(|v| v.to_string().into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 0..200),
        1 => Just(b"{\"title\":".to_vec()),
    ];
    let id = prop_oneof!["[A-Za-z0-9_.:@-]{1,20}", any::<String>(), "[a-z]{129,140}",];
    let mut runner = TestRunner::new(RunnerConfig {
        cases: 200,
        ..RunnerConfig::default()
    });
    runner
        .run(&(body, id), |(body, id)| {
            rt.block_on(async {
                let url = format!("{base}/v1/tenants/acme/schedules/{}", percent_encode(&id));
                let r = http
                    .put(&url)
                    .bearer_auth(&key)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                    .unwrap();
                let status = r.status();
                let text = r.text().await.unwrap();
                prop_assert!(!status.is_server_error(), "{status} {text}");
                if status.is_client_error() && status != 404 && status != 405 {
                    let v: Value = serde_json::from_str(&text)
                        .map_err(|e| TestCaseError::fail(format!("{status} {text:?}: {e}")))?;
                    prop_assert!(v["error"]["message"].is_string(), "{status} {text}");
                }
                if status.is_success() {
                    let got = http.get(&url).bearer_auth(&key).send().await.unwrap();
                    prop_assert_eq!(got.status(), 200);
                }
                Ok(())
            })
        })
        .unwrap();
}
