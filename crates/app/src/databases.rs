//! Where tenant databases are, and with which credentials: SQLite files in the
//! data folder (embedded), or Postgres databases named by a template, opened
//! with the runtime credentials and provisioned with the admin ones.

use std::path::PathBuf;

#[cfg(feature = "secrets")]
use anyhow::Context;
use toki_model::TenantId;
use toki_sql::database_for;

use crate::config::{BackendKind, Config};

/// How the tenant databases of a deployment are reached.
#[derive(Clone)]
pub enum TenantDatabases {
    /// One SQLite file per tenant in a folder.
    Files { dir: PathBuf },
    /// Postgres: URL templates with `{tenant}` for running and for provisioning.
    Postgres {
        runtime: String,
        admin: String,
        /// The database name, with `{tenant}`: what the directory records.
        name: String,
        /// The runtime role, when provisioning must create it (separate credentials).
        runtime_role: Option<(String, String)>,
    },
    /// Not configured: only processes that never open one (the scanner) can run.
    Unconfigured,
}

impl std::fmt::Debug for TenantDatabases {
    // URLs may carry passwords: say only which kind it is.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TenantDatabases::Files { dir } => write!(f, "Files({})", dir.display()),
            TenantDatabases::Postgres { name, .. } => write!(f, "Postgres({name})"),
            TenantDatabases::Unconfigured => f.write_str("Unconfigured"),
        }
    }
}

impl TenantDatabases {
    /// Where a new database of `tenant` goes, as the directory records it:
    /// a file whose name differs at each creation (`<tenant>.<incarnation>.sqlite`,
    /// so a tenant deleted and created again never shares a path with its
    /// old database, nor with a process that still holds it), or the
    /// database name; never a URL with credentials. A file is recorded by
    /// its absolute path, so a process started from another working
    /// directory finds it.
    pub fn new_location(&self, tenant: &TenantId) -> String {
        match self {
            TenantDatabases::Files { dir } => {
                let incarnation = format!("{:016x}", rand::random::<u64>());
                let file = dir.join(format!("{tenant}.{incarnation}.sqlite"));
                std::path::absolute(&file)
                    .unwrap_or(file)
                    .display()
                    .to_string()
            }
            TenantDatabases::Postgres { name, .. } => database_for(name, tenant),
            TenantDatabases::Unconfigured => database_for("toki_{tenant}", tenant),
        }
    }

    /// Where provisioning (creating, migrating, dropping) opens the
    /// database the directory records at `recorded`: that file (an entry
    /// from before incarnations names `<tenant>.sqlite`, and keeps it), or
    /// the tenant's database with the provisioning credentials.
    pub fn admin_url_at(&self, tenant: &TenantId, recorded: &str) -> anyhow::Result<String> {
        match self {
            TenantDatabases::Files { .. } => Ok(recorded.to_owned()),
            TenantDatabases::Postgres { admin, .. } => Ok(database_for(admin, tenant)),
            TenantDatabases::Unconfigured => Err(unconfigured()),
        }
    }

    /// Where provisioning opens a Postgres tenant database (found by name
    /// alone). A tenant's file is found through its directory entry
    /// ([`Self::admin_url_at`]).
    pub fn admin_url(&self, tenant: &TenantId) -> anyhow::Result<String> {
        match self {
            TenantDatabases::Files { .. } => Err(anyhow::anyhow!(
                "tenant {tenant}'s file is found through its directory entry, not by name"
            )),
            TenantDatabases::Postgres { admin, .. } => Ok(database_for(admin, tenant)),
            TenantDatabases::Unconfigured => Err(unconfigured()),
        }
    }
}

fn unconfigured() -> anyhow::Error {
    anyhow::anyhow!(
        "tenant databases are not configured: set TOKI_DATABASE_HOST and TOKI_DATABASE_SECRET_ARN \
         (or TOKI_DATABASE_URL_TEMPLATE / DATABASE_URL)"
    )
}

/// `user:password@` for a URL, each part percent-encoded.
#[cfg(any(feature = "secrets", test))]
fn userinfo(user: &str, password: &str) -> String {
    use toki_model::percent::encode;
    format!("{}:{}@", encode(user), encode(password))
}

