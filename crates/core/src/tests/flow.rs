//! The daemon under limits, on paused time: deliveries beyond a rate are
//! paced (their messages go back to the queue, never lost), a throttle
//! answer pauses the key, and a small tenant is not stuck behind a large one.

use std::time::Duration;

use chrono::Duration as ChronoDuration;

use crate::testing::{meeting, SentNotification, TestKit};
use toki_model::domain::{Channel, Instant, TenantId};
use toki_model::limits::{FlowSettings, Limit};
use toki_ports::channel::SendError;
use toki_ports::{DelayQueue, TenantDirectory};

const WAIT: Duration = Duration::from_secs(3600);

/// Only the Slack workspace is limited (no per-recipient limit), at `rate`/s.
fn workspace_limit(rate: f64, burst: u32) -> FlowSettings {
    FlowSettings {
        limits: [("slack:*".to_owned(), Limit::rate(rate, burst))].into(),
        ..FlowSettings::default()
    }
}

/// `meetings` meetings of `tenant`, each with users u0..u(people-1), all
/// due at `due`, reminded by Slack.
async fn meetings(kit: &TestKit, t: &TenantId, meetings: usize, people: usize, due: Instant) {
    let people: Vec<String> = (0..people).map(|j| format!("u{j}")).collect();
    let people: Vec<&str> = people.iter().map(String::as_str).collect();
    for m in 0..meetings {
        kit.registrar()
            .put_schedule(
                t,
                &format!("m{m}").parse().unwrap(),
                &meeting(
                    due + ChronoDuration::minutes(5),
                    5,
                    &people,
                    &[Channel::Slack],
                ),
            )
            .await
            .unwrap();
    }
}

/// The most sent in any 1-second window (sliding by 10 ms).
fn busiest_second(sent: &[SentNotification]) -> usize {
    let Some(first) = sent.iter().map(|s| s.at).min() else {
        return 0;
    };
    let last = sent.iter().map(|s| s.at).max().unwrap();
    let mut most = 0;
    let mut w = first;
    while w <= last {
        let n = sent
            .iter()
            .filter(|s| s.at >= w && s.at < w + ChronoDuration::seconds(1))
            .count();
        most = most.max(n);
        w += ChronoDuration::milliseconds(10);
    }
    most
}

