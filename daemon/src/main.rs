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
    /// Serve /metrics, /healthz and /readyz on this address (e.g.
    /// 127.0.0.1:9464): the operator's. Unset: not served.
    #[arg(long, visible_alias = "operator-listen", env = "TOKI_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Print lateness as CloudWatch EMF lines on stdout every N seconds (on ECS: 60).
    #[arg(long, env = "TOKI_EMF_EVERY_S")]
    emf_every_s: Option<u64>,
    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Exit 0 while the running daemon's workers keep polling (its
    /// `/healthz` on TOKI_METRICS_LISTEN, else its heartbeat file, is
    /// fresh): the container's health check.
    Healthcheck,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    toki_app::memory::no_huge_pages();
    toki_app::init_tracing("info");
    let args = Args::parse();
    if let Some(Sub::Healthcheck) = args.command {
        return match toki_app::daemon::healthcheck(args.metrics_listen) {
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
    let seen = toki_app::daemon::Observability {
        metrics_listen: args.metrics_listen,
        emf_every: args.emf_every_s.map(std::time::Duration::from_secs),
    };
    let result = toki_app::daemon::run(config, seen).await;
    toki_app::shutdown_traces();
    result
}
