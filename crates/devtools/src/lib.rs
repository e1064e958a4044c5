//! Toki's dev tools: `toki demo` and `toki bench` (the 09:00-on-a-Monday
//! scenario, registered, delivered and verified; `--plot` draws each run's
//! lateness), and stand-ins for Slack's Web API, an SMTP server and a
//! tenant's webhook receiver, each able to fail on request. Not linked by the
//! production binaries.

pub mod bench;
pub mod demo;
pub mod plot;
pub mod progress;
pub mod scenario;
pub mod slack_standin;
pub mod smtp_standin;
pub mod webhook_standin;

/// Serves `router` on a free port of 127.0.0.1, in a task of its own (for
/// tests that need a server to talk to): its address.
pub async fn serve_locally(router: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port on 127.0.0.1");
    let addr = listener.local_addr().expect("a bound listener's address");
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}
