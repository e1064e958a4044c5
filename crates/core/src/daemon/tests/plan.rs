//! Intake, claims and every verdict of the plan.

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;
use crate::daemon::*;
use toki_model::domain::*;
use toki_model::template::Templates;
use toki_ports::message;

#[test]
fn intake_sets_aside_undecodable_and_early_messages() {
    let due_soon = reminder("a", 1, &[Channel::Mail]);
    let mut garbage = received(&due_soon, 2);
    garbage.attributes.remove(message::ATTR_VERSION);
    let now = due_soon.due_at.0 - chrono::Duration::seconds(600);
    let early = intake(
        vec![received(&due_soon, 1), garbage],
        now,
        Duration::from_secs(2),
    );
    assert!(early.by_tenant.is_empty());
    assert_eq!(early.set_aside.len(), 2);
    assert_eq!(
        early.set_aside[0].1,
        MessageFate::Early {
            wait: Duration::from_secs(598)
        },
        "hidden until lead before due"
    );
    assert!(
        matches!(&early.set_aside[1].1, MessageFate::Poison(why) if why.contains("version")),
        "{:?}",
        early.set_aside[1].1
    );
    // Within lead (+1 s) of due it is worked on.
    let on_time = intake(
        vec![received(&due_soon, 1)],
        due_soon.due_at.0 - chrono::Duration::milliseconds(2_900),
        Duration::from_secs(2),
    );
    assert_eq!(on_time.by_tenant[&"acme".parse().unwrap()].len(), 1);
    assert!(on_time.set_aside.is_empty());
}

#[test]
fn claims_cover_current_versions_once_each() {
    let r = reminder("a", 2, &[Channel::Mail, Channel::Slack]);
    let old = reminder("b", 1, &[Channel::Mail]);
    let ctx = context(&[("a", 2, &["u1", "u2"]), ("b", 2, &["u1"])], &[]);
    let claims = claims_for(
        &[work(&r, 1), work(&r, 2), work(&old, 3)],
        &ctx,
        &all_channels(),
    );
    assert_eq!(
        claims.len(),
        4,
        "two copies claim once; stale claims nothing"
    );
    assert!(claims
        .iter()
        .all(|c| c.version == 2 && c.due_at == r.due_at));
}

#[test]
fn every_verdict() {
    let live = reminder("a", 2, &[Channel::Mail]);
    let deleted = reminder("gone", 1, &[Channel::Mail]);
    let moved = reminder("b", 1, &[Channel::Chat]);
    let busy = reminder("c", 1, &[Channel::Slack]);
    let unconfigured = reminder("d", 1, &[Channel::Chat]);
    let ctx = context(
        &[
            ("a", 2, &["u1", "ghost", "nomail"]),
            ("b", 3, &["u1"]),
            ("c", 1, &["u1"]),
            ("d", 1, &["u1"]),
        ],
        &[user("u1", true, true), user("nomail", false, true)],
    );
    let work_items = vec![
        work(&live, 1),
        work(&deleted, 2),
        work(&moved, 3),
        work(&busy, 4),
        work(&unconfigured, 5),
    ];
    let mut claims = Claims::default();
    for c in claims_for(&work_items, &ctx, &all_channels()) {
        if c.key.schedule.as_str() == "c" {
            claims.busy.push(c.key);
        } else {
            claims.owned.push(toki_ports::OwnedDelivery::new(c.key));
        }
    }
    let channels = ChannelState {
        configured: [Channel::Mail, Channel::Slack].into_iter().collect(),
        open: BTreeSet::new(),
    };
    let plan = plan_batch(
        "acme".parse().unwrap(),
        work_items,
        &ctx,
        &claims,
        &channels,
        &Templates::defaults(),
    );
    let v = verdicts(&plan);
    assert_eq!(
        v[0],
        vec![
            Verdict::Live,
            Verdict::Undeliverable("recipient no longer exists".into()),
            Verdict::Undeliverable("recipient has no e-mail address".into()),
        ]
    );
    // A deleted schedule names nobody any more: stale, without delivery rows.
    assert_eq!(v[1], vec![]);
    assert_eq!(plan.messages[1].stale.as_deref(), Some("schedule deleted"));
    assert_eq!(
        v[2],
        vec![Verdict::Stale(
            "schedule is at version 3, message has 1".into()
        )]
    );
    assert_eq!(v[3], vec![Verdict::Busy]);
    assert_eq!(
        v[4],
        vec![Verdict::Undeliverable(
            "channel chat is not configured".into()
        )]
    );
    assert_eq!(plan.to_send.len(), 1);
    let n = &plan.to_send[0];
    assert_eq!((n.message, n.delivery), (0, 0));
    assert_eq!(n.notification.version, 2);
    assert_eq!(n.notification.subject(), "Reminder: Review");
}

