//! `toki tenant delete`: the inventory a dry run lists, and the delete on
//! either backend. The order (door closed, fence, claims waited out, then
//! the database dropped, the key secrets, the control rows and last the
//! directory entry) is [`toki_core::offboard`]'s; see docs/offboarding.md.

use std::time::Duration;

use anyhow::Context;
use toki_core::offboard::{Inventory, OffboardSettings, Offboarding, Quiesced};
use toki_model::TenantId;
use toki_ports::Holding;

use crate::config::BackendKind;
use crate::Toki;

/// What a dry run lists: the inventory, and the tenant's key secrets
/// (AWS backend only; the error when they could not be listed).
#[derive(Debug)]
pub struct TenantInventory {
    pub inventory: Inventory,
    pub secrets: Result<Vec<String>, String>,
}

/// What a delete did.
#[derive(Debug)]
pub struct Deleted {
    /// The database's rows per table before it was dropped.
    pub database: Result<Vec<Holding>, String>,
    pub database_name: String,
    pub quiesced: Quiesced,
    pub secrets: Vec<String>,
    pub control: Vec<Holding>,
}

impl Toki {
    /// Offboarding on this deployment's ports; claims wait at most `max_wait`.
    pub fn offboarding(&self, max_wait: Duration) -> Offboarding {
        Offboarding {
            directory: self.directory.clone(),
            stores: self.stores.clone(),
            footprints: self.footprints.clone(),
            clock: self.clock.clone(),
            settings: OffboardSettings {
                lease: self.config.daemon_settings().visibility,
                max_wait,
                ..OffboardSettings::default()
            },
        }
    }

    /// What deleting `tenant` would remove; changes nothing.
    pub async fn tenant_inventory(&self, tenant: &TenantId) -> anyhow::Result<TenantInventory> {
        let inventory = self.offboarding(Duration::ZERO).inventory(tenant).await?;
        let secrets = self.key_secrets(tenant).await.map_err(|e| format!("{e:#}"));
        Ok(TenantInventory { inventory, secrets })
    }

    /// Deletes `tenant` and everything of it. When this returns Ok, no
    /// delivery of the tenant is sent any more (docs/offboarding.md says
    /// exactly what is guaranteed); on an error before the drop, nothing is
    /// deleted and the tenant stays fenced (run it again).
    pub async fn delete_tenant(
        &self,
        tenant: &TenantId,
        max_wait: Duration,
    ) -> anyhow::Result<Deleted> {
        let offboarding = self.offboarding(max_wait);
        let before = offboarding.inventory(tenant).await?;
        let quiesced = offboarding.quiesce(tenant).await?;
        let database_name = before.record.database.clone();
        self.stores.forget(tenant).await;
        let admin = self.databases.admin_url_at(tenant, &database_name)?;
        toki_sql::drop_tenant_database(&admin)
            .await
            .with_context(|| format!("dropping the database of tenant {tenant}"))?;
        let secrets = self.key_secrets(tenant).await?;
        self.delete_key_secrets(&secrets).await?;
        let control = offboarding.remove(tenant).await?;
        tracing::info!(%tenant, waited_ms = quiesced.waited.as_millis() as u64, "tenant deleted");
        Ok(Deleted {
            database: before.database,
            database_name,
            quiesced,
            secrets,
            control,
        })
    }

    /// The Secrets Manager secrets `tenant`'s keys were handed over in (AWS backend).
    #[cfg(feature = "secrets")]
    async fn key_secrets(&self, tenant: &TenantId) -> anyhow::Result<Vec<String>> {
        if self.config.backend != BackendKind::Aws {
            return Ok(Vec::new());
        }
        let client = self.secrets_client().await;
        Ok(toki_aws::tenant_secrets::tenant_key_secrets(&client, tenant).await?)
    }

    #[cfg(feature = "secrets")]
    async fn delete_key_secrets(&self, names: &[String]) -> anyhow::Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        let client = self.secrets_client().await;
        Ok(toki_aws::tenant_secrets::delete_secrets(&client, names).await?)
    }

    #[cfg(feature = "secrets")]
    async fn secrets_client(&self) -> toki_aws::aws_sdk_secretsmanager::Client {
        let a = &self.config.aws;
        let sdk = toki_aws::sdk_config(a.endpoint_url.as_deref(), a.region.as_deref()).await;
        toki_aws::aws_sdk_secretsmanager::Client::new(&sdk)
    }

    #[cfg(not(feature = "secrets"))]
    async fn key_secrets(&self, _tenant: &TenantId) -> anyhow::Result<Vec<String>> {
        let _ = BackendKind::Aws;
        Ok(Vec::new())
    }

    #[cfg(not(feature = "secrets"))]
    async fn delete_key_secrets(&self, _names: &[String]) -> anyhow::Result<()> {
        Ok(())
    }
}
