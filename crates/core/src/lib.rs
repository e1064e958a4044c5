//! Toki's core: the domain, the pure scheduling logic and the ports, plus the
//! pipeline services (registrar, scanner, daemon) written against the ports.
//! No storage, AWS or network dependency lives here.

pub mod change;
pub mod channel;
pub mod daemon;
pub mod debounce;
pub mod domain;
pub mod enqueue;
pub mod error;
pub mod flow;
pub mod input;
pub mod message;
pub mod metrics;
pub mod periodic;
pub mod plan;
pub mod ports;
pub mod recurrence;
pub mod registrar;
pub mod render;
pub mod scanner;
pub mod settings;
pub mod stats;
pub mod template;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;
pub mod trace;

pub use domain::*;
pub use error::{StoreError, StoreResult, ValidationError};
