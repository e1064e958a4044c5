//! A deterministic simulation of the fleet: daemons, the scanner and the
//! registrar on the in-memory ports and tokio's paused clock, with faults
//! drawn from a seed (a daemon killed mid-burst, channel outages and 429s, a
//! tenant store that fails or stalls, the queue down, daemons' clocks off,
//! meetings moved or deleted up to the cut-off, DST days, debounce storms),
//! and the invariants of `check` read after each run.
//!
//! `cargo test -p toki-core sim::` runs seeds 0..500 (`TOKI_SIM_SEEDS=N`
//! for more, `TOKI_SIM_FIRST_SEED=K` to start elsewhere); a failing seed
//! prints itself, and `TOKI_SIM_SEED=K` replays it alone, with its story.

mod check;
mod scenario;
mod trap;
mod world;

use std::hash::{Hash, Hasher};

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use check::{check, describe, Tally};
use scenario::Scenario;
use world::{Outcome, World};

const SEEDS: u64 = 500;

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
    })
}

/// What one seed's run gave: its tally, its violations, a digest of what
/// reached whom.
struct Run {
    tally: Tally,
    violations: Vec<String>,
    digest: u64,
}

fn run_seed(seed: u64) -> Run {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let scenario = Scenario::from_seed(seed);
        // However the run goes, it ends: a pipeline that never settles fails.
        let outcome = tokio::time::timeout(
            Duration::from_secs(3 * 3600),
            World::new(scenario.clone()).await.run(),
        )
        .await
        .expect("the run ended within three hours of simulated time");
        let (tally, violations) = check(&scenario, &outcome);
        Run {
            tally,
            violations,
            digest: digest(&outcome),
        }
    })
}

/// What reached whom (not when: see `a_seed_replays_its_scenario`).
fn digest(out: &Outcome) -> u64 {
    let mut sent: Vec<String> = out
        .sent
        .iter()
        .map(|(c, n)| format!("{c} {} {:?}", n.tenant, n.key))
        .chain(
            out.chat
                .iter()
                .map(|(t, m)| format!("chat {t} {:?}", m.key)),
        )
        .collect();
    sent.sort();
    sent.dedup();
    if let Ok(path) = std::env::var("TOKI_SIM_DUMP") {
        std::fs::write(path, sent.join("\n")).expect("the dump");
    }
    let mut h = std::hash::DefaultHasher::new();
    sent.hash(&mut h);
    h.finish()
}

/// Runs `seed`, turning a panic inside into a violation.
fn run_caught(seed: u64) -> Run {
    std::panic::catch_unwind(AssertUnwindSafe(|| run_seed(seed))).unwrap_or_else(|p| {
        let why = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Run {
            tally: Tally::default(),
            violations: vec![format!("panicked: {why}")],
            digest: 0,
        }
    })
}

#[test]
fn the_fleet_keeps_its_invariants_under_seeded_faults() {
    if let Some(seed) = env("TOKI_SIM_SEED") {
        let run = run_caught(seed);
        println!("seed {seed}: {}", describe(&Scenario::from_seed(seed)));
        println!("{:?}", run.tally);
        assert!(
            run.violations.is_empty(),
            "seed {seed}:\n{}",
            run.violations.join("\n")
        );
        return;
    }
    let first = env("TOKI_SIM_FIRST_SEED").unwrap_or(0);
    let seeds: Vec<u64> = (first..first + env("TOKI_SIM_SEEDS").unwrap_or(SEEDS)).collect();
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(4);
    let runs: Vec<(u64, Run)> = std::thread::scope(|scope| {
        let chunks: Vec<_> = seeds
            .chunks(seeds.len().div_ceil(threads))
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|s| (*s, run_caught(*s)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        chunks
            .into_iter()
            .flat_map(|c| c.join().expect("a seed thread"))
            .collect()
    });
    let failed: Vec<String> = runs
        .iter()
        .filter(|(_, r)| !r.violations.is_empty())
        .map(|(seed, r)| {
            let shown: Vec<_> = r.violations.iter().take(5).cloned().collect();
            format!(
                "seed {seed} ({}): {} violations, replay with TOKI_SIM_SEED={seed}\n  {}",
                describe(&Scenario::from_seed(*seed)),
                r.violations.len(),
                shown.join("\n  ")
            )
        })
        .collect();
    let total = |f: fn(&Tally) -> usize| runs.iter().map(|(_, r)| f(&r.tally)).sum::<usize>();
    println!(
        "{} seeds: {} deliveries expected, {} killed between send and record, repeated {} across a crash and {} across a store failure, {} of late changes, {} notices, {} cap overshoots after a 429",
        runs.len(),
        total(|t| t.expected),
        total(|t| t.killed_between_send_and_record),
        total(|t| t.repeated_across_crash),
        total(|t| t.repeated_across_store_fault),
        total(|t| t.late_changes_sent),
        total(|t| t.notices),
        total(|t| t.cap_overshoots_after_429)
    );
    assert!(
        failed.is_empty(),
        "{} of {} seeds failed:\n{}",
        failed.len(),
        runs.len(),
        failed.join("\n")
    );
    // The full run must have met the crash it is there for.
    assert!(
        runs.len() < SEEDS as usize || total(|t| t.killed_between_send_and_record) > 0,
        "no daemon was killed between a send and its record in {} seeds",
        runs.len()
    );
}

/// A seed gives the same scenario (meetings, changes, faults and their
/// instants) and the same deliveries, to the same people on the same
/// channels. Not always at the same millisecond: when several tasks are
/// ready at one instant, tokio's `select!` and std's `HashMap` order them at
/// random, so two replays may pace simultaneous sends in another order.
#[test]
fn a_seed_replays_its_scenario() {
    for seed in [3, 11, 30] {
        let (a, b) = (Scenario::from_seed(seed), Scenario::from_seed(seed));
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "seed {seed}");
        assert_eq!(
            run_caught(seed).digest,
            run_caught(seed).digest,
            "seed {seed}"
        );
    }
}
