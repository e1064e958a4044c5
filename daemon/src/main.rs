//! The production daemon: `toki-daemon --workers W`, configured by the
//! environment (`TOKI_BACKEND`, `TOKI_*`) and an optional TOML file.

use clap::Parser;

// Many small, short-lived allocations per delivery: mimalloc keeps them cheap and RSS low.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "toki-daemon",
    version,
    about = "Long-polls the delay queue and delivers reminders."
)]
struct Args {
    /// Concurrent workers in this instance (default: daemon.workers / TOKI_WORKERS).
    #[arg(long)]
    workers: Option<usize>,
    /// Configuration file (TOML).
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Serve /metrics, /healthz and /readyz on this address (e.g. 127.0.0.1:9464).
    #[arg(long, env = "TOKI_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Exit 0 while the running daemon's workers keep polling (its heartbeat
    /// file is fresh): the container's health check.
    Healthcheck,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    toki_app::init_tracing("info");
    let args = Args::parse();
    if let Some(Sub::Healthcheck) = args.command {
        return match toki_app::daemon::healthy(&toki_app::daemon::heartbeat_file()) {
            Ok(()) => Ok(()),
            Err(why) => {
                eprintln!("unhealthy: {why}");
                std::process::exit(1)
            }
        };
    }
    let mut config = toki_app::Config::load(args.config.as_deref())?;
    if let Some(w) = args.workers {
        config.daemon.workers = w;
    }
    config.validate()?;
    toki_app::daemon::run(config, args.metrics_listen).await
}
