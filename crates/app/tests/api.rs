//! The registrar API in process, on the testing kit: one test binary, each
//! file beside this one a module (`audit::…`, `quota::…`), `common` the
//! helpers they share. One binary rather than one per file: the app and its
//! dependencies are linked once.

mod common;

mod audit;
mod batch;
mod erasure;
mod event_endpoints;
mod idempotency;
mod openapi;
mod quota;
mod router;
mod server;
mod throttle;
