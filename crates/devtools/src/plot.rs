//! `toki bench --plot DIR`: each run's lateness CDF as an SVG file named
//! after the run's parameters, drawn as the report page draws its own.

use std::path::{Path, PathBuf};

use anyhow::Context;
use toki_app::report_page::{cdf_points, lateness_cdf, CdfSeries};

use crate::bench::{BenchOptions, BenchRun};

/// `lateness-slack-embedded-n3000-d1-w8.svg`: what was run, so that a sweep's
/// files sort and read by their parameters (`-large2000`, `-run1` when given).
pub fn file_name(
    opts: &BenchOptions,
    deliveries: usize,
    daemons: usize,
    workers: usize,
    repeat: Option<usize>,
) -> String {
    let backend = format!("{:?}", opts.backend).to_lowercase();
    let mut name = format!(
        "lateness-{}-{backend}-n{deliveries}-d{daemons}-w{workers}",
        opts.channel
    );
    if let Some(large) = opts.large {
        name.push_str(&format!("-large{large}"));
    }
    if let Some(k) = repeat {
        name.push_str(&format!("-run{k}"));
    }
    name + ".svg"
}

/// Writes the run's CDF (all deliveries, then each group) to `dir/name`.
pub fn write_cdf(dir: &Path, name: &str, run: &BenchRun) -> anyhow::Result<PathBuf> {
    let series: Vec<CdfSeries> = run
        .samples_ms
        .iter()
        .map(|(label, late)| {
            let mut sorted = late.clone();
            sorted.sort_unstable();
            CdfSeries {
                name: format!("{label} ({})", sorted.len()),
                points: cdf_points(&sorted),
            }
        })
        .collect();
    let l = &run.lateness_ms;
    let daemons = match run.daemons {
        1 => "1 daemon".to_owned(),
        d => format!("{d} daemons"),
    };
    let title = format!(
        "{} {} deliveries, {} workers, {daemons}: p50 {} ms, p99 {} ms, max {} ms",
        run.deliveries, run.channel, run.workers, l.p50, l.p99, l.max
    );
    let svg = lateness_cdf(&title, &series, (960, 480))?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}
