//! Traces across the pipeline, one per reminder: `toki.enqueue` (the scanner
//! or the registrar's direct path puts it on the queue) → `toki.deliver` (a
//! daemon works on its message) → `toki.send` (one per delivery, on its
//! channel). The context crosses the queue as a W3C `traceparent` message
//! attribute. The enqueue span is the root of its trace and links to the
//! scanner run or API request that made it: a scan at 08:55 moves thousands
//! of reminders, and one trace per reminder stays readable where a trace per
//! run would not.
//!
//! Off unless the application installs a [`Propagator`] (it does when an
//! OTLP endpoint is configured): then no span is made and no attribute is
//! added, so an untraced pipeline pays one atomic load per message.

use std::sync::OnceLock;

use tracing::field::Empty;
use tracing::Span;

use toki_model::domain::{DueAt, ReminderKey};
use toki_ports::channel::{Notification, SendResult};
use toki_ports::message::{Attributes, ATTR_TRACEPARENT};

/// The span target every pipeline span uses (the OTLP layer's filter keeps it).
pub const TARGET: &str = "toki::trace";

/// Reads and writes a span's context as a W3C `traceparent` (the exporter's
/// side; core knows only `tracing`).
pub trait Propagator: Send + Sync + 'static {
    /// The `traceparent` of `span` (none: the span is not recorded).
    fn traceparent(&self, span: &Span) -> Option<String>;
    /// Makes `traceparent` the parent of `span`, which must be new.
    fn set_parent(&self, span: &Span, traceparent: &str);
}

static PROPAGATOR: OnceLock<Box<dyn Propagator>> = OnceLock::new();

/// Turns tracing on for the process (once; later calls are ignored).
pub fn install(propagator: Box<dyn Propagator>) {
    let _ = PROPAGATOR.set(propagator);
}

/// Whether pipeline spans are made.
pub fn enabled() -> bool {
    PROPAGATOR.get().is_some()
}

/// A reminder's enqueue: the root of its trace, linked to the current span
/// (the scanner run or the API request).
pub fn enqueue_span(key: &ReminderKey, due: DueAt) -> Span {
    if !enabled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        "toki.enqueue",
        otel.kind = "producer",
        toki.reminder = %key,
        toki.tenant = %key.tenant,
        toki.due_at = %due.0.to_rfc3339(),
    );
    span.follows_from(Span::current());
    span
}

/// Adds `span`'s context to a message's attributes.
pub fn inject(span: &Span, attributes: &mut Attributes) {
    if let (Some(p), false) = (PROPAGATOR.get(), span.is_none()) {
        if let Some(tp) = p.traceparent(span) {
            attributes.insert(ATTR_TRACEPARENT.to_owned(), tp);
        }
    }
}

/// A daemon working on a reminder's message: a child of its enqueue when the
/// message carries a `traceparent`.
pub fn deliver_span(key: &ReminderKey, attributes: &Attributes, receive_count: u32) -> Span {
    let Some(p) = PROPAGATOR.get() else {
        return Span::none();
    };
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        "toki.deliver",
        otel.kind = "consumer",
        toki.reminder = %key,
        toki.tenant = %key.tenant,
        toki.receive_count = receive_count,
    );
    if let Some(tp) = attributes.get(ATTR_TRACEPARENT) {
        p.set_parent(&span, tp);
    }
    span
}

/// One delivery's send, a child of its message's span.
pub fn send_span(parent: &Span, n: &Notification) -> Span {
    if parent.is_none() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        parent: parent,
        "toki.send",
        otel.kind = "client",
        toki.delivery = %n.key.logged(),
        toki.channel = %n.key.channel,
        toki.outcome = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    )
}

/// Writes a send's answer on its span.
pub fn record_send(span: &Span, result: Option<&SendResult>) {
    if span.is_none() {
        return;
    }
    match result {
        Some(Ok(_)) => {
            span.record("toki.outcome", "sent");
        }
        Some(Err(e)) => {
            span.record("toki.outcome", "failed");
            span.record("otel.status_code", "error");
            // A channel's error may quote the recipient (an SMTP reply does).
            let description = e.to_string();
            span.record(
                "otel.status_description",
                toki_model::redact::scrub(&description).as_ref(),
            );
        }
        None => {
            span.record("toki.outcome", "not sent (circuit open)");
        }
    }
}

/// An API request, a child of the caller's `traceparent` if it sent one.
pub fn request_span(method: &str, route: &str, traceparent: Option<&str>) -> Span {
    let Some(p) = PROPAGATOR.get() else {
        return Span::none();
    };
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        "toki.request",
        otel.name = %format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = Empty,
    );
    if let Some(tp) = traceparent {
        p.set_parent(&span, tp);
    }
    span
}

/// A scanner run (its enqueue spans link to it).
pub fn scan_span() -> Span {
    if !enabled() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        parent: None,
        "toki.scan",
        toki.rows_seen = Empty,
        toki.enqueued = Empty,
    )
}
