//! The invariants a run must keep, read from its [`Outcome`]: nothing lost,
//! chat exactly once, mail and Slack repeated only across a crash, nothing
//! early (beyond a daemon's clock skew), nothing stale, every delivery recorded, the fleet-wide and contract limits held in
//! every second, a fair share for each tenant, change notices after storms.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::Duration as Span;

use super::scenario::{Fault, KillMoment, Scenario};
use super::world::{Outcome, NOTICES};
use toki_model::domain::{
    Channel, DeliveryKey, DeliveryPurpose, DeliveryStatus, Instant, Occurrence, ScheduleId,
    TenantId,
};
use toki_model::input::ScheduleInput;

/// A reminder delivery, as the invariants name it.
type Key = (TenantId, DeliveryKey);

/// What a run showed besides its violations.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub expected: usize,
    /// Mail and Slack sent again after a crash (allowed, counted).
    pub repeated_across_crash: usize,
    /// Deliveries a daemon sent and was killed before it recorded them
    /// (their takeover must record them, and resend only what it may).
    pub killed_between_send_and_record: usize,
    /// Mail and Slack sent again because the tenant's store failed between
    /// the send and its record (allowed: at-least-once, counted).
    pub repeated_across_store_fault: usize,
    /// Old deliveries of changes made too late to honour (allowed).
    pub late_changes_sent: usize,
    pub notices: usize,
    /// Runs in which a tenant's contract cap was passed in some second after
    /// Slack answered 429: a known fault, counted (docs/testing.md, "What
    /// the simulation found").
    pub cap_overshoots_after_429: usize,
}

pub fn check(s: &Scenario, out: &Outcome) -> (Tally, Vec<String>) {
    let mut v = Vec::new();
    let mut tally = Tally::default();
    let expected = expected(out, out.meetings.iter().map(|(k, i)| (k, i.as_ref())));
    tally.expected = expected.len();
    tally.killed_between_send_and_record = out.killed_between_send_and_record;
    let delivered = delivered(out);
    for k in expected.keys() {
        if !delivered.contains(k) {
            v.push(format!("lost: {} {:?}", k.0, k.1));
        }
    }
    stale(s, out, &expected, &delivered, &mut tally, &mut v);
    early(s, out, &mut v);
    repeated(s, out, &mut tally, &mut v);
    recorded(out, &expected, &mut v);
    tally.cap_overshoots_after_429 = limits(s, out, &mut v);
    fairness(s, out, &mut v);
    tally.notices = notices(out, &mut v);
    if !out.dead_letters.is_empty() {
        v.push(format!(
            "{} dead-lettered with no poison injected",
            out.dead_letters.len()
        ));
    }
    if out.left_in_queue != 0 {
        v.push(format!("{} messages left in the queue", out.left_in_queue));
    }
    (tally, v)
}

/// Every reminder the meetings' states ask for, with its due instant, that
/// falls due in the run's first 70 minutes.
fn expected<'a>(
    out: &Outcome,
    meetings: impl Iterator<Item = (&'a (TenantId, ScheduleId), Option<&'a ScheduleInput>)>,
) -> BTreeMap<Key, Instant> {
    let mut keys = BTreeMap::new();
    // The run lasts until all of these were due (see `World::settled`).
    let last = out.origin + Span::minutes(70);
    for ((tenant, id), input) in meetings {
        let Some(input) = input else { continue };
        let series = input.series(out.origin).expect("a valid schedule");
        let occurrences = series
            .between(out.origin, out.end + Span::hours(1))
            .expect("an expansion");
        for occurrence in occurrences {
            for rule in &input.reminders {
                let due = occurrence.at - Span::minutes(rule.minutes_before);
                if due <= out.origin || due > last {
                    continue;
                }
                for p in &input.participants {
                    for c in &rule.channels {
                        let key = DeliveryKey {
                            schedule: id.clone(),
                            occurrence: Occurrence(occurrence.at),
                            purpose: DeliveryPurpose::Reminder {
                                minutes_before: rule.minutes_before as u32,
                            },
                            recipient: p.parse().expect("a user id"),
                            channel: c.parse().expect("a channel"),
                        };
                        keys.insert((tenant.clone(), key), due);
                    }
                }
            }
        }
    }
    keys
}

