//! `chat.postMessage`'s own HTTP/1.1 client: keep-alive connections to the
//! one Web API origin, reused as they come free, each request handed to
//! hyper as it stands. reqwest (the client for everything else) rebuilds
//! and re-parses every answer's URL, arms a timer of its own and goes
//! through its pool's layers on each request: at the due instant that was
//! most of the daemon's HTTP work per request (BENCHMARKS.md, issue 38).
//!
//! No proxy: with a proxy in the environment the channel uses reqwest,
//! which honours it (see [`proxied`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::debug;

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    #[error("connecting to {origin}: {source}")]
    Connect {
        origin: String,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the answer: {0}")]
    Answer(String),
    #[error("the answer is over {0} bytes")]
    TooLarge(usize),
}

/// The most of an answer's body read: Slack's answers to a post are a few
/// hundred bytes.
pub(super) const MAX_ANSWER_BYTES: usize = 1 << 20;

/// The base URL is not one this client can reach.
#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    #[error("the Web API URL {0:?} is not http or https with a host")]
    Unsupported(String),
    #[error("the Web API URL's host {host:?} is not a TLS server name: {source}")]
    ServerName {
        host: String,
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    #[error("the Web API URL's host {0:?} is not a valid Host header")]
    Host(String),
    #[error("the Web API URL's path {0:?} is not a request target")]
    Path(String),
}

/// An answer, as much of it as Slack's client reads.
pub struct Answer {
    pub status: StatusCode,
    pub retry_after: Option<HeaderValue>,
    pub body: Bytes,
}

/// Where the requests go.
struct Origin {
    /// Origin-form: `/api/chat.postMessage`.
    path: Uri,
    host: String,
    port: u16,
    /// The `Host` header (`host` or `host:port`).
    authority: HeaderValue,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
}

type Sender = SendRequest<Full<Bytes>>;

/// How long a connection may sit idle and still be reused: a quiet
/// connection may have been dropped on the way (a NAT, a firewall) without
/// a word, and a request written into it would wait out its timeout.
/// reqwest's pool keeps them as long.
const IDLE_AT_MOST: Duration = Duration::from_secs(90);

/// An open connection, counted in [`Connections`]' `open` while it lives
/// (idle or carrying a request).
struct Conn {
    sender: Sender,
    open: Arc<AtomicUsize>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Conn {
    fn usable(&self, idle_since: Instant) -> bool {
        !self.sender.is_closed() && idle_since.elapsed() <= IDLE_AT_MOST
    }
}

/// Keep-alive connections to one URL's origin, for POSTs to that URL.
/// Callers bound how many requests are in flight (the channel's permits);
/// this opens a connection when none is idle and keeps at most `max_idle`
/// idle.
pub struct Connections {
    origin: Origin,
    /// Idle connections, each with the instant it came free.
    idle: Mutex<Vec<(Conn, Instant)>>,
    /// Connections open, idle or not.
    open: Arc<AtomicUsize>,
    max_idle: usize,
    timeout: Duration,
}

impl Connections {
    /// POSTs to `base` (scheme, host, port and path); a request is
    /// answered within `timeout` (connecting included) or fails.
    pub fn new(base: &url::Url, max_idle: usize, timeout: Duration) -> Result<Self, OriginError> {
        let unsupported = || OriginError::Unsupported(base.to_string());
        let host = base.host_str().ok_or_else(unsupported)?.to_owned();
        let port = base.port_or_known_default().ok_or_else(unsupported)?;
        let tls = match base.scheme() {
            "http" => None,
            "https" => {
                // An IPv6 literal comes bracketed in the URL, not in the name.
                let name = host.trim_start_matches('[').trim_end_matches(']');
                let name = ServerName::try_from(name.to_owned()).map_err(|source| {
                    OriginError::ServerName {
                        host: host.clone(),
                        source,
                    }
                })?;
                Some((crate::tls::http1_connector(), name))
            }
            _ => return Err(unsupported()),
        };
        let authority = match base.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.clone(),
        };
        let authority =
            HeaderValue::from_str(&authority).map_err(|_| OriginError::Host(host.clone()))?;
        let target = match base.query() {
            Some(q) => format!("{}?{q}", base.path()),
            None => base.path().to_owned(),
        };
        let path = target
            .parse()
            .map_err(|_| OriginError::Path(target.clone()))?;
        Ok(Self {
            origin: Origin {
                path,
                host,
                port,
                authority,
                tls,
            },
            idle: Mutex::new(Vec::new()),
            open: Arc::default(),
            max_idle,
            timeout,
        })
    }

