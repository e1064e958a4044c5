//! An SMTP server for tests and benches: speaks enough ESMTP for lettre
//! (EHLO, MAIL, RCPT, DATA, RSET, NOOP, QUIT), keeps every mail it accepts
//! with its arrival instant, and can be told while it runs to answer with a
//! 4xx or 5xx reply, or to accept a connection and then say nothing (hang).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use toki_core::ports::Clock;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The delivery header every Toki mail carries (`tenant/key`).
const DELIVERY_HEADER: &str = "x-toki-delivery:";

/// How the server answers, changeable while it runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SmtpBehaviour {
    #[default]
    Accept,
    /// Answer `MAIL FROM` with this reply (e.g. `451 4.3.0 try later`,
    /// `554 5.7.1 rejected`), and NOOP too.
    Reply(String),
    /// Greet, then never answer anything again.
    Hang,
}

/// One accepted mail.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AcceptedMail {
    pub delivery: Option<String>,
    pub message_id: Option<String>,
    pub arrived_ms: i64,
    pub data: String,
}

#[derive(Clone, Default)]
pub struct SmtpStandin {
    behaviour: Arc<Mutex<SmtpBehaviour>>,
    mails: Arc<Mutex<Vec<AcceptedMail>>>,
    connections: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
    arrived: Arc<tokio::sync::Notify>,
}

/// What the server saw.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SmtpStats {
    pub connections: u64,
    /// Transactions answered with a failure on purpose.
    pub refused: u64,
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

    fn behaviour(&self) -> SmtpBehaviour {
        self.behaviour.lock().expect("smtp lock").clone()
    }

    pub fn mails(&self) -> Vec<AcceptedMail> {
        self.mails.lock().expect("smtp lock").clone()
    }

    /// Each delivery's first arrival (ms) and its number of copies.
    pub fn arrivals(&self) -> HashMap<String, (i64, u64)> {
        let mut out: HashMap<String, (i64, u64)> = HashMap::new();
        for m in self.mails.lock().expect("smtp lock").iter() {
            if let Some(d) = &m.delivery {
                let e = out.entry(d.clone()).or_insert((m.arrived_ms, 0));
                e.0 = e.0.min(m.arrived_ms);
                e.1 += 1;
            }
        }
        out
    }

    pub fn stats(&self) -> SmtpStats {
        let arrivals = self.arrivals();
        SmtpStats {
            connections: self.connections.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            mails: self.mails.lock().expect("smtp lock").len() as u64,
            unique: arrivals.len() as u64,
            duplicates: arrivals.values().map(|(_, n)| n - 1).sum(),
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
            let me = self.clone();
            tokio::spawn(async move {
                let _ = me.session(stream).await;
            });
        }
    }

    async fn session(&self, stream: TcpStream) -> std::io::Result<()> {
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        write.write_all(b"220 toki-smtp-standin ESMTP\r\n").await?;
        let mut in_data = false;
        let mut data = String::new();
        while let Some(line) = lines.next_line().await? {
            if self.behaviour() == SmtpBehaviour::Hang {
                // Accepts and then says nothing: the client must time out.
                std::future::pending::<()>().await;
            }
            if in_data {
                if line == "." {
                    in_data = false;
                    self.accept(std::mem::take(&mut data));
                    write.write_all(b"250 2.0.0 queued\r\n").await?;
                } else {
                    data.push_str(line.strip_prefix('.').unwrap_or(&line));
                    data.push('\n');
                }
                continue;
            }
            let verb = line
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_ascii_uppercase();
            let reply: &[u8] = match verb.as_str() {
                "EHLO" => b"250-toki-smtp-standin\r\n250-PIPELINING\r\n250-AUTH PLAIN LOGIN\r\n250 8BITMIME\r\n",
                // Any credentials will do: the stand-in checks what is sent, not who.
                "AUTH" if line.split_whitespace().count() >= 3 => b"235 2.7.0 authenticated\r\n",
                "AUTH" if line.to_ascii_uppercase().contains("LOGIN") => {
                    // LOGIN: username, then password, each after a 334 prompt.
                    write.write_all(b"334 VXNlcm5hbWU6\r\n").await?;
                    lines.next_line().await?;
                    write.write_all(b"334 UGFzc3dvcmQ6\r\n").await?;
                    lines.next_line().await?;
                    b"235 2.7.0 authenticated\r\n"
                }
                "AUTH" => {
                    write.write_all(b"334 \r\n").await?;
                    lines.next_line().await?;
                    b"235 2.7.0 authenticated\r\n"
                }
                "HELO" => b"250 toki-smtp-standin\r\n",
                "MAIL" | "NOOP" => match self.behaviour() {
                    SmtpBehaviour::Reply(r) => {
                        self.refused.fetch_add(1, Ordering::Relaxed);
                        write.write_all(format!("{r}\r\n").as_bytes()).await?;
                        continue;
                    }
                    _ => b"250 2.0.0 ok\r\n",
                },
                "RCPT" | "RSET" => b"250 2.0.0 ok\r\n",
                "DATA" => {
                    in_data = true;
                    b"354 end with <CRLF>.<CRLF>\r\n"
                }
                "QUIT" => {
                    write.write_all(b"221 2.0.0 bye\r\n").await?;
                    return Ok(());
                }
                _ => b"502 5.5.2 command not recognised\r\n",
            };
            write.write_all(reply).await?;
        }
        Ok(())
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
            arrived_ms: toki_core::ports::SystemClock.now().timestamp_millis(),
            data,
        };
        self.mails.lock().expect("smtp lock").push(mail);
        self.arrived.notify_waiters();
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
