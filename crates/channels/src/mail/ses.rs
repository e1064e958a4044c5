//! Mail through Amazon SES's v2 API: one `SendEmail` per mail, with the mail
//! as raw MIME (the same bytes the SMTP path sends, so its Message-ID and
//! `X-Toki-Delivery` header survive). SES's `SendBulkEmail` takes only
//! templated mails with per-destination data; Toki's mails are rendered per
//! recipient (their zone, their language), so there is no bulk shape to use.
//!
//! Verdicts: SES throttling (`TooManyRequestsException`: the sending rate)
//! is `Throttled` and costs the delivery nothing; a message SES rejects for itself
//! (`MessageRejected`, `BadRequestException`) is final; everything an
//! operator fixes (an identity not verified, sending paused, the account
//! suspended) and every network failure is tried again, and dead-lettered
//! after the budget, never dropped.

use std::time::Duration;

use aws_sdk_sesv2::error::ProvideErrorMetadata;
use aws_sdk_sesv2::primitives::Blob;
use aws_sdk_sesv2::types::{Destination, EmailContent, RawMessage};
use toki_ports::channel::SendError;

/// How long a throttled mail waits before it is tried again (SES gives no Retry-After).
const THROTTLE_BACKOFF: Duration = Duration::from_secs(1);

/// An SES v2 client and what every mail carries.
pub(super) struct SesTransport {
    client: aws_sdk_sesv2::Client,
    configuration_set: Option<String>,
}

/// A mail rendered for SES: the envelope recipients and the raw message.
pub(super) struct SesMail {
    from: String,
    to: Vec<String>,
    raw: Vec<u8>,
}

impl SesMail {
    pub(super) fn new(from: String, to: Vec<String>, raw: Vec<u8>) -> Self {
        Self { from, to, raw }
    }
}

impl SesTransport {
    pub(super) fn new(client: aws_sdk_sesv2::Client, configuration_set: Option<String>) -> Self {
        Self {
            client,
            configuration_set,
        }
    }

    /// Sends one mail; the message id SES gave it.
    pub(super) async fn send(&self, mail: &SesMail) -> Result<String, SendError> {
        let raw = RawMessage::builder()
            .data(Blob::new(mail.raw.clone()))
            .build()
            .map_err(|e| SendError::Permanent(format!("ses: building the raw message: {e}")))?;
        let sent = self
            .client
            .send_email()
            .from_email_address(&mail.from)
            .destination(
                Destination::builder()
                    .set_to_addresses(Some(mail.to.clone()))
                    .build(),
            )
            .content(EmailContent::builder().raw(raw).build())
            .set_configuration_set_name(self.configuration_set.clone())
            .send()
            .await;
        match sent {
            Ok(out) => Ok(out.message_id.unwrap_or_default()),
            Err(e) => Err(error_verdict(
                e.code(),
                e.message().or(Some(&toki_model::error::chain(&e))),
            )),
        }
    }

    /// Whether SES answers: a read of the sender's identity (allowed by the
    /// same scoped IAM policy as sending). An identity verified as a domain
    /// has no entry for the address: "not found" is an answer too.
    pub(super) async fn probe(&self, sender: &str) -> Result<(), SendError> {
        match self
            .client
            .get_email_identity()
            .email_identity(sender)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("NotFoundException") => Ok(()),
            Err(e) => Err(error_verdict(
                e.code(),
                e.message().or(Some(&toki_model::error::chain(&e))),
            )),
        }
    }
}

/// What an SES error (its code and message) means for the delivery (see
/// the module's note).
pub fn error_verdict(code: Option<&str>, message: Option<&str>) -> SendError {
    let text = format!(
        "ses: {}: {}",
        code.unwrap_or("no error code"),
        message.unwrap_or("no message")
    );
    match code {
        Some("TooManyRequestsException" | "Throttling") => SendError::Throttled {
            retry_after: THROTTLE_BACKOFF,
        },
        // A sender identity that is not verified (or not authorised) is the
        // operator's to fix, not the mail's fault.
        Some("MessageRejected")
            if message.is_some_and(|m| {
                m.contains("not verified") || m.contains("not have authority")
            }) =>
        {
            SendError::transient(text)
        }
        Some("MessageRejected" | "BadRequestException") => SendError::Permanent(text),
        _ => SendError::transient(text),
    }
}
