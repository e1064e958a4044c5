//! The scanner on paused time: the next 15 minutes into the queue, once.

use std::sync::Arc;
use std::time::Duration;

use chrono::Duration as Minutes;

use crate::testing::{meeting, TestKit};
use toki_model::domain::{Channel, IndexStatus};
use toki_ports::DelayQueue;

fn mins(n: i64) -> Minutes {
    Minutes::minutes(n)
}

#[tokio::test(start_paused = true)]
async fn it_enqueues_what_falls_due_within_the_window_once() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let registrar = kit.registrar();
    for (i, start) in [40, 60].into_iter().enumerate() {
        registrar
            .put_schedule(
                &t,
                &format!("m{i}").parse().unwrap(),
                &meeting(kit.now() + mins(start), 5, &["u0"], &[Channel::Mail]),
            )
            .await
            .unwrap();
    }
    // Due at +35 and +55 minutes: nothing in the window yet.
    let first = kit.scanner().scan_once().await.unwrap();
    assert_eq!((first.scanned, first.enqueued), (0, 0));
    tokio::time::advance(Duration::from_secs(25 * 60)).await;
    // Now +35 is 10 minutes ahead; +55 is 30 minutes ahead.
    let second = kit.scanner().scan_once().await.unwrap();
    assert_eq!(second.enqueued, 1, "{second:?}");
    assert_eq!(second.failed_partitions, 0);
    let third = kit.scanner().scan_once().await.unwrap();
    assert_eq!(third.enqueued, 0, "already enqueued: {third:?}");
    let statuses: Vec<_> = kit.index.rows().iter().map(|r| r.status).collect();
    assert!(statuses.contains(&IndexStatus::Enqueued) && statuses.contains(&IndexStatus::Pending));
    // The message becomes visible lead before its due instant.
    let got = kit
        .queue
        .receive(10, Duration::from_secs(900), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    let due = toki_ports::message::decode(&got[0].attributes)
        .unwrap()
        .due_at;
    assert_eq!(
        kit.now(),
        due.0 - Minutes::from_std(kit.pipeline.lead).unwrap()
    );
}

#[tokio::test(start_paused = true)]
async fn overlapping_runs_never_enqueue_twice() {
    let kit = Arc::new(TestKit::new());
    let t = kit.tenant("acme").await;
    for i in 0..50 {
        kit.registrar()
            .put_schedule(
                &t,
                &format!("m{i}").parse().unwrap(),
                &meeting(kit.now() + mins(25), 5, &["u0"], &[Channel::Chat]),
            )
            .await
            .unwrap();
    }
    tokio::time::advance(Duration::from_secs(10 * 60)).await;
    let (s1, s2) = (kit.scanner(), kit.scanner());
    let (a, b) = tokio::join!(s1.scan_once(), s2.scan_once());
    let (a, b) = (a.unwrap(), b.unwrap());
    // Both runs saw the rows pending: they raced for every claim.
    assert_eq!((a.pending, b.pending), (50, 50), "{a:?} {b:?}");
    assert_eq!(a.enqueued + b.enqueued, 50, "{a:?} {b:?}");
    assert_eq!(kit.queue.depth().await.unwrap().messages, 50);
}

#[tokio::test(start_paused = true)]
async fn contracts_are_checked_and_rows_held_back() {
    let kit = TestKit::new();
    let off = kit.tenant_with("offco", false).await;
    kit.registrar()
        .put_schedule(
            &off,
            &"m".parse().unwrap(),
            &meeting(kit.now() + mins(25), 5, &["u0"], &[Channel::Chat]),
        )
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(10 * 60)).await;
    let s = kit.scanner().scan_once().await.unwrap();
    assert_eq!((s.skipped_by_contract, s.enqueued), (1, 0));
    assert_eq!(kit.index.rows()[0].status, IndexStatus::Pending);
}

#[tokio::test(start_paused = true)]
async fn a_failed_send_leaves_the_rows_for_the_next_run() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    kit.registrar()
        .put_schedule(
            &t,
            &"m".parse().unwrap(),
            &meeting(kit.now() + mins(25), 5, &["u0"], &[Channel::Chat]),
        )
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(10 * 60)).await;
    kit.queue.set_down(true);
    let failed = kit.scanner().scan_once().await.unwrap();
    assert_eq!((failed.failed, failed.enqueued), (1, 0));
    assert_eq!(kit.index.rows()[0].status, IndexStatus::Pending, "released");
    kit.queue.set_down(false);
    let next = kit.scanner().scan_once().await.unwrap();
    assert_eq!(next.enqueued, 1);
}

