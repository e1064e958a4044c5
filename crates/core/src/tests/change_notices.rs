//! Change notices end to end on the kit's in-memory ports, on paused time:
//! registrar edits → debounce → notice messages → daemon → channels.

use std::time::Duration;

use chrono::Duration as Span;

use crate::testing::{meeting, SentNotification, TestKit};
use toki_model::change::ChangeNoticeSettings;
use toki_model::debounce::Edge;
use toki_model::domain::{Channel, DeliveryStatus, ScheduleId, TenantId};
use toki_ports::channel::SendError;
use toki_ports::{DelayQueue, TenantStore};

fn notices(kit: &TestKit) -> Vec<SentNotification> {
    kit.sent()
        .into_iter()
        .filter(|s| s.key.is_change_notice())
        .collect()
}

/// A tenant with change notices on (default delays) and a meeting in three
/// hours for u0 and u1, reminded by mail and Slack.
async fn setup(kit: &TestKit) -> (TenantId, ScheduleId) {
    let t = kit.tenant("acme").await;
    kit.change_notices_on(&t, ChangeNoticeSettings::default())
        .await;
    let id: ScheduleId = "review".parse().unwrap();
    kit.registrar()
        .put_schedule(&t, &id, &review(kit, "Design review", &["u0", "u1"]))
        .await
        .unwrap();
    (t, id)
}

fn review(kit: &TestKit, title: &str, people: &[&str]) -> toki_model::input::ScheduleInput {
    let mut m = meeting(
        kit.now() + Span::hours(3),
        5,
        people,
        &[Channel::Mail, Channel::Slack],
    );
    m.title = title.into();
    m
}

