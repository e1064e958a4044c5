//! `toki demo`: the whole pipeline in one process on the embedded default —
//! N deliveries due at one instant a short lead ahead, then a report.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant as StdInstant};

use anyhow::{bail, Context};
use chrono::{DateTime, Utc};
use serde::Serialize;
use toki_core::daemon::Daemon;
use toki_model::{Channel, TenantId};
use tokio::sync::watch;

use crate::progress::Progress;
use crate::scenario::{self, Verification};
use toki_app::{BackendKind, Config, Toki};

/// The channels that need no set-up by a tenant (a webhook needs its endpoint).
const DEMO_CHANNELS: [Channel; 3] = [Channel::Mail, Channel::Chat, Channel::Slack];

#[derive(Debug, Clone)]
pub struct DemoOptions {
    pub deliveries: usize,
    pub tenants: usize,
    pub workers: usize,
    /// From now to the due instant; none: [`DEFAULT_LEAD`], or longer when
    /// a timed sample says registering takes longer.
    pub lead: Option<Duration>,
    pub data_dir: PathBuf,
    pub json: bool,
    pub backend: BackendKind,
}

#[derive(Debug, Serialize)]
pub struct DemoReport {
    pub deliveries: u64,
    pub delivered: u64,
    pub missing: u64,
    pub duplicates: u64,
    pub stale: u64,
    pub lateness_ms: toki_model::lateness::Lateness,
    pub elapsed_s: f64,
    pub backend: BackendKind,
    pub tenants: usize,
    pub workers: usize,
    pub due_at: String,
    pub last_delivery_ms: i64,
    pub registration_s: f64,
    /// The lead the run used (seconds).
    pub lead_s: u64,
    pub channels: Vec<scenario::ChannelFigures>,
}

const MARKER: &str = ".toki-demo";

/// A fresh data folder; an old demo folder is replaced, anything else is left alone.
fn fresh_data_dir(dir: &PathBuf) -> anyhow::Result<()> {
    if dir.exists() {
        let is_demo = dir.join(MARKER).exists();
        let empty = std::fs::read_dir(dir)?.next().is_none();
        if !is_demo && !empty {
            bail!(
                "--data-dir {}: exists and was not made by `toki demo`; choose another folder",
                dir.display()
            );
        }
        std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join(MARKER),
        "made by toki demo; removed by the next run\n",
    )?;
    Ok(())
}

pub async fn run(config: Config, opts: DemoOptions) -> anyhow::Result<DemoReport> {
    check(&opts)?;
    let started = StdInstant::now();
    let toki = open(config, &opts).await?;
    let progress = Progress::new(!opts.json);
    let tenants = demo_tenants(&toki, &opts).await?;
    progress.println(&format!(
        "toki demo: {} deliveries, {} tenants, {} workers, {:?} backend, data in {}",
        opts.deliveries,
        opts.tenants,
        opts.workers,
        opts.backend,
        opts.data_dir.display()
    ));
    scenario::create_tenants(&toki, &tenants, scenario::USERS_PER_TENANT).await?;

    // The pipeline runs before anything is registered, as in production.
    let (stop, shutdown) = watch::channel(false);
    let daemon = toki.daemon().await?;
    let daemon_task = tokio::spawn(daemon.clone().run(shutdown.clone()));
    let scanner_task = tokio::spawn(toki.clone().run_scanner(shutdown.clone()));

    let lead = match opts.lead {
        Some(lead) => lead,
        None => lead_for(&toki, &tenants, opts.deliveries, &progress).await?,
    };
    let due = scenario::due_instant(lead);
    let meetings = scenario::plan_meetings(opts.deliveries, &tenants, &DEMO_CHANNELS, due);
    let reg_started = StdInstant::now();
    let expected = scenario::register(&toki, meetings, &progress).await?;
    let registration_s = reg_started.elapsed().as_secs_f64();
    if toki.clock.now() > due {
        tracing::warn!("registration ran past the due instant; raise --lead");
    }

    wait_for_deliveries(&toki, &daemon, due, &opts, &progress).await;
    // Stop and drain, so every outcome is recorded before it is counted.
    stop.send(true).ok();
    daemon_task.await.context("daemon task")?;
    scanner_task.await.context("scanner task")?;

    let sinks = scenario::count_outboxes(&opts.data_dir)?;
    let v: Verification = scenario::verify(&toki, &expected, due, Some(&sinks)).await?;
    Ok(DemoReport {
        deliveries: v.deliveries,
        delivered: v.delivered,
        missing: v.missing,
        duplicates: v.duplicates,
        stale: v.stale,
        lateness_ms: v.lateness_ms,
        elapsed_s: (started.elapsed().as_secs_f64() * 100.0).round() / 100.0,
        backend: opts.backend,
        tenants: opts.tenants,
        workers: opts.workers,
        due_at: due.to_rfc3339(),
        last_delivery_ms: v.last_delivery_ms,
        registration_s: (registration_s * 100.0).round() / 100.0,
        lead_s: lead.as_secs(),
        channels: v.channels,
    })
}

