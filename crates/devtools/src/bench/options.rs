//! What a bench sweep is told: [`BenchOptions`], and the parsers of the
//! command line's values for it.

use std::path::PathBuf;

use anyhow::Context;
use toki_app::BackendKind;
use toki_model::Channel;

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub deliveries: Vec<usize>,
    pub workers: Vec<usize>,
    /// Daemon processes sharing the queue.
    pub daemons: Vec<usize>,
    pub tenants: usize,
    /// Seconds from the start of registration to the due instant; None: 10 s + 1 s per 1,000.
    pub lead: Option<u64>,
    pub backend: BackendKind,
    pub channel: Channel,
    /// Runs per (deliveries, workers); the median run is reported too.
    pub repeat: usize,
    pub data_dir: PathBuf,
    pub json: bool,
    /// For `--channel mail`: an SMTP server (default: the SMTP stand-in, its
    /// own process) and, optionally, the Maildir its capture writes.
    pub smtp_url: Option<String>,
    pub maildir: Option<PathBuf>,
    /// The daemons' limits (`TOKI_FLOW_LIMITS`, JSON): none by default, so
    /// that runs measure the pipeline, not a limit.
    pub limits: String,
    /// The Slack stand-in answers 429 beyond this many a second (+ burst).
    pub standin_limit: Option<(u32, u32)>,
    /// One more tenant with this many deliveries on top (a large tenant's
    /// burst beside the others'): lateness is then reported per group.
    pub large: Option<usize>,
    /// The large tenant's contract limits (its own caps).
    pub large_limits: Option<toki_model::limits::ContractLimits>,
    /// Where each run's lateness CDF goes, as SVG (`--plot DIR`).
    pub plot: Option<PathBuf>,
    /// Where the stand-in and the daemons run.
    pub cores: super::cores::Cores,
    /// Each tenant with an event endpoint at the receiver stand-in (`--events`).
    pub events: super::events::EventsMode,
}

/// `slack:default=50/10,smtp:ses=14` → the limits' JSON table.
pub fn parse_limits(s: &str) -> anyhow::Result<String> {
    let mut table = serde_json::Map::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, spec) = part
            .split_once('=')
            .with_context(|| format!("--limit: {part:?} is not KEY=RATE[/BURST]"))?;
        let (rate, burst) = spec.split_once('/').unwrap_or((spec, "0"));
        let rate: f64 = rate
            .parse()
            .ok()
            .filter(|r: &f64| *r > 0.0)
            .with_context(|| format!("--limit: {key}: rate {rate:?} is not a number above 0"))?;
        let burst: u32 = burst
            .parse()
            .with_context(|| format!("--limit: {key}: burst {burst:?} is not a whole number"))?;
        table.insert(
            key.to_owned(),
            serde_json::json!({ "rate": rate, "burst": burst }),
        );
    }
    Ok(serde_json::Value::Object(table).to_string())
}

/// `50/10` → (50, 10).
pub fn parse_rate(field: &str, s: &str) -> anyhow::Result<(u32, u32)> {
    let (rate, burst) = s.split_once('/').unwrap_or((s, "0"));
    let rate = rate
        .parse::<u32>()
        .ok()
        .filter(|r| *r > 0)
        .with_context(|| format!("{field}: {rate:?} is not a rate above 0"))?;
    let burst = burst
        .parse::<u32>()
        .with_context(|| format!("{field}: burst {burst:?} is not a whole number"))?;
    Ok((rate, burst))
}

/// `--deliveries 3000,30000` → [3000, 30000].
pub fn parse_list(field: &str, s: &str) -> anyhow::Result<Vec<usize>> {
    s.split(',')
        .map(|p| {
            let p = p.trim().replace('_', "");
            p.parse::<usize>()
                .ok()
                .filter(|v| *v > 0)
                .with_context(|| format!("{field}: {p:?} is not a positive number"))
        })
        .collect()
}
