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

/// Runs the daemon until a signal; with `metrics_listen`, also `/metrics`,
/// `/healthz` and `/readyz` there.
pub async fn run(config: Config, metrics_listen: Option<SocketAddr>) -> anyhow::Result<()> {
    let toki = Toki::open(config).await?;
    let daemon = toki.daemon().await?;
    let (stop, shutdown) = watch::channel(false);
    tracing::info!(workers = toki.config.daemon.workers, "daemon started");
    let ops = match metrics_listen {
        Some(listen) => {
            let (addr, task) = crate::ops::serve(toki.clone(), listen, shutdown.clone()).await?;
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
    let task = tokio::spawn(daemon.run(shutdown));
    crate::shutdown_signal().await;
    tracing::info!("stopping; draining in-flight deliveries");
    stop.send_replace(true);
    task.await?;
    beat.await?;
    if let Some(ops) = ops {
        ops.await??;
    }
    Ok(())
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
