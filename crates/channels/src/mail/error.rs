//! A mail channel that cannot be set up: the setting at fault and why.

use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum MailConfigError {
    #[error("mail.from: {0:?} is not a mailbox ({1})")]
    From(String, String),
    #[error("mail.smtp_url: {0}")]
    SmtpUrl(String),
    #[error("mail.outbox: cannot create {0}: {1}")]
    Outbox(PathBuf, std::io::Error),
}
