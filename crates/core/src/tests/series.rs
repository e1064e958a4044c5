//! Recurring schedules on the testing kit, on paused time: what the index
//! holds (a horizon, not the whole series), what the repair pass extends,
//! DST, exceptions, rule edits and "this and following".

use std::time::Duration;

use chrono::{DateTime, Duration as ChronoDuration, Utc};

use crate::registrar::RegistrarError;
use crate::testing::{meeting, TestKit};
use toki_model::domain::{Channel, Instant, TenantId};
use toki_model::input::{OccurrenceInput, RecurrenceInput, ScheduleInput};

fn at(s: &str) -> Instant {
    DateTime::parse_from_rfc3339(s).unwrap().to_utc()
}

const WAIT: Duration = Duration::from_secs(3600);

/// A series starting at the local `start` in `zone`, reminded 5 minutes before by chat to u0.
fn series(start: &str, zone: &str, rrule: &str) -> ScheduleInput {
    ScheduleInput {
        starts_at: start.into(),
        time_zone: zone.into(),
        recurrence: Some(RecurrenceInput {
            rrule: rrule.into(),
            exdates: vec![],
        }),
        ..meeting(Utc::now(), 5, &["u0"], &[Channel::Chat])
    }
}

/// Due instants of the index rows of `schedule`, in order.
fn indexed(kit: &TestKit, schedule: &str) -> Vec<Instant> {
    let mut due: Vec<Instant> = kit
        .index
        .rows()
        .into_iter()
        .filter(|r| r.reminder.key.schedule.as_str() == schedule)
        .map(|r| r.reminder.due_at.0)
        .collect();
    due.sort();
    due
}

async fn put(kit: &TestKit, t: &TenantId, id: &str, input: &ScheduleInput) {
    kit.registrar()
        .put_schedule(t, &id.parse().unwrap(), input)
        .await
        .unwrap();
}

/// A kit at Monday 2026-11-23 08:00 UTC with `standup` every Monday at 10:00 UTC.
async fn weekly_standup() -> (TestKit, TenantId) {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    put(
        &kit,
        &t,
        "standup",
        &series("2026-11-23T10:00:00", "UTC", "FREQ=WEEKLY;BYDAY=MO"),
    )
    .await;
    (kit, t)
}