#[test]
fn a_delivery_final_elsewhere_or_carried_by_another_copy_is_done() {
    let r = reminder("a", 1, &[Channel::Mail]);
    let ctx = context(&[("a", 1, &["u1"])], &[user("u1", true, true)]);
    let claims = owning(
        claims_for(&[work(&r, 1)], &ctx, &all_channels())
            .into_iter()
            .map(|c| c.key),
    );
    let plan = plan_batch(
        "acme".parse().unwrap(),
        vec![work(&r, 1), work(&r, 2)],
        &ctx,
        &claims,
        &all_channels(),
        &Templates::defaults(),
    );
    assert_eq!(
        verdicts(&plan),
        vec![vec![Verdict::Live], vec![Verdict::Done]]
    );
    let nothing_owned = plan_batch(
        "acme".parse().unwrap(),
        vec![work(&r, 3)],
        &ctx,
        &Claims::default(),
        &all_channels(),
        &Templates::defaults(),
    );
    assert_eq!(verdicts(&nothing_owned), vec![vec![Verdict::Done]]);
}

/// The version is not part of a delivery's identity: a version-2 copy that
/// meets the version-1 claim in flight is busy, not done.
#[test]
fn a_newer_version_meeting_an_older_claim_is_busy() {
    let v2 = reminder("a", 2, &[Channel::Slack]);
    let v1 = reminder("a", 1, &[Channel::Slack]);
    let ctx = context(&[("a", 2, &["u1"])], &[user("u1", true, true)]);
    // What the store answers: the row is held by the version-1 claim.
    let held_by_v1 = Claims {
        busy: v1.deliveries_to(&["u1".parse().unwrap()]).collect(),
        ..Claims::default()
    };
    let plan = plan_batch(
        "acme".parse().unwrap(),
        vec![work(&v2, 1)],
        &ctx,
        &held_by_v1,
        &all_channels(),
        &Templates::defaults(),
    );
    assert_eq!(verdicts(&plan), vec![vec![Verdict::Busy]]);
    let s = settle(plan.messages, vec![], &[], at(DUE));
    assert_eq!(s.fates[0].1, MessageFate::Busy);
    assert_eq!(
        disposition(&s.fates[0].1, 1, &RetryPolicy::default(), 0.5),
        Disposition::Redelay(RetryPolicy::default().busy_wait),
        "waits for the other holder without using the budget"
    );
}

/// A stale message records a stale verdict for the schedule's current
/// participants, claims nothing and is counted stale.
#[test]
fn a_stale_message_names_the_current_participants() {
    let old = reminder("a", 1, &[Channel::Mail]);
    let ctx = context(
        &[("a", 2, &["u1", "u2"])],
        &[user("u1", true, true), user("u2", true, true)],
    );
    assert!(claims_for(&[work(&old, 1)], &ctx, &all_channels()).is_empty());
    let plan = plan_batch(
        "acme".parse().unwrap(),
        vec![work(&old, 1)],
        &ctx,
        &Claims::default(),
        &all_channels(),
        &Templates::defaults(),
    );
    let why = "schedule is at version 2, message has 1".to_string();
    assert_eq!(verdicts(&plan), vec![vec![Verdict::Stale(why.clone()); 2]]);
    assert_eq!(plan.messages[0].stale, Some(why));
    assert!(plan.to_send.is_empty());
}

/// A channel behind an open circuit is neither claimed nor sent; its
/// deliveries wait (parked), and the other channels go ahead.
#[test]
fn an_open_circuit_parks_its_channel_only() {
    let r = reminder("a", 1, &[Channel::Mail, Channel::Slack]);
    let ctx = context(&[("a", 1, &["u1"])], &[user("u1", true, true)]);
    let channels = ChannelState {
        configured: Channel::ALL.into_iter().collect(),
        open: [Channel::Slack].into_iter().collect(),
    };
    let claims = claims_for(&[work(&r, 1)], &ctx, &channels);
    assert_eq!(
        claims.iter().map(|c| c.key.channel).collect::<Vec<_>>(),
        vec![Channel::Mail],
        "nothing is claimed on the open channel"
    );
    let plan = plan_batch(
        "acme".parse().unwrap(),
        vec![work(&r, 1)],
        &ctx,
        &owning(claims.into_iter().map(|c| c.key)),
        &channels,
        &Templates::defaults(),
    );
    assert_eq!(
        verdicts(&plan),
        vec![vec![Verdict::Live, Verdict::Parked(Channel::Slack)]]
    );
    assert_eq!(plan.to_send.len(), 1);
}

