//! Flow control on the real parts, as a user runs it: `toki bench` with its
//! daemons as separate processes on one embedded store (SQLite: queue,
//! index and the rate-limit leases), and the Slack stand-in process set to
//! answer 429 beyond the limit, as Slack does.
//!
//! This asserts what holds on any machine: nothing lost or repeated, and a
//! limit never exceeded (so a backlog takes at least so long). How close the
//! pacing comes to the ideal, and how many 429s a run met, are measurements:
//! `toki bench` prints them, and BENCHMARKS.md has them with the commands
//! (the fleet's tail, and the fairness and capped-tenant rows). Fairness
//! between tenants and a contract's cap are shown to the millisecond on the
//! paused clock (`crates/core/src/tests/flow.rs`), the fleet's pacing across
//! daemons and leases by the deterministic fleet simulation beside them.

use crate::common;

/// `toki bench ARGS --json`, with the flow's log lines in the daemons' logs.
fn bench(args: &[&str]) -> serde_json::Value {
    common::bench(args, &[("RUST_LOG", "warn,toki_flow=info")])
}

/// Three daemons share a 50/s limit (burst 10) on one Slack workspace; the
/// stand-in answers 429 above 50/s + 10: 1,500 deliveries due at one instant
/// go out never more than 60 in any second, and over 27 s at least (the
/// fleet's 50/s held: the stand-in's own limit would allow 24 s), none lost
/// or repeated, each by one of the daemons. How close the last comes to the
/// ideal 30 s, and how many 429s the fleet met on the way (none, on a quiet
/// machine), are measurements (BENCHMARKS.md), printed here, not asserted.
#[test]
fn three_daemons_share_one_workspace_limit() {
    let run = bench(&[
        "--deliveries",
        "1500",
        "--daemons",
        "3",
        "--workers",
        "4",
        "--tenants",
        "3",
        "--lead",
        "8",
        "--limit",
        "slack:default=50/10",
        "--standin-limit",
        "50/10",
    ]);
    assert_eq!(run["missing"], 0, "{run}");
    assert_eq!(run["duplicates"], 0, "{run}");
    let busiest = run["max_per_second"].as_u64().unwrap();
    assert!(
        busiest <= 60,
        "the stand-in saw {busiest} in one second: {run}"
    );
    let throttled = run["throttle_answers"].as_u64().unwrap();
    let last = run["lateness_ms"]["max"].as_i64().unwrap();
    eprintln!("1,500 at 50/s + 10 over 3 daemons: the last {last} ms after due (ideal 29,800 ms); {throttled} 429s; busiest second {busiest}");
    assert!(
        last >= 27_000,
        "1,500 at 50/s + 10 cannot all go out in under 27 s, the last went at {last} ms: {run}"
    );
    let share: Vec<u64> = run["share"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert_eq!(share.iter().sum::<u64>(), 1_500, "{run}");
}
