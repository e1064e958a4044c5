//! One bench run: a fresh data folder and sink, the tenants, the daemon
//! processes, the meetings registered, the deliveries waited for and measured.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant as StdInstant};

use anyhow::{bail, Context};
use chrono::{DateTime, Utc};
use toki_app::{BackendKind, Config, Toki};
use toki_model::{Channel, DeliveryKey, TenantId};

use super::events::{self, EventFigures, EventsMode};
use super::measure::{Measured, RowsOptions, Sink, Watch};
use super::options::BenchOptions;
use super::processes::{
    fleet_usage, spawn_daemons, start_smtp_standin, start_standin, start_webhook_standin,
    stop_fleet, DaemonArgs, Guard,
};
use super::results::BenchRun;
use crate::progress::Progress;
use crate::scenario::{self, Meeting};

/// How long a daemon may take to stop after SIGTERM: its long polls' wait
/// (20 s) and a margin.
const DAEMON_STOP_GRACE: Duration = Duration::from_secs(30);

/// Runs `n` deliveries (and the large tenant's, if any) with `daemons`
/// daemon processes of `workers` workers each, in `dir` (replaced).
pub async fn run_once(
    base: &Config,
    opts: &BenchOptions,
    n: usize,
    workers: usize,
    daemons: usize,
    dir: &Path,
) -> anyhow::Result<BenchRun> {
    let mut config = run_config(base, opts, workers, dir)?;
    let (standin, sink) = start_sink(opts, &mut config)?;
    let receiver = start_events_receiver(opts, &sink, &mut config)?;
    config.validate()?;
    let toki = Toki::open(config.clone()).await?;
    let tenants = bench_tenants(&toki, opts).await?;
    let progress = Progress::new(!opts.json);
    if let Some(r) = &receiver {
        events::register_endpoints(&toki, &tenants, &r.url, &progress).await?;
    }
    let slack_url = match &sink {
        Sink::Slack(url) => Some(url.as_str()),
        _ => None,
    };
    let webhook_url = match &sink {
        Sink::Webhook(url) => {
            webhook_endpoints(&toki, &tenants, url).await?;
            Some(url.as_str())
        }
        _ => None,
    };
    let args = DaemonArgs {
        dir,
        workers,
        limits: &opts.limits,
        slack_url,
        webhook_url,
        events_url: receiver.as_ref().map(|r| r.url.as_str()),
        cores: opts.cores,
    };
    let fleet = spawn_daemons(daemons, &config, &args)?;
    let pids: Vec<u32> = fleet.iter().map(Guard::pid).collect();
    if receiver.is_some() {
        events::wait_first_look(&toki, &progress).await?;
    }

    let lead = Duration::from_secs(opts.lead.unwrap_or(10 + n as u64 / 1000));
    let due = scenario::due_instant(lead);
    let (meetings, large_tenant) = plan(opts, n, &tenants, due)?;
    let n = n + opts.large.unwrap_or(0);
    let started = StdInstant::now();
    let expected = scenario::register(&toki, meetings, &progress).await?;
    let enqueue_s = started.elapsed().as_secs_f64();
    if toki.clock.now() >= due {
        bail!("registration took {enqueue_s:.1} s, past the due instant; raise --lead");
    }

    let http = reqwest::Client::new();
    let watch = Watch {
        toki: &toki,
        sink: &sink,
        http: &http,
        tenants: &tenants,
        channel: opts.channel,
        due,
        deliveries: n,
    };
    watch.wait(workers, &progress).await?;
    // A moment for duplicates to show up, and for the daemon to record its rows.
    tokio::time::sleep(Duration::from_millis(500)).await;
    if let Some(r) = &receiver {
        // Every delivery makes one event at least (its `delivery.delivered`).
        events::wait(&http, &r.url, n as u64, &progress).await?;
    }
    let (peak_rss_mb, cpu_s) = fleet_usage(&pids);
    let sink_cpu_s = standin.as_ref().map(|g| fleet_usage(&[g.pid()]).1);
    let share = watch.delivered_by_daemon(&pids).await?;
    progress.finish(&format!("n={n} w={workers}: done"));
    let measured = measure(&watch, opts, &expected, large_tenant.as_ref()).await?;
    let events = match &receiver {
        Some(r) => Some(r.measure(&toki, &http, &tenants, sink_cpu_s).await?),
        None => None,
    };
    tokio::task::spawn_blocking(move || stop_fleet(fleet, DAEMON_STOP_GRACE)).await?;
    drop(standin);
    drop(receiver);
    let facts = RunFacts {
        deliveries: n,
        workers,
        daemons,
        share,
        peak_rss_mb,
        cpu_s,
        sink_cpu_s,
        enqueue_s,
        events,
    };
    Ok(bench_run(opts, facts, measured))
}

