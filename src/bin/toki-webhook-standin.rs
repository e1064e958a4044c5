//! The webhook receiver stand-in as its own process (for `toki bench`): prints its address on the first line of stdout, serves until killed; tenants' secrets come through `POST /control/secret`.

use clap::Parser;
use toki_devtools::webhook_standin::WebhookStandin;

#[derive(Debug, Parser)]
#[command(
    name = "toki-webhook-standin",
    about = "A local receiver that verifies Toki's signed webhook requests."
)]
struct Args {
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("http://{}", listener.local_addr()?);
    toki_devtools::webhook_standin::serve(WebhookStandin::new(), listener).await?;
    Ok(())
}
