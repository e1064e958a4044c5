//! The Slack stand-in as its own process (for `toki bench`): prints its
//! address on the first line of stdout, serves until killed.

use clap::Parser;
use toki_devtools::slack_standin::{Standin, StandinOptions};

#[derive(Debug, Parser)]
#[command(
    name = "toki-slack-standin",
    about = "A local server that answers like Slack's chat.postMessage."
)]
struct Args {
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// Answer the first N requests with HTTP 429.
    #[arg(long, default_value_t = 0)]
    throttle_first: u64,
    /// Retry-After seconds on a 429.
    #[arg(long, default_value_t = 1)]
    retry_after: u64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("http://{}", listener.local_addr()?);
    let standin = Standin::new(StandinOptions {
        throttle_first: args.throttle_first,
        retry_after_s: args.retry_after,
    });
    toki_devtools::slack_standin::serve(standin, listener).await?;
    Ok(())
}