#[tokio::test(start_paused = true)]
async fn twenty_edits_in_a_minute_make_two_notices_per_participant_and_channel() {
    let kit = TestKit::new();
    let (t, id) = setup(&kit).await;
    assert!(
        notices(&kit).is_empty(),
        "creating a schedule is not a change"
    );
    let running = kit.run();
    let start = kit.now();
    for i in 1..=20 {
        kit.registrar()
            .put_schedule(
                &t,
                &id,
                &review(&kit, &format!("Review v{i}"), &["u0", "u1"]),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    let sent = notices(&kit);
    for user in ["u0", "u1"] {
        for channel in [Channel::Mail, Channel::Slack] {
            let mine: Vec<_> = sent
                .iter()
                .filter(|s| s.key.recipient.as_str() == user && s.key.channel == channel)
                .collect();
            assert_eq!(mine.len(), 2, "{user} by {channel}: {mine:#?}");
            // The leading one at once, with the first edit.
            assert!(mine[0].at - start < Span::seconds(1));
            assert!(
                mine[0].text.contains("Title: Design review → Review v1"),
                "{}",
                mine[0].text
            );
            // The trailing one once the edits stopped (the last at 57 s, quiet for 5 s), with the final state.
            let quiet = mine[1].at - start;
            assert!(
                quiet >= Span::seconds(62) && quiet < Span::seconds(64),
                "{quiet}"
            );
            assert_eq!(mine[1].subject, "Changed: Review v20");
            assert!(
                mine[1].text.contains("Title: Review v1 → Review v20"),
                "{}",
                mine[1].text
            );
        }
    }
    // One delivery row each, all delivered; the queue and the debounce rows are empty.
    let store = kit.stores.get(&t).unwrap();
    let rows: Vec<_> = store
        .deliveries()
        .await
        .unwrap()
        .into_iter()
        .filter(|d| d.key.is_change_notice())
        .collect();
    assert_eq!(rows.len(), 8);
    assert!(rows.iter().all(|d| d.status == DeliveryStatus::Delivered));
    assert_eq!(store.change_notices(&id).await.unwrap().len(), 2);
    let depth = kit.queue.depth().await.unwrap();
    assert_eq!((depth.messages, depth.dead_letters), (0, 0));
    assert!(kit.debounce.is_empty());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn added_removed_and_cancelled_reach_the_right_people() {
    let kit = TestKit::new();
    let (t, id) = setup(&kit).await;
    let running = kit.run();
    // u0 leaves, u2 joins: told at once (the leading edge).
    kit.registrar()
        .put_schedule(&t, &id, &review(&kit, "Design review", &["u1", "u2"]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let by = |sent: &[SentNotification], user: &str| -> Vec<String> {
        sent.iter()
            .filter(|s| s.key.recipient.as_str() == user && s.key.channel == Channel::Mail)
            .map(|s| s.subject.clone())
            .collect()
    };
    let sent = notices(&kit);
    assert_eq!(by(&sent, "u0"), ["Removed: Design review"]);
    assert_eq!(by(&sent, "u2"), ["Added: Design review"]);
    assert!(by(&sent, "u1").is_empty(), "nothing changed for u1");
    // Deleted within the burst: the trailing edge tells who was in it.
    kit.registrar().delete_schedule(&t, &id).await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let sent = notices(&kit);
    assert_eq!(
        by(&sent, "u0"),
        ["Removed: Design review"],
        "u0 was out already"
    );
    assert_eq!(by(&sent, "u1"), ["Cancelled: Design review"]);
    assert_eq!(
        by(&sent, "u2"),
        ["Added: Design review", "Cancelled: Design review"]
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_notice_sent_twice_tells_once_and_a_failed_send_is_retried() {
    let kit = TestKit::new();
    let (t, id) = setup(&kit).await;
    kit.slack
        .fail_next(1, SendError::transient("slack answered 503"));
    let running = kit.run();
    kit.registrar()
        .put_schedule(&t, &id, &review(&kit, "Renamed", &["u0", "u1"]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The same edge acting again (a check delivered twice): same token, same notice.
    let frozen = kit
        .stores
        .get(&t)
        .unwrap()
        .change_notices(&id)
        .await
        .unwrap();
    assert_eq!(frozen.len(), 1);
    let key = toki_model::change::debounce_key(&t, &id);
    kit.change_notices()
        .action
        .act(&key, &frozen[0].token, Edge::Leading)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(5 * 60)).await;
    let sent = notices(&kit);
    for user in ["u0", "u1"] {
        for channel in [Channel::Mail, Channel::Slack] {
            let n = sent
                .iter()
                .filter(|s| s.key.recipient.as_str() == user && s.key.channel == channel)
                .count();
            assert_eq!(n, 1, "{user} by {channel}");
        }
    }
    let rows = kit.stores.get(&t).unwrap().deliveries().await.unwrap();
    let failed_then_sent = rows
        .iter()
        .find(|d| d.key.is_change_notice() && d.key.channel == Channel::Slack)
        .unwrap();
    assert_eq!(failed_then_sent.status, DeliveryStatus::Delivered);
    assert_eq!(
        kit.stores
            .get(&t)
            .unwrap()
            .change_notices(&id)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(kit.queue.depth().await.unwrap().dead_letters, 0);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_tenant_without_change_notices_hears_nothing() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let id: ScheduleId = "review".parse().unwrap();
    let running = kit.run();
    for title in ["One", "Two", "Three"] {
        kit.registrar()
            .put_schedule(&t, &id, &review(&kit, title, &["u0"]))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(20 * 60)).await;
    assert!(notices(&kit).is_empty());
    assert!(kit.debounce.is_empty());
    assert_eq!(kit.queue.depth().await.unwrap().messages, 0);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_notice_held_up_by_a_slow_channel_is_not_sent_twice() {
    let kit = TestKit::new();
    let (t, id) = setup(&kit).await;
    let running = kit.run();
    kit.slack.hold(true);
    kit.registrar()
        .put_schedule(&t, &id, &review(&kit, "Renamed", &["u0", "u1"]))
        .await
        .unwrap();
    // Held for three visibility timeouts: the heartbeat keeps the message
    // hidden and the claims renewed, so nobody takes the notice over.
    kit.slack.attempted(1).await;
    tokio::time::sleep(kit.daemon_settings.visibility * 3).await;
    kit.slack.hold(false);
    tokio::time::sleep(Duration::from_secs(60)).await;
    for user in ["u0", "u1"] {
        let n = notices(&kit)
            .iter()
            .filter(|s| s.key.recipient.as_str() == user && s.key.channel == Channel::Slack)
            .count();
        assert_eq!(n, 1, "{user}");
    }
    assert_eq!(kit.slack.attempts(), 1, "one batch, never taken over");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_batch_notifies_for_the_schedules_it_edits_not_those_it_creates() {
    let kit = TestKit::new();
    let (t, id) = setup(&kit).await;
    let other: ScheduleId = "retro".parse().unwrap();
    kit.registrar()
        .put_schedule(&t, &other, &review(&kit, "Retro", &["u0"]))
        .await
        .unwrap();
    let running = kit.run();
    let fresh: ScheduleId = "planning".parse().unwrap();
    kit.registrar()
        .put_schedules(
            &t,
            &[
                (id.clone(), review(&kit, "Review, moved", &["u0", "u1"])),
                (other.clone(), review(&kit, "Retro, moved", &["u0"])),
                (fresh.clone(), review(&kit, "Planning", &["u0", "u1"])),
            ],
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let mail_subjects: Vec<String> = notices(&kit)
        .into_iter()
        .filter(|s| s.key.channel == Channel::Mail && s.key.recipient.as_str() == "u0")
        .map(|s| s.subject)
        .collect();
    assert_eq!(mail_subjects.len(), 2, "{mail_subjects:?}");
    assert!(mail_subjects.contains(&"Changed: Review, moved".to_string()));
    assert!(mail_subjects.contains(&"Changed: Retro, moved".to_string()));
    running.stop().await;
}
