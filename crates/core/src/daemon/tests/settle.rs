//! Outcome rows, message fates and dispositions.

use std::collections::HashMap;
use std::time::Duration;

use super::*;
use crate::daemon::*;
use toki_model::domain::*;
use toki_model::template::Templates;
use toki_ports::channel::SendError;

fn planned(r: &[&Reminder], ctx: &DeliveryContext) -> BatchPlan {
    let work_items: Vec<Work> = r.iter().enumerate().map(|(i, r)| work(r, i)).collect();
    let claims = owning(
        claims_for(&work_items, ctx, &all_channels())
            .into_iter()
            .map(|c| c.key),
    );
    plan_batch(
        "acme".parse().unwrap(),
        work_items,
        ctx,
        &claims,
        &all_channels(),
        &Templates::defaults(),
    )
}

fn sent(message: usize, delivery: usize, result: toki_ports::channel::SendResult) -> Sent {
    Sent {
        message,
        delivery,
        result,
    }
}

#[test]
fn settle_rows_and_fates() {
    let r = reminder("a", 1, &[Channel::Slack]);
    let stale = reminder("b", 1, &[Channel::Mail]);
    let ctx = context(
        &[("a", 1, &["u1", "u2", "u3"]), ("b", 2, &["u1"])],
        &[
            user("u1", true, true),
            user("u2", true, true),
            user("u3", true, true),
        ],
    );
    let plan = planned(&[&r, &stale], &ctx);
    let sent_at = at("2026-11-23T08:55:00.020Z");
    let results = vec![
        sent(0, 0, Ok(sent_at)),
        sent(0, 1, Err(SendError::transient("slack: HTTP 503"))),
        sent(
            0,
            2,
            Err(SendError::Permanent("slack: user_not_found".into())),
        ),
    ];
    let now = at("2026-11-23T08:55:01Z");
    let s = settle(plan.messages, results, &[], now);
    let by: HashMap<_, _> = s
        .outcomes
        .iter()
        .map(|o| ((o.key.schedule.to_string(), o.key.recipient.to_string()), o))
        .collect();
    assert_eq!(s.outcomes.len(), 4);
    let ok = by[&("a".into(), "u1".into())];
    assert_eq!((ok.status, ok.at), (DeliveryStatus::Delivered, sent_at));
    assert_eq!(
        by[&("a".into(), "u2".into())].status,
        DeliveryStatus::Failed
    );
    assert_eq!(
        by[&("a".into(), "u3".into())].status,
        DeliveryStatus::Undeliverable
    );
    let st = by[&("b".into(), "u1".into())];
    assert_eq!((st.status, st.at), (DeliveryStatus::Stale, now));
    assert_eq!(
        s.fates[0].1,
        MessageFate::Failed {
            channel: Channel::Slack,
            reason: "slack: HTTP 503".into(),
            failures: 1,
            others: vec![],
            throttled: None,
        },
        "the first failed attempt of a fresh claim"
    );
    assert_eq!(s.fates[1].1, MessageFate::Done);
}

/// One Slack reminder to u1 and u2, both ours to send.
fn slack_to_two() -> BatchPlan {
    let r = reminder("a", 1, &[Channel::Slack]);
    let ctx = context(
        &[("a", 1, &["u1", "u2"])],
        &[user("u1", true, true), user("u2", true, true)],
    );
    planned(&[&r], &ctx)
}

#[test]
fn a_throttle_is_recorded_and_comes_back_without_failing() {
    let plan = slack_to_two();
    let results = vec![
        sent(
            0,
            0,
            Err(SendError::Throttled {
                retry_after: Duration::from_secs(3),
            }),
        ),
        sent(
            0,
            1,
            Err(SendError::Throttled {
                retry_after: Duration::from_secs(30),
            }),
        ),
    ];
    let s = settle(plan.messages, results, &[], at(DUE));
    assert!(s
        .outcomes
        .iter()
        .all(|o| o.status == DeliveryStatus::Throttled));
    assert_eq!(
        s.fates[0].1,
        MessageFate::Throttled {
            retry_after: Duration::from_secs(30)
        },
        "the longest wait asked for"
    );
}

