//! Database credentials from Secrets Manager, read once when a process starts:
//! no password in the environment, a task definition or the tenant directory.
//! And the other way: a new API key written to a secret ([`put_secret_string`])
//! rather than printed, where stdout is a log (the migrate task on ECS).

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

/// The name of a secret Toki writes (an API key handed over): what Secrets
/// Manager accepts, 1 to 512 of ASCII letters, digits and `/_+=.@-`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretName(String);

/// A secret name Secrets Manager would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("secret name {name:?}: {problem}")]
pub struct SecretNameError {
    pub name: String,
    pub problem: &'static str,
}

impl std::str::FromStr for SecretName {
    type Err = SecretNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |problem| SecretNameError {
            name: s.to_owned(),
            problem,
        };
        if s.is_empty() || s.len() > 512 {
            return Err(bad("expected 1 to 512 characters"));
        }
        if !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/_+=.@-".contains(&b))
        {
            return Err(bad("expected ASCII letters, digits and /_+=.@- only"));
        }
        Ok(SecretName(s.to_owned()))
    }
}

impl SecretName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SecretName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where [`put_secret_string`] wrote a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenSecret {
    pub name: String,
    pub arn: String,
    /// The secret was created (`CreateSecret`), rather than given a new
    /// current version (`PutSecretValue`: it existed).
    pub created: bool,
}

/// Writes `value` as the current value of secret `name`: creates it (with
/// `description`) or, when it exists, puts a new version (the description
/// is then left as it was). The value is never in an error or a log line.
pub async fn put_secret_string(
    client: &Client,
    name: &SecretName,
    value: &str,
    description: &str,
) -> Result<WrittenSecret, AwsError> {
    let created = client
        .create_secret()
        .name(name.as_str())
        .description(description)
        .secret_string(value)
        .send()
        .await;
    match created {
        Ok(out) => {
            return Ok(WrittenSecret {
                name: name.to_string(),
                arn: arn_of("CreateSecret", name, out.arn())?,
                created: true,
            })
        }
        Err(e) if crate::error::code_of(&e) != Some("ResourceExistsException") => {
            return Err(named(sdk("CreateSecret", e), name))
        }
        Err(_) => {}
    }
    let out = client
        .put_secret_value()
        .secret_id(name.as_str())
        .secret_string(value)
        .send()
        .await
        .map_err(|e| named(sdk("PutSecretValue", e), name))?;
    Ok(WrittenSecret {
        name: name.to_string(),
        arn: arn_of("PutSecretValue", name, out.arn())?,
        created: false,
    })
}

fn arn_of(
    operation: &'static str,
    name: &SecretName,
    arn: Option<&str>,
) -> Result<String, AwsError> {
    arn.map(str::to_owned)
        .ok_or_else(|| AwsError::service(operation, format!("secret {name}: no ARN in the answer")))
}

/// The error, with the secret's name in its message.
fn named(e: AwsError, name: &SecretName) -> AwsError {
    match e {
        AwsError::Unavailable { operation, message } => AwsError::Unavailable {
            operation,
            message: format!("secret {name}: {message}"),
        },
        AwsError::Service {
            operation,
            code,
            message,
        } => AwsError::Service {
            operation,
            code,
            message: format!("secret {name}: {message}"),
        },
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::SecretName;

    #[test]
    fn secret_names() {
        for ok in ["toki/prod/tenant-keys/acme", "a", "x+y=z.w@v_u-t"] {
            assert_eq!(ok.parse::<SecretName>().unwrap().as_str(), ok);
        }
        let long = "a".repeat(513);
        for bad in ["", "toki/prod keys", "toki/ä", "a*", long.as_str()] {
            assert!(bad.parse::<SecretName>().is_err(), "{bad:?}");
        }
    }
}
