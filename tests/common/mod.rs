//! Shared helpers for the integration tests: the conformance suite and the
//! services tests need (Postgres, SMTP capture), each test with unique names.
#![allow(dead_code, unused_macros, unused_imports)]

#[macro_use]
pub mod conformance;
pub mod faults;
pub mod pipeline;
pub mod process;
pub mod proxy;
pub mod services;
