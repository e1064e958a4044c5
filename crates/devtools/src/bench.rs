//! `toki bench`: N deliveries across T tenants, all due at one whole second;
//! the daemon runs as its own process (`toki daemon`) and Slack deliveries go
//! to the Slack stand-in, also its own process, which records when each
//! request arrived. Lateness = arrival − due, per delivery.
//!
//! [`run`] sweeps the points; [`run_once`] is one run, in steps: the
//! processes it starts ([`processes`]), the watching and the measuring
//! ([`measure`]); [`options`] and [`results`] are what goes in and out.

mod cores;
mod events;
mod measure;
mod once;
mod options;
mod processes;
mod results;

use crate::plot::{write_cdf, RunName, RunTitle};
use toki_app::Config;

pub use cores::{allowed_cpus, Cores, Role};
pub use events::{tally, EventFigures, EventsMode, LoggedEvent};
pub use once::run_once;
pub use options::{parse_limits, parse_list, parse_rate, BenchOptions};
pub use results::{events_table, groups_table, header, row, BenchRun, GroupLateness, MeasuredAt};

/// Runs the sweep; prints rows as they finish. Returns whether every run delivered everything once.
pub async fn run(base: Config, opts: BenchOptions) -> anyhow::Result<bool> {
    let mut rows = Vec::new();
    let mut events = Vec::new();
    let mut clean = true;
    for (n, d, w) in sweep_points(&opts) {
        let mut runs = Vec::new();
        for k in 0..opts.repeat.max(1) {
            let dir = opts.data_dir.join(format!("n{n}-d{d}-w{w}-{k}"));
            let mut r = run_once(&base, &opts, n, w, d, &dir).await?;
            if let Some(plots) = &opts.plot {
                let name = RunName {
                    channel: opts.channel,
                    backend: opts.backend,
                    deliveries: n,
                    daemons: d,
                    workers: w,
                    large: opts.large,
                    repeat: (opts.repeat > 1).then_some(k),
                };
                r.plot = Some(plot(&opts, plots, &name, &r)?);
            }
            // Events are sent at least once: a copy is allowed, a gap is not.
            let events_whole = r.events.as_ref().is_none_or(|e| e.missing == 0);
            clean &= r.missing == 0 && r.duplicates == 0 && events_whole;
            print_run(&opts, &r)?;
            events.extend(r.events.clone().map(|e| (r.deliveries, e)));
            runs.push(r);
        }
        rows.extend(point_rows(runs));
    }
    if !opts.json {
        println!("{}", toki_app::table::table(&header(), &rows));
        if !events.is_empty() {
            println!("{}", events_table(&events));
            println!("events: expected = logged in the tenants' databases (one per outcome of a type the endpoint wants); lag = arrival at the receiver - the outcome's time (the body's `timestamp`); dup = copies beyond the first (allowed: at least once); missing = logged, never received");
        }
        println!("lateness = arrival at the sink - due (the Slack or SMTP stand-in's clock), or delivered_at - due from the delivery rows (chat, mail to --smtp-url); max = due to last delivery; D = daemon processes, RSS = the largest one's peak, CPU = all of theirs; sessions = SMTP connections the stand-in accepted; share = each daemon's part of the delivered rows; 429s = throttle answers the Slack stand-in gave, max/s = the most it accepted in any 1-second window");
    }
    Ok(clean)
}

/// Every (deliveries, daemons, workers) point of the sweep, in that nesting.
fn sweep_points(opts: &BenchOptions) -> Vec<(usize, usize, usize)> {
    let mut points = Vec::new();
    for &n in &opts.deliveries {
        for &d in &opts.daemons {
            for &w in &opts.workers {
                points.push((n, d, w));
            }
        }
    }
    points
}

/// Writes the run's lateness CDF in `dir`; returns its path.
fn plot(
    opts: &BenchOptions,
    dir: &std::path::Path,
    name: &RunName,
    r: &BenchRun,
) -> anyhow::Result<std::path::PathBuf> {
    let title = RunTitle {
        deliveries: r.deliveries,
        channel: r.channel,
        workers: r.workers,
        daemons: r.daemons,
        lateness_ms: &r.lateness_ms,
    };
    let path = write_cdf(dir, &name.file_name(), &title, &r.samples_ms)?;
    if !opts.json {
        eprintln!("lateness CDF: {}", path.display());
    }
    Ok(path)
}

/// A run as it finishes: a JSON line, or its table (a long sweep shows results as it goes).
fn print_run(opts: &BenchOptions, r: &BenchRun) -> anyhow::Result<()> {
    if opts.json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        eprintln!("{}", toki_app::table::table(&header(), &[row(r, None)]));
        if !r.groups.is_empty() {
            eprintln!("{}", groups_table(&r.groups));
        }
        if let Some(e) = &r.events {
            eprintln!("{}", events_table(&[(r.deliveries, e.clone())]));
        }
    }
    Ok(())
}

/// A point's rows in the final table: each run when there are several, then
/// the median run by p99 lateness.
fn point_rows(mut runs: Vec<BenchRun>) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    if runs.len() > 1 {
        for r in &runs {
            rows.push(row(r, Some(" (run)")));
        }
    }
    runs.sort_by_key(|r| (r.lateness_ms.p99, r.lateness_ms.max));
    let median = &runs[runs.len() / 2];
    rows.push(row(
        median,
        if runs.len() > 1 {
            Some(" median")
        } else {
            None
        },
    ));
    rows
}
