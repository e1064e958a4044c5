//! Connections as `toki serve` takes them (`toki_app::http::serve`), on a
//! real socket and the paused clock: a request head not sent whole within
//! the header-read timeout gets the connection closed, an idle keep-alive
//! connection too, a body not sent whole within the body-read timeout is
//! refused and its connection closed, and past the connection limit a connection is not
//! served until another closes.

use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, put};
use axum::Router;
use toki_app::http::{serve, ConnectionLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// Longer than any timeout the server is given in these tests: on the
/// paused clock it passes at once when nothing else is left to happen.
const NEVER: Duration = Duration::from_secs(3600);

/// A server of `/hello` within `limits`; its address, and what stops it.
async fn server(limits: ConnectionLimits) -> (std::net::SocketAddr, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = Router::new()
        .route("/hello", get(|| async { "hello" }))
        .route("/echo", put(|body: String| async move { body }))
        .route(
            "/refuse",
            put(|| async { axum::http::StatusCode::PAYLOAD_TOO_LARGE }),
        );
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, router, limits, async move {
        let _ = stopped.await;
    }));
    (addr, stop)
}

/// Reads until the server closes the connection, or [`NEVER`]: what was read,
/// and whether it closed.
async fn read_to_close(stream: &mut TcpStream) -> (String, bool) {
    let mut read = Vec::new();
    let closed = tokio::time::timeout(NEVER, async {
        let mut buf = [0u8; 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .is_ok();
    (String::from_utf8_lossy(&read).into_owned(), closed)
}

/// One whole answer to `GET /hello` on a keep-alive connection.
async fn hello(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /hello HTTP/1.1\r\nhost: toki\r\n\r\n")
        .await
        .unwrap();
    let mut read = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&read).ends_with("hello") {
        let n = tokio::time::timeout(NEVER, stream.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        assert!(n > 0, "closed before answering");
        read.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&read).into_owned()
}

#[tokio::test(start_paused = true)]
async fn half_a_request_line_gets_the_connection_closed() {
    let limits = ConnectionLimits {
        header_read: Duration::from_secs(10),
        body_read: Duration::from_secs(60),
        max_connections: 16,
    };
    let (addr, _stop) = server(limits).await;
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /hel").await.unwrap();
    let (answer, closed) = read_to_close(&mut slow).await;
    assert!(closed, "the server held a half-sent request for an hour");
    assert!(!answer.contains("hello"), "{answer}");
}

#[tokio::test(start_paused = true)]
async fn a_body_sent_slowly_is_refused_and_its_connection_closed() {
    let limits = ConnectionLimits {
        header_read: Duration::from_secs(10),
        body_read: Duration::from_secs(60),
        max_connections: 16,
    };
    let (addr, _stop) = server(limits).await;
    // A whole body within the time is read and echoed.
    let mut quick = TcpStream::connect(addr).await.unwrap();
    quick
        .write_all(b"PUT /echo HTTP/1.1\r\nhost: toki\r\ncontent-length: 5\r\n\r\nhi yo")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let n = quick.read(&mut buf).await.unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("hi yo"),
        "{answer}"
    );

    // Ten bytes of a hundred, then nothing.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"PUT /echo HTTP/1.1\r\nhost: toki\r\ncontent-length: 100\r\n\r\n0123456789")
        .await
        .unwrap();
    let (answer, closed) = read_to_close(&mut slow).await;
    assert!(closed, "the server held a slow body for an hour");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
}

/// An answer given before the body was read (a 413) closes the connection
/// and says so, so a client does not send its next request on it; a whole
/// exchange keeps it open.
#[tokio::test(start_paused = true)]
async fn an_answer_before_the_body_was_read_says_the_connection_closes() {
    let limits = ConnectionLimits {
        header_read: Duration::from_secs(10),
        body_read: Duration::from_secs(60),
        max_connections: 16,
    };
    let (addr, _stop) = server(limits).await;
    let mut early = TcpStream::connect(addr).await.unwrap();
    early
        .write_all(
            b"PUT /refuse HTTP/1.1\r\nhost: toki\r\ncontent-length: 100000\r\n\r\n0123456789",
        )
        .await
        .unwrap();
    let (answer, closed) = read_to_close(&mut early).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert!(closed);
    let mut whole = TcpStream::connect(addr).await.unwrap();
    let answer = hello(&mut whole).await;
    assert!(
        !answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_keep_alive_connection_is_closed() {
    let limits = ConnectionLimits {
        header_read: Duration::from_secs(10),
        body_read: Duration::from_secs(60),
        max_connections: 16,
    };
    let (addr, _stop) = server(limits).await;
    let mut idle = TcpStream::connect(addr).await.unwrap();
    assert!(hello(&mut idle).await.starts_with("HTTP/1.1 200"));
    let (more, closed) = read_to_close(&mut idle).await;
    assert!(closed, "an idle connection was kept for an hour");
    assert!(more.is_empty(), "{more}");
}

#[tokio::test(start_paused = true)]
async fn past_the_limit_a_connection_waits_until_one_closes() {
    let limits = ConnectionLimits {
        header_read: 2 * NEVER,
        body_read: 2 * NEVER,
        max_connections: 1,
    };
    let (addr, _stop) = server(limits).await;
    let mut first = TcpStream::connect(addr).await.unwrap();
    assert!(hello(&mut first).await.starts_with("HTTP/1.1 200"));

    // The second connects (the backlog takes it) but is not served while
    // the first stays open, whatever the time.
    let mut second = TcpStream::connect(addr).await.unwrap();
    second
        .write_all(b"GET /hello HTTP/1.1\r\nhost: toki\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let waited = tokio::time::timeout(NEVER, second.read(&mut buf)).await;
    assert!(waited.is_err(), "served past the limit: {waited:?}");

    drop(first);
    let mut read = Vec::new();
    while !String::from_utf8_lossy(&read).ends_with("hello") {
        let n = tokio::time::timeout(NEVER, second.read(&mut buf))
            .await
            .expect("served once the first closed")
            .unwrap();
        assert!(n > 0);
        read.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&read).starts_with("HTTP/1.1 200"));
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_lets_an_answer_in_flight_finish() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (started, running) = oneshot::channel::<()>();
    let started = Arc::new(std::sync::Mutex::new(Some(started)));
    let router = Router::new().route(
        "/slow",
        get(move || {
            let started = started.clone();
            async move {
                if let Some(s) = started.lock().unwrap().take() {
                    let _ = s.send(());
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
                "done"
            }
        }),
    );
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        router,
        ConnectionLimits::default(),
        async move {
            let _ = stopped.await;
        },
    ));
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"GET /slow HTTP/1.1\r\nhost: toki\r\n\r\n")
        .await
        .unwrap();
    running.await.unwrap();
    stop.send(()).unwrap();
    let (answer, closed) = read_to_close(&mut client).await;
    assert!(closed, "closed after its answer");
    assert!(answer.ends_with("done"), "{answer}");
    tokio::time::timeout(NEVER, server)
        .await
        .expect("the server returns once its connections are done")
        .unwrap();
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "no longer listening"
    );
}
