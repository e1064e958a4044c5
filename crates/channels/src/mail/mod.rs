//! Mail built with lettre and sent through SMTP when a server is configured
//! (a fixed pool of long-lived sessions, see `sessions`), through Amazon
//! SES's v2 API when that is configured (`ses`), otherwise through lettre's
//! file transport into an outbox folder (one .eml per mail). Every mail has a Message-ID made
//! of its delivery key, so a copy sent again after a crash is recognisable as
//! the same mail (mail clients and archives collapse it). Mails are rendered
//! before their due instant (`send_at`), so the instant itself only sends.

mod error;
pub mod feedback;
mod ses;
mod sessions;
mod wire;

pub use ses::error_verdict as ses_error_verdict;
pub use wire::smtp_data;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::{Mailbox, MultiPart};
use lettre::{AsyncFileTransport, AsyncTransport, Message, Tokio1Executor};
use toki_model::{Channel, Instant};
use toki_ports::channel::{ChannelSender, Notification, SendError, SendResult};
use toki_ports::Clock;
use tracing::debug;

pub use error::MailConfigError;
use ses::{SesMail, SesTransport};
use sessions::{Endpoint, Failure, Outgoing, SessionPool};

use crate::DELIVERY_HEADER;

enum Transport {
    Smtp(SessionPool),
    Ses(SesTransport),
    File(AsyncFileTransport<Tokio1Executor>),
}

pub struct MailChannel {
    transport: Transport,
    /// One mail's SMTP exchange (or a connect) longer than this fails (a
    /// server that accepts and then says nothing); waiting for a free session
    /// does not count.
    timeout: std::time::Duration,
    from: Mailbox,
    concurrency: usize,
    clock: Arc<dyn Clock>,
}

