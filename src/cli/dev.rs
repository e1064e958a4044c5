//! The dev tools' commands: `toki demo` and `toki bench` (over `toki-devtools`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use toki_app::{BackendKind, Config};
use toki_devtools::bench::{parse_limits, parse_list, parse_rate, BenchOptions, Cores, EventsMode};
use toki_devtools::demo::{self, DemoOptions};
use toki_model::limits::ContractLimits;
use toki_model::Channel;

// `toki demo`: see `Command::Demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Deliveries due at the same instant.
    #[arg(long, default_value_t = 3000)]
    deliveries: usize,
    /// Tenants (each with its own database).
    #[arg(long, default_value_t = 3)]
    tenants: usize,
    /// Daemon workers.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Seconds from now to the due instant (default: 30, or more when a
    /// timed sample of registrations says registering will take longer).
    #[arg(long)]
    lead: Option<u64>,
    /// Data folder (replaced if a previous demo made it).
    #[arg(long, default_value = "toki-demo")]
    data_dir: PathBuf,
    /// Backend family.
    #[arg(long, value_parser = clap::value_parser!(BackendKind), default_value_t = BackendKind::Embedded)]
    backend: BackendKind,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

impl DemoArgs {
    pub async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let config = Config::load(file)?;
        let json = self.json;
        let report = demo::run(
            config,
            DemoOptions {
                deliveries: self.deliveries,
                tenants: self.tenants,
                workers: self.workers,
                lead: self.lead.map(Duration::from_secs),
                data_dir: self.data_dir,
                json,
                backend: self.backend,
            },
        )
        .await?;
        if json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            println!("{}", demo::render(&report));
        }
        Ok(if report.missing == 0 && report.duplicates == 0 {
            0
        } else {
            1
        })
    }
}

// `toki bench`: see `Command::Bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Deliveries, or a sweep: 3000,30000,100000.
    #[arg(long, default_value = "3000")]
    deliveries: String,
    /// Daemon workers, or a sweep: 1,4,16.
    #[arg(long, default_value = "8")]
    workers: String,
    /// Daemon processes sharing the queue (a fleet on one machine), or a sweep: 1,2,4.
    #[arg(long, default_value = "1")]
    daemons: String,
    #[arg(long, default_value_t = 3)]
    tenants: usize,
    /// Seconds from registration to the due instant (default: 10 + 1 per 1,000 deliveries).
    #[arg(long)]
    lead: Option<u64>,
    #[arg(long, value_parser = clap::value_parser!(BackendKind), default_value_t = BackendKind::Embedded)]
    backend: BackendKind,
    /// slack (to the Slack stand-in process), chat (tenant database rows), mail (to the SMTP stand-in process, or --smtp-url) or webhook (to the webhook receiver stand-in process, which verifies every signature).
    #[arg(long, default_value = "slack", value_parser = clap::value_parser!(Channel))]
    channel: Channel,
    /// Runs per point; the median run is reported.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Where runs keep their data (each run replaces its own subfolder).
    #[arg(long, default_value = "toki-bench")]
    data_dir: PathBuf,
    /// SMTP server for --channel mail, e.g. smtp://127.0.0.1:2525 (default: the SMTP
    /// stand-in, which measures lateness on arrival); counted from the delivery rows.
    #[arg(long)]
    smtp_url: Option<String>,
    /// The Maildir an --smtp-url capture server writes, to count duplicates (optional).
    #[arg(long)]
    maildir: Option<PathBuf>,
    /// Limits for the daemons, KEY=RATE[/BURST],... (e.g. slack:default=50/10);
    /// default none, so that a run measures the pipeline rather than a limit.
    #[arg(long)]
    limit: Option<String>,
    /// The Slack stand-in answers 429 beyond RATE[/BURST] a second, as Slack does.
    #[arg(long)]
    standin_limit: Option<String>,
    /// One more tenant with this many deliveries (e.g. 10000 beside --tenants 10
    /// --deliveries 900): lateness is reported for it and for the others.
    #[arg(long)]
    large: Option<usize>,
    /// The large tenant's contract limits, as `toki tenant set --limits`
    /// takes them (e.g. slack=20/5): its own cap, beside the others'.
    #[arg(long, requires = "large")]
    large_limits: Option<String>,
    /// One JSON object per run per line.
    #[arg(long)]
    json: bool,
    /// Write each run's lateness CDF as an SVG file in DIR, named after its parameters.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// shared: wherever the scheduler puts them; separate: the stand-in on
    /// the last CPU and the daemons on the others (as in production, where
    /// Slack is elsewhere; one core is too few for the daemon at 30,000).
    #[arg(long, default_value = "shared")]
    cores: Cores,
    /// Every tenant registers an event endpoint (all types, in order) at the
    /// webhook receiver stand-in before the burst; each event's lag from its
    /// outcome to its arrival, and the events logged, received, missing and
    /// duplicated, are reported too (a missing event fails the run).
    #[arg(long)]
    events: bool,
}

impl BenchArgs {
    pub async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let opts = self.options()?;
        let clean = toki_devtools::bench::run(Config::load(file)?, opts).await?;
        Ok(if clean { 0 } else { 1 })
    }

    /// The sweep's options, its lists and limits parsed.
    fn options(self) -> anyhow::Result<BenchOptions> {
        Ok(BenchOptions {
            deliveries: parse_list("--deliveries", &self.deliveries)?,
            workers: parse_list("--workers", &self.workers)?,
            daemons: parse_list("--daemons", &self.daemons)?,
            tenants: self.tenants,
            lead: self.lead,
            backend: self.backend,
            channel: self.channel,
            repeat: self.repeat,
            data_dir: self.data_dir,
            json: self.json,
            smtp_url: self.smtp_url,
            maildir: self.maildir,
            limits: match &self.limit {
                Some(l) => parse_limits(l)?,
                None => "{}".into(),
            },
            standin_limit: self
                .standin_limit
                .as_deref()
                .map(|s| parse_rate("--standin-limit", s))
                .transpose()?,
            large: self.large,
            large_limits: self.large_limits.as_deref().map(large_limits).transpose()?,
            plot: self.plot,
            cores: self.cores,
            events: if self.events {
                EventsMode::OneEndpointPerTenant
            } else {
                EventsMode::Off
            },
        })
    }
}

/// `--large-limits`: the large tenant's contract limits, as `toki tenant set --limits` takes them.
fn large_limits(spec: &str) -> anyhow::Result<ContractLimits> {
    let mut limits = ContractLimits::default();
    limits
        .edit(spec)
        .map_err(|e| anyhow::anyhow!("--large-limits: {}: {}", e.field, e.problem))?;
    Ok(limits)
}