/// Every reminder that reached its recipient (notices left out).
fn delivered(out: &Outcome) -> BTreeSet<Key> {
    let sent = out
        .sent
        .iter()
        .map(|(_, n)| (n.tenant.clone(), n.key.clone()));
    let chat = out.chat.iter().map(|(t, m)| (t.clone(), m.key.clone()));
    sent.chain(chat)
        .filter(|(_, k)| !k.is_change_notice())
        .collect()
}

/// Nothing sent before it was due by the clock of the daemon that sent it:
/// on the true clock, at most the most-ahead daemon's skew early.
fn early(s: &Scenario, out: &Outcome, v: &mut Vec<String>) {
    let ahead_ms = s.skews_ms.iter().copied().max().unwrap_or(0).max(0);
    for (_, n) in out.sent.iter().filter(|(_, n)| !n.key.is_change_notice()) {
        if n.lateness_ms() < -ahead_ms {
            v.push(format!(
                "early: {} {:?} sent {} ms before due (the most-ahead daemon is {ahead_ms} ms ahead)",
                n.tenant,
                n.key,
                -n.lateness_ms()
            ));
        }
    }
}

/// Nothing delivered that the meetings' last states do not ask for, unless
/// its change was taken too late (a margin before its due instant) to count.
fn stale(
    s: &Scenario,
    out: &Outcome,
    expected: &BTreeMap<Key, Instant>,
    delivered: &BTreeSet<Key>,
    tally: &mut Tally,
    v: &mut Vec<String>,
) {
    let first_states: Vec<((TenantId, ScheduleId), ScheduleInput)> = s
        .tenants
        .iter()
        .flat_map(|t| {
            t.meetings.iter().map(move |m| {
                (
                    (t.id.parse().expect("id"), m.id.parse().expect("id")),
                    m.input.clone(),
                )
            })
        })
        .collect();
    let before = self::expected(out, first_states.iter().map(|(k, i)| (k, Some(i))));
    let margin = Span::from_std(s.change_margin()).expect("a margin");
    for k in delivered.difference(&expected.keys().cloned().collect()) {
        let late = before.get(k).is_some_and(|due| {
            out.changed_at
                .get(&(k.0.clone(), k.1.schedule.clone()))
                .is_some_and(|at| *at + margin > *due)
        });
        if late {
            tally.late_changes_sent += 1;
        } else {
            let at: Vec<_> = out
                .sent
                .iter()
                .filter(|(_, n)| n.tenant == k.0 && n.key == k.1)
                .map(|(_, n)| (n.at, n.version))
                .collect();
            let changed = out.changed_at.get(&(k.0.clone(), k.1.schedule.clone()));
            v.push(format!(
                "stale: {} {:?} sent {at:?}, due {:?}, changed at {changed:?}",
                k.0,
                k.1,
                before.get(k)
            ));
        }
    }
}

/// Mail and Slack sent twice only across a crash (a daemon killed between
/// the two sends; Slack not even then when takeovers ask it first), or
/// when the tenant's store failed between a send and its record (the
/// claim lapses and the message comes back: at-least-once by design).
fn repeated(s: &Scenario, out: &Outcome, tally: &mut Tally, v: &mut Vec<String>) {
    let mut sends: BTreeMap<(Channel, &TenantId, &DeliveryKey), Vec<Instant>> = BTreeMap::new();
    for (c, n) in &out.sent {
        sends.entry((*c, &n.tenant, &n.key)).or_default().push(n.at);
    }
    for ((c, t, k), at) in sends.into_iter().filter(|(_, at)| at.len() > 1) {
        let (first, last) = (at[0], at[at.len() - 1]);
        let crashed = out.kills.iter().any(|kill| *kill >= first && *kill <= last);
        let store_failed = out
            .store_faults
            .iter()
            .any(|(ft, from, until)| ft == t && *from <= last && *until >= first);
        let asked = s.reconcile && c == Channel::Slack;
        if crashed && !asked {
            tally.repeated_across_crash += at.len() - 1;
        } else if store_failed {
            tally.repeated_across_store_fault += at.len() - 1;
        } else {
            v.push(format!(
                "{c} sent {} times with no crash between: {t} {k:?} at {at:?}",
                at.len()
            ));
        }
    }
}

