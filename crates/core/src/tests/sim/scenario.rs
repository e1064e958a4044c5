//! A fleet's day drawn from a seed: the daemons and their clocks, the
//! tenants and their meetings, the changes made to them, and the faults.
//! Everything the run does comes from here, so a seed replays exactly.

use std::time::Duration;

use chrono::{DateTime, Duration as Span};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use toki_model::domain::{Channel, Instant};
use toki_model::input::{DstInput, RecurrenceInput, RuleInput, ScheduleInput};

/// Where the day starts, and in which zone the meetings are held.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Day {
    /// 08:00 UTC on a Monday, in Tokyo (no DST).
    Monday,
    /// New York, twenty minutes after clocks went forward (02:30 did not exist).
    SpringForward,
    /// New York, just before 01:00–02:00 happens twice.
    FallBack,
}

impl Day {
    pub fn origin(self) -> Instant {
        let at = match self {
            Day::Monday => "2026-11-23T08:00:00Z",
            Day::SpringForward => "2026-03-08T07:05:00Z",
            Day::FallBack => "2026-11-01T05:38:00Z",
        };
        DateTime::parse_from_rfc3339(at)
            .expect("an instant")
            .to_utc()
    }

    pub fn zone(self) -> &'static str {
        match self {
            Day::Monday => "Asia/Tokyo",
            _ => "America/New_York",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Meeting {
    pub id: String,
    pub input: ScheduleInput,
    pub change: Option<Change>,
}

/// What happens to a meeting after it was registered, and when (from the start).
#[derive(Debug, Clone)]
pub enum Change {
    /// Moved by `by`, at `at`.
    Move {
        at: Duration,
        by: Span,
    },
    Delete {
        at: Duration,
    },
    /// `edits` title changes, `every` apart (a debounce storm).
    Storm {
        at: Duration,
        edits: u32,
        every: Duration,
    },
}

#[derive(Debug, Clone)]
pub struct TenantPlan {
    pub id: String,
    pub notices: bool,
    /// A contract cap on the tenant's Slack deliveries, per second.
    pub slack_cap: Option<u32>,
    pub meetings: Vec<Meeting>,
}

/// When a kill lands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KillMoment {
    /// At the fault's moment, whatever the daemon is doing.
    Now,
    /// Just after the daemon's first send from the fault's moment on: the
    /// channel has the messages, the daemon has not recorded them (a crash
    /// between send and record). No send before the restart: no kill.
    AfterASend,
}

/// A fault, injected at a moment (from the start).
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// `kill -9` of a daemon; a fresh one starts `restart_after` later.
    Kill {
        daemon: usize,
        restart_after: Duration,
        moment: KillMoment,
    },
    /// Every send on the channel fails (connection refused) for a while.
    Outage { channel: Channel, lasts: Duration },
    /// The next `n` sends are answered 429 with this Retry-After.
    Throttle { n: usize, retry_after: Duration },
    /// A tenant's database refuses every call for a while.
    StoreDown { tenant: usize, lasts: Duration },
    /// A tenant's database answers every call `by` late for a while.
    StoreStall {
        tenant: usize,
        by: Duration,
        lasts: Duration,
    },
    /// The queue refuses every call for a while.
    QueueDown { lasts: Duration },
    /// The next `n` messages sent are delivered twice (SQS's at-least-once).
    Copies { n: usize },
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub day: Day,
    /// Each daemon's clock error, in milliseconds (+ ahead).
    pub skews_ms: Vec<i64>,
    pub tenants: Vec<TenantPlan>,
    /// The fleet-wide Slack limit: rate per second and burst (none: unlimited).
    pub slack_limit: Option<(u32, u32)>,
    pub faults: Vec<(Duration, Fault)>,
    /// Whether takeovers ask the channel before sending again.
    pub reconcile: bool,
    /// When every tenant has a meeting at once (the 09:00 rush), from the start.
    pub rush: Duration,
    /// How long before its instant a message is received and held: the
    /// default, the long lead that holds a large burst ahead, the AWS
    /// template's.
    pub lead: Duration,
}

/// Before this, nothing is due: everything is registered first.
const FIRST_DUE: Duration = Duration::from_secs(60);
/// Meetings' reminders fall due within this of the start (the run's scan
/// window is 2 minutes: the later ones reach the queue by the scanner).
const LAST_DUE: Duration = Duration::from_secs(8 * 60);