impl MailChannel {
    /// SMTP by URL: `smtp://host:port` (plain), `smtp://host:587?tls=required`
    /// (STARTTLS), `smtps://user:pass@host:465`; at most `connections`
    /// sessions open at once, each sending mail after mail.
    pub fn smtp(
        url: &str,
        from: &str,
        connections: u32,
        timeout: std::time::Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, MailConfigError> {
        let pool = SessionPool::new(Endpoint::parse(url)?, connections as usize, timeout);
        Ok(Self {
            timeout,
            transport: Transport::Smtp(pool),
            from: parse_from(from)?,
            concurrency: connections.max(1) as usize,
            clock,
        })
    }

    /// Amazon SES (v2 API) through `client`: at most `concurrency` requests
    /// in flight, each bounded by `timeout`; mails tagged with the
    /// configuration set when one is named (for SES's event publishing).
    pub fn ses(
        client: aws_sdk_sesv2::Client,
        configuration_set: Option<String>,
        from: &str,
        concurrency: u32,
        timeout: std::time::Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, MailConfigError> {
        Ok(Self {
            timeout,
            transport: Transport::Ses(SesTransport::new(client, configuration_set)),
            from: parse_from(from)?,
            concurrency: concurrency.max(1) as usize,
            clock,
        })
    }

    /// A folder of .eml files.
    pub fn outbox(
        dir: PathBuf,
        from: &str,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, MailConfigError> {
        std::fs::create_dir_all(&dir).map_err(|e| MailConfigError::Outbox(dir.clone(), e))?;
        Ok(Self {
            timeout: std::time::Duration::from_secs(10),
            transport: Transport::File(AsyncFileTransport::new(dir)),
            from: parse_from(from)?,
            concurrency: 16,
            clock,
        })
    }

    /// SMTP sessions opened since the start (0 for the outbox).
    pub fn sessions_opened(&self) -> u64 {
        match &self.transport {
            Transport::Smtp(pool) => pool.opened(),
            Transport::Ses(_) | Transport::File(_) => 0,
        }
    }

    fn build(&self, n: &Notification) -> Result<Message, SendError> {
        let to_addr = n
            .address
            .as_deref()
            .ok_or_else(|| SendError::Permanent("recipient has no e-mail address".into()))?;
        let to: Mailbox = format!(
            "{} <{}>",
            n.recipient_name().replace(['<', '>', '"'], ""),
            to_addr
        )
        .parse()
        .or_else(|_| to_addr.parse())
        .map_err(|e| SendError::Permanent(format!("bad address {to_addr:?}: {e}")))?;
        let builder = Message::builder()
            .message_id(Some(message_id(n)))
            .from(self.from.clone())
            .to(to)
            .subject(n.subject().to_owned());
        // With an HTML part, multipart/alternative: clients that show HTML
        // show it, the others the plain text.
        let mut message = match n.html() {
            Some(html) => builder.multipart(MultiPart::alternative_plain_html(
                n.text.clone(),
                html.to_owned(),
            )),
            None => builder.header(ContentType::TEXT_PLAIN).body(n.text.clone()),
        }
        .map_err(|e| SendError::Permanent(format!("building mail: {e}")))?;
        message.headers_mut().insert_raw(HeaderValue::new(
            HeaderName::new_from_ascii_str(DELIVERY_HEADER),
            format!("{}/{}", n.tenant, n.key),
        ));
        let unsubscribe = n.list_unsubscribe();
        if let Some((value, post)) = unsubscribe.and_then(|l| l.headers(n.key.recipient.as_str())) {
            let headers = message.headers_mut();
            headers.insert_raw(HeaderValue::new(
                HeaderName::new_from_ascii_str("List-Unsubscribe"),
                value,
            ));
            if let Some(post) = post {
                headers.insert_raw(HeaderValue::new(
                    HeaderName::new_from_ascii_str("List-Unsubscribe-Post"),
                    post,
                ));
            }
        }
        Ok(message)
    }
}

impl MailChannel {
    fn no_answer(&self, transport: &str) -> SendError {
        SendError::transient(format!(
            "{transport}: no answer within {} s",
            self.timeout.as_secs_f64()
        ))
    }

    fn failure(&self, f: Failure) -> SendError {
        match f {
            Failure::Refused(r) => refused(r),
            Failure::Connection(e) => SendError::transient(format!("smtp: {e}")),
            Failure::NoAnswer => self.no_answer("smtp"),
        }
    }

    /// Renders a mail before its instant: for SMTP, the envelope and the
    /// dot-stuffed bytes; for the outbox, the message.
    fn render(&self, n: &Notification) -> Result<Rendered<'_>, SendError> {
        let message = self.build(n)?;
        Ok(match &self.transport {
            Transport::Smtp(pool) => {
                let envelope = message.envelope();
                let mail = Outgoing::new(
                    envelope.from().map(|a| a.to_string()).unwrap_or_default(),
                    envelope.to().iter().map(|a| a.to_string()).collect(),
                    &message.formatted(),
                );
                Rendered::Smtp(pool, mail)
            }
            Transport::Ses(ses) => {
                let envelope = message.envelope();
                let mail = SesMail::new(
                    envelope.from().map(|a| a.to_string()).unwrap_or_default(),
                    envelope.to().iter().map(|a| a.to_string()).collect(),
                    message.formatted(),
                );
                Rendered::Ses(ses, mail)
            }
            Transport::File(outbox) => Rendered::File(outbox, message),
        })
    }

    async fn send_rendered(
        &self,
        n: &Notification,
        mail: Result<Rendered<'_>, SendError>,
    ) -> Result<Instant, SendError> {
        let sent = match mail {
            Err(e) => Err(e),
            Ok(Rendered::Smtp(pool, mail)) => pool.send(&mail).await.map_err(|f| self.failure(f)),
            Ok(Rendered::Ses(ses, mail)) => {
                match tokio::time::timeout(self.timeout, ses.send(&mail)).await {
                    Ok(sent) => sent.map(drop),
                    Err(_) => Err(self.no_answer("ses")),
                }
            }
            Ok(Rendered::File(outbox, message)) => outbox
                .send(message)
                .await
                .map(|_| ())
                .map_err(|e| SendError::transient(format!("mail outbox: {e}"))),
        };
        if let Err(e) = &sent {
            // The daemon logs the attempt (WARN, with its reason and budget).
            debug!(tenant = %n.tenant, delivery = %n.key.logged(), error = %e, "mail not sent");
        }
        sent.map(|()| self.clock.now())
    }

    async fn send_all(
        &self,
        batch: &[Notification],
        rendered: Vec<Result<Rendered<'_>, SendError>>,
    ) -> Vec<SendResult> {
        // `concurrency` lanes (the pool's size) each take the next mail: one
        // send future per lane, not per mail. 3,000 send futures at once made
        // the kernel zero fresh huge pages, the largest item in the burst's
        // profile (BENCHMARKS.md).
        let queue = std::sync::Mutex::new(rendered.into_iter().enumerate());
        let lane = || async {
            let mut done = Vec::new();
            loop {
                let next = queue.lock().expect("mail queue lock").next();
                let Some((i, mail)) = next else { break };
                done.push((i, self.send_rendered(&batch[i], mail).await));
            }
            done
        };
        let lanes = (0..self.concurrency.min(batch.len())).map(|_| lane());
        let mut results: Vec<(usize, SendResult)> = futures::future::join_all(lanes)
            .await
            .into_iter()
            .flatten()
            .collect();
        results.sort_unstable_by_key(|(i, _)| *i);
        results.into_iter().map(|(_, r)| r).collect()
    }
}

/// A mail rendered for the transport that will carry it.
enum Rendered<'a> {
    Smtp(&'a SessionPool, Outgoing),
    Ses(&'a SesTransport, SesMail),
    File(&'a AsyncFileTransport<Tokio1Executor>, Message),
}

/// The same for every copy of one delivery: `<key@toki>`, with the key's
/// characters that a Message-ID cannot hold replaced.
pub fn message_id(n: &Notification) -> String {
    let id: String = format!("{}.{}", n.tenant, n.key)
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' | '_' | '+' | '=' => c,
            _ => '.',
        })
        .collect();
    format!("<{id}@toki.reminder>")
}

/// Only a refusal of the mailbox itself (550 no such user, 551, 553 bad
/// address, 552 over quota) is final for a delivery; every other reply
/// (4xx, and 5xx such as 530/535 authentication or 554 at the greeting, which
/// operators fix) and every connection problem is tried again.
fn refused(r: wire::Reply) -> SendError {
    match (r.code, r.to) {
        // The recipient's own mailbox: it also goes on the suppression list.
        (550..=553, wire::Answering::Recipient) => {
            SendError::RecipientRefused(format!("smtp: {r}"))
        }
        (550..=553, wire::Answering::Other) => SendError::Permanent(format!("smtp: {r}")),
        _ => SendError::transient(format!("smtp: {r}")),
    }
}

fn parse_from(from: &str) -> Result<Mailbox, MailConfigError> {
    from.parse().map_err(|e: lettre::address::AddressError| {
        MailConfigError::From(from.into(), e.to_string())
    })
}

#[async_trait]
impl ChannelSender for MailChannel {
    fn channel(&self) -> Channel {
        Channel::Mail
    }

    /// Opens the pool's sessions ahead of the due instant.
    async fn warm_up(&self) {
        if let Transport::Smtp(pool) = &self.transport {
            pool.warm().await;
        }
    }

    /// Says NOOP on a session (sends nothing).
    async fn probe(&self) -> Result<(), SendError> {
        match &self.transport {
            Transport::Smtp(pool) => pool.probe().await.map_err(|f| self.failure(f)),
            Transport::Ses(ses) => ses.probe(self.from.email.as_ref()).await,
            Transport::File(_) => Ok(()),
        }
    }

    async fn send(&self, batch: &[Notification]) -> Vec<SendResult> {
        let rendered = batch.iter().map(|n| self.render(n)).collect();
        self.send_all(batch, rendered).await
    }

    /// Renders every mail first, then waits for the instant and sends.
    async fn send_at(&self, batch: &[Notification], at: tokio::time::Instant) -> Vec<SendResult> {
        let rendered = batch.iter().map(|n| self.render(n)).collect();
        tokio::time::sleep_until(at).await;
        self.send_all(batch, rendered).await
    }
}