/// The run's configuration: `base` in a fresh `dir`, with the bench's backend and workers.
fn run_config(
    base: &Config,
    opts: &BenchOptions,
    workers: usize,
    dir: &Path,
) -> anyhow::Result<Config> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let mut config = base.clone();
    config.backend = opts.backend;
    config.data_dir = dir.to_path_buf();
    config.daemon.workers = workers;
    config.aws.create_resources = true;
    Ok(config)
}

/// Where the run's deliveries go and are counted: a stand-in process started
/// for it (Slack, or mail without `--smtp-url`), or the delivery rows.
fn start_sink(opts: &BenchOptions, config: &mut Config) -> anyhow::Result<(Option<Guard>, Sink)> {
    Ok(match (opts.channel, &opts.smtp_url) {
        (Channel::Slack, _) => {
            let (g, url) = start_standin(opts.standin_limit, opts.cores)?;
            config.slack.token = Some("xoxb-toki-bench".into());
            config.slack.api_url = format!("{url}/api");
            (Some(g), Sink::Slack(url))
        }
        (Channel::Mail, None) => {
            let (g, smtp, http) = start_smtp_standin(opts.cores)?;
            config.mail.smtp_url = Some(smtp.into());
            (Some(g), Sink::Smtp(http))
        }
        (Channel::Webhook, _) => {
            let (g, url) = start_webhook_standin(opts.cores)?;
            // The receiver is on this machine: the operator's exception.
            events::allow_local_receiver(config)?;
            (Some(g), Sink::Webhook(url))
        }
        (Channel::Mail, Some(url)) => {
            config.mail.smtp_url = Some(url.clone().into());
            (None, Sink::Rows)
        }
        _ => (None, Sink::Rows),
    })
}

/// Where a run's delivery events go: the webhook stand-in (its own process,
/// or the sink's when webhook deliveries go to it too).
struct EventsReceiver {
    url: String,
    /// None: the sink's stand-in, whose CPU is the sink's.
    process: Option<Guard>,
}

impl EventsReceiver {
    /// The run's event figures, with the receiver's CPU.
    async fn measure(
        &self,
        toki: &Toki,
        http: &reqwest::Client,
        tenants: &[TenantId],
        sink_cpu_s: Option<f64>,
    ) -> anyhow::Result<EventFigures> {
        let mut figures = events::measure(toki, http, &self.url, tenants).await?;
        figures.receiver_cpu_s = match &self.process {
            Some(g) => fleet_usage(&[g.pid()]).1,
            None => sink_cpu_s.unwrap_or(0.0),
        };
        Ok(figures)
    }
}

/// With `--events`, the receiver of the tenants' events, the daemons
/// allowed to post to it.
fn start_events_receiver(
    opts: &BenchOptions,
    sink: &Sink,
    config: &mut Config,
) -> anyhow::Result<Option<EventsReceiver>> {
    if opts.events == EventsMode::Off {
        return Ok(None);
    }
    if let Sink::Webhook(url) = sink {
        return Ok(Some(EventsReceiver {
            url: url.clone(),
            process: None,
        }));
    }
    let (g, url) = start_webhook_standin(opts.cores)?;
    events::allow_local_receiver(config)?;
    Ok(Some(EventsReceiver {
        url,
        process: Some(g),
    }))
}

/// Points each tenant's default webhook endpoint at the receiver and tells
/// the receiver the secret Toki made for it.
async fn webhook_endpoints(toki: &Toki, tenants: &[TenantId], url: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let registrar = toki.registrar();
    for t in tenants {
        let input = toki_model::webhook::WebhookSettingsInput {
            default_url: Some(format!("{url}/hook")),
        };
        let view = registrar.put_webhook_settings(t, &input).await?;
        let secret = view
            .secret
            .context("new webhook settings show their secret")?;
        http.post(format!("{url}/control/secret"))
            .json(&crate::webhook_standin::TenantSecret {
                tenant: t.to_string(),
                secret,
            })
            .send()
            .await?
            .error_for_status()?;
    }
    Ok(())
}

