//! `toki tenant create | set | list`, `delete` ([`super::tenant_delete`]), and `key` ([`super::tenant_key`]).

use std::path::Path;

use anyhow::Context;
use clap::{Args, Subcommand};
use toki_app::key_secret::SecretName;
use toki_app::Toki;
use toki_model::audit::AuditAction;
use toki_model::change::ChangeNoticeSettings;
use toki_model::{KeyName, TenantId, TenantRecord};

use super::common::{config_with, Common};

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant and its database; prints its API key once (or writes
    /// it to a Secrets Manager secret: --key-secret).
    Create(CreateArgs),
    /// Change a tenant's contract.
    Set(SetArgs),
    /// List tenants and their contracts.
    List(ListArgs),
    /// Delete a tenant and everything of it (--dry-run lists what would go).
    Delete(super::tenant_delete::DeleteArgs),
    /// A tenant's API keys: create, list, revoke.
    Key {
        #[command(subcommand)]
        command: super::tenant_key::KeyCommand,
    },
}

impl TenantCommand {
    pub async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        match self {
            TenantCommand::Create(args) => args.run(file).await,
            TenantCommand::Set(args) => args.run(file).await,
            TenantCommand::List(args) => args.run(file).await,
            TenantCommand::Delete(args) => args.run(file).await,
            TenantCommand::Key { command } => command.run(file).await,
        }
    }
}

// `toki tenant create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Lowercase letters and digits, words joined by single hyphens, from a letter (`acme-corp`).
    #[arg(value_parser = new_tenant_id)]
    id: TenantId,
    #[command(flatten)]
    common: Common,
    /// Create with the reminder feature off.
    #[arg(long)]
    disabled: bool,
    /// Write the API key to this AWS Secrets Manager secret (created, or
    /// given a new value if it exists) and print the secret's ARN, not the
    /// key: `toki/<env>/tenant-keys/<tenant>`.
    #[arg(long, value_name = "SECRET_NAME", value_parser = clap::value_parser!(SecretName))]
    key_secret: Option<SecretName>,
}

impl CreateArgs {
    async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let id = &self.id;
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        // Refuses an existing id and one colliding with it (acme-corp, acme_corp).
        let (record, key) = toki.create_tenant(id, !self.disabled).await?;
        toki.audit_operator_write(id, AuditAction::TenantCreate, None)
            .await;
        eprintln!(
            "created tenant {} (database {})",
            record.id, record.database
        );
        let default: KeyName = "default".parse().expect("a valid key name");
        match &self.key_secret {
            Some(secret) => {
                let written = toki.hand_over_key(id, &default, &key, secret).await?;
                drop(key);
                super::tenant_key::print_handover(&written, &default);
            }
            None => {
                eprintln!("its API key, named default (shown once):");
                println!("{key}");
            }
        }
        Ok(0)
    }
}

/// A new tenant's id: the stricter rule than what loads.
fn new_tenant_id(s: &str) -> Result<TenantId, String> {
    TenantId::parse_new(s).map_err(|e| e.problem)
}

// `toki tenant set`.
#[derive(Debug, Args)]
pub struct SetArgs {
    #[arg(value_parser = clap::value_parser!(TenantId))]
    id: TenantId,
    #[command(flatten)]
    common: Common,
    /// Reminder feature on or off.
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
    reminders: Option<bool>,
    /// Tenant active or suspended.
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
    active: Option<bool>,
    /// Change notices to participants when their schedules change (off by default).
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
    change_notices: Option<bool>,
    /// Change notices: the least wait after the last edit before the trailing notice, ms.
    #[arg(long)]
    notice_min_delay_ms: Option<u64>,
    /// Change notices: the longest that wait grows to, ms.
    #[arg(long)]
    notice_max_delay_ms: Option<u64>,
    /// Change notices: a schedule never quiet is notified at least this often, ms.
    #[arg(long)]
    notice_hard_cap_ms: Option<u64>,
    /// Limits the contract sets, over the configured ones:
    /// `slack=10/5,mail=2,tenantdb=permits:4` (per second, /burst;
    /// permits in flight; `R/B+permits:N`; `RESOURCE=none` drops one).
    #[arg(long)]
    limits: Option<String>,
    /// How long records are kept, in days (1 to 3650):
    /// `deliveries=30,chat=90,dead_letters=14,events=7,audit=365`
    /// (`KIND=default` restores the default). See docs/retention.md.
    #[arg(long)]
    retention: Option<String>,
    #[command(flatten)]
    quota: QuotaArgs,
}

