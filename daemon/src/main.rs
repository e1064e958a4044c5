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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    toki::init_tracing("info");
    let args = Args::parse();
    let mut config = toki::Config::load(args.config.as_deref())?;
    if let Some(w) = args.workers {
        config.daemon.workers = w;
    }
    config.validate()?;
    toki::cli::run_daemon(config).await
}
