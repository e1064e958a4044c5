//! The whole pipeline on the testing kit, on paused time: registrar → index →
//! scanner → queue → daemon → channels, with virtual minutes passing in no time.

use std::time::Duration;

use chrono::Duration as ChronoDuration;

use crate::testing::{meeting, TestKit};
use toki_model::domain::{Channel, DeliveryStatus, TenantId};
use toki_model::input::ScheduleInput;
use toki_model::time::delay_for;
use toki_ports::channel::SendError;
use toki_ports::message;
use toki_ports::{DelayQueue, OutgoingMessage, TenantStore};

fn mins(n: i64) -> ChronoDuration {
    ChronoDuration::minutes(n)
}

const WAIT: Duration = Duration::from_secs(3600);

async fn register(
    kit: &TestKit,
    t: &TenantId,
    id: &str,
    input: &ScheduleInput,
) -> crate::registrar::Registered {
    kit.registrar()
        .put_schedule(t, &id.parse().unwrap(), input)
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_reminder_due_in_15_minutes_is_delivered_at_its_instant() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let due = kit.now() + mins(15);
    register(
        &kit,
        &t,
        "review",
        &meeting(
            due + mins(5),
            5,
            &["u0", "u1"],
            &[Channel::Mail, Channel::Slack],
        ),
    )
    .await;
    run.daemon.stats.wait_for(WAIT, |s| s.acked >= 1).await;
    let sent = kit.sent();
    assert_eq!(sent.len(), 4);
    assert!(sent.iter().all(|s| s.at == due), "{sent:?}");
    assert!(sent.iter().all(|s| s.lateness_ms() == 0));
    assert_eq!(kit.queue.depth().await.unwrap().messages, 0, "acknowledged");
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_reminder_hours_ahead_is_picked_up_by_the_scanner() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let due = kit.now() + mins(150);
    let r = register(
        &kit,
        &t,
        "review",
        &meeting(due + mins(5), 5, &["u0"], &[Channel::Chat]),
    )
    .await;
    assert_eq!(r.enqueued_directly, 0);
    run.daemon
        .stats
        .wait_for(WAIT * 4, |s| s.delivered >= 1)
        .await;
    let sent = kit.chat.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].at, due);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_move_after_enqueue_delivers_only_at_the_new_time() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let first = kit.now() + mins(5);
    register(
        &kit,
        &t,
        "review",
        &meeting(first + mins(5), 5, &["u0", "u1"], &[Channel::Slack]),
    )
    .await;
    let moved = first + mins(3);
    let r = register(
        &kit,
        &t,
        "review",
        &meeting(moved + mins(5), 5, &["u0", "u1"], &[Channel::Slack]),
    )
    .await;
    assert_eq!(r.schedule.version, 2);
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 2).await;
    tokio::time::sleep(Duration::from_secs(600)).await;
    let sent = kit.slack.sent();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent.iter().all(|s| s.at == moved && s.version == 2));
    // A moved meeting is another occurrence: the old one's deliveries are stale rows of their own.
    let rows = kit.stores.get(&t).unwrap().deliveries().await.unwrap();
    assert_eq!(rows.len(), 4, "{rows:?}");
    for o in rows {
        match o.status {
            DeliveryStatus::Delivered => assert_eq!((o.version, o.due_at.0), (2, moved)),
            DeliveryStatus::Stale => assert_eq!((o.version, o.due_at.0), (1, first)),
            other => panic!("unexpected {other:?}: {o:?}"),
        }
    }
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_delete_after_enqueue_sends_nothing() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let due = kit.now() + mins(5);
    register(
        &kit,
        &t,
        "review",
        &meeting(due + mins(5), 5, &["u0", "u1"], &[Channel::Mail]),
    )
    .await;
    kit.registrar()
        .delete_schedule(&t, &"review".parse().unwrap())
        .await
        .unwrap();
    let s = run
        .daemon
        .stats
        .wait_for(WAIT, |s| s.stale_messages >= 1 && s.acked >= 1)
        .await;
    // A deleted schedule names nobody: the message is dropped as stale, no rows.
    assert_eq!((s.stale_messages, s.acked, s.delivered), (1, 1, 0));
    assert!(kit.sent().is_empty());
    assert_eq!(kit.queue.depth().await.unwrap().messages, 0);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn copies_of_a_message_deliver_once() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let due = kit.now() + mins(2);
    let r = register(
        &kit,
        &t,
        "review",
        &meeting(
            due + mins(5),
            5,
            &["u0", "u1"],
            &[Channel::Mail, Channel::Chat],
        ),
    )
    .await;
    let reminder = toki_model::index::reminders_for(
        &t,
        &r.schedule,
        kit.now(),
        kit.now() + chrono::Duration::days(365),
    )
    .unwrap()
    .remove(0);
    let copy = |id: &str| OutgoingMessage {
        id: id.into(),
        body: reminder.key.to_string(),
        attributes: message::encode(&reminder),
        delay: delay_for(reminder.due_at, kit.now(), kit.pipeline.lead),
        group: None,
    };
    kit.queue.send_batch(&[copy("a"), copy("b")]).await.unwrap();
    // All three copies settle: one sends, the others find the deliveries taken.
    run.daemon.stats.wait_for(WAIT, |s| s.acked >= 3).await;
    assert_eq!(kit.sent().len(), 4);
    assert!(kit.sent().iter().all(|s| s.at == due));
    assert_eq!(kit.queue.depth().await.unwrap().messages, 0);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_is_retried_with_backoff() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let due = kit.now() + mins(2);
    kit.slack
        .fail_next(1, SendError::transient("slack: HTTP 503"));
    register(
        &kit,
        &t,
        "review",
        &meeting(due + mins(5), 5, &["u0"], &[Channel::Slack]),
    )
    .await;
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 1).await;
    let sent = kit.slack.sent();
    assert_eq!(sent.len(), 1);
    // Failed at due, backed off 0.5–1 s (the first step, jittered), sent at once.
    let late = sent[0].lateness_ms();
    assert!((500..1_100).contains(&late), "{late} ms");
    let s = run.daemon.stats.snapshot();
    assert_eq!((s.failed, s.retried), (1, 1));
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_429_waits_as_long_as_the_service_asked() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let due = kit.now() + mins(2);
    kit.slack.fail_next(
        1,
        SendError::Throttled {
            retry_after: Duration::from_secs(30),
        },
    );
    register(
        &kit,
        &t,
        "review",
        &meeting(due + mins(5), 5, &["u0"], &[Channel::Slack]),
    )
    .await;
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 1).await;
    // The retry counts from when the failure was recorded (a few ms after due).
    let late = kit.slack.sent()[0].lateness_ms();
    assert!((30_000..30_100).contains(&late), "{late} ms");
    let s = run.daemon.stats.snapshot();
    assert_eq!(
        (s.throttled, s.failed, s.retried),
        (1, 0, 0),
        "not a failure"
    );
    run.stop().await;
}

