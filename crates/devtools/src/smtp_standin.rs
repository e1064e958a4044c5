//! An SMTP server for tests and benches: speaks enough ESMTP for lettre
//! (EHLO, MAIL, RCPT, DATA, RSET, NOOP, QUIT; offers PIPELINING and
//! 8BITMIME: replies go out in command order, so a pipelining client works),
//! keeps every mail it accepts with its arrival instant, counts sessions, and
//! can be told while it runs to answer with a 4xx or 5xx reply, or to accept
//! a connection and then say nothing (hang). `toki-smtp-standin` runs it as
//! its own process with an HTTP side (`/stats`, `/arrivals`, `/control/mode`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use toki_ports::Clock;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// The delivery header every Toki mail carries (`tenant/key`).
const DELIVERY_HEADER: &str = "x-toki-delivery:";

/// How the server answers, changeable while it runs (over HTTP as JSON:
/// `"Accept"`, `{"Reply": "451 4.3.0 try later"}`, `"Hang"`, `{"Slow": 200}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SmtpBehaviour {
    #[default]
    Accept,
    /// Answer `MAIL FROM` with this reply (e.g. `451 4.3.0 try later`,
    /// `554 5.7.1 rejected`), and NOOP too.
    Reply(String),
    /// Greet, then never answer anything again.
    Hang,
    /// Take this many milliseconds before accepting each mail (a slow server).
    Slow(u64),
}

/// One accepted mail.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AcceptedMail {
    pub delivery: Option<String>,
    pub message_id: Option<String>,
    pub arrived_ms: i64,
    pub data: String,
}

/// Every mail, and per delivery its first arrival and copies (kept as mails
/// arrive: the bench polls the counts while thousands arrive).
#[derive(Default)]
struct Recorded {
    mails: Vec<AcceptedMail>,
    arrivals: HashMap<String, (i64, u64)>,
}

/// A delivery's first arrival and its number of copies.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MailArrival {
    pub delivery: String,
    pub arrived_ms: i64,
    pub copies: u64,
}

#[derive(Clone, Default)]
pub struct SmtpStandin {
    behaviour: Arc<Mutex<SmtpBehaviour>>,
    recorded: Arc<Mutex<Recorded>>,
    connections: Arc<AtomicU64>,
    open: Arc<AtomicU64>,
    peak_open: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
    pipelined: Arc<AtomicU64>,
    /// Sessions started before this generation close on their next command.
    generation: Arc<AtomicU64>,
    arrived: Arc<tokio::sync::Notify>,
    /// Mailboxes whose RCPT is refused `550 5.1.1` (lower-cased), and how
    /// many RCPTs to them came.
    unknown_mailboxes: Arc<Mutex<HashMap<String, u64>>>,
}

/// What the server saw.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SmtpStats {
    /// Sessions (connections) accepted in all.
    pub connections: u64,
    /// The most sessions open at one time.
    pub peak_open: u64,
    /// Transactions answered with a failure on purpose.
    pub refused: u64,
    /// RCPT and DATA commands that came before the reply to the previous
    /// command had gone out (the client pipelines).
    pub pipelined: u64,
    pub mails: u64,
    /// Distinct deliveries (by the delivery header).
    pub unique: u64,
    /// Copies beyond the first of a delivery.
    pub duplicates: u64,
}

impl SmtpStandin {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn set_behaviour(&self, b: SmtpBehaviour) {
        *self.behaviour.lock().expect("smtp lock") = b;
    }

    /// From now on, `RCPT TO:<address>` is answered `550 5.1.1 … no such
    /// user`, as a server answers for a mailbox that does not exist.
    pub fn refuse_mailbox(&self, address: &str) {
        self.unknown_mailboxes
            .lock()
            .expect("smtp lock")
            .insert(address.to_ascii_lowercase(), 0);
    }

    /// How many RCPTs named a refused mailbox.
    pub fn rcpts_refused(&self, address: &str) -> u64 {
        let refused = self.unknown_mailboxes.lock().expect("smtp lock");
        refused
            .get(&address.to_ascii_lowercase())
            .copied()
            .unwrap_or(0)
    }