    /// POSTs `body`.
    pub async fn post(
        &self,
        authorization: &HeaderValue,
        content_type: &'static str,
        body: Bytes,
    ) -> Result<Answer, PostError> {
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.origin.path.clone())
            .header(header::HOST, self.origin.authority.clone())
            .header(header::AUTHORIZATION, authorization.clone())
            .header(header::CONTENT_TYPE, HeaderValue::from_static(content_type))
            .body(Full::new(body))
            .expect("a request from valid parts");
        tokio::time::timeout(self.timeout, self.exchange(request))
            .await
            .map_err(|_| PostError::Timeout(self.timeout))?
    }

    /// Sends on an idle connection, or a new one. A connection the server
    /// closed while it sat idle hands the request back unwritten: it goes
    /// on the next one (hyper's own pool does the same).
    async fn exchange(&self, mut request: Request<Full<Bytes>>) -> Result<Answer, PostError> {
        loop {
            let (mut conn, reused) = match self.take_idle() {
                Some(conn) => (conn, true),
                None => (self.connect().await?, false),
            };
            let sender = &mut conn.sender;
            // Ready: hyper takes a request only once the connection wants
            // one, which a reused connection signals shortly after its
            // last answer; an error here means it closed while idle.
            if let Err(e) = sender.ready().await {
                if reused {
                    continue;
                }
                return Err(PostError::Http(e));
            }
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    let body = Limited::new(body, MAX_ANSWER_BYTES)
                        .collect()
                        .await
                        .map_err(|e| match e.downcast_ref::<LengthLimitError>() {
                            Some(_) => PostError::TooLarge(MAX_ANSWER_BYTES),
                            None => PostError::Answer(e.to_string()),
                        })?
                        .to_bytes();
                    self.put_back(conn);
                    return Ok(Answer {
                        status: parts.status,
                        retry_after: parts.headers.get(header::RETRY_AFTER).cloned(),
                        body,
                    });
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) if reused => {
                        debug!("slack connection closed while idle; sending on another");
                        request = unsent;
                    }
                    _ => return Err(PostError::Http(e.into_error())),
                },
            }
        }
    }

    /// Opens connections until `max_idle` are open (idle or carrying a
    /// request), before they are needed: how many were opened.
    pub async fn warm(&self) -> usize {
        let missing = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            idle.retain(|(conn, since)| conn.usable(*since));
            self.max_idle
                .saturating_sub(self.open.load(Ordering::Relaxed))
        };
        let opened = (0..missing).map(|_| tokio::time::timeout(self.timeout, self.connect()));
        let mut count = 0;
        for sender in futures::future::join_all(opened).await {
            match sender {
                Ok(Ok(conn)) => {
                    count += 1;
                    self.put_back(conn);
                }
                Ok(Err(e)) => debug!(error = %e, "slack connection not opened"),
                Err(_) => debug!("slack connection not opened in time"),
            }
        }
        count
    }

    fn take_idle(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some((conn, since)) = idle.pop() {
            if conn.usable(since) {
                return Some(conn);
            }
        }
        None
    }

    fn put_back(&self, conn: Conn) {
        if !conn.sender.is_closed() {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < self.max_idle {
                idle.push((conn, Instant::now()));
            }
        }
    }

    async fn connect(&self) -> Result<Conn, PostError> {
        let origin = &self.origin;
        let failed = |source| PostError::Connect {
            origin: format!("{}:{}", origin.host, origin.port),
            source,
        };
        let host = origin.host.trim_start_matches('[').trim_end_matches(']');
        let tcp = TcpStream::connect((host, origin.port))
            .await
            .map_err(failed)?;
        tcp.set_nodelay(true).map_err(failed)?;
        let sender = match &origin.tls {
            None => handshake(tcp).await?,
            Some((connector, name)) => {
                let tls = connector.connect(name.clone(), tcp).await.map_err(failed)?;
                handshake(tls).await?
            }
        };
        self.open.fetch_add(1, Ordering::Relaxed);
        Ok(Conn {
            sender,
            open: self.open.clone(),
        })
    }
}

/// HTTP/1.1 over `io`, its connection driven by a task of its own.
async fn handshake<T>(io: T) -> Result<Sender, PostError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            debug!(error = %e, "slack connection ended");
        }
    });
    Ok(sender)
}

/// Whether the environment sets a proxy for `scheme` (`HTTPS_PROXY`,
/// `ALL_PROXY`, either case): then reqwest, which honours it (and
/// `NO_PROXY`), makes the requests.
pub fn proxied(scheme: &str) -> bool {
    let names = [format!("{scheme}_proxy"), "all_proxy".to_owned()];
    names.iter().any(|name| {
        [name.clone(), name.to_uppercase()]
            .iter()
            .any(|n| std::env::var_os(n).is_some_and(|v| !v.is_empty()))
    })
}
