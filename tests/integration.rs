//! Toki's integration tests, one binary: each file beside this one is a
//! module (`api::…`, `faults::…`), and `common` and `aws_support` are the
//! helpers they share. One binary rather than one per file: the helpers are
//! compiled once and the whole stack is linked once (after a change to
//! `common`, 21 s against 111 s for 22 binaries, README's CI paragraph).
//! Run one file's tests with a filter, e.g.
//! `cargo nextest run --test integration -E 'test(/^faults::/)'`.

#[macro_use]
mod common;
mod aws_support;

mod api;
mod audit;
mod bench_cores;
mod bench_plot;
mod calendar;
mod channels;
mod conformance_aws;
mod conformance_embedded;
mod conformance_memory;
mod conformance_postgres;
mod delivery_events;
mod demo;
mod erasure_embedded;
mod faults;
mod hostile;
mod key_secret;
mod lambdas;
mod least_privilege;
mod log_privacy;
mod mail_ses;
mod offboard_aws;
mod offboard_embedded;
mod ops;
mod pipeline_aws;
mod pipeline_embedded;
mod properties;
mod report_page;
mod retention;
mod secrets;
mod suppression;
mod tls_postgres;
mod traces;
mod version_identity;
mod webhooks;