/// SQS's maxReceiveCount counts every receive, throttled ones included: a
/// message throttled 30 times on a queue that dead-letters after 12 receives
/// is renewed (a fresh message, saying why) instead of reaching that limit.
#[tokio::test(start_paused = true)]
async fn a_message_throttled_past_the_queues_receive_limit_is_renewed_not_dead_lettered() {
    let kit = TestKit::starting_at(toki_ports::testing::monday_morning(), 12);
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let due = kit.now() + mins(2);
    kit.slack.fail_next(
        30,
        SendError::Throttled {
            retry_after: Duration::from_secs(1),
        },
    );
    register(
        &kit,
        &t,
        "review",
        &meeting(due + mins(5), 5, &["u0"], &[Channel::Slack]),
    )
    .await;
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 1).await;
    let s = run.daemon.stats.snapshot();
    assert_eq!((s.throttled, s.failed, s.dead_lettered), (30, 0, 0));
    assert!(s.renewed >= 2, "renewed {} times", s.renewed);
    let depth = kit.queue.depth().await.unwrap();
    assert_eq!(depth.dead_letters, 0, "{depth:?}");
    assert_eq!(kit.slack.sent().len(), 1);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_undecodable_message_is_dead_lettered_at_once_with_its_reason() {
    let kit = TestKit::new();
    let run = kit.run();
    let mut attributes = message::Attributes::new();
    attributes.insert("tenant".into(), "acme".into());
    attributes.insert("due".into(), "not-a-number".into());
    kit.queue
        .send_batch(&[OutgoingMessage {
            id: "0".into(),
            body: "garbage".into(),
            attributes,
            delay: Duration::ZERO,
            group: None,
        }])
        .await
        .unwrap();
    run.daemon
        .stats
        .wait_for(WAIT, |s| s.dead_lettered >= 1)
        .await;
    let depth = kit.queue.depth().await.unwrap();
    assert_eq!(
        (depth.messages, depth.dead_letters),
        (0, 1),
        "never deleted, dead-lettered"
    );
    let letters = kit.queue.dead_lettered();
    assert_eq!(letters[0].receive_count, 1, "retrying cannot help: at once");
    let why = &letters[0].attributes[toki_ports::DEAD_LETTER_REASON];
    assert!(why.contains("undecodable"), "{why}");
    run.stop().await;
}

