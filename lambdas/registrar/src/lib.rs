//! The Toki registrar HTTP API as an AWS Lambda behind an API Gateway HTTP API
//! (payload format 2.0) or a Lambda function URL. Requests are routed to the
//! same axum router `toki serve` serves ([`toki_app::api::router`]): same paths,
//! same JSON, same errors.
//!
//! The clients (DynamoDB, SQS, the tenant database pools) are built once per
//! cold start; [`app`] builds the service every invocation goes through.

use std::sync::Arc;

use axum::Router;
use toki_app::{Config, Toki};

/// The tenant API key header for callers behind the IAM authoriser (their
/// `Authorization` holds the SigV4 signature); the API reads it itself.
pub use toki_app::api::API_KEY_HEADER;

/// Loads the configuration from the environment (`TOKI_BACKEND=aws`,
/// `TOKI_INDEX_TABLE`, `TOKI_DIRECTORY_TABLE`, `TOKI_QUEUE_NAME`,
/// `TOKI_DLQ_NAME`, `TOKI_SHARDS`, `TOKI_DATABASE_URL_TEMPLATE`, ...; see
/// `toki_app::Config`).
pub fn load_config() -> anyhow::Result<Config> {
    Config::load(None)
}

/// Logging for CloudWatch (shared with the other Lambda).
pub fn init_tracing() {
    toki_app::init_lambda_tracing();
}

/// Builds the ports once per cold start.
pub async fn open(config: Config) -> anyhow::Result<Toki> {
    Toki::open(config).await
}

/// The service every invocation goes through: the registrar API router.
pub fn app(toki: &Toki) -> Router {
    // One per cold start: an instance's quotas last as long as it does.
    toki_app::api::router_with_quotas(Arc::new(toki.registrar()), toki.api_quotas())
        .layer(axum::middleware::from_fn(flush_traces_after))
}

/// Sends the request's spans before the response returns: Lambda freezes
/// the function after it (nothing to do when traces are off).
async fn flush_traces_after(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let response = next.run(request).await;
    if toki_app::otel::configured() {
        toki_app::flush_traces().await;
    }
    response
}
