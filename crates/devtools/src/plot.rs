//! `toki bench --plot DIR`: each run's lateness CDF as an SVG file named
//! after the run's parameters, drawn as the report page draws its own.
//!
//! It takes plain figures (what ran, how late), so that it knows nothing of
//! the bench that calls it.

use std::path::{Path, PathBuf};

use anyhow::Context;
use toki_app::report_page::{cdf_points, lateness_cdf, CdfSeries};
use toki_app::BackendKind;
use toki_model::lateness::Lateness;
use toki_model::Channel;

/// What a run's file is named after: its sweep point and options.
#[derive(Debug, Clone, Copy)]
pub struct RunName {
    pub channel: Channel,
    pub backend: BackendKind,
    /// The sweep point's deliveries (the large tenant's not counted).
    pub deliveries: usize,
    pub daemons: usize,
    pub workers: usize,
    /// The large tenant's deliveries, if there is one.
    pub large: Option<usize>,
    /// The run's number, when each point runs more than once.
    pub repeat: Option<usize>,
}

impl RunName {
    /// `lateness-slack-embedded-n3000-d1-w8.svg`: what was run, so that a sweep's
    /// files sort and read by their parameters (`-large2000`, `-run1` when given).
    pub fn file_name(&self) -> String {
        let RunName {
            channel,
            backend,
            deliveries,
            daemons,
            workers,
            ..
        } = self;
        let mut name = format!("lateness-{channel}-{backend}-n{deliveries}-d{daemons}-w{workers}");
        if let Some(large) = self.large {
            name.push_str(&format!("-large{large}"));
        }
        if let Some(k) = self.repeat {
            name.push_str(&format!("-run{k}"));
        }
        name + ".svg"
    }
}

/// What a run's chart is titled with: what ran and how late it was.
#[derive(Debug, Clone, Copy)]
pub struct RunTitle<'a> {
    /// Every delivery of the run (the large tenant's included).
    pub deliveries: usize,
    pub channel: Channel,
    pub workers: usize,
    pub daemons: usize,
    pub lateness_ms: &'a Lateness,
}

impl RunTitle<'_> {
    fn text(&self) -> String {
        let l = self.lateness_ms;
        let daemons = match self.daemons {
            1 => "1 daemon".to_owned(),
            d => format!("{d} daemons"),
        };
        format!(
            "{} {} deliveries, {} workers, {daemons}: p50 {} ms, p99 {} ms, max {} ms",
            self.deliveries, self.channel, self.workers, l.p50, l.p99, l.max
        )
    }
}

/// Writes a CDF of each series of lateness samples (ms), labelled with its
/// name and size, to `dir/name`.
pub fn write_cdf(
    dir: &Path,
    name: &str,
    title: &RunTitle,
    samples_ms: &[(String, Vec<i64>)],
) -> anyhow::Result<PathBuf> {
    let series: Vec<CdfSeries> = samples_ms
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
    let svg = lateness_cdf(&title.text(), &series, (960, 480))?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}
