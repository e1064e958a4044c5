//! The SMTP client side of a session, on the wire: greeting, EHLO, STARTTLS,
//! AUTH, and mail transactions with PIPELINING (RFC 2920) when the server
//! offers it: MAIL, RCPT and DATA go out in one write and their replies are
//! read together, so a mail costs two round trips instead of four. lettre
//! builds the messages; its client has no pipelining and writes a mail's
//! closing dot in a write of its own.

use base64::Engine;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufStream};
use tokio::net::TcpStream;

/// A reply: its code and text (lines joined by a space).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Reply {
    pub code: u16,
    pub text: String,
    /// Which command it answered, where it matters: a refused RCPT is the
    /// recipient's mailbox; a refused MAIL or DATA is not.
    pub to: Answering,
}

/// The command a reply answered, as far as a refusal's meaning goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answering {
    Recipient,
    Other,
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.code, self.text)
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum WireError {
    /// The server answered with a failure reply; the session can go on (after RSET) unless 421.
    #[error("{0}")]
    Reply(Reply),
    /// The connection failed or the server spoke something else than SMTP.
    #[error("{0}")]
    Broken(String),
}

impl WireError {
    fn io(e: std::io::Error) -> Self {
        WireError::Broken(format!("connection: {e}"))
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> Io for T {}

/// What the server said it supports in its EHLO reply.
#[derive(Debug, Default, Clone)]
struct Extensions {
    pipelining: bool,
    eight_bit: bool,
    smtputf8: bool,
    starttls: bool,
    auth_plain: bool,
    auth_login: bool,
}

impl Extensions {
    fn from_ehlo(text_lines: &[String]) -> Self {
        let mut e = Extensions::default();
        for line in text_lines {
            let upper = line.to_ascii_uppercase();
            let mut words = upper.split_whitespace();
            match words.next() {
                Some("PIPELINING") => e.pipelining = true,
                Some("8BITMIME") => e.eight_bit = true,
                Some("SMTPUTF8") => e.smtputf8 = true,
                Some("STARTTLS") => e.starttls = true,
                Some("AUTH") => {
                    for m in words {
                        e.auth_plain |= m == "PLAIN";
                        e.auth_login |= m == "LOGIN";
                    }
                }
                _ => {}
            }
        }
        e
    }
}

/// How to secure a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Security {
    Plain,
    StartTlsIfOffered,
    StartTls,
    Implicit,
}

/// `message` as RFC 5321 DATA content: every line ending (CRLF, a bare CR,
/// a bare LF) becomes CRLF, a line that starts with `.` gets another, and
/// it ends with CRLF. So the content never holds CRLF `.` CRLF before its
/// end, nor a bare CR or LF a server might read as a line ending: whatever
/// the message, it cannot end the DATA early or carry SMTP commands past it.
pub fn smtp_data(message: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(message.len() + 64);
    let mut at_line_start = true;
    let mut bytes = message.iter().copied().peekable();
    while let Some(b) = bytes.next() {
        if at_line_start && b == b'.' {
            data.push(b'.');
        }
        at_line_start = matches!(b, b'\r' | b'\n');
        match b {
            b'\r' => {
                bytes.next_if_eq(&b'\n');
                data.extend_from_slice(b"\r\n");
            }
            b'\n' => data.extend_from_slice(b"\r\n"),
            _ => data.push(b),
        }
    }
    if !data.ends_with(b"\r\n") {
        data.extend_from_slice(b"\r\n");
    }
    data
}

/// A mail on the wire: envelope addresses and the message, dot-stuffed and
/// ending in CRLF, so the session only writes it (rendered before the instant).
pub(super) struct WireMail {
    pub from: String,
    pub to: Vec<String>,
    pub data: Vec<u8>,
    pub eight_bit: bool,
    pub smtputf8: bool,
}

impl WireMail {
    /// A mail of `message`, its DATA content made by [`smtp_data`].
    pub fn new(from: String, to: Vec<String>, message: &[u8]) -> Self {
        let data = smtp_data(message);
        let smtputf8 = !from.is_ascii() || to.iter().any(|t| !t.is_ascii());
        WireMail {
            eight_bit: !message.is_ascii(),
            smtputf8,
            from,
            to,
            data,
        }
    }
}

pub(super) struct Session {
    stream: BufStream<Box<dyn Io>>,
    ext: Extensions,
}

/// Everything a session needs to open.
#[derive(Clone)]
pub(super) struct Opening {
    pub host: String,
    pub port: u16,
    pub security: Security,
    pub credentials: Option<(String, String)>,
    pub hello: String,
}

async fn tls<S: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static>(
    host: &str,
    stream: S,
) -> Result<Box<dyn Io>, WireError> {
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| WireError::Broken(format!("TLS: {host:?} is not a server name ({e})")))?;
    let s = crate::tls::connector()
        .connect(name, stream)
        .await
        .map_err(|e| WireError::Broken(format!("TLS: {e}")))?;
    Ok(Box::new(s))
}

