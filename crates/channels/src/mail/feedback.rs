//! SES's feedback on sent mail: bounce and complaint notifications (as SNS
//! delivers them to a queue, or bare), read into suppression-list entries
//! for the tenant that sent the mail.
//!
//! The tenant is read from the mail's own `X-Toki-Delivery` header
//! (`tenant/delivery key`), which SES copies into the notification when the
//! identity's notifications include the original headers (infra/README.md).
//! Only permanent bounces and complaints list an address: a transient bounce
//! (mailbox full, out of office) does not.

use serde_json::Value;
use thiserror::Error;
use toki_model::domain::TenantId;
use toki_model::suppression::{bounded_detail, ListedAddress, Suppression, SuppressionReason};
use toki_model::Instant;

use crate::DELIVERY_HEADER;

/// What one notification asks: these entries, on this tenant's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feedback {
    pub tenant: TenantId,
    pub entries: Vec<Suppression>,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FeedbackError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not an SES notification: {0}")]
    NotSes(&'static str),
    #[error("the mail carries no X-Toki-Delivery header naming its tenant (are original headers included in the notifications?)")]
    NoTenant,
    #[error("the X-Toki-Delivery header names no valid tenant")]
    BadTenant,
}

/// Reads one notification: an SNS envelope (`"Type": "Notification"`) or
/// the SES JSON itself. `Ok(None)`: a kind that lists nobody (a delivery,
/// a transient bounce). `at` stamps entries without a timestamp of their own.
pub fn read_feedback(body: &str, at: Instant) -> Result<Option<Feedback>, FeedbackError> {
    let mut v: Value =
        serde_json::from_str(body).map_err(|e| FeedbackError::NotJson(e.to_string()))?;
    if v.get("Type").and_then(Value::as_str) == Some("Notification") {
        let inner = v
            .get("Message")
            .and_then(Value::as_str)
            .ok_or(FeedbackError::NotSes(
                "an SNS notification without a Message",
            ))?;
        v = serde_json::from_str(inner).map_err(|e| FeedbackError::NotJson(e.to_string()))?;
    }
    let kind = v
        .get("notificationType")
        .or_else(|| v.get("eventType"))
        .and_then(Value::as_str)
        .ok_or(FeedbackError::NotSes("no notificationType or eventType"))?;
    let (reason, recipients, detail_of) = match kind {
        "Bounce" if v["bounce"]["bounceType"].as_str() == Some("Permanent") => (
            SuppressionReason::Bounce,
            &v["bounce"]["bouncedRecipients"],
            "diagnosticCode",
        ),
        "Complaint" => (
            SuppressionReason::Complaint,
            &v["complaint"]["complainedRecipients"],
            "",
        ),
        _ => return Ok(None),
    };
    let tenant = tenant_of(&v["mail"])?;
    let when = v[if reason == SuppressionReason::Bounce {
        "bounce"
    } else {
        "complaint"
    }]["timestamp"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map_or(at, |t| t.to_utc());
    let entries = recipients
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let address = ListedAddress::parse("emailAddress", r["emailAddress"].as_str()?).ok()?;
            let detail = r.get(detail_of).and_then(Value::as_str).map(bounded_detail);
            Some(Suppression {
                address,
                reason,
                detail,
                at: when,
            })
        })
        .collect();
    Ok(Some(Feedback { tenant, entries }))
}

/// The tenant named by the mail's `X-Toki-Delivery` header.
fn tenant_of(mail: &Value) -> Result<TenantId, FeedbackError> {
    let header = DELIVERY_HEADER.trim_end_matches(':');
    let value = mail["headers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|h| {
            h["name"]
                .as_str()
                .is_some_and(|n| n.eq_ignore_ascii_case(header))
        })
        .and_then(|h| h["value"].as_str())
        .ok_or(FeedbackError::NoTenant)?;
    let (tenant, _) = value.split_once('/').ok_or(FeedbackError::BadTenant)?;
    tenant.parse().map_err(|_| FeedbackError::BadTenant)
}
