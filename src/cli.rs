//! The `toki` command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use toki_app::{BackendKind, Config, Toki};
use toki_model::{Channel, TenantId};

#[derive(Debug, Parser)]
#[command(
    name = "toki",
    version,
    about = "Reminders delivered at the second they are due."
)]
pub struct Cli {
    /// Configuration file (TOML). Default: $TOKI_CONFIG, else ./toki.toml if present.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args, Clone)]
pub struct Common {
    /// Data folder of the embedded backend.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Backend family.
    #[arg(long, value_parser = clap::value_parser!(BackendKind))]
    pub backend: Option<BackendKind>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the whole pipeline on one machine: N deliveries due at one instant, then a report.
    Demo {
        /// Deliveries due at the same instant.
        #[arg(long, default_value_t = 3000)]
        deliveries: usize,
        /// Tenants (each with its own database).
        #[arg(long, default_value_t = 3)]
        tenants: usize,
        /// Daemon workers.
        #[arg(long, default_value_t = 8)]
        workers: usize,
        /// Seconds from now to the due instant.
        #[arg(long, default_value_t = 30)]
        lead: u64,
        /// Data folder (replaced if a previous demo made it).
        #[arg(long, default_value = "toki-demo")]
        data_dir: PathBuf,
        /// Backend family.
        #[arg(long, value_parser = clap::value_parser!(BackendKind), default_value_t = BackendKind::Embedded)]
        backend: BackendKind,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Measure lateness: N deliveries due at one instant, the daemon and a Slack stand-in in their own processes.
    Bench {
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
        /// slack (to the Slack stand-in process), chat (tenant database rows) or mail (to the SMTP stand-in process, or --smtp-url).
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
    },
    /// Registrar API, scanner and daemon in one process.
    Serve {
        #[command(flatten)]
        common: Common,
        /// Address of the registrar API.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Daemon workers (default: daemon.workers / TOKI_WORKERS).
        #[arg(long)]
        workers: Option<usize>,
    },
    /// Only the daemon: long-poll the queue and deliver.
    Daemon {
        #[command(flatten)]
        common: Common,
        /// Concurrent workers (default: daemon.workers / TOKI_WORKERS).
        #[arg(long)]
        workers: Option<usize>,
        /// Serve /metrics, /healthz and /readyz on this address (e.g. 127.0.0.1:9464).
        #[arg(long, env = "TOKI_METRICS_LISTEN")]
        metrics_listen: Option<std::net::SocketAddr>,
        /// Print lateness as CloudWatch EMF lines on stdout every N seconds (on ECS: 60).
        #[arg(long, env = "TOKI_EMF_EVERY_S")]
        emf_every_s: Option<u64>,
    },
    /// Run the scanner once and print its summary.
    Scan {
        #[command(flatten)]
        common: Common,
    },
    /// Manage tenants.
    Tenant {
        #[command(subcommand)]
        command: TenantCommand,
    },
    /// Delivery counts per tenant, channel and status, lateness per channel and
    /// deliveries per second around each due instant, from the delivery rows.
    Report {
        #[command(flatten)]
        common: Common,
        /// Print one JSON object instead of the tables.
        #[arg(long)]
        json: bool,
        /// Also write the report as a self-contained HTML page with charts.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
    },
    /// A schedule's next occurrences and reminder instants, in UTC and in its
    /// zone, with the DST decisions marked. Reads the API's schedule body.
    Preview {
        /// The schedule JSON (the body of PUT .../schedules/{id}); `-` reads stdin.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// How many occurrences.
        #[arg(long, short = 'n', default_value_t = 10)]
        count: usize,
        /// From this instant (RFC 3339); default: now.
        #[arg(long, value_parser = parse_instant)]
        from: Option<toki_model::Instant>,
        #[arg(long)]
        json: bool,
    },
    /// Apply migrations to the control database and every tenant database.
    Migrate {
        #[command(flatten)]
        common: Common,
        /// The migrated tenants as JSON (and no progress bar).
        #[arg(long)]
        json: bool,
    },
    /// Dead-lettered messages by tenant, channel and reason; then move them back to the queue.
    Redrive {
        #[command(flatten)]
        common: Common,
        /// List only; move nothing.
        #[arg(long)]
        dry_run: bool,
        /// Only this tenant's dead letters.
        #[arg(long, value_parser = clap::value_parser!(TenantId))]
        tenant: Option<TenantId>,
        /// At most this many messages.
        #[arg(long, default_value_t = 1000)]
        max: usize,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant and its database; prints its API key once.
    Create {
        #[arg(value_parser = clap::value_parser!(TenantId))]
        id: TenantId,
        #[command(flatten)]
        common: Common,
        /// Create with the reminder feature off.
        #[arg(long)]
        disabled: bool,
    },
    /// Change a tenant's contract.
    Set {
        #[arg(value_parser = clap::value_parser!(TenantId))]
        id: TenantId,
        #[command(flatten)]
        common: Common,
        /// Reminder feature on or off.
        #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
        reminders: Option<bool>,
        /// Tenant active or suspended.
        #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
        active: Option<bool>,
        /// Change notices to participants when their schedules change (off by default).
        #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
        change_notices: Option<bool>,
        /// Change notices: the least wait after the last edit before the trailing notice, ms.
        #[arg(long)]
        notice_min_delay_ms: Option<u64>,
        /// Change notices: the longest that wait grows to, ms.
        #[arg(long)]
        notice_max_delay_ms: Option<u64>,
        /// Change notices: a schedule never quiet is notified at least this often, ms.
        #[arg(long)]
        notice_hard_cap_ms: Option<u64>,
        /// Limits the contract sets, over the configured ones:
        /// `slack=10/5,mail=2,tenantdb=permits:4` (per second, /burst;
        /// permits in flight; `R/B+permits:N`; `RESOURCE=none` drops one).
        #[arg(long)]
        limits: Option<String>,
    },
    /// List tenants and their contracts.
    List {
        #[command(flatten)]
        common: Common,
    },
}

fn config_with(cli_config: Option<&std::path::Path>, common: &Common) -> anyhow::Result<Config> {
    let mut config = Config::load(cli_config)?;
    if let Some(d) = &common.data_dir {
        config.data_dir = d.clone();
    }
    if let Some(b) = common.backend {
        config.backend = b;
    }
    config.validate()?;
    Ok(config)
}

/// Runs the CLI; returns the process exit code.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    let file = cli.config.as_deref();
    match cli.command {
        Command::Demo {
            deliveries,
            tenants,
            workers,
            lead,
            data_dir,
            backend,
            json,
        } => {
            let config = Config::load(file)?;
            let report = toki_devtools::demo::run(
                config,
                toki_devtools::demo::DemoOptions {
                    deliveries,
                    tenants,
                    workers,
                    lead: Duration::from_secs(lead),
                    data_dir,
                    json,
                    backend,
                },
            )
            .await?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                println!("{}", toki_devtools::demo::render(&report));
            }
            Ok(if report.missing == 0 && report.duplicates == 0 {
                0
            } else {
                1
            })
        }
        Command::Bench {
            deliveries,
            workers,
            daemons,
            tenants,
            lead,
            backend,
            channel,
            repeat,
            data_dir,
            smtp_url,
            maildir,
            limit,
            standin_limit,
            large,
            large_limits,
            json,
            plot,
        } => {
            let opts = toki_devtools::bench::BenchOptions {
                deliveries: toki_devtools::bench::parse_list("--deliveries", &deliveries)?,
                workers: toki_devtools::bench::parse_list("--workers", &workers)?,
                daemons: toki_devtools::bench::parse_list("--daemons", &daemons)?,
                tenants,
                lead,
                backend,
                channel,
                repeat,
                data_dir,
                json,
                smtp_url,
                maildir,
                limits: match &limit {
                    Some(l) => toki_devtools::bench::parse_limits(l)?,
                    None => "{}".into(),
                },
                standin_limit: standin_limit
                    .as_deref()
                    .map(|s| toki_devtools::bench::parse_rate("--standin-limit", s))
                    .transpose()?,
                large,
                large_limits: match &large_limits {
                    Some(spec) => {
                        let mut limits = toki_model::limits::ContractLimits::default();
                        limits.edit(spec).map_err(|e| {
                            anyhow::anyhow!("--large-limits: {}: {}", e.field, e.problem)
                        })?;
                        Some(limits)
                    }
                    None => None,
                },
                plot,
            };
            let clean = toki_devtools::bench::run(Config::load(file)?, opts).await?;
            Ok(if clean { 0 } else { 1 })
        }
        Command::Serve {
            common,
            listen,
            workers,
        } => {
            let mut config = config_with(file, &common)?;
            if let Some(w) = workers {
                config.daemon.workers = w;
            }
            config.validate()?;
            toki_app::serve::run(Toki::open(config).await?, listen).await?;
            Ok(0)
        }
        Command::Daemon {
            common,
            workers,
            metrics_listen,
            emf_every_s,
        } => {
            let mut config = config_with(file, &common)?;
            if let Some(w) = workers {
                config.daemon.workers = w;
            }
            config.validate()?;
            let seen = toki_app::daemon::Observability {
                metrics_listen,
                emf_every: emf_every_s.map(std::time::Duration::from_secs),
            };
            toki_app::daemon::run(config, seen).await?;
            Ok(0)
        }
        Command::Scan { common } => {
            let toki = Toki::open(config_with(file, &common)?).await?;
            let summary = toki.scanner().scan_once().await?;
            println!("{}", serde_json::to_string(&summary)?);
            Ok(0)
        }
        Command::Tenant { command } => tenant(file, command).await,
        Command::Preview {
            file,
            count,
            from,
            json,
        } => {
            let text = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading stdin")?
            } else {
                std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?
            };
            let input: toki_model::input::ScheduleInput = serde_json::from_str(&text)
                .with_context(|| format!("{}: not a schedule body", file.display()))?;
            let from = from.unwrap_or_else(chrono::Utc::now);
            match toki_app::preview::preview(&input, from, count) {
                Ok(p) if json => println!("{}", serde_json::to_string_pretty(&p)?),
                Ok(p) => println!("{}", toki_app::preview::render(&p)),
                Err(e) => {
                    eprintln!("toki preview: {e}");
                    return Ok(2);
                }
            }
            Ok(0)
        }
        Command::Report { common, json, html } => {
            let toki = Toki::open(config_with(file, &common)?).await?;
            let report = toki_app::report::collect(&toki).await?;
            // One read for every output: the page and the JSON cannot disagree.
            if let Some(path) = &html {
                let page = toki_app::report_page::render(&report)?;
                std::fs::write(path, page)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                println!("{}", toki_app::report::render(&report));
            }
            Ok(0)
        }
        Command::Redrive {
            common,
            dry_run,
            tenant,
            max,
            json,
        } => {
            let toki = Toki::open(config_with(file, &common)?).await?;
            let opts = toki_app::redrive::RedriveOptions {
                dry_run,
                tenant,
                max,
            };
            let report = toki_app::redrive::redrive(&toki, &opts).await?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                println!("{}", toki_app::redrive::render(&report));
            }
            Ok(0)
        }
        Command::Migrate { common, json } => {
            let toki = Toki::open(config_with(file, &common)?).await?;
            let progress = toki_devtools::progress::Progress::new(!json);
            let tenants = toki
                .migrate_all(|done, of, tenant| {
                    if done == 0 {
                        progress.stage("migrating", Some(of as u64));
                    }
                    progress.set(done as u64);
                    progress.message(tenant.to_string());
                })
                .await?;
            drop(progress);
            if json {
                let tenants: Vec<String> = tenants.iter().map(ToString::to_string).collect();
                println!(
                    "{}",
                    serde_json::json!({"control_store": "migrated", "tenants": tenants})
                );
            } else {
                println!(
                    "migrated the control store and {} tenant databases",
                    tenants.len()
                );
            }
            Ok(0)
        }
    }
}

