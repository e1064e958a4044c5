//! The SMTP stand-in as its own process (for `toki bench --channel mail`):
//! prints `smtp://ADDR http://ADDR` (the SMTP side, then the HTTP side with
//! `/stats`, `/arrivals` and `/control/mode`) on the first line of stdout,
//! serves until killed.

use clap::Parser;
use toki_devtools::smtp_standin::{serve_both, SmtpStandin};

#[derive(Debug, Parser)]
#[command(
    name = "toki-smtp-standin",
    about = "A local ESMTP server that records when each Toki mail arrived."
)]
struct Args {
    /// SMTP address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// HTTP address for the stats and the controls.
    #[arg(long, default_value = "127.0.0.1:0")]
    http: std::net::SocketAddr,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let smtp = tokio::net::TcpListener::bind(args.listen).await?;
    let http = tokio::net::TcpListener::bind(args.http).await?;
    println!(
        "smtp://{} http://{}",
        smtp.local_addr()?,
        http.local_addr()?
    );
    serve_both(SmtpStandin::new(), smtp, http).await?;
    Ok(())
}
