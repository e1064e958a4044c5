//! `toki audit list`: a tenant's audit log, oldest first (docs/audit.md).
//! Read-only: the log is written only by the writes it records.

use std::path::Path;

use clap::{Args, Subcommand};
use toki_app::table::table;
use toki_app::Toki;
use toki_model::audit::{StoredAuditEntry, MAX_LISTED};
use toki_model::TenantId;
use toki_ports::TenantStores;

use super::common::{config_with, Common};

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// The tenant's audit log, oldest first.
    List(AuditListArgs),
}

impl AuditCommand {
    pub async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        match self {
            AuditCommand::List(a) => a.run(file).await,
        }
    }
}

#[derive(Debug, Args)]
pub struct AuditListArgs {
    #[arg(long, value_parser = clap::value_parser!(TenantId))]
    tenant: TenantId,
    #[command(flatten)]
    common: Common,
    /// Entries after this sequence number.
    #[arg(long, default_value_t = 0)]
    after: u64,
    /// At most this many (1 to 1,000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=MAX_LISTED as u64))]
    limit: u64,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

impl AuditListArgs {
    async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        toki.tenant_record(&self.tenant).await?;
        let store = TenantStores::open(toki.stores.as_ref(), &self.tenant).await?;
        let entries = store.audit_after(self.after, self.limit as usize).await?;
        if self.json {
            for e in &entries {
                println!("{}", serde_json::to_string(e)?);
            }
            return Ok(0);
        }
        let rows: Vec<Vec<String>> = entries.iter().map(row).collect();
        let header = ["seq", "at", "actor", "action", "resource", "version"];
        println!("{}", table(&header, &rows));
        Ok(0)
    }
}

fn row(e: &StoredAuditEntry) -> Vec<String> {
    let v = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
    let a = &e.entry;
    vec![
        e.seq.to_string(),
        a.at.to_rfc3339(),
        a.actor.to_string(),
        a.action.to_string(),
        a.resource.clone().unwrap_or_default(),
        format!("{} → {}", v(a.version_before), v(a.version_after)),
    ]
}