impl Scenario {
    pub fn from_seed(seed: u64) -> Scenario {
        let mut rng = StdRng::seed_from_u64(seed);
        let day = *[Day::Monday, Day::Monday, Day::SpringForward, Day::FallBack]
            .choose(&mut rng)
            .expect("days");
        let daemons = rng.gen_range(1..=3);
        let skews_ms = (0..daemons)
            .map(|_| {
                if rng.gen_bool(0.3) {
                    rng.gen_range(-2_000..=2_000)
                } else {
                    0
                }
            })
            .collect::<Vec<i64>>();
        let rush = secs(&mut rng, FIRST_DUE, LAST_DUE);
        let tenants = (0..rng.gen_range(1..=3))
            .map(|i| tenant(&mut rng, day, i, rush))
            .collect::<Vec<_>>();
        // Not on the fall-back day, whose second 01:50 is an hour on: the
        // limits' timers would make that hour the run's whole cost.
        let slack_limit = rng
            .gen_bool(if day == Day::FallBack { 0.0 } else { 0.7 })
            .then(|| {
                (
                    *[20, 50, 100].choose(&mut rng).expect("rates"),
                    *[0, 10].choose(&mut rng).expect("bursts"),
                )
            });
        let mut scenario = Scenario {
            day,
            skews_ms,
            tenants,
            slack_limit,
            faults: Vec::new(),
            reconcile: rng.gen_bool(0.5),
            rush,
            lead: Duration::ZERO,
        };
        scenario.faults = (0..rng.gen_range(0..=4))
            .map(|_| fault(&mut rng, &scenario))
            .collect();
        scenario.faults.sort_by_key(|(at, _)| *at);
        // Drawn last: the draws above, and so each seed's story, stay as they were.
        scenario.lead = Duration::from_secs(*[2, 2, 5, 9].choose(&mut rng).expect("leads"));
        scenario
    }

    /// The largest clock error of any daemon, plus the daemon's own cut-off:
    /// a change made this long before a due instant is honoured everywhere.
    pub fn change_margin(&self) -> Duration {
        let skew = self
            .skews_ms
            .iter()
            .map(|s| s.unsigned_abs())
            .max()
            .unwrap_or(0);
        Duration::from_millis(skew + 500)
    }
}

fn secs(rng: &mut StdRng, from: Duration, to: Duration) -> Duration {
    Duration::from_millis(rng.gen_range(from.as_millis() as u64..to.as_millis() as u64))
}

fn tenant(rng: &mut StdRng, day: Day, i: usize, rush: Duration) -> TenantPlan {
    let notices = rng.gen_bool(0.3);
    let mut meetings = Vec::new();
    // The rush: every tenant has one at the same instant, some large.
    let people = if rng.gen_bool(0.3) {
        10
    } else {
        rng.gen_range(1..=10)
    };
    let times = if people == 10 {
        rng.gen_range(1..=6)
    } else {
        1
    };
    for m in 0..times {
        meetings.push(one_off(rng, day, format!("rush{m}"), rush, people, notices));
    }
    for m in 0..rng.gen_range(0..=5) {
        let due = secs(rng, FIRST_DUE, LAST_DUE);
        let people = rng.gen_range(1..=6);
        meetings.push(one_off(rng, day, format!("m{m}"), due, people, notices));
    }
    if day != Day::Monday && rng.gen_bool(0.7) {
        meetings.push(daily_across_dst(rng, day));
    }
    TenantPlan {
        id: format!("t{i}"),
        notices,
        slack_cap: rng.gen_bool(0.2).then(|| rng.gen_range(2..=10)),
        meetings,
    }
}

/// A meeting whose reminder falls due `due` after the start.
fn one_off(
    rng: &mut StdRng,
    day: Day,
    id: String,
    due: Duration,
    people: usize,
    notices: bool,
) -> Meeting {
    let before = *[0u32, 5, 10].choose(rng).expect("leads");
    // Whole seconds: a series' occurrences are (and the key names one).
    let due = Duration::from_secs(due.as_secs());
    let starts = day.origin() + span(due) + Span::minutes(i64::from(before));
    let mut channels = vec![Channel::Mail, Channel::Chat, Channel::Slack];
    channels.retain(|_| rng.gen_bool(0.6));
    if channels.is_empty() {
        channels.push(Channel::Slack);
    }
    let mut everyone: Vec<usize> = (0..10).collect();
    everyone.shuffle(rng);
    let input = ScheduleInput {
        title: format!("Meeting {id}"),
        body: String::new(),
        starts_at: starts.to_rfc3339(),
        time_zone: day.zone().into(),
        participants: everyone[..people].iter().map(|j| format!("u{j}")).collect(),
        reminders: vec![RuleInput {
            minutes_before: i64::from(before),
            channels: channels.iter().map(|c| c.to_string()).collect(),
        }],
        recurrence: None,
        dst: None,
    };
    let change = change(rng, due, notices);
    Meeting { id, input, change }
}