#[tokio::test(start_paused = true)]
async fn an_endless_weekly_series_holds_a_horizon_and_repair_extends_it() {
    let (kit, t) = weekly_standup().await;
    // 7 days ahead: today's 10:00 only (next Monday 09:55 is past the horizon).
    assert_eq!(indexed(&kit, "standup"), vec![at("2026-11-23T09:55:00Z")]);
    // Half the horizon later nothing is due for extension yet...
    tokio::time::advance(Duration::from_secs(3 * 86_400)).await;
    assert_eq!(kit.registrar().repair(&t).await.unwrap(), 0);
    // ...just past it, the repair pass adds the next week, once.
    tokio::time::advance(Duration::from_secs(86_400)).await;
    assert_eq!(kit.registrar().repair(&t).await.unwrap(), 1);
    assert_eq!(kit.registrar().repair(&t).await.unwrap(), 0);
    assert_eq!(
        indexed(&kit, "standup"),
        vec![at("2026-11-23T09:55:00Z"), at("2026-11-30T09:55:00Z")]
    );
    // A year of daily repairs: never more than the horizon's rows ahead,
    // and the next Monday always in the index half a horizon before it.
    for _ in 0..365 {
        tokio::time::advance(Duration::from_secs(86_400)).await;
        kit.registrar().repair(&t).await.unwrap();
        let now = kit.now();
        let ahead: Vec<Instant> = indexed(&kit, "standup")
            .into_iter()
            .filter(|d| *d >= now)
            .collect();
        assert!(ahead.len() <= 2, "{ahead:?} ahead at {now}");
        for day in 0..3 {
            let candidate = (now + ChronoDuration::days(day))
                .date_naive()
                .and_hms_opt(9, 55, 0)
                .unwrap()
                .and_utc();
            if candidate >= now && candidate.format("%a").to_string() == "Mon" {
                assert!(ahead.contains(&candidate), "{candidate} missing at {now}");
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_weekly_reminder_keeps_its_wall_clock_time_across_dst() {
    // Just before the 09:00 New York meeting on the Monday after the US
    // spring-forward (2027-03-14): it is 13:00 UTC now, 14:00 UTC before.
    let kit = TestKit::starting_at(at("2027-03-15T12:40:00Z"), 100);
    let t = kit.tenant("acme").await;
    let run = kit.run();
    put(
        &kit,
        &t,
        "standup",
        &series(
            "2027-03-01T09:00:00",
            "America/New_York",
            "FREQ=WEEKLY;BYDAY=MO",
        ),
    )
    .await;
    assert_eq!(
        indexed(&kit, "standup"),
        vec![at("2027-03-15T12:55:00Z")],
        "08:55 EDT; the weeks before (14:00 UTC) are past"
    );
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 1).await;
    let sent = kit.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].at, at("2027-03-15T12:55:00Z"));
    // u0 reads Tokyo time: 09:00 EDT is 22:00 JST.
    assert!(
        sent[0].text.contains("2027-03-15 22:00"),
        "{}",
        sent[0].text
    );
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_moved_occurrence_is_reminded_at_its_new_time_and_a_cancelled_one_not_at_all() {
    let kit = TestKit::new(); // 08:00 UTC
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let id = "daily".parse().unwrap();
    put(
        &kit,
        &t,
        "daily",
        &series("2026-11-20T08:30:00", "UTC", "FREQ=DAILY"),
    )
    .await;
    let registrar = kit.registrar();
    // Today's 08:30 moves to 08:40 with its own title; tomorrow's is cancelled.
    registrar
        .put_occurrence(
            &t,
            &id,
            "2026-11-23T08:30:00Z",
            &OccurrenceInput {
                starts_at: Some("2026-11-23T08:40:00".into()),
                title: Some("Daily (late today)".into()),
                body: None,
            },
        )
        .await
        .unwrap();
    let r = registrar
        .cancel_occurrence(&t, &id, "2026-11-24T08:30:00")
        .await
        .unwrap();
    assert_eq!(r.schedule.version, 3);
    let due = indexed(&kit, "daily");
    assert!(due.contains(&at("2026-11-23T08:35:00Z")), "{due:?}");
    assert!(!due.contains(&at("2026-11-23T08:25:00Z")), "{due:?}");
    assert!(!due.contains(&at("2026-11-24T08:25:00Z")), "{due:?}");
    assert!(due.contains(&at("2026-11-25T08:25:00Z")), "{due:?}");
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 1).await;
    let sent = kit.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].at, at("2026-11-23T08:35:00Z"));
    assert!(sent[0].text.contains("Daily (late today)"), "{sent:?}");
    run.stop().await;
    // What the API lists for the two days.
    let (_, list) = registrar
        .occurrences(
            &t,
            &id,
            Some("2026-11-23T00:00:00Z"),
            Some("2026-11-26T00:00:00"),
        )
        .await
        .unwrap();
    let starts: Vec<_> = list.iter().map(|o| (o.starts_at, o.exception)).collect();
    assert_eq!(
        starts,
        vec![
            (at("2026-11-23T08:40:00Z"), true),
            (at("2026-11-25T08:30:00Z"), false)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_occurrence_the_rule_does_not_have_is_refused_and_nothing_changes() {
    let (kit, t) = weekly_standup().await;
    let id = "standup".parse().unwrap();
    let registrar = kit.registrar();
    let tuesday = registrar
        .cancel_occurrence(&t, &id, "2026-11-24T10:00:00Z")
        .await;
    assert!(
        matches!(tuesday, Err(RegistrarError::NotFound(_))),
        "{tuesday:?}"
    );
    let empty = registrar
        .put_occurrence(&t, &id, "2026-11-30T10:00:00Z", &OccurrenceInput::default())
        .await;
    assert!(
        matches!(&empty, Err(RegistrarError::Invalid(v)) if v.field == "starts_at"),
        "{empty:?}"
    );
    // Moving onto another occurrence would merge two meetings: refused.
    let clash = registrar
        .put_occurrence(
            &t,
            &id,
            "2026-11-30T10:00:00Z",
            &OccurrenceInput {
                starts_at: Some("2026-12-07T10:00:00Z".into()),
                ..OccurrenceInput::default()
            },
        )
        .await;
    assert!(
        matches!(&clash, Err(RegistrarError::Invalid(v)) if v.field == "starts_at"),
        "{clash:?}"
    );
    let s = registrar.get_schedule(&t, &id).await.unwrap();
    assert_eq!(s.version, 1);
    assert!(s.recurrence.unwrap().exceptions.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_rule_edit_replaces_what_was_materialised() {
    let kit = TestKit::new(); // Monday 08:00 UTC
    let t = kit.tenant("acme").await;
    put(
        &kit,
        &t,
        "sync",
        &series("2026-11-23T12:00:00", "UTC", "FREQ=WEEKLY;BYDAY=MO,WE"),
    )
    .await;
    assert_eq!(
        indexed(&kit, "sync"),
        vec![at("2026-11-23T11:55:00Z"), at("2026-11-25T11:55:00Z")]
    );
    put(
        &kit,
        &t,
        "sync",
        &series("2026-11-24T12:00:00", "UTC", "FREQ=WEEKLY;BYDAY=TU,TH"),
    )
    .await;
    assert_eq!(
        indexed(&kit, "sync"),
        vec![at("2026-11-24T11:55:00Z"), at("2026-11-26T11:55:00Z")],
        "the Monday and Wednesday rows went with the old version"
    );
}

#[tokio::test(start_paused = true)]
async fn this_and_following_ends_the_series_and_starts_another() {
    let kit = TestKit::new(); // Monday 2026-11-23 08:00 UTC
    let t = kit.tenant("acme").await;
    put(
        &kit,
        &t,
        "sync",
        &series("2026-11-16T12:00:00", "UTC", "FREQ=DAILY;COUNT=30"),
    )
    .await;
    let registrar = kit.registrar();
    let mut following = series("2026-11-25T15:00:00", "UTC", "FREQ=DAILY");
    following.title = "Sync (afternoons)".into();
    let (ended, new) = registrar
        .split_series(
            &t,
            &"sync".parse().unwrap(),
            "2026-11-25T12:00:00Z",
            &"sync-pm".parse().unwrap(),
            &following,
        )
        .await
        .unwrap();
    let ended = ended.expect("occurrences are left before the split");
    assert_eq!(
        ended.schedule.recurrence.as_ref().unwrap().rrule,
        "FREQ=DAILY;UNTIL=20261125T115959Z"
    );
    assert_eq!(new.schedule.title, "Sync (afternoons)");
    assert_eq!(
        indexed(&kit, "sync"),
        vec![at("2026-11-23T11:55:00Z"), at("2026-11-24T11:55:00Z")]
    );
    let pm = indexed(&kit, "sync-pm");
    assert_eq!(pm.first(), Some(&at("2026-11-25T14:55:00Z")));
    assert_eq!(
        pm.len(),
        5,
        "25th to 29th: the horizon ends the 30th at 08:00; {pm:?}"
    );
    // A split whose new series is invalid writes nothing.
    let mut bad = series("2026-11-24T15:00:00", "UTC", "FREQ=HOURLY");
    bad.title = "x".into();
    let err = registrar
        .split_series(
            &t,
            &"sync".parse().unwrap(),
            "2026-11-24T12:00:00Z",
            &"sync-x".parse().unwrap(),
            &bad,
        )
        .await;
    assert!(
        matches!(&err, Err(RegistrarError::Invalid(v)) if v.field.starts_with("recurrence")),
        "{err:?}"
    );
    assert_eq!(
        registrar
            .get_schedule(&t, &"sync".parse().unwrap())
            .await
            .unwrap()
            .version,
        ended.schedule.version
    );
}

/// A series holds at most `MAX_EXCEPTIONS` occurrences changed one by one:
/// the next is refused naming `original`; changing one already changed
/// again still passes.
#[tokio::test(start_paused = true)]
async fn a_series_holds_a_bounded_number_of_exceptions() {
    use toki_model::input::MAX_EXCEPTIONS;
    let (kit, t) = weekly_standup().await;
    let id = "standup".parse().unwrap();
    let registrar = kit.registrar();
    let monday = |week: i64| {
        (at("2026-11-23T10:00:00Z") + ChronoDuration::weeks(week))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    for week in 0..MAX_EXCEPTIONS as i64 {
        registrar
            .cancel_occurrence(&t, &id, &monday(week))
            .await
            .unwrap_or_else(|e| panic!("week {week}: {e}"));
    }
    let over = registrar
        .cancel_occurrence(&t, &id, &monday(MAX_EXCEPTIONS as i64))
        .await;
    assert!(
        matches!(&over, Err(RegistrarError::Invalid(v)) if v.field == "original"),
        "{over:?}"
    );
    let retitled = OccurrenceInput {
        title: Some("Stand-up (moved room)".into()),
        ..OccurrenceInput::default()
    };
    registrar
        .put_occurrence(&t, &id, &monday(3), &retitled)
        .await
        .unwrap();
}