/// Slack is down for ten minutes around the due instant: its circuit opens
/// after a few failures, mail is not held up, nothing is dead-lettered, and
/// the backlog goes out within a probe interval of Slack's return.
#[tokio::test(start_paused = true)]
async fn a_ten_minute_outage_loses_nothing_and_resumes_within_seconds() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let due = kit.now() + mins(2);
    kit.slack
        .set_down(Some(SendError::transient("slack: connection refused")));
    register(
        &kit,
        &t,
        "review",
        &meeting(
            due + mins(5),
            5,
            &["u0", "u1", "u2"],
            &[Channel::Mail, Channel::Slack],
        ),
    )
    .await;
    run.daemon
        .stats
        .wait_for(WAIT, |s| s.circuits_opened >= 1)
        .await;
    assert!(
        kit.mail.sent().iter().all(|s| s.lateness_ms() == 0) && kit.mail.sent().len() == 3,
        "mail on time: {:?}",
        kit.mail.sent()
    );
    let back = due + mins(10);
    tokio::time::sleep((back - kit.now()).to_std().unwrap()).await;
    kit.slack.set_down(None);
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 6).await;
    let slack = kit.slack.sent();
    assert_eq!(slack.len(), 3, "{slack:?}");
    for s in &slack {
        let after_return = (s.at - back).num_milliseconds();
        assert!(
            (0..=3_000).contains(&after_return),
            "sent {after_return} ms after Slack came back"
        );
    }
    let stats = run.daemon.stats.snapshot();
    assert_eq!(stats.dead_lettered, 0);
    assert!(
        kit.slack.probes() > 100,
        "probed every 2 s: {}",
        kit.slack.probes()
    );
    assert!(
        kit.slack.attempts() < 10,
        "not hammered while open: {} batches",
        kit.slack.attempts()
    );
    assert_eq!(kit.queue.depth().await.unwrap().messages, 0);
    run.stop().await;
}

/// A delete or a move committed before the cut-off (200 ms before due) sends
/// nothing at the old instant, though the message was held already.
#[tokio::test(start_paused = true)]
async fn a_late_delete_or_move_is_honoured_up_to_the_cutoff() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let due = kit.now() + mins(2);
    let input = meeting(
        due + mins(5),
        5,
        &["u0", "u1"],
        &[Channel::Chat, Channel::Slack],
    );
    register(&kit, &t, "deleted", &input).await;
    register(&kit, &t, "moved", &input).await;
    // The messages are received lead (5 s) before due; act at T−500 ms.
    let act = due - ChronoDuration::milliseconds(500);
    tokio::time::sleep((act - kit.now()).to_std().unwrap()).await;
    assert_eq!(run.daemon.stats.snapshot().received, 2, "held already");
    kit.registrar()
        .delete_schedule(&t, &"deleted".parse().unwrap())
        .await
        .unwrap();
    let later = due + mins(3);
    register(
        &kit,
        &t,
        "moved",
        &meeting(
            later + mins(5),
            5,
            &["u0", "u1"],
            &[Channel::Chat, Channel::Slack],
        ),
    )
    .await;
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 4).await;
    let sent = kit.sent();
    assert_eq!(sent.len(), 4, "{sent:?}");
    assert!(
        sent.iter()
            .all(|s| s.key.schedule.as_str() == "moved" && s.at == later),
        "only the moved one, only at its new instant: {sent:?}"
    );
    run.stop().await;
}

