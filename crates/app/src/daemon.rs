//! Running the daemon alone (`toki daemon`, `toki-daemon`): until SIGTERM or
//! Ctrl-C, then drain in-flight deliveries. While its workers keep polling it
//! refreshes a heartbeat file, which `toki-daemon healthcheck` (the container's
//! health check) reads.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use toki_core::daemon::DaemonStats;
use tokio::sync::watch;

use crate::config::Config;
use crate::toki::Toki;

/// How often the heartbeat is refreshed, and how stale it may get before the
/// daemon counts as unhealthy (a worker's long poll returns within 20 s).
const BEAT: Duration = Duration::from_secs(5);
pub const HEALTHY_WITHIN: Duration = Duration::from_secs(60);

/// Where the heartbeat is: `TOKI_HEARTBEAT_FILE`, else in the temp folder.
pub fn heartbeat_file() -> PathBuf {
    std::env::var_os("TOKI_HEARTBEAT_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("toki-daemon.heartbeat"))
}

/// What the daemon shows of itself besides its logs.
#[derive(Debug, Clone, Default)]
pub struct Observability {
    /// `/metrics`, `/healthz` and `/readyz` on this address.
    pub metrics_listen: Option<SocketAddr>,
    /// Lateness as CloudWatch EMF lines on stdout this often (on ECS).
    pub emf_every: Option<Duration>,
}

/// Runs the daemon until a signal, showing itself as `seen` says.
pub async fn run(config: Config, seen: Observability) -> anyhow::Result<()> {
    let metrics_listen = seen.metrics_listen;
    let files = crate::open_files::raise(crate::open_files::wanted(&config));
    tracing::info!(?files, "open-file limit");
    let toki = Toki::open(config).await?;
    let daemon = toki.daemon().await?;
    let (stop, shutdown) = watch::channel(false);
    tracing::info!(workers = toki.config.daemon.workers, "daemon started");
    let ops = match metrics_listen {
        Some(listen) => {
            let alive = || healthy(&heartbeat_file());
            let limits = crate::http::ConnectionLimits::from(&toki.config.http);
            let routes = crate::ops::routes(toki.clone());
            let (addr, task) =
                crate::ops::serve(routes, listen, limits, shutdown.clone(), alive).await?;
            tracing::info!(%addr, "metrics, healthz and readyz listening");
            Some(task)
        }
        None => None,
    };
    let beat = tokio::spawn(heartbeat(
        daemon.stats.clone(),
        heartbeat_file(),
        shutdown.clone(),
    ));
    let emf = seen
        .emf_every
        .map(|every| tokio::spawn(emit_lateness(toki.clone(), every, shutdown.clone())));
    let events = tokio::spawn(toki.event_dispatcher()?.run(shutdown.clone()));
    let task = tokio::spawn(daemon.run(shutdown));
    crate::shutdown_signal().await;
    tracing::info!("stopping; draining in-flight deliveries");
    stop.send_replace(true);
    task.await?;
    events.await?;
    beat.await?;
    if let Some(ops) = ops {
        ops.await?;
    }
    if let Some(emf) = emf {
        emf.await?;
    }
    Ok(())
}

/// Prints the lateness of each period's deliveries as EMF lines (CloudWatch
/// turns them into `Toki/LatenessMs`, which the p99 alarm watches); the last
/// period is printed on the way out.
async fn emit_lateness(toki: Toki, every: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut periods = crate::emf::LatenessPeriods::default();
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        let stopping = tokio::select! {
            _ = tick.tick() => false,
            _ = shutdown.changed() => true,
        };
        let now = toki_ports::Clock::now(toki.clock.as_ref()).timestamp_millis();
        for line in periods.lines(&toki.metrics.encode(), &toki.config.environment, now) {
            println!("{line}");
        }
        if stopping {
            return;
        }
    }
}

/// Touches `path` while the workers' poll count moves.
async fn heartbeat(stats: Arc<DaemonStats>, path: PathBuf, mut shutdown: watch::Receiver<bool>) {
    let mut seen = u64::MAX;
    let mut last_move = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(BEAT);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => break,
        }
        let polls = stats.polls.load(Ordering::Relaxed);
        if polls != seen {
            seen = polls;
            last_move = tokio::time::Instant::now();
        }
        if last_move.elapsed() < HEALTHY_WITHIN {
            if let Err(e) = std::fs::write(&path, b"alive\n") {
                tracing::warn!(path = %path.display(), error = %e, "heartbeat not written");
            }
        }
    }
    let _ = std::fs::remove_file(&path);
}

/// `toki-daemon healthcheck`: the running daemon's `/healthz` when it serves
/// one (`TOKI_METRICS_LISTEN`), else its heartbeat file.
pub fn healthcheck(metrics_listen: Option<SocketAddr>) -> Result<(), String> {
    let Some(addr) = metrics_listen else {
        return healthy(&heartbeat_file());
    };
    use std::io::{Read, Write};
    let timeout = Duration::from_secs(3);
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("no /healthz at {addr}: {e}"))?;
    stream.set_read_timeout(Some(timeout)).ok();
    write!(stream, "GET /healthz HTTP/1.0\r\nHost: {addr}\r\n\r\n")
        .map_err(|e| format!("/healthz at {addr}: {e}"))?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| format!("/healthz at {addr}: {e}"))?;
    match answer.split_whitespace().nth(1) {
        Some("200") => Ok(()),
        _ => Err(answer
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or(&answer)
            .trim()
            .to_owned()),
    }
}

/// Whether the heartbeat at `path` is fresh: the container's health check.
pub fn healthy(path: &Path) -> Result<(), String> {
    let modified = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .map_err(|e| format!("no heartbeat at {}: {e}", path.display()))?;
    let age = modified.elapsed().unwrap_or_default();
    if age > HEALTHY_WITHIN {
        return Err(format!(
            "heartbeat {} is {} s old: the workers stopped polling",
            path.display(),
            age.as_secs()
        ));
    }
    Ok(())
}
