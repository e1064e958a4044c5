use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    toki::init_tracing("warn,toki=info,toki_core=warn");
    let code = toki::cli::run(toki::cli::Cli::parse()).await?;
    std::process::exit(code);
}
