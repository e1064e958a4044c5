//! `toki bench`: N deliveries across T tenants, all due at one whole second;
//! the daemon runs as its own process (`toki daemon`) and Slack deliveries go
//! to the Slack stand-in, also its own process, which records when each
//! request arrived. Lateness = arrival − due, per delivery.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant as StdInstant};

use anyhow::{bail, Context};
use serde::Serialize;
use toki_model::lateness::Lateness;
use toki_model::{Channel, DeliveryStatus};
use toki_ports::TenantStores;

use crate::plot::{write_cdf, RunName, RunTitle};
use crate::progress::Progress;
use crate::scenario;
use crate::slack_standin::{Arrival, StandinStats};
use crate::smtp_standin::{MailArrival, SmtpStats};
use toki_app::{BackendKind, Config, Toki};

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

/// Lateness of one group of tenants' deliveries.
#[derive(Debug, Clone, Serialize)]
pub struct GroupLateness {
    pub group: String,
    pub deliveries: usize,
    pub lateness_ms: Lateness,
}

/// One run, as printed (`--json`: one object per line).
#[derive(Debug, Clone, Serialize)]
pub struct BenchRun {
    pub deliveries: usize,
    pub workers: usize,
    /// Daemon processes; `share` is each one's part of the delivered rows, in start order.
    pub daemons: usize,
    pub share: Vec<u64>,
    pub backend: BackendKind,
    pub channel: Channel,
    pub lateness_ms: Lateness,
    pub missing: u64,
    pub duplicates: u64,
    pub deliveries_per_s: f64,
    /// The largest daemon's peak RSS, and the CPU seconds of all daemons.
    pub peak_rss_mb: f64,
    pub cpu_s: f64,
    /// Registration of every meeting, until the last reminder was enqueued.
    pub enqueue_s: f64,
    /// SMTP sessions the stand-in accepted (mail through it only).
    pub smtp_sessions: Option<u64>,
    /// 429s the Slack stand-in answered (its rate limit and `throttle_first`).
    pub throttle_answers: Option<u64>,
    /// The most deliveries the Slack stand-in accepted in any 1-second window.
    pub max_per_second: Option<u64>,
    /// With a large tenant: lateness of its deliveries and of the others'.
    pub groups: Vec<GroupLateness>,
    /// Deliveries the Slack stand-in accepted per second from the due
    /// instant (second 0 holds the due instant), for a look at the pacing.
    pub per_second: Vec<u64>,
    /// Where lateness was measured: "sink" (the stand-in's arrival clock) or "rows" (delivery rows).
    pub measured_at: &'static str,
    /// The run's lateness CDF (`--plot`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plot: Option<PathBuf>,
    /// Each delivery's lateness (ms) as measured, all of them and then per
    /// group, for `--plot`; not printed.
    #[serde(skip)]
    pub samples_ms: Vec<(String, Vec<i64>)>,
}

/// Kills a child process when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sibling_binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe.with_file_name(name);
    if !path.exists() {
        bail!(
            "{} not found next to {}; build it with `cargo build --release --bins`",
            name,
            exe.display()
        );
    }
    Ok(path)
}

/// Starts a stand-in process; returns it and the first line it printed.
fn start_process(name: &str, args: &[String]) -> anyhow::Result<(Guard, String)> {
    let mut child = Command::new(sibling_binary(name)?)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let stdout = child.stdout.take().context("stand-in stdout")?;
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)?;
    Ok((Guard(child), line.trim().to_owned()))
}

/// Starts the Slack stand-in process; returns it and its API base URL.
fn start_standin(limit: Option<(u32, u32)>) -> anyhow::Result<(Guard, String)> {
    let args: Vec<String> = match limit {
        Some((rate, burst)) => vec![
            "--rate-limit".into(),
            rate.to_string(),
            "--burst".into(),
            burst.to_string(),
        ],
        None => Vec::new(),
    };
    let (guard, base) = start_process("toki-slack-standin", &args)?;
    if !base.starts_with("http://") {
        bail!("the Slack stand-in did not print its address (got {base:?})");
    }
    Ok((guard, base))
}

/// Starts the SMTP stand-in process; returns it, its SMTP URL and its HTTP base URL.
fn start_smtp_standin() -> anyhow::Result<(Guard, String, String)> {
    let (guard, line) = start_process("toki-smtp-standin", &[])?;
    match line.split_once(' ') {
        Some((smtp, http)) if smtp.starts_with("smtp://") && http.starts_with("http://") => {
            Ok((guard, smtp.to_owned(), http.to_owned()))
        }
        _ => bail!("the SMTP stand-in did not print its addresses (got {line:?})"),
    }
}