async fn tenant(file: Option<&std::path::Path>, command: TenantCommand) -> anyhow::Result<i32> {
    match command {
        TenantCommand::Create {
            id,
            common,
            disabled,
        } => {
            let toki = Toki::open(config_with(file, &common)?).await?;
            if toki.directory.get(&id).await?.is_some() {
                anyhow::bail!("tenant {id} exists already");
            }
            let (record, key) = toki.create_tenant(&id, !disabled).await?;
            eprintln!(
                "created tenant {} (database {})",
                record.id, record.database
            );
            eprintln!("its API key (shown once):");
            println!("{key}");
            Ok(0)
        }
        TenantCommand::Set {
            id,
            common,
            reminders,
            active,
            change_notices,
            notice_min_delay_ms,
            notice_max_delay_ms,
            notice_hard_cap_ms,
            limits,
        } => {
            let toki = Toki::open(config_with(file, &common)?).await?;
            let mut record = toki
                .directory
                .get(&id)
                .await?
                .with_context(|| format!("no tenant {id}"))?;
            if let Some(r) = reminders {
                record.reminders_enabled = r;
            }
            if let Some(a) = active {
                record.active = a;
            }
            let n = &mut record.change_notices;
            let turned_on = change_notices == Some(true) && !n.enabled;
            if let Some(on) = change_notices {
                n.enabled = on;
            }
            for (value, field) in [
                (notice_min_delay_ms, &mut n.min_delay_ms),
                (notice_max_delay_ms, &mut n.max_delay_ms),
                (notice_hard_cap_ms, &mut n.hard_cap_ms),
            ] {
                if let Some(v) = value {
                    *field = v;
                }
            }
            record
                .change_notices
                .validate()
                .map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.problem))?;
            if let Some(spec) = &limits {
                record
                    .limits
                    .edit(spec)
                    .map_err(|e| anyhow::anyhow!("--limits: {}: {}", e.field, e.problem))?;
            }
            if turned_on {
                // What was edited while notices were off is not news now.
                let store = toki_ports::TenantStores::open(toki.stores.as_ref(), &id).await?;
                store.clear_change_baselines().await?;
            }
            toki.directory.put(&record).await?;
            println!(
                "{}: reminders {}, {}, change notices {}, limits {}",
                id,
                if record.reminders_enabled {
                    "on"
                } else {
                    "off"
                },
                if record.active { "active" } else { "suspended" },
                notices_summary(&record.change_notices),
                record.limits
            );
            Ok(0)
        }
        TenantCommand::List { common } => {
            let toki = Toki::open(config_with(file, &common)?).await?;
            let rows: Vec<Vec<String>> = toki
                .directory
                .list()
                .await?
                .into_iter()
                .map(|t| {
                    vec![
                        t.id.to_string(),
                        if t.reminders_enabled {
                            "on".into()
                        } else {
                            "off".into()
                        },
                        if t.active { "yes".into() } else { "no".into() },
                        notices_summary(&t.change_notices),
                        t.limits.to_string(),
                        t.database,
                    ]
                })
                .collect();
            println!(
                "{}",
                toki_app::table::table(
                    &[
                        "tenant",
                        "reminders",
                        "active",
                        "change notices",
                        "limits",
                        "database"
                    ],
                    &rows
                )
            );
            Ok(0)
        }
    }
}

/// `off`, or `on (min 5 s, max 300 s, cap 900 s)`.
fn notices_summary(n: &toki_model::change::ChangeNoticeSettings) -> String {
    if !n.enabled {
        return "off".into();
    }
    let s = |ms: u64| format!("{} s", ms as f64 / 1000.0);
    format!(
        "on (min {}, max {}, cap {})",
        s(n.min_delay_ms),
        s(n.max_delay_ms),
        s(n.hard_cap_ms)
    )
}

fn parse_instant(s: &str) -> Result<toki_model::Instant, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.to_utc())
        .map_err(|e| format!("{s:?} is not an RFC 3339 instant ({e})"))
}