/// A delete made early in the lead is honoured even when the tenant's store
/// is too slow to answer the last look (which then sends as claimed rather
/// than late): the looks while the message is held found it already.
#[tokio::test(start_paused = true)]
async fn a_change_early_in_the_lead_is_honoured_though_the_last_look_stalls() {
    let mut kit = TestKit::new();
    // A long lead, as a large burst held ahead would have.
    kit.pipeline.lead = Duration::from_secs(5);
    kit.daemon_settings.lead = kit.pipeline.lead;
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let due = kit.now() + mins(2);
    let input = meeting(due + mins(5), 5, &["u0", "u1"], &[Channel::Chat]);
    register(&kit, &t, "deleted", &input).await;
    register(&kit, &t, "kept", &input).await;
    let until = |at: chrono::DateTime<chrono::Utc>| {
        let now = kit.now();
        tokio::time::sleep((at - now).to_std().unwrap())
    };
    until(due - ChronoDuration::milliseconds(4_000)).await;
    assert_eq!(run.daemon.stats.snapshot().received, 2, "held already");
    kit.registrar()
        .delete_schedule(&t, &"deleted".parse().unwrap())
        .await
        .unwrap();
    // From T−700 ms every call takes 2 s: the last look (T−200 ms) cannot
    // answer by the instant.
    until(due - ChronoDuration::milliseconds(700)).await;
    let store = kit.stores.get(&t).unwrap();
    store.set_stall(Some(Duration::from_secs(2)));
    until(due + ChronoDuration::seconds(5)).await;
    store.set_stall(None);
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 2).await;
    let sent = kit.sent();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(
        sent.iter()
            .all(|s| s.key.schedule.as_str() == "kept" && s.at == due),
        "the kept one at its instant, the deleted one not at all: {sent:?}"
    );
    run.stop().await;
}

/// Registers a Slack reminder to `participants` due in two minutes, its
/// send held when it is tried; returns its instant once it was tried.
async fn a_send_held_at_its_instant(
    kit: &TestKit,
    t: &TenantId,
    participants: &[&str],
) -> chrono::DateTime<chrono::Utc> {
    let due = kit.now() + mins(2);
    kit.slack.hold(true);
    register(
        kit,
        t,
        "review",
        &meeting(due + mins(5), 5, participants, &[Channel::Slack]),
    )
    .await;
    kit.slack.attempted(1).await;
    due
}

/// A daemon killed while sending: its claims stop being renewed and its
/// messages stop being extended, so another daemon takes the deliveries over
/// within the lease (10 s), not minutes.
#[tokio::test(start_paused = true)]
async fn a_dead_holders_deliveries_are_taken_over_within_the_lease() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let first = kit.run();
    a_send_held_at_its_instant(&kit, &t, &["u0", "u1"]).await;
    first.kill().await;
    kit.slack.hold(false);
    let second = kit.run();
    second
        .daemon
        .stats
        .wait_for(WAIT, |s| s.delivered >= 2)
        .await;
    let sent = kit.slack.sent();
    assert_eq!(sent.len(), 2, "{sent:?}");
    for s in &sent {
        let late = s.lateness_ms();
        assert!((1..=15_000).contains(&late), "taken over {late} ms late");
    }
    second.stop().await;
}

/// The heartbeat does not renew claims while an instant's batches send: it
/// waits until they are done (a quarter beat at most). A burst's claims
/// due for renewal while it sends had their writes beside the sends.
#[tokio::test(start_paused = true)]
async fn the_heartbeat_waits_while_an_instant_sends() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let run = kit.run();
    // Beats a third of the 10 s visibility after the last: the 36th falls
    // 24 ms after the instant and waits its quarter beat for the sends
    // (833 ms), the 37th falls 4,190 ms after the instant, when the claim
    // (stamped at the instant) is due for renewal and the batch is still
    // sending (from its last look, 200 ms before the instant).
    let due = a_send_held_at_its_instant(&kit, &t, &["u0"]).await;
    let release = due + ChronoDuration::milliseconds(4_400);
    tokio::time::sleep((release - kit.now()).to_std().unwrap()).await;
    kit.slack.hold(false);
    run.daemon.stats.wait_for(WAIT, |s| s.acked >= 1).await;
    let renewals = kit.stores.get(&t).unwrap().renewals();
    let sending = due - ChronoDuration::milliseconds(200)..release;
    assert!(
        !renewals.iter().any(|r| sending.contains(r)),
        "renewed while sending: {renewals:?}"
    );
    assert!(
        renewals.contains(&release),
        "the beat after the instant renews once the sends are done: {renewals:?}"
    );
    run.stop().await;
}

