//! The Toki application: configuration, the assembly of the ports for each
//! backend ([`Toki`]), the registrar HTTP API ([`api::router`]), `serve`, the
//! daemon runner and reports. The binaries (`toki`, `toki-daemon`, the
//! Lambdas) are thin shells over this crate; the dev tools live elsewhere.
//!
//! Features: `embedded` (the SQLite backend), `api` (the HTTP API, axum),
//! `channels` (mail, chat, Slack, and the daemon), `secrets` (Secrets Manager:
//! database credentials, API keys handed over by [`key_secret`]). The Lambdas build with the
//! AWS family only (and the registrar with `api`).

#[cfg(feature = "api")]
pub mod api;
mod aws;
pub mod config;
#[cfg(feature = "channels")]
pub mod daemon;
pub mod databases;
#[cfg(feature = "embedded")]
mod embedded;
pub mod emf;
#[cfg(feature = "api")]
pub mod http;
#[cfg(feature = "secrets")]
pub mod key_secret;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod offboard;
pub mod open_files;
#[cfg(feature = "api")]
mod openapi;
pub mod operator_audit;
#[cfg(feature = "api")]
pub mod ops;
pub mod otel;
mod ports;
pub mod preview;
pub mod redrive;
pub mod report;
pub mod report_page;
#[cfg(all(feature = "channels", feature = "api"))]
pub mod serve;
pub mod table;
pub mod tls;
mod toki;

pub use config::{BackendKind, Config};
pub use logging::{init_lambda_tracing, init_tracing, shutdown_signal};
pub use otel::{flush_traces, shutdown_traces};
pub use toki::{new_api_key, Toki, BULK_CREATE_CONCURRENCY};
/// SES bounce and complaint notifications read into suppression entries.
#[cfg(feature = "channels")]
pub use toki_channels::mail::feedback as mail_feedback;