impl SetArgs {
    async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let id = &self.id;
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        let mut record = toki
            .directory
            .get(id)
            .await?
            .with_context(|| format!("no tenant {id}"))?;
        if let Some(r) = self.reminders {
            record.reminders_enabled = r;
        }
        if let Some(a) = self.active {
            record.active = a;
        }
        let turned_on = self.edit_notices(&mut record.change_notices)?;
        if let Some(spec) = &self.limits {
            record
                .limits
                .edit(spec)
                .map_err(|e| anyhow::anyhow!("--limits: {}: {}", e.field, e.problem))?;
        }
        self.quota.apply(&mut record.limits.quota)?;
        if let Some(spec) = &self.retention {
            record
                .retention
                .edit(spec)
                .map_err(|e| anyhow::anyhow!("--retention: {}: {}", e.field, e.problem))?;
        }
        if turned_on == NoticesTurnedOn::Yes {
            // What was edited while notices were off is not news now.
            let store = toki_ports::TenantStores::open(toki.stores.as_ref(), id).await?;
            store.clear_change_baselines().await?;
        }
        toki.directory.put(&record).await?;
        toki.audit_operator_write(id, AuditAction::ContractSet, None)
            .await;
        println!("{}", summary(&record));
        Ok(0)
    }

    /// The change notices' switch and delays, checked; whether this turned them on.
    fn edit_notices(&self, n: &mut ChangeNoticeSettings) -> anyhow::Result<NoticesTurnedOn> {
        let turned_on = if self.change_notices == Some(true) && !n.enabled {
            NoticesTurnedOn::Yes
        } else {
            NoticesTurnedOn::No
        };
        if let Some(on) = self.change_notices {
            n.enabled = on;
        }
        for (value, field) in [
            (self.notice_min_delay_ms, &mut n.min_delay_ms),
            (self.notice_max_delay_ms, &mut n.max_delay_ms),
            (self.notice_hard_cap_ms, &mut n.hard_cap_ms),
        ] {
            if let Some(v) = value {
                *field = v;
            }
        }
        n.validate()
            .map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.problem))?;
        Ok(turned_on)
    }
}

/// Whether `toki tenant set` turned change notices on (they were off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NoticesTurnedOn {
    Yes,
    No,
}

/// `acme: reminders on, active, change notices off, limits ...`.
fn summary(record: &TenantRecord) -> String {
    format!(
        "{}: reminders {}, {}, change notices {}, limits {}, retention {}",
        record.id,
        if record.reminders_enabled {
            "on"
        } else {
            "off"
        },
        if record.active { "active" } else { "suspended" },
        notices_summary(&record.change_notices),
        record.limits,
        record.retention
    )
}

// `toki tenant list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// The tenants after this id (the next page: the last id of this one).
    #[arg(long, value_name = "TENANT")]
    after: Option<TenantId>,
    /// Tenants on one page, by id.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    limit: u32,
    #[command(flatten)]
    common: Common,
}

impl ListArgs {
    async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        let page = toki
            .directory
            .list_page(self.after.as_ref(), self.limit as usize)
            .await?;
        let next = (page.len() == self.limit as usize)
            .then(|| page.last().map(|t| t.id.clone()))
            .flatten();
        let rows: Vec<Vec<String>> = page
            .into_iter()
            .map(|t| {
                vec![
                    t.id.to_string(),
                    if t.reminders_enabled {
                        "on".into()
                    } else {
                        "off".into()
                    },
                    if t.active { "yes".into() } else { "no".into() },
                    notices_summary(&t.change_notices),
                    t.limits.to_string(),
                    t.retention.to_string(),
                    t.database,
                ]
            })
            .collect();
        println!(
            "{}",
            toki_app::table::table(
                &[
                    "tenant",
                    "reminders",
                    "active",
                    "change notices",
                    "limits",
                    "retention",
                    "database"
                ],
                &rows
            )
        );
        if let Some(last) = next {
            eprintln!("more: toki tenant list --after {last}");
        }
        Ok(0)
    }
}

