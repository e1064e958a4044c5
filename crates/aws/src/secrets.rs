//! Database credentials from Secrets Manager, read once when a process starts:
//! no password in the environment, a task definition or the tenant directory.

use aws_sdk_secretsmanager::Client;

use crate::error::{sdk, AwsError};

/// A database login, as RDS stores it in Secrets Manager
/// (`{"username": ..., "password": ..., ...}`; other keys are ignored).
#[derive(Clone, serde::Deserialize)]
pub struct DatabaseCredentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for DatabaseCredentials {
    // Never print the password (logs, panics).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseCredentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// The credentials in secret `arn`.
pub async fn database_credentials(
    client: &Client,
    arn: &str,
) -> Result<DatabaseCredentials, AwsError> {
    let resp = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| sdk("GetSecretValue", e))?;
    let text = resp.secret_string().ok_or_else(|| {
        AwsError::service(
            "GetSecretValue",
            format!("secret {arn} has no string value"),
        )
    })?;
    serde_json::from_str(text).map_err(|e| {
        // The error names the field, never the secret's text.
        AwsError::service(
            "GetSecretValue",
            format!(
                "secret {arn} is not JSON with username and password: {}",
                e.classify_name()
            ),
        )
    })
}

trait Classify {
    fn classify_name(&self) -> &'static str;
}

impl Classify for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "unreadable",
            serde_json::error::Category::Syntax => "not JSON",
            serde_json::error::Category::Data => "a field is missing or of the wrong type",
            serde_json::error::Category::Eof => "cut short",
        }
    }
}
