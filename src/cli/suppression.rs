//! `toki suppression`: a tenant's suppression list (docs/suppression.md),
//! and SES's bounce and complaint notifications applied to it.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use toki_app::mail_feedback::read_feedback;
use toki_app::table::table;
use toki_app::Toki;
use toki_model::audit::AuditAction;
use toki_model::suppression::{ListedAddress, SuppressionInput, SuppressionView};
use toki_model::TenantId;
use toki_ports::suppression::MAX_LISTED;

use super::common::{config_with, Common};

#[derive(Debug, Subcommand)]
pub enum SuppressionCommand {
    /// The tenant's list, in address order.
    List(TenantArgs),
    /// Put an address on the list by hand.
    Add(AddressArgs),
    /// Take an address off the list: it is mailed again.
    Remove(AddressArgs),
    /// Apply SES bounce and complaint notifications (SNS envelopes or bare
    /// SES JSON, one per line) to the tenants that sent the mail.
    Feedback(FeedbackArgs),
}

impl SuppressionCommand {
    pub async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        match self {
            SuppressionCommand::List(a) => a.list(file).await,
            SuppressionCommand::Add(a) => a.add(file).await,
            SuppressionCommand::Remove(a) => a.remove(file).await,
            SuppressionCommand::Feedback(a) => a.run(file).await,
        }
    }
}

#[derive(Debug, Args)]
pub struct TenantArgs {
    #[arg(long, value_parser = clap::value_parser!(TenantId))]
    tenant: TenantId,
    #[command(flatten)]
    common: Common,
}

impl TenantArgs {
    async fn list(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        let registrar = toki.registrar();
        let (mut rows, mut after) = (Vec::new(), None::<ListedAddress>);
        loop {
            let page = registrar
                .suppressions(&self.tenant, after.as_ref(), MAX_LISTED)
                .await?;
            rows.extend(page.iter().map(|s| {
                let v = SuppressionView::from(s);
                vec![
                    v.address,
                    s.reason.as_str().to_owned(),
                    v.since,
                    v.detail.unwrap_or_default(),
                ]
            }));
            if page.len() < MAX_LISTED {
                break;
            }
            after = page.last().map(|s| s.address.clone());
        }
        println!(
            "{}",
            table(&["address", "reason", "since", "detail"], &rows)
        );
        Ok(0)
    }
}

#[derive(Debug, Args)]
pub struct AddressArgs {
    #[command(flatten)]
    tenant: TenantArgs,
    address: String,
    /// Kept with the entry (at most 1,000 bytes).
    #[arg(long)]
    note: Option<String>,
}

impl AddressArgs {
    async fn add(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let toki = Toki::open(config_with(file, &self.tenant.common)?).await?;
        let address = ListedAddress::parse("address", &self.address)?;
        let input = SuppressionInput { note: self.note };
        toki.registrar()
            .suppress_address(&self.tenant.tenant, &address, &input)
            .await?;
        // The address is personal data: the entry names the action only.
        toki.audit_operator_write(&self.tenant.tenant, AuditAction::SuppressionPut, None)
            .await;
        println!("{address} is on {}'s suppression list", self.tenant.tenant);
        Ok(0)
    }

    async fn remove(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let toki = Toki::open(config_with(file, &self.tenant.common)?).await?;
        let address = ListedAddress::parse("address", &self.address)?;
        toki.registrar()
            .unsuppress(&self.tenant.tenant, &address)
            .await?;
        toki.audit_operator_write(&self.tenant.tenant, AuditAction::SuppressionDelete, None)
            .await;
        println!("{address} is off {}'s suppression list", self.tenant.tenant);
        Ok(0)
    }
}

#[derive(Debug, Args)]
pub struct FeedbackArgs {
    /// A file of notifications, one JSON document per line.
    notifications: PathBuf,
    #[command(flatten)]
    common: Common,
}

impl FeedbackArgs {
    async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        let registrar = toki.registrar();
        let text = std::fs::read_to_string(&self.notifications)
            .with_context(|| format!("reading {}", self.notifications.display()))?;
        let (mut listed, mut passed, mut unread) = (0u64, 0u64, 0u64);
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            match read_feedback(line, toki.clock.now()) {
                Ok(Some(f)) => listed += registrar.suppress_feedback(&f.tenant, &f.entries).await?,
                Ok(None) => passed += 1,
                Err(e) => {
                    unread += 1;
                    eprintln!("line {}: {e}", n + 1);
                }
            }
        }
        println!(
            "{listed} addresses listed, {passed} notifications list nobody, {unread} not read"
        );
        Ok(if unread == 0 { 0 } else { 1 })
    }
}