    /// Whether `RCPT` `line` names a refused mailbox (counted if so).
    fn refuses(&self, line: &str) -> bool {
        let address = line
            .split_once('<')
            .and_then(|(_, rest)| rest.split_once('>'))
            .map(|(a, _)| a.to_ascii_lowercase())
            .unwrap_or_default();
        let mut refused = self.unknown_mailboxes.lock().expect("smtp lock");
        match refused.get_mut(&address) {
            Some(n) => {
                *n += 1;
                true
            }
            None => false,
        }
    }

    fn behaviour(&self) -> SmtpBehaviour {
        self.behaviour.lock().expect("smtp lock").clone()
    }

    /// Every open session closes when its client next speaks, as a server
    /// does that closed idle connections.
    pub fn close_sessions(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    pub fn mails(&self) -> Vec<AcceptedMail> {
        self.recorded.lock().expect("smtp lock").mails.clone()
    }

    /// Each delivery's first arrival, as the bench reads it.
    pub fn arrival_list(&self) -> Vec<MailArrival> {
        self.arrivals()
            .into_iter()
            .map(|(delivery, (arrived_ms, copies))| MailArrival {
                delivery,
                arrived_ms,
                copies,
            })
            .collect()
    }

    /// Each delivery's first arrival (ms) and its number of copies.
    pub fn arrivals(&self) -> HashMap<String, (i64, u64)> {
        self.recorded.lock().expect("smtp lock").arrivals.clone()
    }

    pub fn stats(&self) -> SmtpStats {
        let rec = self.recorded.lock().expect("smtp lock");
        SmtpStats {
            connections: self.connections.load(Ordering::Relaxed),
            peak_open: self.peak_open.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            pipelined: self.pipelined.load(Ordering::Relaxed),
            mails: rec.mails.len() as u64,
            unique: rec.arrivals.len() as u64,
            duplicates: rec.arrivals.values().map(|(_, n)| n - 1).sum(),
        }
    }

    /// Waits until `n` distinct deliveries arrived or `timeout` passed; returns how many had.
    pub async fn wait_unique(&self, n: u64, timeout: std::time::Duration) -> u64 {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let next = self.arrived.notified();
            tokio::pin!(next);
            next.as_mut().enable();
            let unique = self.stats().unique;
            if unique >= n || tokio::time::timeout_at(deadline, next).await.is_err() {
                return self.stats().unique;
            }
        }
    }

