//! Mail through lettre: SMTP when a server is configured, otherwise lettre's
//! file transport into an outbox folder (one .eml per mail). Every mail has a
//! Message-ID made of its delivery key, so a copy sent again after a crash is
//! recognisable as the same mail (mail clients and archives collapse it).

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::{self, StreamExt};
use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::Mailbox;
use lettre::transport::smtp::PoolConfig;
use lettre::{AsyncFileTransport, AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use thiserror::Error;
use toki_core::channel::{ChannelSender, Notification, SendError, SendResult};
use toki_core::ports::Clock;
use toki_core::{Channel, Instant};

use crate::DELIVERY_HEADER;

#[derive(Debug, Error)]
pub enum MailConfigError {
    #[error("mail.from: {0:?} is not a mailbox ({1})")]
    From(String, String),
    #[error("mail.smtp_url: {0}")]
    SmtpUrl(String),
    #[error("mail.outbox: cannot create {0}: {1}")]
    Outbox(PathBuf, std::io::Error),
}

enum Transport {
    Smtp(AsyncSmtpTransport<Tokio1Executor>),
    File(AsyncFileTransport<Tokio1Executor>),
}

pub struct MailChannel {
    transport: Transport,
    /// A whole SMTP exchange longer than this fails: lettre's own timeout
    /// covers connecting, not a server that accepts and then says nothing.
    timeout: std::time::Duration,
    from: Mailbox,
    concurrency: usize,
    clock: Arc<dyn Clock>,
}

impl MailChannel {
    /// SMTP by URL: `smtp://host:port` (plain), `smtp://host:587?tls=required`, `smtps://user:pass@host:465`.
    pub fn smtp(
        url: &str,
        from: &str,
        connections: u32,
        timeout: std::time::Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, MailConfigError> {
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
            .map_err(|e| MailConfigError::SmtpUrl(e.to_string()))?
            .pool_config(PoolConfig::new().max_size(connections.max(1)))
            // A hung server fails the send (the claim is renewed meanwhile).
            .timeout(Some(timeout))
            .build();
        Ok(Self {
            timeout,
            transport: Transport::Smtp(transport),
            from: parse_from(from)?,
            concurrency: connections.max(1) as usize,
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

    fn build(&self, n: &Notification) -> Result<Message, SendError> {
        let to_addr = n
            .recipient
            .email
            .as_deref()
            .ok_or_else(|| SendError::Permanent("recipient has no e-mail address".into()))?;
        let to: Mailbox = format!(
            "{} <{}>",
            n.recipient.name.replace(['<', '>', '"'], ""),
            to_addr
        )
        .parse()
        .or_else(|_| to_addr.parse())
        .map_err(|e| SendError::Permanent(format!("bad address {to_addr:?}: {e}")))?;
        let mut message = Message::builder()
            .message_id(Some(message_id(n)))
            .from(self.from.clone())
            .to(to)
            .subject(n.subject.clone())
            .header(ContentType::TEXT_PLAIN)
            .body(n.text.clone())
            .map_err(|e| SendError::Permanent(format!("building mail: {e}")))?;
        message.headers_mut().insert_raw(HeaderValue::new(
            HeaderName::new_from_ascii_str(DELIVERY_HEADER),
            format!("{}/{}", n.tenant, n.key),
        ));
        Ok(message)
    }
}

impl MailChannel {
    fn no_answer(&self) -> SendError {
        SendError::transient(format!(
            "smtp: no answer within {} s",
            self.timeout.as_secs_f64()
        ))
    }

    async fn send_one(&self, n: &Notification) -> Result<Instant, SendError> {
        let message = self.build(n)?;
        let sent = match &self.transport {
            Transport::Smtp(t) => match tokio::time::timeout(self.timeout, t.send(message)).await {
                Ok(sent) => sent.map(|_| ()).map_err(smtp_error),
                Err(_) => Err(self.no_answer()),
            },
            Transport::File(t) => t
                .send(message)
                .await
                .map(|_| ())
                .map_err(|e| SendError::transient(format!("mail outbox: {e}"))),
        };
        sent.map(|()| self.clock.now())
    }
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
fn smtp_error(e: lettre::transport::smtp::Error) -> SendError {
    let code = e.status().map(|c| c.to_string());
    match code.as_deref() {
        Some("550" | "551" | "552" | "553") => SendError::Permanent(format!("smtp: {e}")),
        _ => SendError::transient(format!("smtp: {e}")),
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

    /// Opens a connection and says NOOP (sends nothing).
    async fn probe(&self) -> Result<(), SendError> {
        match &self.transport {
            Transport::Smtp(t) => match tokio::time::timeout(self.timeout, t.test_connection())
                .await
            {
                Ok(Ok(true)) => Ok(()),
                Ok(Ok(false)) => Err(SendError::transient("smtp: the server did not answer NOOP")),
                Ok(Err(e)) => Err(smtp_error(e)),
                Err(_) => Err(self.no_answer()),
            },
            Transport::File(_) => Ok(()),
        }
    }

    async fn send(&self, batch: &[Notification]) -> Vec<SendResult> {
        let sends: Vec<_> = batch.iter().map(|n| self.send_one(n)).collect();
        stream::iter(sends)
            .buffered(self.concurrency)
            .collect()
            .await
    }
}