/// Claims made a lead ahead are stamped at their instant: the heartbeat
/// does not renew them while they wait, nor at the beat right after the
/// instant, which follows a burst's sends and came before its outcomes'
/// writes (at 1,000 tenants it opened 968 tenants' databases once more);
/// it renews them a beat after the instant while they are held. Four
/// tenants' instants a second apart fall at every phase of the 3.3 s beat
/// (with claims counted from the receive, two were renewed ahead).
#[tokio::test(start_paused = true)]
async fn claims_made_ahead_are_first_renewed_a_beat_after_their_instant() {
    let kit = TestKit::new();
    let run = kit.run();
    kit.slack.hold(true);
    let first = kit.now() + mins(2);
    let mut tenants = Vec::new();
    for i in 0..4 {
        let t = kit.tenant(&format!("t{i}")).await;
        let due = first + ChronoDuration::seconds(i);
        let at = meeting(due + mins(5), 5, &["u0"], &[Channel::Slack]);
        register(&kit, &t, "review", &at).await;
        tenants.push((t, due));
    }
    kit.slack.attempted(4).await;
    let release = first + ChronoDuration::seconds(15);
    tokio::time::sleep((release - kit.now()).to_std().unwrap()).await;
    kit.slack.hold(false);
    run.daemon.stats.wait_for(WAIT, |s| s.acked >= 4).await;
    let beat = ChronoDuration::milliseconds(3_333);
    for (t, due) in &tenants {
        let renewals = kit.stores.get(t).unwrap().renewals();
        assert!(
            renewals.iter().all(|r| *r >= *due + beat),
            "{t} renewed within a beat of its instant {due}: {renewals:?}"
        );
        assert!(
            renewals.len() >= 2,
            "{t} held 12 s past its instant, a beat every 3.3 s: {renewals:?}"
        );
    }
    assert_eq!(kit.slack.sent().len(), 4, "none overtaken");
    run.stop().await;
}

/// A live holder that is slow (a send that takes a minute) is never
/// overtaken: its heartbeat keeps the message hidden and the claims renewed.
#[tokio::test(start_paused = true)]
async fn a_slow_live_holder_is_never_overtaken() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let a = kit.run();
    let b = kit.run();
    a_send_held_at_its_instant(&kit, &t, &["u0"]).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    kit.slack.hold(false);
    a.daemon.stats.wait_for(WAIT, |s| s.acked >= 1).await;
    b.daemon.stats.wait_for(WAIT, |s| s.acked >= 1).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(kit.slack.sent().len(), 1);
    let received = a.daemon.stats.snapshot().received + b.daemon.stats.snapshot().received;
    assert_eq!(received, 1, "the message never came back while held");
    a.stop().await;
    b.stop().await;
}

/// A delivery taken over from a holder that died after sending is looked up
/// on the channel first (as Slack's history allows) and not sent again.
#[tokio::test(start_paused = true)]
async fn a_takeover_asks_the_channel_before_sending_again() {
    let kit = TestKit::new();
    kit.slack.look_up_sent(true);
    let t = kit.tenant("acme").await;
    let first = kit.run();
    let due = kit.now() + mins(2);
    register(
        &kit,
        &t,
        "review",
        &meeting(due + mins(5), 5, &["u0"], &[Channel::Slack]),
    )
    .await;
    // Killed after the send, before the outcome was stored: the store is
    // down when it would record, and the process dies meanwhile.
    kit.slack.attempted(1).await;
    let store = kit.stores.get(&t).unwrap();
    store.set_down(true);
    first.daemon.stats.wait_for(WAIT, |s| s.retried >= 1).await;
    first.kill().await;
    store.set_down(false);
    let second = kit.run();
    second.daemon.stats.wait_for(WAIT, |s| s.acked >= 1).await;
    assert_eq!(kit.slack.sent().len(), 1, "not sent twice");
    let rows = store.deliveries().await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, DeliveryStatus::Delivered);
    second.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_tenant_database_outage_delays_but_loses_nothing() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let due = kit.now() + mins(2);
    register(
        &kit,
        &t,
        "review",
        &meeting(due + mins(5), 5, &["u0"], &[Channel::Chat]),
    )
    .await;
    let store = kit.stores.get(&t).unwrap();
    store.set_down(true);
    run.daemon.stats.wait_for(WAIT, |s| s.retried >= 1).await;
    store.set_down(false);
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 1).await;
    let sent = kit.chat.sent();
    assert_eq!(sent.len(), 1);
    // Received lead (5 s) before due, back after the first backoff (≤ 1 s): on time.
    assert_eq!(sent[0].at, due);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_delivery_opens_only_its_own_tenants_database() {
    let kit = TestKit::new();
    let a = kit.tenant("alpha").await;
    let _b = kit.tenant("beta").await;
    register(
        &kit,
        &a,
        "review",
        &meeting(kit.now() + mins(7), 5, &["u0"], &[Channel::Chat]),
    )
    .await;
    // The registrar opened both (creating users); from here on, only alpha's.
    kit.stores.forget_opened();
    let run = kit.run();
    let s = run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 1).await;
    run.stop().await;
    assert_eq!(s.delivered, 1);
    assert_eq!(kit.sent().len(), 1);
    assert_eq!(kit.stores.opened(), vec![a]);
}