    /// Serves `listener` until the future is dropped.
    pub async fn serve(self, listener: TcpListener) -> std::io::Result<()> {
        loop {
            let (stream, _) = listener.accept().await?;
            self.connections.fetch_add(1, Ordering::Relaxed);
            let open = self.open.fetch_add(1, Ordering::Relaxed) + 1;
            self.peak_open.fetch_max(open, Ordering::Relaxed);
            let me = self.clone();
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let _ = me.session(stream).await;
                me.open.fetch_sub(1, Ordering::Relaxed);
            });
        }
    }

    async fn session(&self, stream: TcpStream) -> std::io::Result<()> {
        let mut conn = Conn::new(stream);
        conn.write
            .write_all(b"220 toki-smtp-standin ESMTP\r\n")
            .await?;
        let mut tx = Transaction::default();
        let generation = self.generation.load(Ordering::Relaxed);
        while let Some((line, buffered)) = conn.next_line().await? {
            let behaviour = self.behaviour();
            if behaviour == SmtpBehaviour::Hang {
                // Accepts and then says nothing: the client must time out.
                std::future::pending::<()>().await;
            }
            if tx.data.is_none() && self.generation.load(Ordering::Relaxed) != generation {
                // Closed while idle: the client finds out when it next speaks.
                return Ok(());
            }
            if let Some(data) = &mut tx.data {
                if line != "." {
                    data.push_str(line.strip_prefix('.').unwrap_or(&line));
                    data.push('\n');
                    continue;
                }
                let data = std::mem::take(data);
                tx = Transaction::default();
                self.end_of_data(&mut conn, data, &behaviour).await?;
                continue;
            }
            if let Flow::Quit = self
                .command(&mut conn, &mut tx, &line, buffered, behaviour)
                .await?
            {
                return Ok(());
            }
        }
        Ok(())
    }

    /// The end of a message (`.`): it is accepted, after a while when the server is slow.
    async fn end_of_data(
        &self,
        conn: &mut Conn,
        data: String,
        behaviour: &SmtpBehaviour,
    ) -> std::io::Result<()> {
        if let SmtpBehaviour::Slow(ms) = behaviour {
            conn.write.flush().await?;
            tokio::time::sleep(std::time::Duration::from_millis(*ms)).await;
        }
        self.accept(data);
        conn.write.write_all(b"250 2.0.0 queued\r\n").await
    }

    /// Answers a command outside DATA; `buffered`: it came before the
    /// previous reply went out (the client pipelines).
    async fn command(
        &self,
        conn: &mut Conn,
        tx: &mut Transaction,
        line: &str,
        buffered: Pipelined,
        behaviour: SmtpBehaviour,
    ) -> std::io::Result<Flow> {
        let verb = line
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_ascii_uppercase();
        if buffered == Pipelined::Yes && matches!(verb.as_str(), "RCPT" | "DATA") {
            self.pipelined.fetch_add(1, Ordering::Relaxed);
        }
        let reply: &[u8] = match verb.as_str() {
            "EHLO" => b"250-toki-smtp-standin\r\n250-PIPELINING\r\n250-AUTH PLAIN LOGIN\r\n250 8BITMIME\r\n",
            "AUTH" => conn.auth(line).await?,
            "HELO" => b"250 toki-smtp-standin\r\n",
            "MAIL" | "NOOP" => match behaviour {
                SmtpBehaviour::Reply(r) => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    conn.write.write_all(format!("{r}\r\n").as_bytes()).await?;
                    return Ok(Flow::Continue);
                }
                _ => {
                    tx.mail_from |= verb == "MAIL";
                    b"250 2.0.0 ok\r\n"
                }
            },
            "RCPT" if !tx.mail_from => b"503 5.5.1 need MAIL first\r\n",
            "RCPT" if self.refuses(line) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                b"550 5.1.1 no such user here\r\n"
            }
            "RCPT" => {
                tx.recipients += 1;
                b"250 2.0.0 ok\r\n"
            }
            "RSET" => {
                *tx = Transaction::default();
                b"250 2.0.0 ok\r\n"
            }
            "DATA" if tx.recipients == 0 => b"554 5.5.1 no valid recipients\r\n",
            "DATA" => {
                tx.data = Some(String::new());
                b"354 end with <CRLF>.<CRLF>\r\n"
            }
            "QUIT" => {
                conn.write.write_all(b"221 2.0.0 bye\r\n").await?;
                conn.write.flush().await?;
                return Ok(Flow::Quit);
            }
            _ => b"502 5.5.2 command not recognised\r\n",
        };
        conn.write.write_all(reply).await?;
        Ok(Flow::Continue)
    }

    fn accept(&self, data: String) {
        let header = |name: &str| {
            data.lines()
                .take_while(|l| !l.is_empty())
                .find(|l| l.to_ascii_lowercase().starts_with(name))
                .map(|l| l[name.len()..].trim().to_owned())
        };
        let mail = AcceptedMail {
            delivery: header(DELIVERY_HEADER),
            message_id: header("message-id:"),
            arrived_ms: toki_ports::SystemClock.now().timestamp_millis(),
            data,
        };
        let mut rec = self.recorded.lock().expect("smtp lock");
        if let Some(d) = &mail.delivery {
            let e = rec
                .arrivals
                .entry(d.clone())
                .or_insert((mail.arrived_ms, 0));
            e.0 = e.0.min(mail.arrived_ms);
            e.1 += 1;
        }
        rec.mails.push(mail);
        drop(rec);
        self.arrived.notify_waiters();
    }
}

