//! The tenant's webhook channel settings through the registrar: the default endpoint, the signing secret made and rotated.

use toki_model::egress::EndpointUrl;
use toki_model::webhook::{WebhookSettings, WebhookSettingsInput, WebhookSettingsView};
use toki_model::{TenantId, User};

use super::{Registrar, RegistrarError};

impl Registrar {
    /// The endpoint checked against the operator's egress policy (422
    /// naming `field` if it names an address Toki does not send to).
    pub(super) fn check_endpoint(
        &self,
        field: &str,
        url: Option<&EndpointUrl>,
    ) -> Result<(), RegistrarError> {
        match url {
            Some(url) => Ok(self.settings.egress.check(field, url)?),
            None => Ok(()),
        }
    }

    /// A user's own endpoint, checked as [`Self::check_endpoint`] does.
    pub(super) fn check_user_endpoint(&self, user: &User) -> Result<(), RegistrarError> {
        self.check_endpoint("webhook_url", user.webhook_url.as_ref())
    }

    /// The tenant's webhook settings, without the secret.
    pub async fn webhook_settings(
        &self,
        tenant: &TenantId,
    ) -> Result<WebhookSettingsView, RegistrarError> {
        self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        let settings = store
            .webhook_settings()
            .await?
            .ok_or_else(|| RegistrarError::NotFound("webhook settings".into()))?;
        Ok(WebhookSettingsView::of(&settings, self.clock.now(), false))
    }

    /// Sets the default endpoint. The first time, a signing secret is made
    /// and shown in the answer (the only time it is).
    pub async fn put_webhook_settings(
        &self,
        tenant: &TenantId,
        input: &WebhookSettingsInput,
    ) -> Result<WebhookSettingsView, RegistrarError> {
        let default_url = input.validate()?;
        self.check_endpoint("default_url", default_url.as_ref())?;
        self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        let now = self.clock.now();
        let (settings, made) = match store.webhook_settings().await? {
            Some(s) => (WebhookSettings { default_url, ..s }, false),
            None => (
                WebhookSettings::new(default_url, &mut rand::thread_rng()),
                true,
            ),
        };
        store.put_webhook_settings(&settings, now).await?;
        Ok(WebhookSettingsView::of(&settings, now, made))
    }

    /// A new signing secret, shown in the answer; the one it replaces keeps
    /// signing beside it for [`toki_model::webhook::ROTATION_OVERLAP`].
    pub async fn rotate_webhook_secret(
        &self,
        tenant: &TenantId,
    ) -> Result<WebhookSettingsView, RegistrarError> {
        self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        let now = self.clock.now();
        let mut settings = store
            .webhook_settings()
            .await?
            .ok_or_else(|| RegistrarError::NotFound("webhook settings".into()))?;
        settings.rotate(&mut rand::thread_rng(), now);
        store.put_webhook_settings(&settings, now).await?;
        Ok(WebhookSettingsView::of(&settings, now, true))
    }
}