/// `off`, or `on (min 5 s, max 300 s, cap 900 s)`.
fn notices_summary(n: &ChangeNoticeSettings) -> String {
    if !n.enabled {
        return "off".into();
    }
    let s = |ms: u64| format!("{} s", ms as f64 / 1000.0);
    format!(
        "on (min {}, max {}, cap {})",
        s(n.min_delay_ms),
        s(n.max_delay_ms),
        s(n.hard_cap_ms)
    )
}

/// `toki tenant set`'s caps and API quota: each over the configured
/// default, or `none` to drop the contract's and use the default again.
#[derive(Debug, Args)]
pub struct QuotaArgs {
    /// Schedules the tenant may store (N or none).
    #[arg(long, value_name = "N")]
    max_schedules: Option<Override<u64>>,
    /// Users the tenant may store (N or none).
    #[arg(long, value_name = "N")]
    max_users: Option<Override<u64>>,
    /// Templates the tenant may store (N or none).
    #[arg(long, value_name = "N")]
    max_templates: Option<Override<u64>>,
    /// Suppression-list entries the tenant may store (N or none).
    #[arg(long, value_name = "N")]
    max_suppressions: Option<Override<u64>>,
    /// Event endpoints the tenant may register (N or none).
    #[arg(long, value_name = "N")]
    max_event_endpoints: Option<Override<u64>>,
    /// Idempotency keys the tenant may have kept at once (N or none).
    #[arg(long, value_name = "N")]
    max_idempotency_keys: Option<Override<u64>>,
    /// Audit entries kept: the oldest beyond are trimmed (N or none).
    #[arg(long, value_name = "N")]
    max_audit_entries: Option<Override<u64>>,
    /// Delivery events kept: the oldest beyond are trimmed (N or none).
    #[arg(long, value_name = "N")]
    max_events: Option<Override<u64>>,
    /// API requests a second, per process (R or none).
    #[arg(long, value_name = "R")]
    api_rate: Option<Override<f64>>,
    /// API requests at once after a quiet spell (B or none).
    #[arg(long, value_name = "B")]
    api_burst: Option<Override<u32>>,
    /// API requests in flight at once, per process (C or none).
    #[arg(long, value_name = "C")]
    api_concurrency: Option<Override<u32>>,
}

/// A flag's value: a number, or `none` (the configured default applies).
#[derive(Debug, Clone, Copy)]
enum Override<T> {
    Set(T),
    Default,
}

impl<T: std::str::FromStr> std::str::FromStr for Override<T> {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "none" {
            return Ok(Override::Default);
        }
        s.parse()
            .map(Override::Set)
            .map_err(|_| format!("{s:?} is not a number or none"))
    }
}

fn apply<T, U>(flag: Option<Override<T>>, field: &mut Option<U>, wrap: impl Fn(T) -> U) {
    match flag {
        Some(Override::Set(v)) => *field = Some(wrap(v)),
        Some(Override::Default) => *field = None,
        None => {}
    }
}

impl QuotaArgs {
    /// Sets what was given; the error names the field at fault.
    fn apply(&self, q: &mut toki_model::quota::QuotaOverrides) -> anyhow::Result<()> {
        use toki_model::quota::{Cap, PerSecond};
        apply(self.max_schedules, &mut q.max_schedules, Cap);
        apply(self.max_users, &mut q.max_users, Cap);
        apply(self.max_templates, &mut q.max_templates, Cap);
        apply(self.max_suppressions, &mut q.max_suppressions, Cap);
        apply(self.max_event_endpoints, &mut q.max_event_endpoints, Cap);
        apply(self.max_idempotency_keys, &mut q.max_idempotency_keys, Cap);
        apply(self.max_audit_entries, &mut q.max_audit_entries, Cap);
        apply(self.max_events, &mut q.max_events, Cap);
        apply(self.api_rate, &mut q.api_rate, PerSecond);
        apply(self.api_burst, &mut q.api_burst, |b| b);
        apply(self.api_concurrency, &mut q.api_concurrency, |c| c);
        q.validate()
            .map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.problem))
    }
}
