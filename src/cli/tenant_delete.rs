//! `toki tenant delete <id> [--dry-run] [--yes]`: offboarding a tenant.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use clap::Args;
use toki_app::Toki;
use toki_model::TenantId;
use toki_ports::Holding;

use super::common::{config_with, Common};

#[derive(Debug, Args)]
pub struct DeleteArgs {
    #[arg(value_parser = clap::value_parser!(TenantId))]
    id: TenantId,
    #[command(flatten)]
    common: Common,
    /// List what would be deleted, and delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// Delete without asking to type the tenant's id.
    #[arg(long)]
    yes: bool,
    /// Longest wait for deliveries being sent now to finish, seconds.
    #[arg(long, default_value_t = 120)]
    wait_s: u64,
}

impl DeleteArgs {
    pub async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let id = &self.id;
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        if self.dry_run {
            let found = toki.tenant_inventory(id).await?;
            let inv = &found.inventory;
            println!("tenant {id}: would delete (dry run, nothing deleted)");
            println!(
                "{}",
                listing(
                    &inv.record.database,
                    &inv.database,
                    &inv.control,
                    &found.secrets
                )
            );
            return Ok(0);
        }
        if !self.yes && !confirmed(id)? {
            eprintln!("not deleted: confirm with --yes, or type the id at the prompt");
            return Ok(2);
        }
        let deleted = toki
            .delete_tenant(id, Duration::from_secs(self.wait_s))
            .await?;
        println!(
            "tenant {id} deleted (fenced after {} ms: {} schedules, {} users removed first)",
            deleted.quiesced.waited.as_millis(),
            deleted.quiesced.fenced.schedules,
            deleted.quiesced.fenced.users
        );
        println!(
            "{}",
            listing(
                &deleted.database_name,
                &deleted.database,
                &deleted.control,
                &Ok(deleted.secrets.clone())
            )
        );
        Ok(0)
    }
}

/// Asks on a terminal for the id; anywhere else, no.
fn confirmed(id: &TenantId) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        return Ok(false);
    }
    eprint!("this deletes tenant {id} and all of its data; type its id to confirm: ");
    std::io::stderr().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim() == id.as_str())
}

/// One table: where, what, how many.
fn listing(
    database: &str,
    tables: &Result<Vec<Holding>, String>,
    control: &[Holding],
    secrets: &Result<Vec<String>, String>,
) -> String {
    let mut rows: Vec<Vec<String>> = vec![vec![
        "tenant database".into(),
        database.to_owned(),
        "dropped".into(),
    ]];
    match tables {
        Ok(tables) => rows.extend(tables.iter().map(|h| {
            vec![
                "tenant database".into(),
                h.place.clone(),
                h.count.to_string(),
            ]
        })),
        Err(e) => rows.push(vec![
            "tenant database".into(),
            "(rows not counted)".into(),
            e.clone(),
        ]),
    }
    rows.extend(
        control
            .iter()
            .map(|h| vec!["control".into(), h.place.clone(), h.count.to_string()]),
    );
    rows.push(vec![
        "queue".into(),
        "messages in flight (SQS)".into(),
        "deleted by the daemons as they arrive (reason: tenant deleted)".into(),
    ]);
    match secrets {
        Ok(names) => rows.extend(
            names
                .iter()
                .map(|n| vec!["secret".into(), n.clone(), "deleted".into()]),
        ),
        Err(e) => rows.push(vec!["secret".into(), "(not listed)".into(), e.clone()]),
    }
    toki_app::table::table(&["where", "what", "rows"], &rows)
}
