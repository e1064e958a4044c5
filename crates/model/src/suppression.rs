//! A tenant's suppression list (docs/suppression.md): addresses that bounced,
//! complained or were refused, which Toki does not mail again; and the
//! `List-Unsubscribe` headers a tenant may put on its reminder mail.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::ValidationError;
use crate::time::Instant;

/// The longest address SMTP carries (RFC 5321's path limit less the brackets).
pub const MAX_ADDRESS: usize = 254;
/// The longest detail kept with an entry (a bounce's diagnostic, a note).
pub const MAX_DETAIL: usize = 1_000;
/// The longest unsubscribe URL or mailto a tenant may set.
pub const MAX_UNSUBSCRIBE: usize = 2_048;

/// A mail address as the list keys it: trimmed, ASCII letters lower-cased
/// (as SQL's `lower` does on both engines), so that
/// `Ana@Example.com` and `ana@example.com` are one entry. (The local part is
/// case-sensitive in theory; no mailbox provider treats it so.)
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ListedAddress(String);

impl ListedAddress {
    pub fn parse(field: &str, raw: &str) -> Result<Self, ValidationError> {
        let a = raw.trim().to_ascii_lowercase();
        let bad = |why: &str| Err(ValidationError::new(field, why));
        if a.is_empty() || a.len() > MAX_ADDRESS {
            return bad("must be a mail address of 1 to 254 bytes");
        }
        let Some((local, domain)) = a.rsplit_once('@') else {
            return bad("must be a mail address (local@domain)");
        };
        let printable = |s: &str| s.chars().all(|c| !c.is_control() && !c.is_whitespace());
        if local.is_empty() || domain.is_empty() || !printable(&a) || a.contains(['<', '>']) {
            return bad("must be a mail address (local@domain)");
        }
        Ok(Self(a))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ListedAddress {
    type Error = ValidationError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse("address", &s)
    }
}

impl From<ListedAddress> for String {
    fn from(a: ListedAddress) -> String {
        a.0
    }
}

impl fmt::Display for ListedAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why an address is on the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SuppressionReason {
    /// A permanent bounce reported by SES.
    Bounce,
    /// The recipient marked a mail as spam (SES complaint).
    Complaint,
    /// The SMTP server refused the mailbox (550–553).
    Refused,
    /// The tenant put it there.
    Manual,
}

impl SuppressionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bounce => "bounce",
            Self::Complaint => "complaint",
            Self::Refused => "refused",
            Self::Manual => "manual",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Bounce, Self::Complaint, Self::Refused, Self::Manual]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

/// One entry of a tenant's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suppression {
    pub address: ListedAddress,
    pub reason: SuppressionReason,
    /// What the bounce or the server said, or the tenant's note; bounded.
    pub detail: Option<String>,
    pub at: Instant,
}

impl Suppression {
    /// Why a delivery to this address is not sent, as its row records it.
    pub fn why_not_sent(&self) -> String {
        format!(
            "suppressed: {} on {}",
            self.reason.as_str(),
            self.at.format("%Y-%m-%d")
        )
    }
}

/// An entry as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SuppressionView {
    pub address: String,
    pub reason: SuppressionReason,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// RFC 3339: when it was put on the list.
    pub since: String,
}

impl From<&Suppression> for SuppressionView {
    fn from(s: &Suppression) -> Self {
        Self {
            address: s.address.to_string(),
            reason: s.reason,
            detail: s.detail.clone(),
            since: s.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        }
    }
}

/// What a tenant sends to list an address by hand: an optional note.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuppressionInput {
    #[serde(default)]
    pub note: Option<String>,
}

impl SuppressionInput {
    pub fn validate(&self) -> Result<(), ValidationError> {
        match &self.note {
            Some(n) if n.len() > MAX_DETAIL => Err(ValidationError::new(
                "note",
                format!("must be at most {MAX_DETAIL} bytes"),
            )),
            _ => Ok(()),
        }
    }
}

