//! The Toki application: configuration, wiring of the ports for each backend,
//! the registrar HTTP API, and the commands of the `toki` CLI. The binaries
//! (`toki`, `toki-daemon`, the Lambdas) are thin shells over this crate.

pub mod api;
pub mod app;
pub mod aws;
pub mod bench;
pub mod cli;
pub mod config;
pub mod demo;
pub mod report;
pub mod scenario;
pub mod serve;
pub mod slack_standin;

pub use app::Toki;
pub use config::{BackendKind, Config};

/// Logs to stderr, filtered by `RUST_LOG` (default: warnings, and info from Toki).
pub fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Logging for AWS Lambda (CloudWatch): plain lines without colours or
/// timestamps (Lambda adds its own), JSON lines when the function's log format
/// is JSON (`AWS_LAMBDA_LOG_FORMAT`). Level: `AWS_LAMBDA_LOG_LEVEL`, else
/// `RUST_LOG`, else info.
pub fn init_lambda_tracing() {
    use std::str::FromStr;
    use tracing_subscriber::filter::{EnvFilter, LevelFilter};

    let lambda_level = std::env::var("AWS_LAMBDA_LOG_LEVEL")
        .ok()
        .and_then(|l| LevelFilter::from_str(&l).ok());
    let filter = match lambda_level {
        Some(level) => EnvFilter::default().add_directive(level.into()),
        None => EnvFilter::builder()
            .with_default_directive(LevelFilter::INFO.into())
            .from_env_lossy(),
    };
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .without_time()
        .with_target(false);
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let _ = if json {
        fmt.json().try_init()
    } else {
        fmt.try_init()
    };
}

/// Resolves when SIGTERM or Ctrl-C arrives.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