/// The replies the envelope of `mail` wants, in order: MAIL, each RCPT, DATA.
fn envelope_replies(mail: &WireMail) -> impl Iterator<Item = (u16, Answering)> + '_ {
    std::iter::once((250, Answering::Other))
        .chain(mail.to.iter().map(|_| (250, Answering::Recipient)))
        .chain(std::iter::once((354, Answering::Other)))
}

/// Whether reply `r` accepts a command that wants `want` (251 counts as 250).
fn accepted(r: &Reply, want: u16) -> bool {
    r.code == want || (want == 250 && r.code == 251)
}

impl Session {
    /// Connects (Nagle off), greets, secures and authenticates. The caller
    /// bounds the whole of it in time.
    pub async fn open(o: &Opening) -> Result<Session, WireError> {
        let tcp = TcpStream::connect((o.host.as_str(), o.port))
            .await
            .map_err(|e| WireError::Broken(format!("connecting to {}:{}: {e}", o.host, o.port)))?;
        // Replies and small writes must not wait for delayed ACKs.
        tcp.set_nodelay(true).map_err(WireError::io)?;
        let io: Box<dyn Io> = match o.security {
            Security::Implicit => tls(&o.host, tcp).await?,
            _ => Box::new(tcp),
        };
        let mut s = Session {
            stream: BufStream::new(io),
            ext: Extensions::default(),
        };
        s.expect(220).await?;
        s.ehlo(&o.hello).await?;
        let starttls = match o.security {
            Security::StartTls if !s.ext.starttls => {
                return Err(WireError::Broken(
                    "the server does not offer STARTTLS (tls=required)".into(),
                ))
            }
            Security::StartTls => true,
            Security::StartTlsIfOffered => s.ext.starttls,
            _ => false,
        };
        if starttls {
            s.command("STARTTLS").await?;
            s.expect(220).await?;
            // Nothing may be buffered past the 220 (RFC 3207).
            let io = s.stream.into_inner();
            s = Session {
                stream: BufStream::new(tls(&o.host, io).await?),
                ext: Extensions::default(),
            };
            s.ehlo(&o.hello).await?;
        }
        if let Some((user, pass)) = &o.credentials {
            s.auth(user, pass).await?;
        }
        Ok(s)
    }

    async fn ehlo(&mut self, hello: &str) -> Result<(), WireError> {
        self.command(&format!("EHLO {hello}")).await?;
        let (reply, lines) = self.read_reply_lines().await?;
        if reply.code != 250 {
            return Err(WireError::Reply(reply));
        }
        self.ext = Extensions::from_ehlo(&lines[1.min(lines.len())..]);
        Ok(())
    }

    async fn auth(&mut self, user: &str, pass: &str) -> Result<(), WireError> {
        let b64 = base64::engine::general_purpose::STANDARD;
        if self.ext.auth_login && !self.ext.auth_plain {
            self.command("AUTH LOGIN").await?;
            self.expect(334).await?;
            self.command(&b64.encode(user)).await?;
            self.expect(334).await?;
            self.command(&b64.encode(pass)).await?;
        } else {
            let token = b64.encode(format!("\0{user}\0{pass}"));
            self.command(&format!("AUTH PLAIN {token}")).await?;
        }
        self.expect(235).await.map(|_| ())
    }

    /// Writes a command line and flushes it.
    async fn command(&mut self, line: &str) -> Result<(), WireError> {
        self.stream
            .write_all(format!("{line}\r\n").as_bytes())
            .await
            .map_err(WireError::io)?;
        self.stream.flush().await.map_err(WireError::io)
    }

