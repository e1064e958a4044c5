//! Toki's services, written against the ports: the registrar, the scanner
//! and enqueue, the daemon, the debouncer and change notices. They report to
//! an [`observe::Observer`]; no storage, AWS, network or metrics library
//! lives here.

pub mod crowd;
pub mod daemon;
pub mod debounce;
pub mod enqueue;
pub mod events;
pub mod notice;
pub mod observe;
pub mod offboard;
pub mod periodic;
pub mod registrar;
pub mod render;
pub mod render_pool;
pub mod repair;
pub mod retention;
pub mod scanner;
pub mod settings;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;
pub mod trace;
pub mod work;
