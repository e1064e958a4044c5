//! The `toki` command line: the commands and their dispatch. Each command's
//! arguments and what it does are in a module by kind: [`dev`] (demo,
//! bench), [`processes`] (serve, daemon, scan), [`reports`] (report,
//! preview), [`admin`] (migrate, redrive), [`tenant`], [`events`] and [`audit`]; [`common`] is
//! what they share.

mod admin;
mod audit;
mod common;
mod dev;
mod events;
mod processes;
mod reports;
mod suppression;
mod tenant;
mod tenant_delete;
mod tenant_key;
mod user;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "toki",
    version,
    about = "Reminders delivered at the second they are due."
)]
pub struct Cli {
    /// Configuration file (TOML). Default: $TOKI_CONFIG, else ./toki.toml if present.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the whole pipeline on one machine: N deliveries due at one instant, then a report.
    Demo(dev::DemoArgs),
    /// Measure lateness: N deliveries due at one instant, the daemon and a Slack stand-in in their own processes.
    Bench(dev::BenchArgs),
    /// Registrar API, scanner and daemon in one process.
    Serve(processes::ServeArgs),
    /// Only the daemon: long-poll the queue and deliver.
    Daemon(processes::DaemonArgs),
    /// Run the scanner once and print its summary.
    Scan(processes::ScanArgs),
    /// Manage tenants.
    Tenant {
        #[command(subcommand)]
        command: tenant::TenantCommand,
    },
    /// Delivery counts per tenant, channel and status, lateness per channel and
    /// deliveries per second around each due instant, from the delivery rows.
    Report(reports::ReportArgs),
    /// A schedule's next occurrences and reminder instants, in UTC and in its
    /// zone, with the DST decisions marked. Reads the API's schedule body.
    Preview(reports::PreviewArgs),
    /// Apply migrations to the control database and every tenant database.
    Migrate(admin::MigrateArgs),
    /// Dead-lettered messages by tenant, channel and reason; then move them back to the queue.
    Redrive(admin::RedriveArgs),
    /// A tenant's delivery-event endpoints and event log: register, list, enable, replay.
    Events {
        #[command(subcommand)]
        command: events::EventsCommand,
    },
    /// A tenant's suppression list (addresses not mailed again), and SES
    /// bounce and complaint notifications applied to it.
    Suppression {
        #[command(subcommand)]
        command: suppression::SuppressionCommand,
    },
    /// A tenant's users: erase one (docs/erasure.md).
    User {
        #[command(subcommand)]
        command: user::UserCommand,
    },
    /// A tenant's audit log: who changed what, and when.
    Audit {
        #[command(subcommand)]
        command: audit::AuditCommand,
    },
}

/// Runs the CLI; returns the process exit code.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    let file = cli.config.as_deref();
    match cli.command {
        Command::Demo(args) => args.run(file).await,
        Command::Bench(args) => args.run(file).await,
        Command::Serve(args) => args.run(file).await,
        Command::Daemon(args) => args.run(file).await,
        Command::Scan(args) => args.run(file).await,
        Command::Tenant { command } => command.run(file).await,
        Command::Preview(args) => args.run(),
        Command::Report(args) => args.run(file).await,
        Command::Redrive(args) => args.run(file).await,
        Command::Migrate(args) => args.run(file).await,
        Command::Events { command } => command.run(file).await,
        Command::Suppression { command } => command.run(file).await,
        Command::User { command } => command.run(file).await,
        Command::Audit { command } => command.run(file).await,
    }
}
