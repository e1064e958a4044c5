//! Mail through lettre: SMTP when a server is configured, otherwise lettre's
//! file transport into an outbox folder (one .eml per mail).

use std::path::PathBuf;

use async_trait::async_trait;
use chrono::Utc;
use futures::stream::{self, StreamExt};
use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::Mailbox;
use lettre::transport::smtp::PoolConfig;
use lettre::{AsyncFileTransport, AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use thiserror::Error;
use toki_core::channel::{ChannelSender, Notification, SendError};
use toki_core::ports::TenantStore;
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
    from: Mailbox,
    concurrency: usize,
}

impl MailChannel {
    /// SMTP by URL: `smtp://host:port` (plain), `smtp://host:587?tls=required`, `smtps://user:pass@host:465`.
    pub fn smtp(url: &str, from: &str, connections: u32) -> Result<Self, MailConfigError> {
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
            .map_err(|e| MailConfigError::SmtpUrl(e.to_string()))?
            .pool_config(PoolConfig::new().max_size(connections.max(1)))
            // Well inside the daemon's visibility timeout: a hung server fails the send, not the claim.
            .timeout(Some(std::time::Duration::from_secs(10)))
            .build();
        Ok(Self {
            transport: Transport::Smtp(transport),
            from: parse_from(from)?,
            concurrency: connections.max(1) as usize,
        })
    }

    /// A folder of .eml files.
    pub fn outbox(dir: PathBuf, from: &str) -> Result<Self, MailConfigError> {
        std::fs::create_dir_all(&dir).map_err(|e| MailConfigError::Outbox(dir.clone(), e))?;
        Ok(Self {
            transport: Transport::File(AsyncFileTransport::new(dir)),
            from: parse_from(from)?,
            concurrency: 16,
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
    async fn send_one(&self, n: &Notification) -> Result<Instant, SendError> {
        let message = self.build(n)?;
        let sent = match &self.transport {
            Transport::Smtp(t) => t.send(message).await.map(|_| ()).map_err(|e| {
                if e.is_permanent() {
                    SendError::Permanent(format!("smtp: {e}"))
                } else {
                    SendError::Transient {
                        reason: format!("smtp: {e}"),
                        retry_after: None,
                    }
                }
            }),
            Transport::File(t) => {
                t.send(message)
                    .await
                    .map(|_| ())
                    .map_err(|e| SendError::Transient {
                        reason: format!("mail outbox: {e}"),
                        retry_after: None,
                    })
            }
        };
        sent.map(|()| Utc::now())
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

    async fn send(
        &self,
        _store: &dyn TenantStore,
        batch: &[Notification],
    ) -> Vec<Result<Instant, SendError>> {
        let sends: Vec<_> = batch.iter().map(|n| self.send_one(n)).collect();
        stream::iter(sends)
            .buffered(self.concurrency)
            .collect()
            .await
    }
}
