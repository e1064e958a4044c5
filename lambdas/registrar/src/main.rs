//! `toki-registrar-lambda`: the registrar Lambda's bootstrap. See the library.

use lambda_http::Error;
use toki_registrar_lambda::{app, init_tracing, load_config, open};

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let config = load_config()?;
    // Clients, ports and database pools once per cold start.
    let toki = open(config).await?;
    lambda_http::run(app(&toki)).await
}
