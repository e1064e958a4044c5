//! Logs (to stderr, or CloudWatch's format on Lambda), traces (OTLP, when
//! configured: see [`crate::otel`]) and the shutdown signal.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// The name traces are exported under unless `OTEL_SERVICE_NAME` says otherwise.
fn process_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "toki".into())
}

/// Logs to stderr, filtered by `RUST_LOG` (default: `default`); traces too
/// when an OTLP endpoint is configured.
pub fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only on a terminal: a log file or a collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_filter(filter);
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(crate::otel::layer(&process_name()))
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
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .without_time()
        .with_target(false);
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let logs = if json {
        fmt.json().with_filter(filter).boxed()
    } else {
        fmt.with_filter(filter).boxed()
    };
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(crate::otel::layer(&process_name()))
        .try_init();
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
