//! The Secrets Manager secrets a tenant's API keys were handed over in
//! (`toki tenant create --key-secret`): found by the description they were
//! created with (`Toki API key <name> of tenant <tenant>`), and deleted
//! without a recovery window when the tenant is (offboarding).

use aws_sdk_secretsmanager::types::{Filter, FilterNameStringType};
use aws_sdk_secretsmanager::Client;
use toki_model::TenantId;

use crate::error::{sdk, AwsError};

/// Whether a secret's description is one of `tenant`'s key handovers.
pub fn is_tenants_key_secret(description: &str, tenant: &TenantId) -> bool {
    description.starts_with("Toki API key ")
        && description.ends_with(&format!(" of tenant {tenant}"))
}

/// The names of the secrets holding `tenant`'s API keys.
pub async fn tenant_key_secrets(
    client: &Client,
    tenant: &TenantId,
) -> Result<Vec<String>, AwsError> {
    let mut out = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let resp = client
            .list_secrets()
            .filters(
                Filter::builder()
                    .key(FilterNameStringType::Description)
                    .values("Toki API key")
                    .build(),
            )
            .max_results(100)
            .set_next_token(next.take())
            .send()
            .await
            .map_err(|e| sdk("ListSecrets", e))?;
        for s in resp.secret_list() {
            if s.description()
                .is_some_and(|d| is_tenants_key_secret(d, tenant))
            {
                out.extend(s.name().map(str::to_owned));
            }
        }
        match resp.next_token {
            Some(t) if !t.is_empty() => next = Some(t),
            _ => return Ok(out),
        }
    }
}

/// Deletes secrets at once, without the recovery window.
pub async fn delete_secrets(client: &Client, names: &[String]) -> Result<(), AwsError> {
    for name in names {
        client
            .delete_secret()
            .secret_id(name)
            .force_delete_without_recovery(true)
            .send()
            .await
            .map_err(|e| sdk("DeleteSecret", e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_tenants_own_handovers() {
        let acme: toki_model::TenantId = "acme".parse().unwrap();
        assert!(super::is_tenants_key_secret(
            "Toki API key default of tenant acme",
            &acme
        ));
        assert!(!super::is_tenants_key_secret(
            "Toki API key default of tenant acme-corp",
            &acme
        ));
        assert!(!super::is_tenants_key_secret(
            "database credentials of tenant acme",
            &acme
        ));
    }
}
