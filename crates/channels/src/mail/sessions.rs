//! A fixed pool of long-lived SMTP sessions. lettre's own pool opens a new
//! connection whenever none is idle (so a burst opens hundreds and closes
//! most of them again) and says NOOP before every reuse; here a semaphore of
//! `size` permits bounds the sessions open at once, a send waits its turn
//! (first come, first served) instead of connecting, and a session carries
//! mail after mail, with RSET after a refused one.
//!
//! Failures that are the session's and not the message's (a reused
//! connection the server had closed, a 421 "closing") are tried again on a
//! fresh session at once: they never reach the delivery's failure budget.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant as StdInstant};

use tokio::sync::Semaphore;
use tracing::{debug, warn};

use super::error::MailConfigError;
use super::wire::{Opening, Security, Session as Wire, WireError, WireMail};

/// Where and how to open a session: parsed once from `mail.smtp_url`.
#[derive(Clone)]
pub(super) struct Endpoint(Opening);

impl std::fmt::Debug for Endpoint {
    // Never the credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{} ({:?})", self.0.host, self.0.port, self.0.security)
    }
}

impl Endpoint {
    /// `smtp://[user:pass@]host[:port][?tls=required|opportunistic]` or
    /// `smtps://[user:pass@]host[:port]`.
    pub(super) fn parse(s: &str) -> Result<Self, MailConfigError> {
        let bad = |why: String| MailConfigError::SmtpUrl(why);
        let url = url::Url::parse(s).map_err(|e| bad(format!("not a URL ({e})")))?;
        let host = url
            .host_str()
            .ok_or_else(|| bad("no host".into()))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let mut security = match url.scheme() {
            "smtp" => Security::Plain,
            "smtps" => Security::Implicit,
            other => return Err(bad(format!("scheme {other:?}: use smtp:// or smtps://"))),
        };
        for (k, v) in url.query_pairs() {
            match (k.as_ref(), v.as_ref(), &security) {
                ("tls", "required", Security::Plain) => security = Security::StartTls,
                ("tls", "opportunistic", Security::Plain) => {
                    security = Security::StartTlsIfOffered
                }
                ("tls", "none", Security::Plain) => {}
                ("tls", v, _) => {
                    return Err(bad(format!(
                        "tls={v:?}: smtp:// takes tls=required, opportunistic or none; smtps:// is TLS already"
                    )))
                }
                (k, _, _) => return Err(bad(format!("unknown parameter {k:?}"))),
            }
        }
        let port = url.port().unwrap_or(match security {
            Security::Implicit => 465,
            Security::StartTls => 587,
            _ => 25,
        });
        // Percent-decoding only ('+' stays '+': passwords hold it).
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        let credentials = (!url.username().is_empty())
            .then(|| (decode(url.username()), decode(url.password().unwrap_or(""))));
        Ok(Endpoint(Opening {
            host,
            port,
            security,
            credentials,
            hello: hello_name(),
        }))
    }
}

/// The EHLO name: this host's name if it is a plain DNS name, else a literal.
fn hello_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| {
            !h.is_empty()
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        })
        .unwrap_or_else(|| "[127.0.0.1]".to_owned())
}

/// A mail ready to go: rendered before its instant.
pub(super) type Outgoing = WireMail;

struct Session {
    conn: Wire,
    last_used: StdInstant,
}

/// A session idle this long is asked NOOP when the channel is warmed: a
/// server's idle timeout (Postfix: 300 s) may have closed it.
const CHECK_IDLE_AFTER: Duration = Duration::from_secs(15);

pub(super) struct SessionPool {
    endpoint: Endpoint,
    size: usize,
    /// One per session that may be open; held while a session sends.
    permits: Semaphore,
    idle: Mutex<Vec<Session>>,
    /// Bounds one mail's exchange (and a connect), not its wait for a session.
    timeout: Duration,
    opened: AtomicU64,
}

/// Why a send failed, as the channel reports it.
pub(super) enum Failure {
    /// The server answered this mail with a reply (code and text).
    Refused(super::wire::Reply),
    /// No session could be opened, or it broke on a fresh session.
    Connection(String),
    /// No answer within the timeout.
    NoAnswer,
}

impl SessionPool {
    pub(super) fn new(endpoint: Endpoint, size: usize, timeout: Duration) -> Self {
        let size = size.max(1);
        SessionPool {
            endpoint,
            size,
            permits: Semaphore::new(size),
            idle: Mutex::new(Vec::with_capacity(size)),
            timeout,
            opened: AtomicU64::new(0),
        }
    }

