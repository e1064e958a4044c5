//! `toki-repair-lambda`: the repair Lambda's bootstrap. See the library.

use lambda_runtime::{service_fn, Error, LambdaEvent};
use toki_repair_lambda::{handle, load_config, open, ScheduledEvent};

fn main() -> Result<(), Error> {
    toki_app::init_lambda_tracing();
    let config = load_config()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(config))
}

async fn run(config: toki_app::Config) -> Result<(), Error> {
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
