//! `toki tenant key create | list | revoke`: a tenant's named API keys.
//! A key is printed once, on stdout, and never logged; `list` shows names,
//! dates and states, never a key or its hash.

use std::path::Path;

use clap::{Args, Subcommand};
use toki_app::key_secret::SecretName;
use toki_app::key_secret::WrittenSecret;
use toki_app::Toki;
use toki_model::api_key::ApiKey;
use toki_model::audit::AuditAction;
use toki_model::{Instant, KeyName, TenantId};

use super::common::{config_with, Common};

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Add a key to a tenant; prints it once (or writes it to a Secrets
    /// Manager secret: --key-secret).
    Create(KeyCreateArgs),
    /// A tenant's keys: name, created, expiry, state.
    List(KeyListArgs),
    /// Revoke a key for good: from now on it gets 401.
    Revoke(KeyRevokeArgs),
}

impl KeyCommand {
    pub async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        match self {
            KeyCommand::Create(args) => args.run(file).await,
            KeyCommand::List(args) => args.run(file).await,
            KeyCommand::Revoke(args) => args.run(file).await,
        }
    }
}

// `toki tenant key create`.
#[derive(Debug, Args)]
pub struct KeyCreateArgs {
    #[arg(value_parser = clap::value_parser!(TenantId))]
    tenant: TenantId,
    #[arg(value_parser = clap::value_parser!(KeyName))]
    name: KeyName,
    #[command(flatten)]
    common: Common,
    /// The key expires this long from now: `90d`, `12h`, `30m`.
    #[arg(long, value_parser = parse_expires_in, conflicts_with = "expires_at")]
    expires_in: Option<chrono::Duration>,
    /// The key expires at this instant (RFC 3339).
    #[arg(long, value_parser = parse_expires_at)]
    expires_at: Option<Instant>,
    /// Write the key to this AWS Secrets Manager secret (created, or given a
    /// new value if it exists) and print the secret's ARN, not the key.
    #[arg(long, value_name = "SECRET_NAME", value_parser = clap::value_parser!(SecretName))]
    key_secret: Option<SecretName>,
}

impl KeyCreateArgs {
    async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        let expires_at = match (self.expires_in, self.expires_at) {
            (Some(d), _) => Some(toki.clock.now() + d),
            (None, at) => at,
        };
        let key = toki
            .create_key(&self.tenant, self.name.clone(), expires_at)
            .await?;
        toki.audit_operator_write(&self.tenant, AuditAction::KeyAdd, Some(self.name.as_str()))
            .await;
        let until = expires_at.map_or("never expires".into(), |e| format!("expires {e}"));
        match &self.key_secret {
            Some(secret) => {
                eprintln!(
                    "created key {} of tenant {} ({until})",
                    self.name, self.tenant
                );
                let written = toki
                    .hand_over_key(&self.tenant, &self.name, &key, secret)
                    .await?;
                drop(key);
                print_handover(&written, &self.name);
            }
            None => {
                eprintln!(
                    "created key {} of tenant {} ({until}); shown once:",
                    self.name, self.tenant
                );
                println!("{key}");
            }
        }
        Ok(0)
    }
}

/// `90d`, `12h`, `30m`: a whole number and a unit.
fn parse_expires_in(s: &str) -> Result<chrono::Duration, String> {
    let bad = || format!("expected a number and d, h or m (90d, 12h, 30m), got {s:?}");
    let (n, unit) = s.split_at(s.len().saturating_sub(1));
    let n: i64 = n.parse().map_err(|_| bad())?;
    if n <= 0 {
        return Err(bad());
    }
    match unit {
        "d" => Ok(chrono::Duration::days(n)),
        "h" => Ok(chrono::Duration::hours(n)),
        "m" => Ok(chrono::Duration::minutes(n)),
        _ => Err(bad()),
    }
}

fn parse_expires_at(s: &str) -> Result<Instant, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.to_utc())
        .map_err(|e| format!("expected an RFC 3339 instant (2027-01-31T00:00:00Z): {e}"))
}

// `toki tenant key list`.
#[derive(Debug, Args)]
pub struct KeyListArgs {
    #[arg(value_parser = clap::value_parser!(TenantId))]
    tenant: TenantId,
    #[command(flatten)]
    common: Common,
}

impl KeyListArgs {
    async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        let record = toki.tenant_record(&self.tenant).await?;
        let now = toki.clock.now();
        let rows: Vec<Vec<String>> = record.api_keys.iter().map(|k| key_row(k, now)).collect();
        let header = ["name", "created", "expires", "state"];
        println!("{}", toki_app::table::table(&header, &rows));
        Ok(0)
    }
}

/// A key's row: never the key or its hash.
fn key_row(k: &ApiKey, now: Instant) -> Vec<String> {
    let or = |t: Option<Instant>, none: &str| t.map_or(none.to_owned(), |t| t.to_rfc3339());
    let state = match k.revoked_at {
        Some(at) => format!("revoked {}", at.to_rfc3339()),
        None => k.state(now).to_string(),
    };
    vec![
        k.name.to_string(),
        or(k.created_at, "(before named keys)"),
        or(k.expires_at, "never"),
        state,
    ]
}

// `toki tenant key revoke`.
#[derive(Debug, Args)]
pub struct KeyRevokeArgs {
    #[arg(value_parser = clap::value_parser!(TenantId))]
    tenant: TenantId,
    #[arg(value_parser = clap::value_parser!(KeyName))]
    name: KeyName,
    #[command(flatten)]
    common: Common,
}

impl KeyRevokeArgs {
    async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        toki.revoke_key(&self.tenant, &self.name).await?;
        toki.audit_operator_write(
            &self.tenant,
            AuditAction::KeyRevoke,
            Some(self.name.as_str()),
        )
        .await;
        eprintln!("revoked key {} of tenant {}", self.name, self.tenant);
        Ok(0)
    }
}

/// Where a key went, instead of the key: the secret's ARN on stdout, how
/// to read it on stderr.
pub(super) fn print_handover(written: &WrittenSecret, key: &KeyName) {
    let how = if written.created {
        "created"
    } else {
        "existed: new current value"
    };
    eprintln!(
        "its API key, named {key}, is in secret {} ({how}); read it once with\n  \
         aws secretsmanager get-secret-value --secret-id {} --query SecretString --output text",
        written.name, written.name
    );
    println!("{}", written.arn);
}

#[cfg(test)]
mod tests {
    use super::parse_expires_in;

    #[test]
    fn expiry_durations() {
        assert_eq!(parse_expires_in("90d"), Ok(chrono::Duration::days(90)));
        assert_eq!(parse_expires_in("12h"), Ok(chrono::Duration::hours(12)));
        assert_eq!(parse_expires_in("30m"), Ok(chrono::Duration::minutes(30)));
        for bad in ["", "d", "0d", "-1d", "90", "90s", "9x0d"] {
            assert!(parse_expires_in(bad).is_err(), "{bad:?}");
        }
    }
}