/// Each delivered reminder has its delivered row.
fn recorded(out: &Outcome, expected: &BTreeMap<Key, Instant>, v: &mut Vec<String>) {
    let rows: BTreeSet<Key> = out
        .rows
        .iter()
        .filter(|(_, r)| r.status == DeliveryStatus::Delivered)
        .map(|(t, r)| (t.clone(), r.key.clone()))
        .collect();
    for k in expected.keys().filter(|k| !rows.contains(*k)) {
        v.push(format!("no delivered row: {} {:?}", k.0, k.1));
    }
}

/// The most of `at` in any second (a window from each one).
fn busiest_second(mut at: Vec<Instant>) -> usize {
    at.sort();
    let mut most = 0;
    let mut end = 0;
    for (i, a) in at.iter().enumerate() {
        while end < at.len() && at[end] < *a + Span::seconds(1) {
            end += 1;
        }
        most = most.max(end - i);
    }
    most
}

/// A fleet-wide limit's bound in any second: its rate, what may be saved
/// up, one slice's release rounded up, and for each instance the floor its
/// gate keeps however small its share (one token, and one slice's release
/// while deliveries wait): what a tiny cap split between daemons allows.
fn bound(rate: u32, burst: u32, instances: usize) -> usize {
    (rate + burst + (f64::from(rate) * 0.15).ceil() as u32) as usize + 2 * instances
}

/// The fleet-wide Slack limit and each contract cap, held in every second;
/// returns the known cap overshoots it let pass (see `Tally`).
fn limits(s: &Scenario, out: &Outcome, v: &mut Vec<String>) -> usize {
    let Some((rate, burst)) = s.slack_limit else {
        return 0;
    };
    let slack = |t: Option<&TenantId>| -> Vec<Instant> {
        out.sent
            .iter()
            .filter(|(c, n)| *c == Channel::Slack && t.is_none_or(|t| &n.tenant == t))
            .map(|(_, n)| n.at)
            .collect()
    };
    let fleet = s.skews_ms.len();
    let most = busiest_second(slack(None));
    if most > bound(rate, burst, fleet) {
        v.push(format!(
            "{most} Slack sends in one second under {rate}/s + {burst}"
        ));
    }
    let throttled = s
        .faults
        .iter()
        .any(|(_, f)| matches!(f, Fault::Throttle { .. }));
    let mut known = 0;
    for plan in &s.tenants {
        let Some(cap) = plan.slack_cap else { continue };
        let t: TenantId = plan.id.parse().expect("id");
        let most = busiest_second(slack(Some(&t)));
        if most <= bound(cap, 0, fleet) {
            continue;
        }
        if throttled {
            known += 1;
            continue;
        }
        let mut at: Vec<_> = out
            .sent
            .iter()
            .filter(|(c, n)| *c == Channel::Slack && n.tenant == t)
            .map(|(_, n)| (n.at, if n.key.is_change_notice() { "n" } else { "r" }))
            .collect();
        at.sort();
        let shown: Vec<String> = at
            .iter()
            .map(|(a, k)| format!("{}{k}", a.format("%M:%S%.3f")))
            .collect();
        v.push(format!(
            "{most} Slack sends of {t} in one second under its {cap}/s: {}",
            shown.join(" ")
        ));
    }
    known
}

/// In a run without faults, each tenant's part of the rush is through within
/// its fair share of the fleet's Slack rate (plus what else was due then).
fn fairness(s: &Scenario, out: &Outcome, v: &mut Vec<String>) {
    let Some((rate, _)) = s.slack_limit else {
        return;
    };
    if !s.faults.is_empty() {
        return;
    }
    let rush = out.origin + Span::from_std(s.rush).expect("rush");
    let near = |due: Instant| (due - rush).num_seconds().abs() <= 30;
    let slack: Vec<_> = out
        .sent
        .iter()
        .filter(|(c, n)| *c == Channel::Slack && !n.key.is_change_notice())
        .map(|(_, n)| n)
        .collect();
    let in_rush = |t: &TenantId| {
        slack
            .iter()
            .filter(|n| &n.tenant == t && n.due_at.0 == rush)
            .count()
    };
    let others = slack
        .iter()
        .filter(|n| n.due_at.0 != rush && near(n.due_at.0))
        .count();
    let tenants: Vec<TenantId> = s
        .tenants
        .iter()
        .map(|t| t.id.parse().expect("id"))
        .collect();
    let busy = tenants.iter().filter(|t| in_rush(t) > 0).count();
    let skew = s.change_margin().as_secs_f64();
    for (t, plan) in tenants.iter().zip(&s.tenants) {
        let n = in_rush(t);
        let Some(last) = slack
            .iter()
            .filter(|x| &x.tenant == t && x.due_at.0 == rush)
            .map(|x| x.lateness_ms())
            .max()
        else {
            continue;
        };
        let share = match plan.slack_cap {
            Some(cap) => n as f64 / f64::from(cap).min(f64::from(rate)),
            None => (n * busy + others) as f64 / f64::from(rate),
        };
        let allowed = (share + 3.0 + skew) * 1000.0;
        if last as f64 > allowed {
            v.push(format!("{t}'s {n} rush Slack deliveries ended {last} ms late; a fair share allows {allowed:.0} ms"));
        }
    }
}