    /// Sessions opened since the start (for the log and tests).
    pub(super) fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    async fn open(&self) -> Result<Session, Failure> {
        match tokio::time::timeout(self.timeout, Wire::open(&self.endpoint.0)).await {
            Ok(Ok(conn)) => {
                let n = self.opened.fetch_add(1, Ordering::Relaxed) + 1;
                debug!(endpoint = ?self.endpoint, opened = n, "smtp session opened");
                Ok(Session {
                    conn,
                    last_used: StdInstant::now(),
                })
            }
            Ok(Err(e)) => Err(Failure::Connection(e.to_string())),
            Err(_) => Err(Failure::NoAnswer),
        }
    }

    fn park(&self, mut session: Session) {
        session.last_used = StdInstant::now();
        self.idle.lock().expect("smtp pool lock").push(session);
    }

    fn take_idle(&self) -> Option<Session> {
        self.idle.lock().expect("smtp pool lock").pop()
    }

    /// Opens every session that is not open and not busy, and checks those
    /// idle for a while, so the sends at the due instant find them ready.
    pub(super) async fn warm(&self) {
        let mut held = Vec::new();
        while let Ok(p) = self.permits.try_acquire() {
            held.push(p);
        }
        if held.is_empty() {
            return;
        }
        let parked: Vec<Session> = std::mem::take(&mut *self.idle.lock().expect("smtp pool lock"));
        let missing = held.len().saturating_sub(parked.len());
        let checks = parked.into_iter().map(|mut s| async move {
            let alive = s.last_used.elapsed() < CHECK_IDLE_AFTER
                || matches!(
                    tokio::time::timeout(self.timeout, s.conn.noop()).await,
                    Ok(Ok(()))
                );
            if alive {
                s.last_used = StdInstant::now();
                Some(s)
            } else {
                self.open().await.ok()
            }
        });
        let opens = (0..missing).map(|_| async { self.open().await.ok() });
        let (checked, opened) = futures::join!(
            futures::future::join_all(checks),
            futures::future::join_all(opens)
        );
        let ready: Vec<Session> = checked.into_iter().chain(opened).flatten().collect();
        if ready.len() < held.len() {
            warn!(endpoint = ?self.endpoint, ready = ready.len(), wanted = held.len(), "could not open every SMTP session ahead of the due instant");
        }
        for s in ready {
            self.park(s);
        }
        drop(held);
    }

    /// Sends one mail on a session of the pool, waiting for one to be free.
    pub(super) async fn send(&self, mail: &Outgoing) -> Result<(), Failure> {
        let _permit = self.permits.acquire().await.expect("the pool never closes");
        // A reused session that turns out closed is replaced (at most once
        // per session in the pool); a fresh one that fails is a failure.
        let mut reused_left = self.size;
        loop {
            let (mut session, reused) = match self.take_idle() {
                Some(s) if reused_left > 0 => (s, true),
                _ => (self.open().await?, false),
            };
            match tokio::time::timeout(self.timeout, session.conn.send(mail)).await {
                Ok(Ok(())) => {
                    self.park(session);
                    return Ok(());
                }
                // The server refused this mail; the session was reset.
                Ok(Err(WireError::Reply(r))) => {
                    self.park(session);
                    return Err(Failure::Refused(r));
                }
                Ok(Err(WireError::Broken(e))) => {
                    if reused {
                        debug!(error = %e, "a pooled SMTP session had closed; sending on another");
                        reused_left -= 1;
                        continue;
                    }
                    return Err(Failure::Connection(e));
                }
                Err(_) => return Err(Failure::NoAnswer),
            }
        }
    }

    /// A session's NOOP: whether the server answers now (opens one if none is idle).
    pub(super) async fn probe(&self) -> Result<(), Failure> {
        let _permit = self.permits.acquire().await.expect("the pool never closes");
        let mut session = match self.take_idle() {
            Some(s) => s,
            None => self.open().await?,
        };
        match tokio::time::timeout(self.timeout, session.conn.noop()).await {
            Ok(Ok(())) => {
                self.park(session);
                Ok(())
            }
            Ok(Err(WireError::Reply(r))) => Err(Failure::Refused(r)),
            Ok(Err(WireError::Broken(e))) => Err(Failure::Connection(e)),
            Err(_) => Err(Failure::NoAnswer),
        }
    }
}