/// Where arrivals are counted and lateness measured.
enum Sink {
    /// The Slack stand-in (its HTTP base).
    Slack(String),
    /// The SMTP stand-in (its HTTP base).
    Smtp(String),
    /// The delivery rows (and a Maildir's files for duplicates, if given).
    Rows,
}

/// Peak resident memory (MB) and CPU seconds of a process, from /proc.
fn process_usage(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm_kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime is the 12th, stime the 13th.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (
        (hwm_kb / 1024.0 * 10.0).round() / 10.0,
        ((ticks(11) + ticks(12)) / hz.max(1.0) * 100.0).round() / 100.0,
    )
}

async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
) -> anyhow::Result<T> {
    Ok(http
        .get(url)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}

/// Counts delivered rows across tenants.
async fn delivered_rows(
    toki: &Toki,
    tenants: &[toki_model::TenantId],
    channel: Channel,
) -> anyhow::Result<u64> {
    let mut n = 0;
    for t in tenants {
        for c in toki.stores.open(t).await?.delivery_counts().await? {
            if c.channel == channel && c.status == DeliveryStatus::Delivered {
                n += c.count;
            }
        }
    }
    Ok(n)
}

/// Delivered rows per daemon process (in `pids` order), from the claim holder each row names.
async fn delivered_by_daemon(
    toki: &Toki,
    tenants: &[toki_model::TenantId],
    pids: &[u32],
) -> anyhow::Result<Vec<u64>> {
    let mut share = vec![0; pids.len()];
    for t in tenants {
        for (holder, count) in toki.stores.open(t).await?.delivered_by_holder().await? {
            if let Some(i) = pids.iter().position(|p| p.to_string() == holder) {
                share[i] += count;
            }
        }
    }
    Ok(share)
}

pub async fn run_once(
    base: &Config,
    opts: &BenchOptions,
    n: usize,
    workers: usize,
    daemons: usize,
    dir: &Path,
) -> anyhow::Result<BenchRun> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let mut config = base.clone();
    config.backend = opts.backend;
    config.data_dir = dir.to_path_buf();
    config.daemon.workers = workers;
    config.aws.create_resources = true;
    let (standin, sink) = match (opts.channel, &opts.smtp_url) {
        (Channel::Slack, _) => {
            let (g, url) = start_standin(opts.standin_limit)?;
            config.slack.token = Some("xoxb-toki-bench".into());
            config.slack.api_url = format!("{url}/api");
            (Some(g), Sink::Slack(url))
        }
        (Channel::Mail, None) => {
            let (g, smtp, http) = start_smtp_standin()?;
            config.mail.smtp_url = Some(smtp.into());
            (Some(g), Sink::Smtp(http))
        }
        (Channel::Mail, Some(url)) => {
            config.mail.smtp_url = Some(url.clone().into());
            (None, Sink::Rows)
        }
        _ => (None, Sink::Rows),
    };
    let slack_url = match &sink {
        Sink::Slack(url) => Some(url.clone()),
        _ => None,
    };
    config.validate()?;
    let toki = Toki::open(config.clone()).await?;
    let mut tenants = scenario::tenant_ids(opts.tenants);
    if opts.backend == BackendKind::Aws {
        tenants = tenants
            .iter()
            .map(|t| format!("bench-{t}").parse())
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for t in &tenants {
            toki_sql::drop_tenant_database(&toki.databases.admin_url(t)?).await?;
        }
    }
    scenario::create_tenants(&toki, &tenants).await?;
    if let Some(limits) = &opts.large_limits {
        let mut record = toki
            .directory
            .get(&tenants[0])
            .await?
            .context("the large tenant was just created")?;
        record.limits = limits.clone();
        toki.directory.put(&record).await?;
    }

    // The daemons: each its own process, configured through the environment.
    let mut fleet = Vec::with_capacity(daemons);
    for d in 0..daemons {
        let log = std::fs::File::create(dir.join(format!("daemon-{d}.log")))?;
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args(["daemon", "--workers", &workers.to_string(), "--data-dir"])
            .arg(dir)
            .env(
                "TOKI_BACKEND",
                if opts.backend == BackendKind::Aws {
                    "aws"
                } else {
                    "embedded"
                },
            )
            .env("TOKI_LEAD_MS", config.pipeline.lead_ms.to_string())
            .env("TOKI_FLOW_LIMITS", &opts.limits)
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(t) = &config.tenant_database_template {
            cmd.env("TOKI_DATABASE_URL_TEMPLATE", t.expose());
        }
        if let Some(url) = &slack_url {
            cmd.env("TOKI_SLACK_TOKEN", "xoxb-toki-bench")
                .env("TOKI_SLACK_API_URL", format!("{url}/api"));
        }
        if let Some(s) = &config.mail.smtp_url {
            cmd.env("TOKI_SMTP_URL", s.expose());
        }
        fleet.push(Guard(cmd.spawn().context("starting a daemon process")?));
    }
    let pids: Vec<u32> = fleet.iter().map(|g| g.0.id()).collect();

    let progress = Progress::new(!opts.json);
    let lead = Duration::from_secs(opts.lead.unwrap_or(10 + n as u64 / 1000));
    let due = scenario::due_instant(lead);
    let (mut meetings, large_tenant) = match opts.large {
        // The large tenant is the first; the others share `n`.
        Some(_) if tenants.len() < 2 => bail!("--large needs --tenants 2 or more"),
        Some(_) => (
            scenario::plan_meetings(n, &tenants[1..], &[opts.channel], due),
            Some(tenants[0].clone()),
        ),
        None => (
            scenario::plan_meetings(n, &tenants, &[opts.channel], due),
            None,
        ),
    };
    if let (Some(large), Some(t)) = (opts.large, &large_tenant) {
        meetings.extend(scenario::plan_meetings(
            large,
            std::slice::from_ref(t),
            &[opts.channel],
            due,
        ));
    }
    let n = n + opts.large.unwrap_or(0);
    let started = StdInstant::now();
    let expected = scenario::register(&toki, meetings, &progress).await?;
    let enqueue_s = started.elapsed().as_secs_f64();
    if toki.clock.now() >= due {
        bail!("registration took {enqueue_s:.1} s, past the due instant; raise --lead");
    }

    // Wait for the due instant, then for every delivery (or a deadline).
    let http = reqwest::Client::new();
    let deadline = due + chrono::Duration::seconds(60 + (n / 1000) as i64);
    progress.stage("waiting", None);
    let mut delivering = false;
    loop {
        let now = toki.clock.now();
        let done = match &sink {
            Sink::Slack(url) => {
                get_json::<StandinStats>(&http, &format!("{url}/stats"))
                    .await?
                    .unique
            }
            Sink::Smtp(url) => {
                get_json::<SmtpStats>(&http, &format!("{url}/stats"))
                    .await?
                    .unique
            }
            Sink::Rows if now >= due => delivered_rows(&toki, &tenants, opts.channel).await?,
            Sink::Rows => 0,
        };
        if done >= n as u64 || now > deadline {
            break;
        }
        if now < due {
            progress.message(format!(
                "n={n} w={workers}: due in {:.1} s",
                (due - now).num_milliseconds() as f64 / 1000.0
            ));
        } else {
            if !delivering {
                progress.stage("delivering", Some(n as u64));
                progress.message(format!("n={n} w={workers}"));
                delivering = true;
            }
            progress.set(done);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A moment for duplicates to show up, and for the daemon to record its rows.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let usage: Vec<(f64, f64)> = pids.iter().map(|p| process_usage(*p)).collect();
    let peak_rss_mb = usage.iter().map(|u| u.0).fold(0.0, f64::max);
    let cpu_s = (usage.iter().map(|u| u.1).sum::<f64>() * 100.0).round() / 100.0;
    let share = delivered_by_daemon(&toki, &tenants, &pids).await?;
    progress.finish(&format!("n={n} w={workers}: done"));

    let mut smtp_sessions = None;
    let (mut throttle_answers, mut max_per_second, mut groups) = (None, None, Vec::new());
    let mut per_second: Vec<u64> = Vec::new();
    let mut samples_ms: Vec<(String, Vec<i64>)> = Vec::new();
    let (mut lateness, missing, duplicates, measured_at, last_ms) = match &sink {
        Sink::Slack(url) => {
            let arrivals: Vec<Arrival> = get_json(&http, &format!("{url}/arrivals")).await?;
            let stats: StandinStats = get_json(&http, &format!("{url}/stats")).await?;
            throttle_answers = Some(stats.rate_limited + stats.throttled);
            let seconds: Vec<(i64, u64)> = get_json(&http, &format!("{url}/per_second")).await?;
            let first = due.timestamp_millis().div_euclid(1000);
            for (second, accepted) in seconds {
                if let Ok(i) = usize::try_from(second - first) {
                    if per_second.len() <= i {
                        per_second.resize(i + 1, 0);
                    }
                    per_second[i] = accepted;
                }
            }
            max_per_second = Some(stats.max_per_second);
            samples_ms.push((
                "all deliveries".into(),
                arrivals
                    .iter()
                    .map(|a| a.arrived_ms - a.due_at_ms)
                    .collect(),
            ));
            if let Some(large) = &large_tenant {
                let prefix = format!("{large}/");
                let (big, rest): (Vec<&Arrival>, Vec<&Arrival>) = arrivals
                    .iter()
                    .partition(|a| a.delivery.starts_with(&prefix));
                for (group, part) in [("large tenant", big), ("other tenants", rest)] {
                    let late: Vec<i64> = part.iter().map(|a| a.arrived_ms - a.due_at_ms).collect();
                    groups.push(GroupLateness {
                        group: group.into(),
                        deliveries: part.len(),
                        lateness_ms: Lateness::from_millis(late.clone()),
                    });
                    samples_ms.push((group.into(), late));
                }
            }
            let at_sink = arrivals.iter().map(|a| (a.arrived_ms, a.due_at_ms));
            measured_at_sink(at_sink, due, n, stats.unique, stats.duplicates)
        }
        Sink::Smtp(url) => {
            let arrivals: Vec<MailArrival> = get_json(&http, &format!("{url}/arrivals")).await?;
            let stats: SmtpStats = get_json(&http, &format!("{url}/stats")).await?;
            smtp_sessions = Some(stats.connections);
            samples_ms.push((
                "all deliveries".into(),
                arrivals
                    .iter()
                    .map(|a| a.arrived_ms - due.timestamp_millis())
                    .collect(),
            ));
            // Mails carry no due instant; every bench delivery is due at `due`.
            let at_sink = arrivals
                .iter()
                .map(|a| (a.arrived_ms, due.timestamp_millis()));
            measured_at_sink(at_sink, due, n, stats.unique, stats.duplicates)
        }
        Sink::Rows => {
            let sinks = match (&opts.maildir, opts.channel) {
                (Some(md), Channel::Mail) => {
                    Some(scenario::count_mail(&[md.join("new"), md.join("cur")])?)
                }
                _ => None,
            };
            let v = scenario::verify(&toki, &expected, due, sinks.as_ref()).await?;
            if opts.plot.is_some() {
                samples_ms.push((
                    "all deliveries".into(),
                    delivered_lateness(&toki, &tenants, opts.channel).await?,
                ));
            }
            (
                v.lateness_ms,
                v.missing,
                v.duplicates,
                "rows",
                v.last_delivery_ms,
            )
        }
    };
    // Max lateness is the time from due to the last delivery.
    lateness.max = lateness.max.max(last_ms);
    drop(fleet);
    drop(standin);
    Ok(BenchRun {
        deliveries: n,
        workers,
        daemons,
        share,
        backend: opts.backend,
        channel: opts.channel,
        lateness_ms: lateness,
        missing,
        duplicates,
        deliveries_per_s: if last_ms > 0 {
            ((n as f64 - missing as f64) / (last_ms as f64 / 1000.0)).round()
        } else {
            0.0
        },
        peak_rss_mb,
        cpu_s,
        enqueue_s: (enqueue_s * 100.0).round() / 100.0,
        smtp_sessions,
        throttle_answers,
        max_per_second,
        groups,
        per_second,
        measured_at,
        plot: None,
        samples_ms,
    })
}

/// Lateness (ms) of every delivered row of `channel`, for `--plot`.
async fn delivered_lateness(
    toki: &Toki,
    tenants: &[toki_model::TenantId],
    channel: Channel,
) -> anyhow::Result<Vec<i64>> {
    let mut late = Vec::new();
    for t in tenants {
        for d in toki.stores.open(t).await?.deliveries().await? {
            if d.key.channel == channel && d.status == DeliveryStatus::Delivered {
                late.push((d.at - d.due_at.0).num_milliseconds());
            }
        }
    }
    Ok(late)
}

/// Lateness from (arrival, due) pairs at a stand-in, the missing, the
/// duplicates, where, and the last arrival after `due` (ms).
fn measured_at_sink(
    at_sink: impl Iterator<Item = (i64, i64)>,
    due: chrono::DateTime<chrono::Utc>,
    n: usize,
    unique: u64,
    duplicates: u64,
) -> (Lateness, u64, u64, &'static str, i64) {
    let (lat, arrived): (Vec<i64>, Vec<i64>) = at_sink.map(|(a, d)| (a - d, a)).unzip();
    let last = arrived.into_iter().max().unwrap_or(0) - due.timestamp_millis();
    (
        Lateness::from_millis(lat),
        (n as u64).saturating_sub(unique),
        duplicates,
        "sink",
        last,
    )
}

pub fn header() -> Vec<&'static str> {
    vec![
        "N",
        "W",
        "D",
        "backend",
        "channel",
        "enqueue s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "deliv/s",
        "missing",
        "dup",
        "RSS MB",
        "CPU s",
        "sessions",
        "share %",
        "429s",
        "max/s",
    ]
}

pub fn row(r: &BenchRun, label: Option<&str>) -> Vec<String> {
    vec![
        format!("{}{}", r.deliveries, label.unwrap_or("")),
        r.workers.to_string(),
        r.daemons.to_string(),
        format!("{:?}", r.backend).to_lowercase(),
        r.channel.to_string(),
        format!("{:.1}", r.enqueue_s),
        r.lateness_ms.p50.to_string(),
        r.lateness_ms.p90.to_string(),
        r.lateness_ms.p99.to_string(),
        r.lateness_ms.max.to_string(),
        format!("{:.0}", r.deliveries_per_s),
        r.missing.to_string(),
        r.duplicates.to_string(),
        format!("{:.1}", r.peak_rss_mb),
        format!("{:.2}", r.cpu_s),
        r.smtp_sessions
            .map_or_else(|| "-".to_owned(), |s| s.to_string()),
        share_percent(&r.share),
        r.throttle_answers
            .map_or_else(|| "-".to_owned(), |s| s.to_string()),
        r.max_per_second
            .map_or_else(|| "-".to_owned(), |s| s.to_string()),
    ]
}

/// Lateness per group of tenants, as a table.
pub fn groups_table(groups: &[GroupLateness]) -> String {
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            vec![
                g.group.clone(),
                g.deliveries.to_string(),
                g.lateness_ms.p50.to_string(),
                g.lateness_ms.p99.to_string(),
                g.lateness_ms.max.to_string(),
            ]
        })
        .collect();
    toki_app::table::table(
        &["tenants", "deliveries", "p50 ms", "p99 ms", "max ms"],
        &rows,
    )
}