/// After a storm of edits, each participant hears of it at least once after
/// the last edit, and at most a couple of times per channel.
fn notices(out: &Outcome, v: &mut Vec<String>) -> usize {
    let mut heard: BTreeMap<(&TenantId, &ScheduleId, String, Channel), Vec<Instant>> =
        BTreeMap::new();
    let sent = out.sent.iter().map(|(c, n)| (&n.tenant, &n.key, *c, n.at));
    let chat = out
        .chat
        .iter()
        .map(|(t, m)| (t, &m.key, Channel::Chat, m.created_at));
    let mut count = 0;
    for (t, k, c, at) in sent.chain(chat).filter(|(_, k, _, _)| k.is_change_notice()) {
        heard
            .entry((t, &k.schedule, k.recipient.to_string(), c))
            .or_default()
            .push(at);
        count += 1;
    }
    // The notices' hard cap, as the run sets it.
    let hard_cap = Duration::from_millis(NOTICES.hard_cap_ms);
    for ((t, id), (first, last)) in &out.storms {
        let Some(Some(input)) = out.meetings.get(&(t.clone(), id.clone())) else {
            continue;
        };
        let most = 3
            + ((*last - *first).to_std().unwrap_or_default().as_secs() / hard_cap.as_secs())
                as usize;
        for p in &input.participants {
            let after = heard
                .iter()
                .filter(|((ht, hid, hp, _), _)| *ht == t && *hid == id && hp == p)
                .flat_map(|(_, at)| at)
                .any(|at| at >= last);
            if !after {
                v.push(format!("{t}/{id}: {p} never told of the storm's last edit"));
            }
            for ((_, _, _, c), at) in heard
                .iter()
                .filter(|((ht, hid, hp, _), _)| *ht == t && *hid == id && hp == p)
            {
                if at.len() > most {
                    v.push(format!(
                        "{t}/{id}: {p} told {} times by {c} (at most {most})",
                        at.len()
                    ));
                }
            }
        }
    }
    count
}

/// Faults in a scenario, for its summary line.
pub fn describe(s: &Scenario) -> String {
    let faults: Vec<String> = s
        .faults
        .iter()
        .map(|(at, f)| {
            let what = match f {
                Fault::Kill { daemon, moment, .. } => match moment {
                    KillMoment::Now => format!("kill d{daemon}"),
                    KillMoment::AfterASend => format!("kill d{daemon} after a send"),
                },
                Fault::Outage { channel, lasts } => format!("{channel} down {lasts:?}"),
                Fault::Throttle { n, .. } => format!("{n}×429"),
                Fault::StoreDown { tenant, lasts } => format!("t{tenant} store down {lasts:?}"),
                Fault::StoreStall { tenant, by, .. } => format!("t{tenant} store slow {by:?}"),
                Fault::QueueDown { lasts } => format!("queue down {lasts:?}"),
                Fault::Copies { n } => format!("{n} messages twice"),
            };
            format!("{what} at {:.1}s", at.as_secs_f64())
        })
        .collect();
    format!(
        "{:?}, {} daemons (skew {:?} ms), {} tenants, limit {:?}, reconcile {}, lead {:?}, faults [{}]",
        s.day,
        s.skews_ms.len(),
        s.skews_ms,
        s.tenants.len(),
        s.slack_limit,
        s.reconcile,
        s.lead,
        faults.join(", ")
    )
}