/// A claim taken over from a holder that stopped carries its failures and
/// says so, so the channel is asked before sending again.
#[test]
fn a_taken_over_claim_keeps_its_budget_and_is_marked() {
    let r = reminder("a", 1, &[Channel::Slack]);
    let ctx = context(&[("a", 1, &["u1"])], &[user("u1", true, true)]);
    let key = r.deliveries_to(&["u1".parse().unwrap()]).next().unwrap();
    let claims = Claims {
        owned: vec![toki_ports::OwnedDelivery {
            key,
            failures: 3,
            taken_over: true,
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
    assert_eq!(plan.messages[0].deliveries[0].failures, 3);
    assert!(plan.to_send[0].taken_over);
}

/// A channel the recipient turned off is not sent on: its delivery is
/// undeliverable with the reason, and the user's other channels go out.
#[test]
fn a_channel_the_recipient_turned_off_is_not_sent() {
    let r = reminder("a", 1, &[Channel::Mail, Channel::Slack]);
    let mut quiet = user("u1", true, true);
    quiet.channels_off = [Channel::Slack].into();
    let ctx = context(&[("a", 1, &["u1"])], &[quiet]);
    let work_items = vec![work(&r, 1)];
    let mut claims = Claims::default();
    for c in claims_for(&work_items, &ctx, &all_channels()) {
        claims.owned.push(toki_ports::OwnedDelivery::new(c.key));
    }
    let plan = plan_batch(
        "acme".parse().unwrap(),
        work_items,
        &ctx,
        &claims,
        &all_channels(),
        &Templates::defaults(),
    );
    let by_channel: Vec<(Channel, Verdict)> = plan.messages[0]
        .deliveries
        .iter()
        .map(|d| (d.key.channel, d.verdict.clone()))
        .collect();
    assert_eq!(
        by_channel,
        vec![
            (Channel::Mail, Verdict::Live),
            (
                Channel::Slack,
                Verdict::Undeliverable("recipient turned slack off".into())
            ),
        ]
    );
    assert_eq!(plan.to_send.len(), 1);
    assert_eq!(plan.to_send[0].notification.key.channel, Channel::Mail);
}

#[test]
fn a_due_group_is_split_off_in_order_and_the_last_moves_out_whole() {
    let mut early = reminder("a", 1, &[Channel::Mail, Channel::Slack]);
    early.key.minutes_before = 10;
    early.due_at = Reminder::due_for(early.key.occurrence, 10);
    let late = reminder("b", 1, &[Channel::Mail]);
    let ctx = context(
        &[("a", 1, &["u1", "u2"]), ("b", 1, &["u1"])],
        &[user("u1", true, true), user("u2", true, true)],
    );
    let items = vec![work(&late, 1), work(&early, 2)];
    let claims = owning(
        claims_for(&items, &ctx, &all_channels())
            .into_iter()
            .map(|c| c.key),
    );
    let mut rest = plan_batch(
        "acme".parse().unwrap(),
        items,
        &ctx,
        &claims,
        &all_channels(),
        &Templates::defaults(),
    )
    .to_send;
    rest.sort_by_key(|t| t.notification.due_at);
    assert_eq!(rest.len(), 5);

    let first = crate::daemon::fire::take_due_group(&mut rest, early.due_at);
    assert_eq!(first.len(), 4);
    assert!(first.iter().all(|t| t.notification.due_at == early.due_at));
    let buffer = rest.as_ptr();
    let second = crate::daemon::fire::take_due_group(&mut rest, late.due_at);
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].notification.key.schedule.as_str(), "b");
    assert_eq!(
        second.as_ptr(),
        buffer,
        "the last group is the vector itself, not a copy"
    );
    assert!(rest.is_empty());

    // At the instant: the first group (mail and Slack, interleaved by the
    // plan) becomes one run per channel, in the group's own buffer.
    let buffer = first.as_ptr() as usize;
    let planned: Vec<(usize, usize, Channel)> = first
        .iter()
        .map(|t| (t.message, t.delivery, t.notification.key.channel))
        .collect();
    let (notifications, origins, spans) = crate::daemon::fire::split_group(first, &[]);
    assert!(spans.is_empty(), "no send spans with traces off");
    assert_eq!(
        notifications.as_ptr() as usize,
        buffer,
        "the notifications are taken out in place, not copied"
    );
    let runs: Vec<_> = crate::daemon::fire::channel_runs(&notifications).collect();
    assert_eq!(runs, vec![(Channel::Mail, 0..2), (Channel::Slack, 2..4)]);
    let sent: Vec<(usize, usize, Channel)> = origins
        .iter()
        .zip(&notifications)
        .map(|(o, n)| (o.message, o.delivery, n.key.channel))
        .collect();
    let mut expected = planned;
    expected.sort_by_key(|p| p.2);
    assert_eq!(
        sent, expected,
        "each origin beside its notification, plan order within a channel"
    );
}