/// Up to half the meetings change: moved, deleted, or edited in a storm.
/// Every change is made a margin before the due instant (the run adds the
/// clocks' errors to it, see `World`).
fn change(rng: &mut StdRng, due: Duration, notices: bool) -> Option<Change> {
    if !rng.gen_bool(0.5) {
        return None;
    }
    let latest = due.saturating_sub(Duration::from_secs(3));
    let at = secs(
        rng,
        Duration::from_secs(5),
        latest.max(Duration::from_secs(6)),
    );
    Some(match rng.gen_range(0..3) {
        0 => Change::Move {
            at,
            by: Span::seconds(rng.gen_range(-90..=120)),
        },
        1 => Change::Delete { at },
        _ if notices => Change::Storm {
            at: secs(rng, Duration::from_secs(5), Duration::from_secs(60)),
            edits: rng.gen_range(3..=40),
            // Closer than the notices' least delay: the storm never goes quiet.
            every: Duration::from_millis(rng.gen_range(100..=900)),
        },
        _ => Change::Move {
            at,
            by: Span::seconds(rng.gen_range(10..=60)),
        },
    })
}

/// A daily series at a local time that the day's transition skips or repeats.
fn daily_across_dst(rng: &mut StdRng, day: Day) -> Meeting {
    let (start, nonexistent, ambiguous) = match day {
        // 02:30 did not exist today: shifted to 03:30 EDT (07:30Z) or skipped.
        Day::SpringForward => (
            "2026-03-06T02:30:00-05:00",
            Some(*["shift_forward", "skip"].choose(rng).expect("p")),
            None,
        ),
        // 01:50 happens twice today: 05:50Z (EDT) and 06:50Z (EST).
        _ => (
            "2026-10-30T01:50:00-04:00",
            None,
            Some(*["first", "last", "both"].choose(rng).expect("p")),
        ),
    };
    let input = ScheduleInput {
        title: "Daily stand-up".into(),
        body: String::new(),
        starts_at: start.into(),
        time_zone: "America/New_York".into(),
        participants: vec!["u0".into(), "u1".into()],
        reminders: vec![RuleInput {
            minutes_before: 5,
            channels: vec![Channel::Chat.to_string(), Channel::Slack.to_string()],
        }],
        recurrence: Some(RecurrenceInput {
            rrule: "FREQ=DAILY".into(),
            exdates: Vec::new(),
        }),
        dst: Some(DstInput {
            nonexistent: nonexistent.map(str::to_owned),
            ambiguous: ambiguous.map(str::to_owned),
        }),
    };
    Meeting {
        id: "standup".into(),
        input,
        change: None,
    }
}

fn fault(rng: &mut StdRng, s: &Scenario) -> (Duration, Fault) {
    // Faults land around the rush or around any due instant.
    let around = if rng.gen_bool(0.5) {
        s.rush
    } else {
        secs(rng, FIRST_DUE, LAST_DUE)
    };
    let at = around.saturating_sub(Duration::from_secs(2))
        + secs(rng, Duration::ZERO, Duration::from_millis(3_000));
    let tenant = rng.gen_range(0..s.tenants.len());
    let f = match rng.gen_range(0..7) {
        0 => Fault::Kill {
            daemon: rng.gen_range(0..s.skews_ms.len()),
            restart_after: secs(rng, Duration::from_millis(500), Duration::from_secs(20)),
            moment: if rng.gen_bool(0.5) {
                KillMoment::AfterASend
            } else {
                KillMoment::Now
            },
        },
        1 => Fault::Outage {
            channel: *[Channel::Mail, Channel::Slack]
                .choose(rng)
                .expect("channels"),
            lasts: secs(rng, Duration::from_secs(1), Duration::from_secs(120)),
        },
        2 => Fault::Throttle {
            n: rng.gen_range(1..=50),
            retry_after: secs(rng, Duration::from_millis(500), Duration::from_secs(5)),
        },
        3 => Fault::StoreDown {
            tenant,
            lasts: secs(rng, Duration::from_secs(1), Duration::from_secs(60)),
        },
        4 => Fault::StoreStall {
            tenant,
            by: secs(rng, Duration::from_millis(50), Duration::from_secs(3)),
            lasts: secs(rng, Duration::from_secs(1), Duration::from_secs(30)),
        },
        5 => Fault::QueueDown {
            lasts: secs(rng, Duration::from_millis(200), Duration::from_secs(10)),
        },
        _ => Fault::Copies {
            n: rng.gen_range(1..=200),
        },
    };
    // Copies are made as messages are sent: by the scanner up to a window
    // ahead of their instant.
    let at = match f {
        Fault::Copies { .. } => secs(rng, Duration::ZERO, around.max(Duration::from_secs(1))),
        _ => at,
    };
    (at, f)
}

pub fn span(d: Duration) -> Span {
    Span::from_std(d).expect("a short span")
}