/// Whether a command was at hand before the reply to the previous one went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pipelined {
    Yes,
    No,
}

/// What a session does after a command.
enum Flow {
    Continue,
    Quit,
}

/// The mail transaction so far: MAIL accepted, recipients accepted, and
/// the message while it is being sent (DATA).
#[derive(Default)]
struct Transaction {
    mail_from: bool,
    recipients: u32,
    data: Option<String>,
}

/// A session's connection.
struct Conn {
    reader: BufReader<OwnedReadHalf>,
    /// Replies wait in the buffer while more input is at hand, and go out
    /// in one write when the client waits: what a server does for a
    /// pipelining client (and what keeps the stand-in cheap to measure against).
    write: BufWriter<OwnedWriteHalf>,
    buf: String,
}

impl Conn {
    fn new(stream: TcpStream) -> Self {
        let (read, write) = stream.into_split();
        Conn {
            reader: BufReader::new(read),
            write: BufWriter::new(write),
            buf: String::new(),
        }
    }

    /// The next input line (without its line end) and whether it was at hand
    /// already; the replies are flushed first when no whole line is buffered
    /// (the client is waiting for them).
    async fn next_line(&mut self) -> std::io::Result<Option<(String, Pipelined)>> {
        let buffered = self.reader.buffer().contains(&b'\n');
        if !buffered {
            self.write.flush().await?;
        }
        self.buf.clear();
        if self.reader.read_line(&mut self.buf).await? == 0 {
            return Ok(None);
        }
        Ok(Some((
            self.buf.trim_end_matches(['\r', '\n']).to_owned(),
            if buffered {
                Pipelined::Yes
            } else {
                Pipelined::No
            },
        )))
    }

    /// AUTH: any credentials will do (the stand-in checks what is sent, not
    /// who); the final reply.
    async fn auth(&mut self, line: &str) -> std::io::Result<&'static [u8]> {
        if line.split_whitespace().count() < 3 {
            if line.to_ascii_uppercase().contains("LOGIN") {
                // LOGIN: username, then password, each after a 334 prompt.
                self.write.write_all(b"334 VXNlcm5hbWU6\r\n").await?;
                self.next_line().await?;
                self.write.write_all(b"334 UGFzc3dvcmQ6\r\n").await?;
                self.next_line().await?;
            } else {
                self.write.write_all(b"334 \r\n").await?;
                self.next_line().await?;
            }
        }
        Ok(b"235 2.7.0 authenticated\r\n")
    }
}

/// Starts a stand-in on 127.0.0.1 (any port) in this runtime; returns it and its `host:port`.
pub async fn start() -> std::io::Result<(SmtpStandin, String)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let standin = SmtpStandin::new();
    tokio::spawn(standin.clone().serve(listener));
    Ok((standin, addr))
}

/// The HTTP side: `GET /stats`, `GET /arrivals`, `POST /control/mode` with an [`SmtpBehaviour`].
pub fn control_router(standin: SmtpStandin) -> axum::Router {
    use axum::extract::State;
    use axum::routing::{get, post};
    use axum::Json;
    axum::Router::new()
        .route(
            "/stats",
            get(|State(s): State<SmtpStandin>| async move { Json(s.stats()) }),
        )
        .route(
            "/arrivals",
            get(|State(s): State<SmtpStandin>| async move { Json(s.arrival_list()) }),
        )
        .route(
            "/control/mode",
            post(
                |State(s): State<SmtpStandin>, Json(b): Json<SmtpBehaviour>| async move {
                    s.set_behaviour(b);
                    axum::http::StatusCode::NO_CONTENT
                },
            ),
        )
        .with_state(standin)
}

/// Serves SMTP on `smtp` and the HTTP side on `http` until either fails.
pub async fn serve_both(
    standin: SmtpStandin,
    smtp: TcpListener,
    http: TcpListener,
) -> std::io::Result<()> {
    let control = control_router(standin.clone());
    tokio::select! {
        r = standin.serve(smtp) => r,
        r = axum::serve(http, control) => r,
    }
}