/// The run's tenants, created empty (on the aws backend under names of
/// their own, one set per run of the invocation since the directory table
/// outlives a run, their old databases dropped); the first gets the large
/// tenant's limits when there are any.
async fn bench_tenants(toki: &Toki, opts: &BenchOptions) -> anyhow::Result<Vec<TenantId>> {
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
    let mut tenants = scenario::tenant_ids(opts.tenants);
    if opts.backend == BackendKind::Aws {
        let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tenants = tenants
            .iter()
            .map(|t| format!("bench{run}-{t}").parse())
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for t in &tenants {
            toki_sql::drop_tenant_database(&toki.databases.admin_url(t)?).await?;
        }
    }
    // As many users as the largest run's meetings name (all for a large tenant).
    let most = opts.deliveries.iter().copied().max().unwrap_or(0);
    let users = match opts.large {
        Some(_) => scenario::USERS_PER_TENANT,
        None => scenario::users_needed(most, tenants.len()),
    };
    scenario::create_tenants(toki, &tenants, users).await?;
    if let Some(limits) = &opts.large_limits {
        let mut record = toki
            .directory
            .get(&tenants[0])
            .await?
            .context("the large tenant was just created")?;
        record.limits = limits.clone();
        toki.directory.put(&record).await?;
    }
    Ok(tenants)
}

/// The meetings to register: `n` deliveries across the tenants, and with
/// `--large` that many more for the first tenant (then the large one) alone.
fn plan(
    opts: &BenchOptions,
    n: usize,
    tenants: &[TenantId],
    due: DateTime<Utc>,
) -> anyhow::Result<(Vec<Meeting>, Option<TenantId>)> {
    let channels = [opts.channel];
    let Some(large) = opts.large else {
        return Ok((scenario::plan_meetings(n, tenants, &channels, due), None));
    };
    if tenants.len() < 2 {
        bail!("--large needs --tenants 2 or more");
    }
    // The large tenant is the first; the others share `n`.
    let mut meetings = scenario::plan_meetings(n, &tenants[1..], &channels, due);
    let t = &tenants[0];
    meetings.extend(scenario::plan_meetings(
        large,
        std::slice::from_ref(t),
        &channels,
        due,
    ));
    Ok((meetings, Some(t.clone())))
}

/// Measures the run where its sink counts.
async fn measure(
    watch: &Watch<'_>,
    opts: &BenchOptions,
    expected: &HashMap<TenantId, HashSet<DeliveryKey>>,
    large_tenant: Option<&TenantId>,
) -> anyhow::Result<Measured> {
    match watch.sink {
        Sink::Slack(url) => watch.at_slack(url, large_tenant).await,
        Sink::Smtp(url) => watch.at_smtp(url).await,
        Sink::Webhook(url) => watch.at_webhook(url).await,
        Sink::Rows => {
            let rows = RowsOptions {
                maildir: opts.maildir.as_ref(),
                plot: opts.plot.is_some(),
            };
            watch.in_rows(expected, &rows).await
        }
    }
}

/// What the bench knows of a run itself, besides what it measured.
struct RunFacts {
    /// Every delivery, the large tenant's included.
    deliveries: usize,
    workers: usize,
    daemons: usize,
    share: Vec<u64>,
    peak_rss_mb: f64,
    cpu_s: f64,
    /// The stand-in process's CPU seconds (none: no stand-in).
    sink_cpu_s: Option<f64>,
    enqueue_s: f64,
    events: Option<EventFigures>,
}

/// The run's figures: what the bench knows, and what was measured.
fn bench_run(opts: &BenchOptions, facts: RunFacts, m: Measured) -> BenchRun {
    let n = facts.deliveries;
    let mut lateness = m.lateness_ms;
    // Max lateness is the time from due to the last delivery.
    lateness.max = lateness.max.max(m.last_ms);
    BenchRun {
        deliveries: n,
        workers: facts.workers,
        daemons: facts.daemons,
        share: facts.share,
        backend: opts.backend,
        channel: opts.channel,
        lateness_ms: lateness,
        missing: m.missing,
        duplicates: m.duplicates,
        deliveries_per_s: if m.last_ms > 0 {
            ((n as f64 - m.missing as f64) / (m.last_ms as f64 / 1000.0)).round()
        } else {
            0.0
        },
        peak_rss_mb: facts.peak_rss_mb,
        cpu_s: facts.cpu_s,
        sink_cpu_s: facts.sink_cpu_s,
        enqueue_s: (facts.enqueue_s * 100.0).round() / 100.0,
        smtp_sessions: m.smtp_sessions,
        throttle_answers: m.throttle_answers,
        max_per_second: m.max_per_second,
        groups: m.groups,
        per_second: m.per_second,
        measured_at: m.measured_at,
        plot: None,
        events: facts.events,
        samples_ms: m.samples_ms,
    }
}