#[tokio::test(start_paused = true)]
async fn a_partly_refused_batch_releases_only_the_refused_rows() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    for i in 0..5 {
        kit.registrar()
            .put_schedule(
                &t,
                &format!("m{i}").parse().unwrap(),
                &meeting(kit.now() + mins(25), 5, &["u0"], &[Channel::Chat]),
            )
            .await
            .unwrap();
    }
    tokio::time::advance(Duration::from_secs(10 * 60)).await;
    // SQS refuses one entry of the batch and takes the others.
    kit.queue.refuse_when(|m| {
        m.body
            .contains("#m3#")
            .then(|| "InternalError (simulated)".to_string())
    });
    let s = kit.scanner().scan_once().await.unwrap();
    assert_eq!((s.enqueued, s.failed), (4, 1), "{s:?}");
    let pending: Vec<_> = kit
        .index
        .rows()
        .into_iter()
        .filter(|r| r.status == IndexStatus::Pending)
        .collect();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].reminder.key.schedule.as_str(), "m3");
    kit.queue.refuse_when(|_| None);
    let next = kit.scanner().scan_once().await.unwrap();
    assert_eq!(next.enqueued, 1, "only the refused one is sent again");
    assert_eq!(
        kit.queue.depth().await.unwrap().messages,
        5,
        "no message twice"
    );
}

#[tokio::test(start_paused = true)]
async fn past_its_deadline_a_run_claims_nothing_more() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    for i in 0..3 {
        kit.registrar()
            .put_schedule(
                &t,
                &format!("m{i}").parse().unwrap(),
                &meeting(kit.now() + mins(25), 5, &["u0"], &[Channel::Chat]),
            )
            .await
            .unwrap();
    }
    tokio::time::advance(Duration::from_secs(10 * 60)).await;
    let s = kit
        .scanner()
        .scan(Some(tokio::time::Instant::now()))
        .await
        .unwrap();
    assert_eq!((s.pending, s.enqueued, s.deferred), (3, 0, 3), "{s:?}");
    assert!(kit
        .index
        .rows()
        .iter()
        .all(|r| r.status == IndexStatus::Pending));
    assert!(!s.had_failures(), "deferred is not a failure");
    assert_eq!(kit.scanner().scan_once().await.unwrap().enqueued, 3);
}

/// Traces are off unless the application installs a propagator (none in
/// these tests): no span, and a message carries only the reminder's seven
/// attributes, never a `traceparent`.
#[tokio::test(start_paused = true)]
async fn without_traces_a_message_carries_no_trace_context() {
    assert!(!crate::trace::enabled());
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    kit.registrar()
        .put_schedule(
            &t,
            &"m0".parse().unwrap(),
            &meeting(kit.now() + mins(10), 5, &["u0"], &[Channel::Mail]),
        )
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(10 * 60)).await;
    let got = kit
        .queue
        .receive(10, Duration::from_secs(900), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert!(!got[0]
        .attributes
        .contains_key(toki_ports::message::ATTR_TRACEPARENT));
    assert_eq!(got[0].attributes.len(), 7, "{:?}", got[0].attributes);
    let r = toki_ports::message::decode(&got[0].attributes).unwrap();
    assert!(crate::trace::enqueue_span(&r.key, r.due_at).is_none());
    assert!(crate::trace::deliver_span(&r.key, &got[0].attributes, 1).is_none());
}

/// Each further wave of tenants due at one instant has its messages visible
/// earlier than the one before, by a step a tenant, up to the longest lead
/// (the claims of a crowded instant spread ahead of it); the first wave, and
/// a lone tenant at another instant, keep the plain lead.
#[tokio::test(start_paused = true)]
async fn a_crowded_instant_is_visible_earlier_wave_by_wave() {
    let mut kit = TestKit::new();
    kit.pipeline.lead_per_tenant = Duration::from_millis(10);
    kit.pipeline.max_lead = Duration::from_secs(6);
    let registrar = kit.registrar();
    let wave = crate::crowd::WAVE as usize;
    let crowd: Vec<String> = (0..2 * wave + 1).map(|i| format!("t{i}")).collect();
    let tenants = crowd.iter().map(|n| (n.as_str(), 40));
    for (name, start) in tenants.chain([("lone", 45)]) {
        let t = kit.tenant(name).await;
        let meeting = meeting(kit.now() + mins(start), 5, &["u0"], &[Channel::Mail]);
        registrar
            .put_schedule(&t, &"m".parse().unwrap(), &meeting)
            .await
            .unwrap();
    }
    tokio::time::advance(Duration::from_secs(25 * 60)).await;
    let scan = kit.scanner().scan_once().await.unwrap();
    assert_eq!(scan.enqueued, crowd.len() + 1, "{scan:?}");
    let mut leads: std::collections::BTreeMap<(bool, i64), usize> = Default::default();
    let mut received = 0;
    while received < crowd.len() + 1 {
        let got = kit
            .queue
            .receive(10, Duration::from_secs(900), Duration::from_secs(600))
            .await
            .unwrap();
        for m in got {
            let r = toki_ports::message::decode(&m.attributes).unwrap();
            let lead = (r.due_at.0 - kit.now()).num_milliseconds();
            *leads
                .entry((r.key.tenant.as_str() == "lone", lead))
                .or_default() += 1;
            received += 1;
        }
    }
    // 5 s for the first wave, 0.64 s more for the second, the last capped at 6 s.
    let expected = [
        ((false, 5000), wave),
        ((false, 5640), wave),
        ((false, 6000), 1),
        ((true, 5000), 1),
    ];
    assert_eq!(leads, expected.into_iter().collect(), "{leads:?}");
}