#[test]
fn a_failure_beside_a_throttle_still_waits_out_the_retry_after() {
    // u1's Slack asked for 30 s; u2's failed. The failure decides the fate
    // (it counts), but the retry must not come back before Slack said.
    let plan = slack_to_two();
    let results = vec![
        sent(
            0,
            0,
            Err(SendError::Throttled {
                retry_after: Duration::from_secs(30),
            }),
        ),
        sent(0, 1, Err(SendError::transient("slack: HTTP 503"))),
    ];
    let s = settle(plan.messages, results, &[], at(DUE));
    let fate = &s.fates[0].1;
    assert!(
        matches!(fate, MessageFate::Failed { failures: 1, throttled: Some(t), .. } if *t == Duration::from_secs(30)),
        "{fate:?}"
    );
    let policy = RetryPolicy::default();
    assert_eq!(
        disposition(fate, 1, &policy, 1.0),
        Disposition::Retry(Duration::from_secs(30)),
        "the backoff of one failure is 1 s; Retry-After wins"
    );
}

#[test]
fn a_live_delivery_not_attempted_is_deferred_and_waits_for_its_channel() {
    let r = reminder("a", 1, &[Channel::Mail]);
    let ctx = context(&[("a", 1, &["u1"])], &[user("u1", true, true)]);
    let plan = planned(&[&r], &ctx);
    // The mail circuit opened between the plan and the due instant: nothing sent.
    let s = settle(plan.messages, vec![], &[], at(DUE));
    assert_eq!(s.outcomes[0].status, DeliveryStatus::Deferred);
    assert_eq!(
        s.fates[0].1,
        MessageFate::Parked {
            channels: vec![Channel::Mail]
        }
    );
}

#[test]
fn a_message_revoked_at_the_last_look_records_stale_and_is_done() {
    let r = reminder("a", 1, &[Channel::Mail, Channel::Chat]);
    let ctx = context(&[("a", 1, &["u1"])], &[user("u1", true, true)]);
    let plan = planned(&[&r], &ctx);
    let why = "schedule deleted just before it was due".to_string();
    let s = settle(plan.messages, vec![], &[(0, why.clone())], at(DUE));
    assert_eq!(s.outcomes.len(), 2);
    assert!(s
        .outcomes
        .iter()
        .all(|o| o.status == DeliveryStatus::Stale && o.detail.as_deref() == Some(why.as_str())));
    assert_eq!(s.fates[0].1, MessageFate::Done);
}

#[test]
fn a_failure_counts_on_top_of_the_claims_budget() {
    let r = reminder("a", 1, &[Channel::Mail]);
    let ctx = context(&[("a", 1, &["u1"])], &[user("u1", true, true)]);
    let key = r.deliveries_to(&["u1".parse().unwrap()]).next().unwrap();
    let claims = Claims {
        owned: vec![toki_ports::OwnedDelivery {
            key,
            failures: 9,
            taken_over: false,
        }],
        ..Claims::default()
    };
    let plan = plan_batch(
        "acme".parse().unwrap(),
        vec![work(&r, 1)],
        &ctx,
        &claims,
        &all_channels(),
        &Templates::defaults(),
    );
    let s = settle(
        plan.messages,
        vec![sent(
            0,
            0,
            Err(SendError::transient("smtp: connection refused")),
        )],
        &[],
        at(DUE),
    );
    let fate = &s.fates[0].1;
    assert!(
        matches!(fate, MessageFate::Failed { failures: 10, .. }),
        "{fate:?}"
    );
    assert_eq!(
        disposition(fate, 12, &RetryPolicy::default(), 0.5),
        Disposition::DeadLetter(
            "10 failed attempts, the last on mail: smtp: connection refused".into()
        )
    );
}

