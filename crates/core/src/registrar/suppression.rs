//! The tenant's suppression list and mail settings through the registrar.

use toki_model::quota::Counted;
use toki_model::suppression::{
    bounded_detail, ListUnsubscribe, ListedAddress, MailSettings, Suppression, SuppressionInput,
    SuppressionReason,
};
use toki_model::TenantId;

use super::{Registrar, RegistrarError};

impl Registrar {
    /// Up to `limit` entries after `after`, in address order.
    pub async fn suppressions(
        &self,
        tenant: &TenantId,
        after: Option<&ListedAddress>,
        limit: usize,
    ) -> Result<Vec<Suppression>, RegistrarError> {
        self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        Ok(store.suppressions(after, limit).await?)
    }

    /// Lists `address` by hand; an address listed already keeps its entry,
    /// which is answered.
    pub async fn suppress_address(
        &self,
        tenant: &TenantId,
        address: &ListedAddress,
        input: &SuppressionInput,
    ) -> Result<Suppression, RegistrarError> {
        input.validate()?;
        let record = self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        self.check_cap(
            &record,
            store.as_ref(),
            Counted::Suppressions,
            1,
            || async { Ok(u64::from(store.suppression(address).await?.is_none())) },
        )
        .await?;
        let entry = Suppression {
            address: address.clone(),
            reason: SuppressionReason::Manual,
            detail: input.note.as_deref().map(bounded_detail),
            at: self.clock.now(),
        };
        store.suppress(std::slice::from_ref(&entry)).await?;
        Ok(store.suppression(address).await?.unwrap_or(entry))
    }

    /// Takes `address` off the list (404 if it was not on it): it is mailed again.
    pub async fn unsuppress(
        &self,
        tenant: &TenantId,
        address: &ListedAddress,
    ) -> Result<(), RegistrarError> {
        self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        match store.unsuppress(address).await? {
            true => Ok(()),
            false => Err(RegistrarError::NotFound(
                "address on the suppression list".into(),
            )),
        }
    }

    /// Entries from a mail service's feedback (SES bounces and complaints);
    /// how many were new.
    pub async fn suppress_feedback(
        &self,
        tenant: &TenantId,
        entries: &[Suppression],
    ) -> Result<u64, RegistrarError> {
        self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        Ok(store.suppress(entries).await?)
    }

    pub async fn mail_settings(&self, tenant: &TenantId) -> Result<MailSettings, RegistrarError> {
        self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        Ok(MailSettings {
            list_unsubscribe: store.list_unsubscribe().await?,
        })
    }

    pub async fn put_mail_settings(
        &self,
        tenant: &TenantId,
        settings: &MailSettings,
    ) -> Result<MailSettings, RegistrarError> {
        settings.list_unsubscribe.validate()?;
        self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        let l: &ListUnsubscribe = &settings.list_unsubscribe;
        store.put_list_unsubscribe(l, self.clock.now()).await?;
        Ok(settings.clone())
    }
}