/// A version-2 copy that meets the version-1 claim still being sent must come
/// back, so that when the version-1 send fails the reminder is still sent.
#[tokio::test(start_paused = true)]
async fn a_newer_copy_meeting_an_older_claim_in_flight_is_not_lost() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let due = kit.now() + mins(2);
    let v1 = meeting(due + mins(5), 5, &["u0"], &[Channel::Slack]);
    kit.slack.hold(true);
    kit.slack
        .fail_next(1, SendError::transient("connection reset"));
    register(&kit, &t, "review", &v1).await;
    kit.slack.attempted(1).await;
    // Version 2 (new title, same instant) while version 1 is being sent.
    let v2 = ScheduleInput {
        title: "Design review (room changed)".into(),
        ..v1
    };
    assert_eq!(register(&kit, &t, "review", &v2).await.schedule.version, 2);
    let s = run
        .daemon
        .stats
        .wait_for(WAIT, |s| s.busy >= 1 || s.acked >= 1)
        .await;
    assert_eq!(
        (s.busy, s.acked),
        (1, 0),
        "the version-2 copy must come back, not be acknowledged"
    );
    kit.slack.hold(false);
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 1).await;
    let sent = kit.slack.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].version, 2);
    assert!(sent[0].text.contains("room changed"));
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_idle_daemon_polls_with_one_worker_and_a_burst_with_all() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let settings = &run.daemon.settings;
    assert!(settings.workers >= 4, "the test needs several workers");
    // Ten idle minutes: one long poll at a time, each its whole wait.
    tokio::time::sleep(Duration::from_secs(600)).await;
    let polls = run
        .daemon
        .stats
        .polls
        .load(std::sync::atomic::Ordering::Relaxed);
    let one_at_a_time = 600 / settings.wait.as_secs() + 1;
    assert!(
        polls <= one_at_a_time,
        "{polls} polls in 600 s of {} s waits: more than one worker polled the idle queue",
        settings.wait.as_secs()
    );
    // Then work: 30 messages due at once, every worker receiving again.
    let due = kit.now() + mins(5);
    for i in 0..30 {
        let input = meeting(due + mins(5), 5, &["u0"], &[Channel::Chat]);
        register(&kit, &t, &format!("m{i}"), &input).await;
    }
    run.daemon.stats.wait_for(WAIT, |s| s.acked >= 30).await;
    let sent = kit.sent();
    assert_eq!(sent.len(), 30);
    assert!(sent.iter().all(|s| s.at == due), "all at their instant");
    run.stop().await;
}

/// A delivery that fails until its budget is spent, with a provider's
/// answer quoting the recipient: the dead letter's reason (kept with the
/// message, past any erasure) and its event carry a pseudonym, not the
/// address nor the Slack id.
#[tokio::test(start_paused = true)]
async fn a_dead_letter_reason_names_no_address() {
    let mut kit = TestKit::new();
    // Failures spend the budget (no circuit opens to park the message).
    kit.daemon_settings.breaker.threshold = u32::MAX;
    kit.daemon_settings.retry.max_failures = 3;
    let t = kit.tenant("acme").await;
    let run = kit.run();
    let due = kit.now() + mins(2);
    kit.mail.set_down(Some(SendError::transient(
        "smtp: 451 <u0@example.com> (slack U012AB3CDE) mailbox busy",
    )));
    register(
        &kit,
        &t,
        "review",
        &meeting(due + mins(5), 5, &["u0"], &[Channel::Mail]),
    )
    .await;
    run.daemon
        .stats
        .wait_for(WAIT, |s| s.dead_lettered >= 1)
        .await;
    let letters = kit.queue.dead_lettered();
    let why = &letters[0].attributes[toki_ports::DEAD_LETTER_REASON];
    assert!(why.contains("mailbox busy"), "{why}");
    for personal in ["u0@example.com", "U012AB3CDE"] {
        assert!(!why.contains(personal), "{personal} in {why}");
    }
    run.stop().await;
}
