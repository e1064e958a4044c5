//! `toki`: the command line. Each command is a few lines over `toki-app`
//! (production) or `toki-devtools` (demo, bench).

mod cli;

use clap::Parser;

// Many small, short-lived allocations per delivery: mimalloc keeps them cheap and RSS low.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    toki_app::memory::no_huge_pages();
    toki_app::init_tracing("warn,toki=info,toki_app=info,toki_core=warn,toki_flow=info");
    let result = cli::run(cli::Cli::parse()).await;
    // The spans still in the exporter's buffer go out before the process does.
    toki_app::shutdown_traces();
    std::process::exit(result?);
}
