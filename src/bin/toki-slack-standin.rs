//! The Slack stand-in as its own process (for `toki bench`): prints its
//! address on the first line of stdout, serves until killed.

use clap::Parser;
use toki_devtools::slack_standin::{RateLimit, Standin, StandinOptions};

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
    /// Retry-After seconds on a 429 from --throttle-first.
    #[arg(long, default_value_t = 1)]
    retry_after: u64,
    /// Limit chat.postMessage, across all clients, to N + B accepted in any
    /// sliding 1-second window; beyond it answer as Slack does (HTTP 429,
    /// Retry-After: 1, "ratelimited") and record nothing. Off by default.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    rate_limit: Option<u32>,
    /// With --rate-limit: B more allowed in any 1-second window on top of N
    /// (0: never more than N in any second).
    #[arg(long, value_name = "B", default_value_t = 0, requires = "rate_limit")]
    burst: u32,
    /// Memory made ready before the first request (MB): the arrivals of a
    /// burst are recorded on pages already in, not on fresh ones.
    #[arg(long, value_name = "MB", default_value_t = 256)]
    warm_memory: usize,
}

// The instrument's own cost is part of every burst it measures: the same
// allocator as the daemon, without huge pages (toki_app::memory).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() -> anyhow::Result<()> {
    toki_app::memory::no_huge_pages();
    let args = Args::parse();
    toki_app::memory::warm(args.warm_memory.saturating_mul(1 << 20));
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("http://{}", listener.local_addr()?);
    let standin = Standin::new(StandinOptions {
        throttle_first: args.throttle_first,
        retry_after_s: args.retry_after,
        rate_limit: args.rate_limit.map(|per_second| RateLimit {
            per_second,
            burst: args.burst,
        }),
    });
    toki_devtools::slack_standin::serve(standin, listener).await?;
    Ok(())
}