#[test]
fn dispositions() {
    let policy = RetryPolicy::default();
    let d = |fate: &MessageFate, receives| disposition(fate, receives, &policy, 1.0);
    assert_eq!(d(&MessageFate::Done, 1), Disposition::Ack);
    let early = MessageFate::Early {
        wait: Duration::from_secs(60),
    };
    assert_eq!(d(&early, 50), Disposition::Redelay(Duration::from_secs(60)));
    let failed = |failures| MessageFate::Failed {
        channel: Channel::Slack,
        reason: "x".into(),
        failures,
        others: vec![],
        throttled: None,
    };
    assert_eq!(d(&failed(1), 1), Disposition::Retry(Duration::from_secs(1)));
    assert_eq!(
        d(&failed(3), 1),
        Disposition::Retry(Duration::from_secs(4)),
        "doubles per failure of the delivery, whatever the receive count"
    );
    assert_eq!(d(&failed(9), 1), Disposition::Retry(policy.cap), "capped");
    assert!(matches!(d(&failed(10), 1), Disposition::DeadLetter(_)));
    assert_eq!(
        d(
            &MessageFate::Throttled {
                retry_after: Duration::from_secs(7)
            },
            40
        ),
        Disposition::Redelay(Duration::from_secs(7)),
        "a throttle never uses the budget, however often"
    );
    assert_eq!(
        d(
            &MessageFate::Parked {
                channels: vec![Channel::Mail]
            },
            40
        ),
        Disposition::Park(vec![Channel::Mail])
    );
    assert_eq!(
        d(&MessageFate::Busy, 40),
        Disposition::Redelay(policy.busy_wait)
    );
    assert!(matches!(
        d(&MessageFate::Poison("undecodable".into()), 1),
        Disposition::DeadLetter(why) if why == "undecodable"
    ));
    let unprocessed = |overdue| MessageFate::Unprocessed {
        reason: "db down".into(),
        overdue,
    };
    assert_eq!(
        d(&unprocessed(Duration::from_secs(60)), 2),
        Disposition::Retry(Duration::from_secs(2))
    );
    assert_eq!(
        d(&unprocessed(Duration::from_secs(599)), 40),
        Disposition::Retry(policy.cap),
        "a ten-minute outage of its database never dead-letters it"
    );
    assert!(matches!(
        d(&unprocessed(policy.give_up_after), 2),
        Disposition::DeadLetter(_)
    ));
}

#[test]
fn jitter_spreads_retries_between_half_and_the_full_backoff() {
    let policy = RetryPolicy::default();
    let failed = MessageFate::Failed {
        channel: Channel::Mail,
        reason: "x".into(),
        failures: 4,
        others: vec![],
        throttled: None,
    };
    assert_eq!(
        disposition(&failed, 1, &policy, 0.0),
        Disposition::Retry(Duration::from_secs(4))
    );
    assert_eq!(
        disposition(&failed, 1, &policy, 1.0),
        Disposition::Retry(Duration::from_secs(8))
    );
}

#[test]
fn reads_are_deduplicated() {
    let a = reminder("a", 1, &[Channel::Mail]);
    let b = reminder("b", 1, &[Channel::Mail]);
    let schedules = reads_for(&[work(&a, 1), work(&b, 2), work(&a, 3)]);
    assert_eq!(schedules.len(), 2);
}

#[test]
fn every_failed_channel_is_in_the_fate_and_the_worst_speaks_for_the_budget() {
    let r = reminder("a", 1, &[Channel::Mail, Channel::Slack]);
    let ctx = context(&[("a", 1, &["u1"])], &[user("u1", true, true)]);
    // Slack's delivery has failed 3 times before, mail's never.
    let claims = Claims {
        owned: r
            .deliveries_to(&["u1".parse().unwrap()])
            .map(|key| toki_ports::OwnedDelivery {
                failures: if key.channel == Channel::Slack { 3 } else { 0 },
                key,
                taken_over: false,
            })
            .collect(),
        ..Claims::default()
    };
    let plan = plan_batch(
        "acme".parse().unwrap(),
        vec![work(&r, 0)],
        &ctx,
        &claims,
        &all_channels(),
        &Templates::defaults(),
    );
    let results = vec![
        sent(0, 0, Err(SendError::transient("smtp: 451 later"))),
        sent(0, 1, Err(SendError::transient("slack: HTTP 503"))),
    ];
    let s = settle(plan.messages, results, &[], at("2026-11-23T08:55:01Z"));
    let MessageFate::Failed {
        channel,
        reason,
        failures,
        others,
        ..
    } = &s.fates[0].1
    else {
        panic!("{:?}", s.fates[0].1)
    };
    assert_eq!(
        (*channel, reason.as_str(), *failures),
        (Channel::Slack, "slack: HTTP 503", 4),
        "the delivery with the most failures speaks for the budget"
    );
    assert_eq!(others, &vec![(Channel::Mail, "smtp: 451 later".into(), 1)]);
}