/// `postgres://user:pw@host:port/<name>?sslmode=..`
#[cfg(any(feature = "secrets", test))]
fn url_template(config: &Config, host: &str, user: &str, password: &str) -> String {
    let db = &config.database;
    let mut url = format!(
        "postgres://{}{host}:{}/{}?sslmode={}",
        userinfo(user, password),
        db.port,
        db.name_template,
        db.sslmode
    );
    if let Some(root) = &db.sslrootcert {
        url.push_str("&sslrootcert=");
        url.push_str(root);
    }
    url
}

/// Resolves the configuration; fetches credentials from Secrets Manager when
/// the server is given by host and secret.
pub(crate) async fn resolve(config: &Config) -> anyhow::Result<TenantDatabases> {
    if let Some(t) = &config.tenant_database_template {
        let t = t.expose();
        let (_, path) = t.rsplit_once('/').unwrap_or(("", t));
        let name = path.split('?').next().unwrap_or(path).to_owned();
        return Ok(TenantDatabases::Postgres {
            runtime: t.to_owned(),
            admin: t.to_owned(),
            name,
            runtime_role: None,
        });
    }
    if let Some(host) = &config.database.host {
        return from_secrets(config, host).await;
    }
    Ok(match config.backend {
        BackendKind::Embedded => TenantDatabases::Files {
            dir: config.data_dir.join("tenants"),
        },
        BackendKind::Aws => TenantDatabases::Unconfigured,
    })
}

#[cfg(feature = "secrets")]
async fn from_secrets(config: &Config, host: &str) -> anyhow::Result<TenantDatabases> {
    use toki_aws::aws_sdk_secretsmanager::Client;
    use toki_aws::secrets::database_credentials;

    let sdk = toki_aws::sdk_config(
        config.aws.endpoint_url.as_deref(),
        config.aws.region.as_deref(),
    )
    .await;
    let client = Client::new(&sdk);
    let runtime_arn = config
        .database
        .secret_arn
        .as_deref()
        .context("database.secret_arn (TOKI_DATABASE_SECRET_ARN) is not set")?;
    let runtime = database_credentials(&client, runtime_arn)
        .await
        .context("reading the database's runtime credentials")?;
    let runtime_url = url_template(config, host, &runtime.username, &runtime.password);
    let (admin_url, runtime_role) = match &config.database.admin_secret_arn {
        Some(arn) => {
            let admin = database_credentials(&client, arn)
                .await
                .context("reading the database's admin credentials")?;
            (
                url_template(config, host, &admin.username, &admin.password),
                Some((runtime.username, runtime.password)),
            )
        }
        None => (runtime_url.clone(), None),
    };
    Ok(TenantDatabases::Postgres {
        runtime: runtime_url,
        admin: admin_url,
        name: config.database.name_template.clone(),
        runtime_role,
    })
}

#[cfg(not(feature = "secrets"))]
async fn from_secrets(_config: &Config, _host: &str) -> anyhow::Result<TenantDatabases> {
    anyhow::bail!("database.host: this build reads no secrets (it never opens a tenant database)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_percent_encoded_in_the_url() {
        let config = Config::default();
        let url = url_template(&config, "db.example", "toki runtime", "p@ss:w/rd");
        assert_eq!(
            url,
            "postgres://toki%20runtime:p%40ss%3Aw%2Frd@db.example:5432/toki_{tenant}?sslmode=verify-full"
        );
        let t: TenantId = "acme-corp".parse().unwrap();
        let dbs = TenantDatabases::Postgres {
            runtime: url.clone(),
            admin: url,
            name: "toki_{tenant}".into(),
            runtime_role: None,
        };
        assert_eq!(dbs.new_location(&t), "toki_acme_corp");
        let files = TenantDatabases::Files {
            dir: PathBuf::from("data/tenants"),
        };
        let at = PathBuf::from(files.new_location(&t));
        assert!(at.is_absolute(), "{}", at.display());
        assert!(at.starts_with(std::env::current_dir().unwrap().join("data/tenants")));
        assert!(
            !format!("{dbs:?}").contains("p%40ss"),
            "no password in Debug"
        );
    }
}