/// A tenant's mail settings as the API reads and writes them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MailSettings {
    #[serde(default)]
    pub list_unsubscribe: ListUnsubscribe,
}

/// `detail` cut to [`MAX_DETAIL`] bytes on a character boundary.
pub fn bounded_detail(detail: &str) -> String {
    let mut end = detail.len().min(MAX_DETAIL);
    while !detail.is_char_boundary(end) {
        end -= 1;
    }
    detail[..end].to_owned()
}

/// The `List-Unsubscribe` a tenant puts on its reminder mail. With a URL,
/// `List-Unsubscribe-Post: List-Unsubscribe=One-Click` too (RFC 8058): the
/// URL must take a POST without a login. `{user}` in either is replaced by
/// an opaque per-recipient token the tenant's own service can resolve (the
/// user id, percent-encoded).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListUnsubscribe {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mailto: Option<String>,
}

impl ListUnsubscribe {
    /// Checks both parts: an https URL, a mail address; each bounded.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if let Some(url) = &self.url {
            let ok = url.len() <= MAX_UNSUBSCRIBE
                && url.starts_with("https://")
                && url.len() > "https://".len()
                && !url.contains(|c: char| c.is_control() || c.is_whitespace() || c == '>');
            if !ok {
                return Err(ValidationError::new(
                    "list_unsubscribe.url",
                    "must be an https URL of at most 2,048 bytes, without spaces or '>'",
                ));
            }
        }
        if let Some(mailto) = &self.mailto {
            ListedAddress::parse("list_unsubscribe.mailto", mailto)?;
        }
        Ok(())
    }

    pub fn is_enabled(&self) -> bool {
        self.url.is_some() || self.mailto.is_some()
    }

    /// The two header values for `user`: `List-Unsubscribe`, and
    /// `List-Unsubscribe-Post` when there is a URL; None when disabled.
    pub fn headers(&self, user: &str) -> Option<(String, Option<String>)> {
        let token = crate::percent::encode(user);
        let mut parts = Vec::new();
        if let Some(url) = &self.url {
            parts.push(format!("<{}>", url.replace("{user}", &token)));
        }
        if let Some(mailto) = &self.mailto {
            parts.push(format!("<mailto:{mailto}?subject=unsubscribe%20{token}>"));
        }
        if parts.is_empty() {
            return None;
        }
        let post = self
            .url
            .as_ref()
            .map(|_| "List-Unsubscribe=One-Click".to_owned());
        Some((parts.join(", "), post))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_keyed_lower_case_and_checked() {
        let a = ListedAddress::parse("address", "  Ana@Example.COM ").unwrap();
        assert_eq!(a.as_str(), "ana@example.com");
        for bad in ["", "ana", "@example.com", "ana@", "a b@c.d", "<a@b.c>"] {
            let e = ListedAddress::parse("address", bad).unwrap_err();
            assert_eq!(e.field, "address", "{bad:?}");
        }
        assert!(ListedAddress::parse("address", &format!("{}@b.c", "a".repeat(260))).is_err());
    }

    #[test]
    fn unsubscribe_headers_only_when_enabled() {
        assert_eq!(ListUnsubscribe::default().headers("ana"), None);
        let l = ListUnsubscribe {
            url: Some("https://app.example.com/unsub?u={user}".into()),
            mailto: Some("unsub@example.com".into()),
        };
        l.validate().unwrap();
        let (value, post) = l.headers("ana b/1").unwrap();
        assert_eq!(
            value,
            "<https://app.example.com/unsub?u=ana%20b%2F1>, <mailto:unsub@example.com?subject=unsubscribe%20ana%20b%2F1>"
        );
        assert_eq!(post.as_deref(), Some("List-Unsubscribe=One-Click"));
        let http = ListUnsubscribe {
            url: Some("http://x.example".into()),
            mailto: None,
        };
        assert_eq!(http.validate().unwrap_err().field, "list_unsubscribe.url");
    }
}
