//! A new API key handed over through AWS Secrets Manager rather than printed
//! (`toki tenant create | key create --key-secret NAME`): on AWS the operator
//! runs those commands in the migrate task, whose stdout is CloudWatch Logs.

use toki_aws::aws_sdk_secretsmanager::Client;
use toki_aws::secrets::put_secret_string;
pub use toki_aws::secrets::{SecretName, SecretNameError, WrittenSecret};
use toki_aws::AwsError;
use toki_model::{KeyName, TenantId};

use crate::toki::Toki;

/// A key that could not be written to its secret. Nobody has it, so it was
/// revoked (or revoking it failed too: then say which key to revoke). The
/// AWS error is the source (anyhow's `Caused by:`).
#[derive(Debug, thiserror::Error)]
pub enum KeyHandoverError {
    #[error(
        "could not write key {key} of tenant {tenant} to secret {secret}, so \
         the key was revoked (nobody has it): create another with \
         `toki tenant key create {tenant} <name> --key-secret {secret}`"
    )]
    Revoked {
        tenant: TenantId,
        key: KeyName,
        secret: SecretName,
        #[source]
        source: AwsError,
    },
    #[error(
        "could not write key {key} of tenant {tenant} to secret {secret}, and \
         revoking the key failed too ({revoke}): nobody has it, revoke it with \
         `toki tenant key revoke {tenant} {key}`"
    )]
    NotRevoked {
        tenant: TenantId,
        key: KeyName,
        secret: SecretName,
        #[source]
        source: AwsError,
        revoke: String,
    },
}

impl Toki {
    /// Writes `key`, just created as `tenant`'s key `name`, to `secret`
    /// (created, or given a new current version if it exists) with the
    /// SDK configuration of `aws.endpoint_url` / `aws.region` and the
    /// standard AWS environment. If the write fails, revokes the key.
    pub async fn hand_over_key(
        &self,
        tenant: &TenantId,
        name: &KeyName,
        key: &str,
        secret: &SecretName,
    ) -> Result<WrittenSecret, KeyHandoverError> {
        let sdk = toki_aws::sdk_config(
            self.config.aws.endpoint_url.as_deref(),
            self.config.aws.region.as_deref(),
        )
        .await;
        let client = Client::new(&sdk);
        let description = format!("Toki API key {name} of tenant {tenant}");
        match put_secret_string(&client, secret, key, &description).await {
            Ok(written) => Ok(written),
            Err(source) => Err(match self.revoke_key(tenant, name).await {
                Ok(()) => KeyHandoverError::Revoked {
                    tenant: tenant.clone(),
                    key: name.clone(),
                    secret: secret.clone(),
                    source,
                },
                Err(e) => KeyHandoverError::NotRevoked {
                    tenant: tenant.clone(),
                    key: name.clone(),
                    secret: secret.clone(),
                    source,
                    revoke: format!("{e:#}"),
                },
            }),
        }
    }
}
