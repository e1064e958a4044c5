//! Delivery channels: mail through lettre (SMTP, or a file outbox), in-app chat
//! (a row in the tenant database), Slack through the Web API (or a JSON-lines
//! outbox), webhooks to tenants' endpoints (signed, under the egress policy).

pub mod chat;
pub mod egress;
pub mod event_poster;
pub mod mail;
pub mod slack;
mod tls;
pub mod webhook;

pub use chat::ChatChannel;
pub use event_poster::HttpEventPoster;
pub use mail::{ses_error_verdict, MailChannel};
pub use slack::SlackChannel;
pub use webhook::{WebhookChannel, WebhookOptions};

/// The header (mail) and metadata field (Slack) that carry the delivery key,
/// so a receiver can detect duplicates.
pub const DELIVERY_HEADER: &str = "X-Toki-Delivery";