/// The lead without `--lead`, unless registering takes longer.
pub const DEFAULT_LEAD: Duration = Duration::from_secs(30);
const LEAD_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(5)..=Duration::from_secs(600);
/// Deliveries in the timed sample (a tenth of the run, at most this).
const SAMPLE_DELIVERIES: usize = 300;

/// A lead that fits the registration rate this backend shows: a sample of
/// meetings (a day ahead) is registered, timed and deleted; the lead is
/// the projected registration time with half again as margin and 10 s for
/// the pipeline, at least [`DEFAULT_LEAD`]. Says what it found.
async fn lead_for(
    toki: &Toki,
    tenants: &[TenantId],
    deliveries: usize,
    progress: &Progress,
) -> anyhow::Result<Duration> {
    let sample = (deliveries / 10).clamp(1, SAMPLE_DELIVERIES);
    let far = toki.clock.now() + chrono::Duration::days(1);
    let meetings: Vec<_> = scenario::plan_meetings(sample, tenants, &DEMO_CHANNELS, far)
        .into_iter()
        .map(|m| {
            Ok(scenario::Meeting {
                id: format!("sample-{}", m.id).parse()?,
                ..m
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let ids: Vec<_> = meetings
        .iter()
        .map(|m| (m.tenant.clone(), m.id.clone()))
        .collect();
    let started = StdInstant::now();
    scenario::register(toki, meetings, &Progress::new(false)).await?;
    let per_delivery = started.elapsed().as_secs_f64() / sample as f64;
    let registrar = toki.registrar();
    for (tenant, id) in &ids {
        registrar.delete_schedule(tenant, id).await?;
    }
    let projected = per_delivery * deliveries as f64;
    let lead = Duration::from_secs_f64(projected * 1.5 + 10.0)
        .max(DEFAULT_LEAD)
        .min(*LEAD_RANGE.end());
    progress.println(&format!(
        "registering {deliveries} deliveries should take about {projected:.0} s \
         (a sample of {sample} took {:.1} s): due in {} s",
        per_delivery * sample as f64,
        lead.as_secs()
    ));
    Ok(lead)
}

/// The options' ranges.
fn check(opts: &DemoOptions) -> anyhow::Result<()> {
    if opts.deliveries == 0 {
        bail!("--deliveries: must be at least 1");
    }
    if opts.tenants == 0 || opts.tenants > 100 {
        bail!("--tenants: {} is out of range 1..=100", opts.tenants);
    }
    if let Some(lead) = opts.lead.filter(|l| !LEAD_RANGE.contains(l)) {
        bail!("--lead: {} s is out of range 5..=600", lead.as_secs());
    }
    Ok(())
}

/// Toki on a fresh data folder, with the demo's backend and workers.
async fn open(mut config: Config, opts: &DemoOptions) -> anyhow::Result<Toki> {
    fresh_data_dir(&opts.data_dir)?;
    config.data_dir = opts.data_dir.clone();
    config.backend = opts.backend;
    config.daemon.workers = opts.workers;
    config.pipeline.scan_interval_s = config.pipeline.scan_interval_s.min(10);
    config.aws.create_resources = true;
    config.validate()?;
    Toki::open(config).await
}

/// The demo's tenants; on shared servers (the aws backend) its own, and
/// their old databases dropped so that they start empty.
async fn demo_tenants(toki: &Toki, opts: &DemoOptions) -> anyhow::Result<Vec<TenantId>> {
    let tenants = scenario::tenant_ids(opts.tenants);
    if opts.backend != BackendKind::Aws {
        return Ok(tenants);
    }
    let tenants: Vec<TenantId> = tenants
        .iter()
        .map(|t| format!("demo-{t}").parse())
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for t in &tenants {
        toki_sql::drop_tenant_database(&toki.databases.admin_url(t)?).await?;
    }
    Ok(tenants)
}

/// Waits for the due instant and for every delivery to settle, with a deadline.
async fn wait_for_deliveries(
    toki: &Toki,
    daemon: &Daemon,
    due: DateTime<Utc>,
    opts: &DemoOptions,
    progress: &Progress,
) {
    let total = opts.deliveries as u64;
    let deadline = due + chrono::Duration::seconds(30 + (opts.deliveries / 500) as i64);
    progress.stage("waiting", None);
    let mut delivering = false;
    loop {
        let s = daemon.stats.snapshot();
        let settled = s.delivered + s.undeliverable + daemon.stats.stale.load(Ordering::Relaxed);
        let now = toki.clock.now();
        if settled >= total || now > deadline {
            break;
        }
        if now < due {
            progress.message(format!(
                "due at {} UTC, in {:.1} s",
                due.format("%H:%M:%S"),
                (due - now).num_milliseconds() as f64 / 1000.0
            ));
        } else {
            if !delivering {
                progress.stage("delivering", Some(total));
                delivering = true;
            }
            progress.set(s.delivered);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let delivered = daemon.stats.snapshot().delivered;
    progress.set(delivered);
    progress.finish(&format!("delivered {delivered} of {total}"));
}

pub fn render(r: &DemoReport) -> String {
    let mut rows: Vec<Vec<String>> = r
        .channels
        .iter()
        .map(|c| {
            vec![
                c.channel.clone(),
                c.expected.to_string(),
                c.delivered.to_string(),
                c.missing.to_string(),
                c.duplicates.to_string(),
                c.stale.to_string(),
                c.lateness_ms.p50.to_string(),
                c.lateness_ms.p90.to_string(),
                c.lateness_ms.p99.to_string(),
                c.lateness_ms.max.to_string(),
            ]
        })
        .collect();
    rows.push(vec![
        "total".into(),
        r.deliveries.to_string(),
        r.delivered.to_string(),
        r.missing.to_string(),
        r.duplicates.to_string(),
        r.stale.to_string(),
        r.lateness_ms.p50.to_string(),
        r.lateness_ms.p90.to_string(),
        r.lateness_ms.p99.to_string(),
        r.lateness_ms.max.to_string(),
    ]);
    let verdict = if r.missing == 0 && r.duplicates == 0 {
        format!(
            "OK: {} of {} delivered, none missing, none twice.",
            r.delivered, r.deliveries
        )
    } else {
        format!(
            "FAILED: {} missing, {} duplicated.",
            r.missing, r.duplicates
        )
    };
    format!(
        "\nDeliveries due at {} ({} tenants, {} workers, {:?} backend)\n\n{}\n\nlateness = delivered_at - due_at, in ms\nlead {} s; registration {:.2} s; last delivery {} ms after due; elapsed {:.2} s\n{}\n",
        r.due_at,
        r.tenants,
        r.workers,
        r.backend,
        toki_app::table::table(
            &["channel", "expected", "delivered", "missing", "duplicates", "stale", "p50 ms", "p90 ms", "p99 ms", "max ms"],
            &rows
        ),
        r.lead_s,
        r.registration_s,
        r.last_delivery_ms,
        r.elapsed_s,
        verdict
    )
}
