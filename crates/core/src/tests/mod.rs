//! The services on the testing kit's in-memory ports, on tokio's paused clock.

mod caps;
mod change_notices;
mod daemon;
mod debounce;
mod events;
mod flow;
mod idle;
mod isolation;
mod offboard;
mod registrar;
mod repair;
mod retention;
mod scanner;
mod series;
mod shutdown;
mod sim;
mod templates;