    async fn read_reply_lines(&mut self) -> Result<(Reply, Vec<String>), WireError> {
        let mut lines = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .stream
                .read_line(&mut line)
                .await
                .map_err(WireError::io)?;
            if n == 0 {
                return Err(WireError::Broken("the server closed the connection".into()));
            }
            if line.len() > 4096 || lines.len() > 100 {
                return Err(WireError::Broken("reply too long".into()));
            }
            let t = line.trim_end();
            let code = t
                .get(..3)
                .and_then(|c| c.parse::<u16>().ok())
                .filter(|c| (200..600).contains(c))
                .ok_or_else(|| WireError::Broken(format!("not an SMTP reply: {t:?}")))?;
            let last = t.as_bytes().get(3) != Some(&b'-');
            lines.push(t.get(4..).unwrap_or("").to_owned());
            if last {
                let reply = Reply {
                    code,
                    text: lines.join(" "),
                    to: Answering::Other,
                };
                return Ok((reply, lines));
            }
        }
    }

    async fn read_reply(&mut self) -> Result<Reply, WireError> {
        self.read_reply_lines().await.map(|(r, _)| r)
    }

    /// Reads a reply and wants `code`; another reply is an error (421 included).
    async fn expect(&mut self, code: u16) -> Result<Reply, WireError> {
        let r = self.read_reply().await?;
        if r.code == code {
            Ok(r)
        } else {
            Err(WireError::Reply(r))
        }
    }

    /// One mail transaction. A refused mail leaves the session reset (RSET)
    /// and usable; `Broken` means the session must be dropped.
    pub async fn send(&mut self, mail: &WireMail) -> Result<(), WireError> {
        let head = self.envelope(mail)?;
        // The first refusal, and whether DATA was answered 354 anyway.
        let (refusal, data_open) = if self.ext.pipelining {
            self.envelope_pipelined(&head, mail).await?
        } else {
            (self.envelope_in_turn(&head, mail).await?, false)
        };
        if let Some(refused) = refusal {
            if data_open {
                // DATA was accepted although MAIL or a recipient was not
                // (a lax server): end it empty before resetting.
                self.stream
                    .write_all(b".\r\n")
                    .await
                    .map_err(WireError::io)?;
                self.stream.flush().await.map_err(WireError::io)?;
                self.read_reply().await?;
            }
            return Err(self.reset_after(refused).await);
        }
        self.stream
            .write_all(&mail.data)
            .await
            .map_err(WireError::io)?;
        self.stream
            .write_all(b".\r\n")
            .await
            .map_err(WireError::io)?;
        self.stream.flush().await.map_err(WireError::io)?;
        let r = self.read_reply().await?;
        if r.code == 250 {
            Ok(())
        } else {
            Err(self.reset_after(r).await)
        }
    }

    /// The MAIL, RCPT and DATA lines of `mail`, each ending in CRLF, with the
    /// MAIL parameters the server supports; refused (553) when an address
    /// needs SMTPUTF8 and the server has none.
    fn envelope(&self, mail: &WireMail) -> Result<String, WireError> {
        let mut params = String::new();
        if mail.eight_bit && self.ext.eight_bit {
            params.push_str(" BODY=8BITMIME");
        }
        if mail.smtputf8 {
            if !self.ext.smtputf8 {
                return Err(WireError::Reply(Reply {
                    code: 553,
                    text: "non-ASCII address and the server has no SMTPUTF8".into(),
                    to: Answering::Other,
                }));
            }
            params.push_str(" SMTPUTF8");
        }
        let mut head = format!("MAIL FROM:<{}>{params}\r\n", mail.from);
        for to in &mail.to {
            head.push_str(&format!("RCPT TO:<{to}>\r\n"));
        }
        head.push_str("DATA\r\n");
        Ok(head)
    }

    /// Sends the envelope in one write, then reads every reply in order (RFC
    /// 2920): the first refusal, and whether DATA was answered 354 anyway.
    async fn envelope_pipelined(
        &mut self,
        head: &str,
        mail: &WireMail,
    ) -> Result<(Option<Reply>, bool), WireError> {
        self.stream
            .write_all(head.as_bytes())
            .await
            .map_err(WireError::io)?;
        self.stream.flush().await.map_err(WireError::io)?;
        let mut refusal = None;
        let mut data_open = false;
        for (want, to) in envelope_replies(mail) {
            let r = self.read_reply().await?;
            data_open = want == 354 && r.code == 354;
            if !accepted(&r, want) && refusal.is_none() {
                refusal = Some(Reply { to, ..r });
            }
        }
        Ok((refusal, data_open))
    }

    /// Sends the envelope a line at a time, each after the last was
    /// accepted; the refusal that stopped it, if one did.
    async fn envelope_in_turn(
        &mut self,
        head: &str,
        mail: &WireMail,
    ) -> Result<Option<Reply>, WireError> {
        for (line, (want, to)) in head.split_terminator("\r\n").zip(envelope_replies(mail)) {
            self.command(line).await?;
            let r = self.read_reply().await?;
            if !accepted(&r, want) {
                return Ok(Some(Reply { to, ..r }));
            }
        }
        Ok(None)
    }

    /// After a refusal: 421 ends the session; otherwise RSET so the next
    /// mail starts clean (a failed RSET ends it too).
    async fn reset_after(&mut self, refused: Reply) -> WireError {
        if refused.code == 421 {
            return WireError::Broken(format!("the server is closing: {refused}"));
        }
        match self.command("RSET").await {
            Ok(()) => match self.expect(250).await {
                Ok(_) => WireError::Reply(refused),
                Err(_) => WireError::Broken(format!("{refused} (and RSET failed)")),
            },
            Err(_) => WireError::Broken(format!("{refused} (and RSET failed)")),
        }
    }

    /// NOOP: whether the server answers.
    pub async fn noop(&mut self) -> Result<(), WireError> {
        self.command("NOOP").await?;
        self.expect(250).await.map(|_| ())
    }
}
