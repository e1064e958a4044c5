//! What a notice tells whom, and how it reads in the recipient's zone and language.

use super::*;
use crate::render::change_text;
use toki_model::change::*;
use toki_model::domain::{ChannelSet, ReminderRule, User};
use toki_model::{Channel, Instant, Occurrence, Schedule, UserId};

fn at(s: &str) -> Instant {
    chrono::DateTime::parse_from_rfc3339(s).unwrap().to_utc()
}

fn schedule(title: &str, starts: &str, people: &[&str]) -> Schedule {
    Schedule {
        id: "review".parse().unwrap(),
        title: title.into(),
        body: "Room 3".into(),
        starts_at: at(starts),
        time_zone: chrono_tz::Asia::Tokyo,
        participants: people.iter().map(|p| p.parse().unwrap()).collect(),
        rules: vec![ReminderRule {
            minutes_before: 5,
            channels: ChannelSet::new("c", &[Channel::Mail, Channel::Slack]).unwrap(),
        }],
        recurrence: None,
        version: 1,
    }
}

fn notice(before: Option<Schedule>, after: Option<Schedule>) -> ChangeNotice {
    ChangeNotice {
        schedule: "review".parse().unwrap(),
        token: "t1".into(),
        edge: NoticeEdge::Leading,
        at: at("2026-11-23T08:00:00Z"),
        before,
        after,
    }
}

fn user(id: &str, zone: chrono_tz::Tz, locale: &str) -> User {
    User {
        id: id.parse().unwrap(),
        name: id.to_uppercase(),
        email: None,
        slack_user_id: None,
        time_zone: zone,
        locale: locale.into(),
        channels_off: Default::default(),
        webhook_url: None,
    }
}

#[test]
fn each_participant_hears_what_changed_for_them() {
    let before = schedule("Review", "2026-11-24T01:00:00Z", &["a", "b"]);
    let mut after = schedule("Design review", "2026-11-24T02:30:00Z", &["b", "c"]);
    after.version = 2;
    let n = notice(Some(before), Some(after));
    let changes: std::collections::HashMap<_, _> = n.changes().into_iter().collect();
    assert_eq!(changes.len(), 3);
    assert_eq!(
        changes[&"a".parse::<UserId>().unwrap()],
        RecipientChange::Removed {
            title: "Design review".into()
        }
    );
    assert!(matches!(
        &changes[&"c".parse::<UserId>().unwrap()],
        RecipientChange::Added { title, .. } if title == "Design review"
    ));
    let RecipientChange::Updated(u) = &changes[&"b".parse::<UserId>().unwrap()] else {
        panic!("b stays and is told what changed");
    };
    assert_eq!(u.renamed, Some(("Review".into(), "Design review".into())));
    assert_eq!(
        u.moved,
        Some((at("2026-11-24T01:00:00Z"), at("2026-11-24T02:30:00Z")))
    );
    assert!(!u.details);
    // Two channels each: six deliveries, keyed by the notice, never a reminder's.
    let deliveries = n.deliveries();
    assert_eq!(deliveries.len(), 6);
    assert!(deliveries
        .iter()
        .all(|(k, _)| k.is_change_notice() && k.occurrence == Occurrence(n.at)));
    assert_eq!(n.version(), 2);
}

#[test]
fn a_deletion_is_a_cancellation_for_everyone_and_nothing_changed_tells_nobody() {
    let before = schedule("Review", "2026-11-24T01:00:00Z", &["a", "b"]);
    let n = notice(Some(before.clone()), None);
    let changes = n.changes();
    assert_eq!(changes.len(), 2);
    assert!(changes
        .iter()
        .all(|(_, c)| matches!(c, RecipientChange::Cancelled { .. })));
    assert_eq!(n.version(), 2, "one past the last version seen");
    // Edits that came back to where they started: nothing to say.
    assert!(notice(Some(before.clone()), Some(before))
        .changes()
        .is_empty());
}

