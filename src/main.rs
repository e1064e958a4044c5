use clap::Parser;

// Many small, short-lived allocations per delivery: mimalloc keeps them cheap and RSS low.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    toki::init_tracing("warn,toki=info,toki_core=warn");
    let code = toki::cli::run(toki::cli::Cli::parse()).await?;
    std::process::exit(code);
}
