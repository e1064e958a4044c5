//! A tenant's webhook channel: its default endpoint and its signing secrets (two while one is rotated out), and where one notification goes.

use std::sync::Arc;

use chrono::Duration;
use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::egress::EndpointUrl;
use crate::error::ValidationError;
use crate::time::Instant;
use crate::webhook_signature::WebhookSecret;

/// How long the secret rotated out still signs, beside the new one: the
/// tenant's receivers have that long to switch.
pub const ROTATION_OVERLAP: Duration = Duration::hours(24);

/// What a tenant configured for the webhook channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// Where reminders go for users without an endpoint of their own.
    pub default_url: Option<EndpointUrl>,
    /// Signs every request.
    pub secret: WebhookSecret,
    /// The secret rotated out, also signing until the instant given.
    pub previous: Option<(WebhookSecret, Instant)>,
}

impl WebhookSettings {
    /// New settings with a new secret.
    pub fn new(default_url: Option<EndpointUrl>, rng: &mut impl RngCore) -> Self {
        WebhookSettings {
            default_url,
            secret: WebhookSecret::generate(rng),
            previous: None,
        }
    }

    /// A new secret; the current one keeps signing for [`ROTATION_OVERLAP`].
    pub fn rotate(&mut self, rng: &mut impl RngCore, now: Instant) {
        let old = std::mem::replace(&mut self.secret, WebhookSecret::generate(rng));
        self.previous = Some((old, now + ROTATION_OVERLAP));
    }

    /// The secrets that sign a request sent at `now`: the current one, then
    /// the one being rotated out while it lasts.
    pub fn signing_secrets(&self, now: Instant) -> impl Iterator<Item = &WebhookSecret> {
        let previous = self
            .previous
            .as_ref()
            .filter(|(_, until)| now < *until)
            .map(|(s, _)| s);
        std::iter::once(&self.secret).chain(previous)
    }

    /// When the secret rotated out stops signing, if one still does at `now`.
    pub fn rotating_until(&self, now: Instant) -> Option<Instant> {
        self.previous
            .as_ref()
            .map(|(_, until)| *until)
            .filter(|until| now < *until)
    }
}

/// Where one notification goes and what signs it.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookTarget {
    pub url: EndpointUrl,
    pub settings: Arc<WebhookSettings>,
}

impl WebhookTarget {
    /// The user's own endpoint, else the tenant's default; why none if none.
    pub fn resolve(
        user_url: Option<&EndpointUrl>,
        settings: Option<&Arc<WebhookSettings>>,
    ) -> Result<Self, &'static str> {
        let settings = settings.ok_or("the tenant has no webhook settings (no signing secret)")?;
        let url = user_url
            .or(settings.default_url.as_ref())
            .ok_or("neither the recipient nor the tenant has a webhook endpoint")?;
        Ok(WebhookTarget {
            url: url.clone(),
            settings: settings.clone(),
        })
    }
}

/// `PUT /v1/tenants/{tenant}/webhook`: the tenant's default endpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettingsInput {
    /// https URL; null or absent: no default (only users' own endpoints).
    #[serde(default)]
    pub default_url: Option<String>,
}

impl WebhookSettingsInput {
    pub fn validate(&self) -> Result<Option<EndpointUrl>, ValidationError> {
        EndpointUrl::parse_optional("default_url", self.default_url.as_deref())
    }
}

/// What the API shows of a tenant's webhook settings. The secret only once,
/// in the answer that made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookSettingsView {
    pub default_url: Option<String>,
    /// RFC 3339: until when the secret rotated out still signs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secret_until: Option<String>,
    /// `whsec_…`: present only in the answer that created or rotated it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl WebhookSettingsView {
    pub fn of(settings: &WebhookSettings, now: Instant, show_secret: bool) -> Self {
        WebhookSettingsView {
            default_url: settings.default_url.as_ref().map(|u| u.to_string()),
            previous_secret_until: settings.rotating_until(now).map(|t| t.to_rfc3339()),
            secret: show_secret.then(|| settings.secret.expose()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotation_signs_with_both_secrets_for_the_overlap_only() {
        let rng = &mut rand::thread_rng();
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let mut s = WebhookSettings::new(None, rng);
        let first = s.secret.clone();
        assert_eq!(s.signing_secrets(now).count(), 1);
        s.rotate(rng, now);
        assert_ne!(s.secret, first);
        let both: Vec<_> = s.signing_secrets(now).cloned().collect();
        assert_eq!(both, vec![s.secret.clone(), first]);
        assert_eq!(s.signing_secrets(now + ROTATION_OVERLAP).count(), 1);
        assert!(s.rotating_until(now).is_some());
    }

    #[test]
    fn a_user_endpoint_wins_over_the_default_and_none_is_a_reason() {
        let rng = &mut rand::thread_rng();
        let url = |s: &str| EndpointUrl::parse("u", s).unwrap();
        let s = Arc::new(WebhookSettings::new(Some(url("https://a.example/")), rng));
        let own = url("https://b.example/");
        assert_eq!(
            WebhookTarget::resolve(Some(&own), Some(&s)).unwrap().url,
            own
        );
        assert_eq!(
            WebhookTarget::resolve(None, Some(&s)).unwrap().url.host(),
            "a.example"
        );
        assert!(WebhookTarget::resolve(Some(&own), None).is_err());
        let bare = Arc::new(WebhookSettings::new(None, rng));
        assert!(WebhookTarget::resolve(None, Some(&bare)).is_err());
    }
}