/// Each daemon's part of the deliveries, in percent: `34/33/33`.
fn share_percent(share: &[u64]) -> String {
    let total: u64 = share.iter().sum();
    if total == 0 {
        return "-".into();
    }
    share
        .iter()
        .map(|s| format!("{:.0}", *s as f64 * 100.0 / total as f64))
        .collect::<Vec<_>>()
        .join("/")
}

/// Runs the sweep; prints rows as they finish. Returns whether every run delivered everything once.
pub async fn run(base: Config, opts: BenchOptions) -> anyhow::Result<bool> {
    let mut rows = Vec::new();
    let mut clean = true;
    let mut points = Vec::new();
    for &n in &opts.deliveries {
        for &d in &opts.daemons {
            for &w in &opts.workers {
                points.push((n, d, w));
            }
        }
    }
    for (n, d, w) in points {
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
                let title = RunTitle {
                    deliveries: r.deliveries,
                    channel: r.channel,
                    workers: r.workers,
                    daemons: r.daemons,
                    lateness_ms: &r.lateness_ms,
                };
                let path = write_cdf(plots, &name.file_name(), &title, &r.samples_ms)?;
                if !opts.json {
                    eprintln!("lateness CDF: {}", path.display());
                }
                r.plot = Some(path);
            }
            clean &= r.missing == 0 && r.duplicates == 0;
            if opts.json {
                println!("{}", serde_json::to_string(&r)?);
            }
            if !opts.json {
                // Each run as it finishes: a long sweep shows results as it goes.
                eprintln!("{}", toki_app::table::table(&header(), &[row(&r, None)]));
                if !r.groups.is_empty() {
                    eprintln!("{}", groups_table(&r.groups));
                }
            }
            runs.push(r);
        }
        if runs.len() > 1 {
            for r in &runs {
                rows.push(row(r, Some(" (run)")));
            }
        }
        // The median run by p99 lateness.
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
    }
    if !opts.json {
        println!("{}", toki_app::table::table(&header(), &rows));
        println!("lateness = arrival at the sink - due (the Slack or SMTP stand-in's clock), or delivered_at - due from the delivery rows (chat, mail to --smtp-url); max = due to last delivery; D = daemon processes, RSS = the largest one's peak, CPU = all of theirs; sessions = SMTP connections the stand-in accepted; share = each daemon's part of the delivered rows; 429s = throttle answers the Slack stand-in gave, max/s = the most it accepted in any 1-second window");
    }
    Ok(clean)
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
