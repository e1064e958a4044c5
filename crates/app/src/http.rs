//! Serving a router over TCP as `toki serve` (both its listeners) and a
//! daemon's `--metrics-listen` do: HTTP/1.1, whose request head must arrive
//! within [`ConnectionLimits::header_read`] of the connection opening or of
//! its previous answer (so a half-sent request, and an idle keep-alive
//! connection, is closed after that long), a body whole within
//! [`ConnectionLimits::body_read`] of its head ([`deadline`]), at most
//! [`ConnectionLimits::max_connections`] open at once (more wait in the
//! listen backlog, not accepted, until one closes), each request carrying its
//! peer's address (`ConnectInfo<SocketAddr>`), and a graceful shutdown: no
//! new connections, answers in flight finished.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::HttpConfig;

mod deadline;

pub use deadline::{BodyRead, BodyReadError, DeadlineBody};

/// How long an accept that failed (out of file descriptors) waits before the
/// next, as axum's own `serve` does.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// What one listener allows its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// A request head must be whole this long after the connection opened
    /// or its previous answer went out; else the connection is closed.
    pub header_read: Duration,
    /// A request body must be whole this long after its head.
    pub body_read: Duration,
    /// Connections open at once; the next waits to be accepted.
    pub max_connections: usize,
}

impl From<&HttpConfig> for ConnectionLimits {
    fn from(c: &HttpConfig) -> Self {
        ConnectionLimits {
            header_read: Duration::from_millis(c.header_read_timeout_ms),
            body_read: Duration::from_millis(c.body_read_timeout_ms),
            max_connections: c.max_connections,
        }
    }
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits::from(&HttpConfig::default())
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes,
/// then waits for the connections open to finish their answers (a caller
/// bounds that wait: a connection may still be reading a body).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .keep_alive(true);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // A slot first: past the limit, connections wait in the backlog.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = accept(&listener) => accepted,
            () = &mut shutdown => break,
        };
        let service = service(&router, peer, limits.body_read);
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(serve_one(connection, slot));
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The next connection (a failed accept is logged and tried again).
async fn accept(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                // Answers are small and go out at once.
                let _ = stream.set_nodelay(true);
                return (stream, peer);
            }
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// `router` for one connection: each request with the peer's address, its
/// body due whole `body_read` after its head; an answer given before the
/// body was read to its end closes the connection, saying so.
fn service(
    router: &Router,
    peer: SocketAddr,
    body_read: Duration,
) -> impl hyper::service::Service<
    hyper::Request<Incoming>,
    Response = axum::response::Response,
    Error = Infallible,
    Future: Send + 'static,
> + Clone {
    let router = router.clone();
    hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        let (parts, body) = request.into_parts();
        let (body, read) = DeadlineBody::wrap(body, body_read);
        let answer =
            tower::ServiceExt::oneshot(router.clone(), hyper::Request::from_parts(parts, body));
        async move {
            let mut response = answer.await?;
            if !read.whole() {
                response.headers_mut().insert(
                    axum::http::header::CONNECTION,
                    axum::http::HeaderValue::from_static("close"),
                );
            }
            Ok(response)
        }
    })
}

/// One connection to its end; its slot is given back then.
async fn serve_one<E: std::fmt::Display>(
    connection: impl Future<Output = Result<(), E>>,
    slot: OwnedSemaphorePermit,
) {
    if let Err(e) = connection.await {
        // A client gone, or one too slow with its request head: routine.
        tracing::debug!(error = %e, "connection closed with an error");
    }
    drop(slot);
}
