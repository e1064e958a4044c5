//! The long-running processes: `toki serve`, `toki daemon`, and one
//! scanner pass (`toki scan`).

use std::net::SocketAddr;
use std::path::Path;

use clap::Args;
use toki_app::{Config, Toki};

use super::common::{config_with, Common};

// `toki serve`: see `Command::Serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    common: Common,
    /// Address of the registrar API (the tenant API, /healthz and /openapi.json only).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Serve /metrics, /readyz, /report and /healthz on this address (e.g.
    /// 127.0.0.1:9464): the operator's, never the API's. Unset: not served.
    #[arg(long, env = "TOKI_OPERATOR_LISTEN")]
    operator_listen: Option<SocketAddr>,
    /// Daemon workers (default: daemon.workers / TOKI_WORKERS).
    #[arg(long)]
    workers: Option<usize>,
}

impl ServeArgs {
    pub async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let config = config_with_workers(file, &self.common, self.workers)?;
        let listen = toki_app::serve::Listeners {
            api: self.listen,
            operator: self.operator_listen,
        };
        toki_app::serve::run(Toki::open(config).await?, listen).await?;
        Ok(0)
    }
}

// `toki daemon`: see `Command::Daemon`.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    #[command(flatten)]
    common: Common,
    /// Concurrent workers (default: daemon.workers / TOKI_WORKERS).
    #[arg(long)]
    workers: Option<usize>,
    /// Serve /metrics, /healthz and /readyz on this address (e.g.
    /// 127.0.0.1:9464): the operator's. Unset: not served.
    #[arg(long, visible_alias = "operator-listen", env = "TOKI_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Print lateness as CloudWatch EMF lines on stdout every N seconds (on ECS: 60).
    #[arg(long, env = "TOKI_EMF_EVERY_S")]
    emf_every_s: Option<u64>,
}

impl DaemonArgs {
    pub async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let config = config_with_workers(file, &self.common, self.workers)?;
        let seen = toki_app::daemon::Observability {
            metrics_listen: self.metrics_listen,
            emf_every: self.emf_every_s.map(std::time::Duration::from_secs),
        };
        toki_app::daemon::run(config, seen).await?;
        Ok(0)
    }
}

// `toki scan`: see `Command::Scan`.
#[derive(Debug, Args)]
pub struct ScanArgs {
    #[command(flatten)]
    common: Common,
}

impl ScanArgs {
    pub async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        let summary = toki.scanner().scan_once().await?;
        println!("{}", serde_json::to_string(&summary)?);
        Ok(0)
    }
}

/// The configuration with `--workers` over the daemon's, checked again.
fn config_with_workers(
    file: Option<&Path>,
    common: &Common,
    workers: Option<usize>,
) -> anyhow::Result<Config> {
    let mut config = config_with(file, common)?;
    if let Some(w) = workers {
        config.daemon.workers = w;
    }
    config.validate()?;
    Ok(config)
}