#[tokio::test(start_paused = true)]
async fn a_burst_beyond_the_rate_is_paced_and_none_is_lost_or_repeated() {
    let mut kit = TestKit::new();
    kit.flow = Some(workspace_limit(10.0, 0));
    let t = kit.tenant("acme").await;
    let due = kit.now() + ChronoDuration::minutes(15);
    // 6 meetings × 10 people: 60 Slack messages due at one instant.
    meetings(&kit, &t, 6, 10, due).await;
    let run = kit.run();
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 60).await;
    let sent = kit.slack.sent();
    assert_eq!(sent.len(), 60, "each exactly once");
    let mut keys: Vec<_> = sent.iter().map(|s| s.key.to_string()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 60, "no repeats");
    // A bucket's bound: the rate plus what may be saved up, here one
    // slice's release rounded up (10/s × 150 ms → 2).
    assert!(busiest_second(&sent) <= 12, "{}", busiest_second(&sent));
    let last = sent.iter().map(|s| s.lateness_ms()).max().unwrap();
    assert!(
        (5_000..=8_000).contains(&last),
        "60 at 10/s end about 6 s after due: {last} ms"
    );
    assert!(sent.iter().all(|s| s.at >= due), "never early");
    let flow = run.daemon.flow_stats();
    let ws = flow
        .iter()
        .find(|k| k.key.to_string() == "slack:default")
        .expect("the workspace key");
    assert_eq!(ws.granted, 60);
    assert!(
        ws.refused > 0,
        "work beyond the wait went back to the queue"
    );
    let stats = run.daemon.stats.snapshot();
    assert_eq!(stats.failed, 0, "waiting for capacity is not a failure");
    assert_eq!(stats.dead_lettered, 0);
    run.daemon.stats.wait_for(WAIT, |s| s.acked >= 6).await;
    assert_eq!(kit.queue.depth().await.unwrap().messages, 0);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_throttle_answer_pauses_the_key_and_the_message_comes_back_as_asked() {
    let mut kit = TestKit::new();
    kit.flow = Some(workspace_limit(50.0, 10));
    let t = kit.tenant("acme").await;
    let due = kit.now() + ChronoDuration::minutes(15);
    meetings(&kit, &t, 1, 1, due).await;
    kit.slack.fail_next(
        1,
        SendError::Throttled {
            retry_after: Duration::from_secs(3),
        },
    );
    let run = kit.run();
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 1).await;
    let sent = kit.slack.sent();
    assert_eq!(sent.len(), 1);
    let late = sent[0].lateness_ms();
    assert!(
        (3_000..4_000).contains(&late),
        "sent once Retry-After passed: {late} ms"
    );
    let ws = run.daemon.flow_stats();
    let ws = ws
        .iter()
        .find(|k| k.key.to_string() == "slack:default")
        .unwrap();
    assert_eq!(ws.throttle_answers, 1);
    let stats = run.daemon.stats.snapshot();
    assert_eq!(
        stats.failed, 0,
        "a throttle uses none of the failure budget"
    );
    assert_eq!(
        stats.throttled, 1,
        "the message went back once, for the throttle"
    );
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_small_tenant_is_served_beside_a_large_tenants_backlog() {
    let mut kit = TestKit::new();
    kit.flow = Some(workspace_limit(20.0, 0));
    let large = kit.tenant("large").await;
    let small = kit.tenant("small").await;
    let due = kit.now() + ChronoDuration::minutes(15);
    // 300 for the large tenant (15 s at 20/s), 10 for the small one.
    meetings(&kit, &large, 30, 10, due).await;
    meetings(&kit, &small, 1, 10, due).await;
    let run = kit.run();
    run.daemon
        .stats
        .wait_for(WAIT, |s| s.delivered >= 310)
        .await;
    let sent = kit.slack.sent();
    assert_eq!(sent.len(), 310);
    let worst = |t: &TenantId| {
        sent.iter()
            .filter(|s| &s.tenant == t)
            .map(|s| s.lateness_ms())
            .max()
            .unwrap()
    };
    let (small_worst, large_worst) = (worst(&small), worst(&large));
    assert!(
        large_worst >= 14_000,
        "the large tenant's backlog: {large_worst} ms"
    );
    // Its fair share is half the rate while both wait: 10 in about 1 s; a
    // place in the queue behind 300 would be 15 s.
    assert!(small_worst <= 3_000, "the small tenant: {small_worst} ms");
    run.stop().await;
}

/// A tenant whose contract caps its Slack deliveries at 5/s is paced at
/// that rate, fleet-wide (leased), while a tenant without one, and no
/// configured limit, goes at once.
#[tokio::test(start_paused = true)]
async fn a_contract_caps_its_tenant_and_no_other() {
    let mut kit = TestKit::new();
    kit.flow = Some(FlowSettings {
        limits: Default::default(),
        ..FlowSettings::default()
    });
    let capped = kit.tenant("capped").await;
    let free = kit.tenant("free").await;
    let mut record = kit.directory.get(&capped).await.unwrap().unwrap();
    record.limits.edit("slack=5").unwrap();
    kit.directory.put(&record).await.unwrap();
    let due = kit.now() + ChronoDuration::minutes(15);
    meetings(&kit, &capped, 2, 10, due).await;
    meetings(&kit, &free, 2, 10, due).await;
    let run = kit.run();
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 40).await;
    let sent = kit.slack.sent();
    assert_eq!(sent.len(), 40);
    let of = |t: &TenantId| -> Vec<SentNotification> {
        sent.iter().filter(|s| &s.tenant == t).cloned().collect()
    };
    let worst = |s: &[SentNotification]| s.iter().map(|s| s.lateness_ms()).max().unwrap();
    assert!(worst(&of(&free)) <= 500, "free: {} ms", worst(&of(&free)));
    let capped_sent = of(&capped);
    let last = worst(&capped_sent);
    assert!(
        (3_000..=6_000).contains(&last),
        "20 at 5/s end about 4 s after due: {last} ms"
    );
    assert!(
        busiest_second(&capped_sent) <= 6,
        "{}",
        busiest_second(&capped_sent)
    );
    let keys = run.daemon.flow_stats();
    let cap = keys
        .iter()
        .find(|k| k.key.to_string() == "tenant:capped:slack")
        .expect("the capped tenant's key");
    assert_eq!(cap.granted, 20);
    assert!(
        keys.iter().all(|k| k.key.tenant() != Some("free")),
        "{keys:?}"
    );
    assert_eq!(run.daemon.stats.snapshot().failed, 0);
    run.stop().await;
}
