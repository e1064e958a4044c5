//! The operator's maintenance: `toki migrate` and `toki redrive`.

use std::path::Path;

use clap::Args;
use toki_app::Toki;
use toki_model::TenantId;

use super::common::{config_with, Common};

// `toki migrate`: see `Command::Migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    common: Common,
    /// The migrated tenants as JSON (and no progress bar).
    #[arg(long)]
    json: bool,
}

impl MigrateArgs {
    pub async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        let progress = toki_devtools::progress::Progress::new(!self.json);
        let tenants = toki
            .migrate_all(|done, of, tenant| {
                if done == 0 {
                    progress.stage("migrating", Some(of as u64));
                }
                progress.set(done as u64);
                progress.message(tenant.to_string());
            })
            .await?;
        drop(progress);
        if self.json {
            let tenants: Vec<String> = tenants.iter().map(ToString::to_string).collect();
            println!(
                "{}",
                serde_json::json!({"control_store": "migrated", "tenants": tenants})
            );
        } else {
            println!(
                "migrated the control store and {} tenant databases",
                tenants.len()
            );
        }
        Ok(0)
    }
}

// `toki redrive`: see `Command::Redrive`.
#[derive(Debug, Args)]
pub struct RedriveArgs {
    #[command(flatten)]
    common: Common,
    /// List only; move nothing.
    #[arg(long)]
    dry_run: bool,
    /// Only this tenant's dead letters.
    #[arg(long, value_parser = clap::value_parser!(TenantId))]
    tenant: Option<TenantId>,
    /// At most this many messages.
    #[arg(long, default_value_t = 1000)]
    max: usize,
    #[arg(long)]
    json: bool,
}

impl RedriveArgs {
    pub async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        let opts = toki_app::redrive::RedriveOptions {
            dry_run: self.dry_run,
            tenant: self.tenant,
            max: self.max,
        };
        let report = toki_app::redrive::redrive(&toki, &opts).await?;
        if self.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            println!("{}", toki_app::redrive::render(&report));
        }
        Ok(0)
    }
}
