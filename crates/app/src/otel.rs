//! Traces exported over OTLP/HTTP, when an endpoint is configured by the
//! standard variables (`OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; `OTEL_EXPORTER_OTLP_PROTOCOL`
//! `http/protobuf` (default) or `http/json`; `OTEL_SERVICE_NAME`;
//! `OTEL_SDK_DISABLED=true` turns them off). Without an endpoint nothing is
//! built and the pipeline makes no spans at all (see `toki_core::trace`).

use std::collections::HashMap;
use std::sync::OnceLock;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether the environment asks for traces.
pub fn configured() -> bool {
    let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    !disabled
        && (var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
            || var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some())
}

/// The protocol the environment names; the error names the variable.
fn protocol() -> Result<Protocol, String> {
    let (name, value) = [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ]
    .into_iter()
    .find_map(|n| var(n).map(|v| (n, v)))
    .unwrap_or(("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()));
    match value.as_str() {
        "http/protobuf" => Ok(Protocol::HttpBinary),
        "http/json" => Ok(Protocol::HttpJson),
        other => Err(format!(
            "{name}: {other:?} is not supported (http/protobuf or http/json)"
        )),
    }
}

/// The service name: `OTEL_SERVICE_NAME`, else the Lambda function's name,
/// else `service`.
fn service_name(service: &str) -> String {
    var("OTEL_SERVICE_NAME")
        .or_else(|| var("AWS_LAMBDA_FUNCTION_NAME"))
        .unwrap_or_else(|| service.to_owned())
}

/// The OTLP layer for `service` when traces are configured (pipeline spans
/// and warnings inside them), and turns the pipeline's spans on. A bad
/// setting is reported on stderr, naming the variable, and traces stay off.
pub(crate) fn layer<S>(service: &str) -> Option<Box<dyn Layer<S> + Send + Sync>>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    if !configured() {
        return None;
    }
    let provider = match build(service) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("traces are off: {e}");
            return None;
        }
    };
    let tracer = provider.tracer("toki");
    let _ = PROVIDER.set(provider);
    toki_core::trace::install(Box::new(W3c(TraceContextPropagator::new())));
    let filter = Targets::new()
        .with_target(toki_core::trace::TARGET, tracing::Level::INFO)
        .with_default(tracing::Level::WARN);
    Some(
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(filter)
            .boxed(),
    )
}

fn build(service: &str) -> Result<SdkTracerProvider, String> {
    let protocol = protocol()?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .build()
        .map_err(|e| format!("OTEL_EXPORTER_OTLP_ENDPOINT: {e}"))?;
    let resource = Resource::builder()
        .with_service_name(service_name(service))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// Sends the spans ended so far (a Lambda before it is frozen). Runs the
/// exporter's blocking wait off the async threads.
pub async fn flush_traces() {
    if let Some(p) = PROVIDER.get() {
        let p = p.clone();
        let _ = tokio::task::spawn_blocking(move || p.force_flush()).await;
    }
}

/// Sends what is left and stops the exporter (at the end of `main`).
pub fn shutdown_traces() {
    if let Some(p) = PROVIDER.get() {
        if let Err(e) = p.shutdown() {
            eprintln!("traces: shutting the exporter down: {e}");
        }
    }
}

/// `traceparent` in and out of a `tracing` span through its OpenTelemetry context.
struct W3c(TraceContextPropagator);

impl toki_core::trace::Propagator for W3c {
    fn traceparent(&self, span: &tracing::Span) -> Option<String> {
        let mut carrier = HashMap::new();
        self.0.inject_context(&span.context(), &mut carrier);
        carrier.remove("traceparent")
    }

    fn set_parent(&self, span: &tracing::Span, traceparent: &str) {
        let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
        let _ = span.set_parent(self.0.extract(&carrier));
    }
}
