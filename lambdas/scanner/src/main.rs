//! `toki-scanner-lambda`: the scanner Lambda's bootstrap. See the library.

use lambda_runtime::{service_fn, Error, LambdaEvent};
use toki_scanner_lambda::{handle, init_tracing, load_config, open, ScheduledEvent};

fn main() -> Result<(), Error> {
    init_tracing();
    // Before the runtime's threads exist: load_config may set an env var.
    let config = load_config()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(config))
}

async fn run(config: toki_app::Config) -> Result<(), Error> {
    // Clients and ports once per cold start, shared by every invocation.
    let toki = open(config).await?;
    let toki = &toki;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<ScheduledEvent>| async move {
            let result = handle(toki, event).await;
            // Before the function is frozen: spans left in the buffer would wait for the next invocation.
            toki_app::flush_traces().await;
            result
        },
    ))
    .await
}