#[test]
fn texts_give_times_in_the_recipients_zone_and_language() {
    let before = schedule("Review", "2026-11-24T01:00:00Z", &["a"]);
    let after = schedule("Review", "2026-11-24T02:30:00Z", &["a"]);
    let change = notice(Some(before), Some(after)).changes().remove(0).1;
    let (subject, text) = change_text(&change, &user("a", chrono_tz::Europe::Berlin, "en"));
    assert_eq!(subject, "Changed: Review");
    assert!(
        text.contains("Time: 2026-11-24 02:00 Europe/Berlin → 2026-11-24 03:30 Europe/Berlin"),
        "{text}"
    );
    let (subject, text) = change_text(&change, &user("a", chrono_tz::Asia::Tokyo, "ja"));
    assert_eq!(subject, "[予定の変更] Review");
    assert!(
        text.contains("日時: 2026-11-24 10:00 Asia/Tokyo → 2026-11-24 11:30 Asia/Tokyo"),
        "{text}"
    );
}

#[test]
fn settings_name_the_field_at_fault() {
    assert!(ChangeNoticeSettings::default().validate().is_ok());
    assert!(
        !ChangeNoticeSettings::default().enabled,
        "off unless turned on"
    );
    let e = ChangeNoticeSettings {
        min_delay_ms: 0,
        ..Default::default()
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.field, "change_notices.min_delay_ms");
    let e = ChangeNoticeSettings {
        hard_cap_ms: 1_000,
        ..Default::default()
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.field, "change_notices.hard_cap_ms");
}

#[test]
fn debounce_keys_split_at_the_first_colon() {
    let key = debounce_key(&"acme".parse().unwrap(), &"weekly:sync".parse().unwrap());
    assert_eq!(key, "acme:weekly:sync");
    let (t, s) = parse_debounce_key(&key).unwrap();
    assert_eq!((t.as_str(), s.as_str()), ("acme", "weekly:sync"));
    assert_eq!(parse_debounce_key("nocolon").unwrap_err().field, "key");
}

#[test]
fn single_occurrences_moved_back_or_renamed_are_told_too() {
    use toki_model::domain::{OccurrenceException, Recurrence};
    let series = |exceptions: Vec<OccurrenceException>| {
        let mut s = schedule("Stand-up", "2026-11-23T00:00:00Z", &["a"]);
        s.recurrence = Some(Recurrence {
            rrule: "FREQ=DAILY".into(),
            exdates: vec![],
            local_start: "2026-11-23T09:00:00".parse().unwrap(),
            dst: Default::default(),
            exceptions,
        });
        s
    };
    let original = at("2026-11-25T00:00:00Z");
    let moved = OccurrenceException {
        original,
        cancelled: false,
        starts_at: Some(at("2026-11-25T06:00:00Z")),
        title: None,
        body: None,
    };
    let update = |before, after| match notice(Some(before), Some(after)).changes().remove(0).1 {
        RecipientChange::Updated(u) => u,
        other => panic!("{other:?}"),
    };
    let u = update(series(vec![]), series(vec![moved.clone()]));
    assert_eq!(
        u.occurrences,
        vec![(original, Some(at("2026-11-25T06:00:00Z")))]
    );
    // Moved back to where the rule puts it: told, at its own time.
    let u = update(series(vec![moved.clone()]), series(vec![]));
    assert_eq!(u.occurrences, vec![(original, Some(original))]);
    // Only renamed: a details change, no move.
    let renamed = OccurrenceException {
        title: Some("Stand-up (demo day)".into()),
        starts_at: None,
        ..moved
    };
    let u = update(series(vec![]), series(vec![renamed]));
    assert!(u.occurrences.is_empty() && u.details);
}

#[test]
fn an_endless_hard_cap_is_refused() {
    let e = ChangeNoticeSettings {
        hard_cap_ms: u64::MAX,
        ..Default::default()
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.field, "change_notices.hard_cap_ms");
    assert!(e.problem.contains("one day"), "{}", e.problem);
}
