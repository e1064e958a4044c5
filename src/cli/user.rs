//! `toki user`: what an operator does to one person of a tenant: erase
//! them (docs/erasure.md), as `DELETE …/users/{id}?erase=true` does.

use std::path::Path;
use toki_model::audit::AuditAction;

use clap::{Args, Subcommand};
use toki_app::table::table;
use toki_app::Toki;
use toki_core::registrar::RegistrarError;
use toki_model::{TenantId, UserId};

use super::common::{config_with, Common};

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Erase a user everywhere the tenant's database holds them: user row,
    /// schedules, pending deliveries, chat; past deliveries and events kept
    /// under a pseudonym. Cannot be undone.
    Erase(EraseArgs),
}

impl UserCommand {
    pub async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        match self {
            UserCommand::Erase(a) => a.run(file).await,
        }
    }
}

#[derive(Debug, Args)]
pub struct EraseArgs {
    #[arg(long, value_parser = clap::value_parser!(TenantId))]
    tenant: TenantId,
    /// The user's id.
    #[arg(value_parser = clap::value_parser!(UserId))]
    id: UserId,
    /// Print the counts as one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    common: Common,
}

impl EraseArgs {
    async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        let erased = match toki.registrar().erase_user(&self.tenant, &self.id).await {
            Err(RegistrarError::NotFound(_)) => {
                eprintln!("tenant {} holds nothing of user {}", self.tenant, self.id);
                return Ok(1);
            }
            other => other?,
        };
        // The entry does not name whom it erased.
        toki.audit_operator_write(&self.tenant, AuditAction::UserErase, None)
            .await;
        let counts = serde_json::to_value(erased.report)?;
        if self.json {
            println!(
                "{}",
                serde_json::json!({"erased": counts, "mirrored": erased.mirrored})
            );
            return Ok(0);
        }
        let rows: Vec<Vec<String>> = counts
            .as_object()
            .into_iter()
            .flatten()
            .map(|(place, n)| vec![place.clone(), n.to_string()])
            .collect();
        println!("{}", table(&["place", "rows"], &rows));
        if !erased.mirrored {
            eprintln!("the schedules they left are mirrored by the next repair pass");
        }
        Ok(0)
    }
}
