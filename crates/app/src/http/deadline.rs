//! A request body that must arrive whole within a time of its head: a
//! client that sends a head and then its body a byte at a time holds a
//! connection (one of the listener's few) only that long. Past it, reading
//! the body fails; the handler answers 400 and the connection is closed (its
//! body was not read to the end).
//!
//! It also tells whether the body was read to its end ([`BodyRead`]): an
//! answer given before (a 413, a 422 on the path) closes the connection and
//! says so (`Connection: close`), so that a client never sends its next
//! request on a connection the server is about to close.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::Sleep;

/// Why a body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyReadError {
    #[error("the request body did not arrive within {} s of its head", .0.as_secs())]
    TooSlow(Duration),
    #[error("reading the request body")]
    Read(#[source] hyper::Error),
}

/// Whether a request's body was read to its end.
#[derive(Debug, Clone, Default)]
pub struct BodyRead(Arc<AtomicBool>);

impl BodyRead {
    pub fn whole(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    fn set(&self) {
        self.0.store(true, Ordering::Release);
    }
}

/// `Incoming`, failing once its deadline passes.
pub struct DeadlineBody {
    inner: Incoming,
    deadline: Pin<Box<Sleep>>,
    within: Duration,
    read: BodyRead,
}

impl DeadlineBody {
    /// `inner` as an axum body: as it is when it has nothing to send (no
    /// timer for a GET), else due whole `within` from now; and whether it
    /// was read to its end.
    pub fn wrap(inner: Incoming, within: Duration) -> (axum::body::Body, BodyRead) {
        let read = BodyRead::default();
        if inner.is_end_stream() {
            read.set();
            return (axum::body::Body::new(inner), read);
        }
        let body = DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(within)),
            within,
            read: read.clone(),
        };
        (axum::body::Body::new(body), read)
    }
}

impl Body for DeadlineBody {
    type Data = Bytes;
    type Error = BodyReadError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyReadError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            if frame.is_none() || this.inner.is_end_stream() {
                this.read.set();
            }
            return Poll::Ready(frame.map(|f| f.map_err(BodyReadError::Read)));
        }
        match this.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyReadError::TooSlow(this.within)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
