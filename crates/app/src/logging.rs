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
    set_pseudonym_key();
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(Scrubbing(std::io::stderr))
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
    set_pseudonym_key();
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(Scrubbing(std::io::stdout))
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

/// A fleet's processes give a person the same pseudonym in their logs when
/// they share `TOKI_LOG_PSEUDONYM_KEY`; unset, each process picks its own.
fn set_pseudonym_key() {
    if let Ok(key) = std::env::var("TOKI_LOG_PSEUDONYM_KEY") {
        toki_model::redact::set_pseudonym_key(key.as_bytes());
    }
}

/// Log lines with any mail address or Slack id in them replaced by a
/// pseudonym (`toki_model::redact::scrub`): the formatter writes each event
/// in one call, so each call is scrubbed whole.
struct Scrubbing<M>(M);

impl<'a, M: tracing_subscriber::fmt::MakeWriter<'a>> tracing_subscriber::fmt::MakeWriter<'a>
    for Scrubbing<M>
{
    type Writer = ScrubbedLine<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        ScrubbedLine(self.0.make_writer())
    }
}

struct ScrubbedLine<W>(W);

impl<W: std::io::Write> std::io::Write for ScrubbedLine<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.0
            .write_all(toki_model::redact::scrub(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
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
