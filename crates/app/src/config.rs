//! Configuration: defaults that run the embedded mode, then a TOML file
//! (`--config`, `TOKI_CONFIG`, or `toki.toml` in the working directory),
//! then `TOKI_*` environment variables, then command-line flags.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use toki_core::daemon::{BreakerSettings, DaemonSettings, RetryPolicy};
use toki_core::settings::PipelineSettings;
use toki_model::limits::FlowSettings;

/// A setting that holds a credential (a token, a URL with a password): it
/// never prints (`Debug` and `Display` say `<redacted>`), so no log line,
/// error or panic carries it. `expose` gives the value to the one place that uses it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Secret(s)
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Secret(s.to_owned())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// SQLite files in the data folder: no AWS, no database server.
    Embedded,
    /// DynamoDB + SQS (or an emulator), tenant databases on Postgres.
    Aws,
}

impl std::str::FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "embedded" => Ok(BackendKind::Embedded),
            "aws" => Ok(BackendKind::Aws),
            other => Err(format!("{other:?} is not embedded or aws")),
        }
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackendKind::Embedded => "embedded",
            BackendKind::Aws => "aws",
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub backend: BackendKind,
    /// TOKI_ENVIRONMENT: the deployment's name (dev, prod), on its metrics.
    pub environment: String,
    /// Embedded state (control database, tenant databases, outboxes).
    pub data_dir: PathBuf,
    /// Where a new tenant's database goes: a Postgres URL with `{tenant}`
    /// (e.g. `postgres://toki@db:5432/toki_{tenant}`). Unset: a SQLite file in the data folder.
    pub tenant_database_template: Option<Secret>,
    /// The Postgres server of the tenant databases, reached with credentials
    /// from Secrets Manager (the aws backend in production).
    pub database: DatabaseConfig,
    pub pipeline: PipelineConfig,
    pub daemon: DaemonConfig,
    pub mail: MailConfig,
    pub slack: SlackConfig,
    pub aws: AwsConfig,
    /// Limits on Slack, mail and tenant databases, shared by the fleet.
    pub flow: FlowSettings,
}

/// Tenant databases on a Postgres server: each tenant's database is named by
/// `name_template`; the credentials are fetched from Secrets Manager when the
/// process starts (JSON `username`, `password`: the RDS secret format), so no
/// password sits in the environment, a task definition or the tenant directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// TOKI_DATABASE_HOST: the server (an RDS Proxy endpoint in the template).
    pub host: Option<String>,
    /// TOKI_DATABASE_PORT.
    pub port: u16,
    /// TOKI_DATABASE_NAME_TEMPLATE: a tenant's database name, with `{tenant}`.
    pub name_template: String,
    /// TOKI_DATABASE_SECRET_ARN: the runtime credentials (reads and writes rows).
    pub secret_arn: Option<String>,
    /// TOKI_DATABASE_ADMIN_SECRET_ARN: the provisioning credentials (creates
    /// databases and the runtime role); `toki tenant create` and `toki migrate`.
    pub admin_secret_arn: Option<String>,
    /// TOKI_DATABASE_SSLMODE: disable, prefer, require, verify-ca, verify-full.
    pub sslmode: String,
    /// TOKI_DATABASE_SSLROOTCERT: CA bundle for verify-ca / verify-full
    /// (the RDS bundle for a direct connection; not needed through RDS Proxy).
    pub sslrootcert: Option<String>,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            host: None,
            port: 5432,
            name_template: "toki_{tenant}".into(),
            secret_arn: None,
            admin_secret_arn: None,
            sslmode: "verify-full".into(),
            sslrootcert: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineConfig {
    pub shards: u16,
    pub scan_interval_s: u64,
    pub window_s: u64,
    /// Messages become visible this long before due; the daemon prepares then fires on time.
    pub lead_ms: u64,
    /// How long a scanner's claim on an index row lasts: longer than a scanner run.
    pub claim_lease_s: u64,
    /// How far ahead a recurring schedule's reminders are in the index.
    pub horizon_s: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DaemonConfig {
    pub workers: usize,
    /// How long a received message stays hidden and a claim lasts unless its
    /// holder renews them: a daemon that died is taken over within it.
    pub visibility_timeout_s: u64,
    /// The queue's own redrive policy, a backstop: receives before the queue
    /// dead-letters a message by itself. The daemon dead-letters earlier, by
    /// its failure budget, with the reason.
    pub max_receives: u32,
    pub max_in_flight: usize,
    /// The first wait before a failed delivery is tried again; it doubles per failure.
    pub retry_base_ms: u64,
    /// The longest wait before a failed delivery is tried again.
    pub max_backoff_s: u64,
    /// Failed attempts of a delivery before its message is dead-lettered.
    pub max_failures: u32,
    /// How long past due a message whose tenant database cannot be reached
    /// keeps coming back before it is dead-lettered.
    pub give_up_after_s: u64,
    /// Transient failures in a row that open a channel's circuit.
    pub breaker_threshold: u32,
    /// How often an open circuit probes its channel.
    pub breaker_probe_ms: u64,
    /// A schedule change committed this long before the due instant is honoured.
    pub late_change_cutoff_ms: u64,
    /// Before resending a delivery taken over from a daemon that died, ask
    /// the channel whether it went out (Slack: message metadata in history).
    pub reconcile_takeovers: bool,
}

/// How mail leaves Toki.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MailTransport {
    /// An SMTP server (`mail.smtp_url`), through a pool of long-lived sessions.
    Smtp,
    /// Amazon SES's v2 API, with the standard AWS environment's credentials and region.
    Ses,
    /// .eml files in `<data_dir>/outbox/mail`.
    Outbox,
}

impl std::str::FromStr for MailTransport {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "smtp" => Ok(MailTransport::Smtp),
            "ses" => Ok(MailTransport::Ses),
            "outbox" => Ok(MailTransport::Outbox),
            other => Err(format!("{other:?} is not smtp, ses or outbox")),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MailConfig {
    /// TOKI_MAIL_TRANSPORT: smtp, ses or outbox. Unset: smtp when
    /// `smtp_url` is set, else outbox.
    pub transport: Option<MailTransport>,
    /// `smtp://host:port`, `smtps://user:pass@host:465`.
    pub smtp_url: Option<Secret>,
    /// TOKI_SES_CONFIGURATION_SET: the SES configuration set every mail names (optional).
    pub ses_configuration_set: Option<String>,
    pub from: String,
    pub connections: u32,
    /// An SMTP exchange taking longer than this fails (a server that accepts
    /// and then hangs); the delivery is tried again.
    pub timeout_s: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlackConfig {
    /// Bot token; unset: JSON lines in `<data_dir>/outbox/slack.jsonl`.
    pub token: Option<Secret>,
    pub api_url: String,
    /// Requests in flight (and pooled connections) to the Slack API.
    pub concurrency: usize,
    /// Speak HTTP/2 to `api_url` without negotiating it (a cleartext
    /// endpoint). Over https it is negotiated anyway when offered.
    pub http2_prior_knowledge: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AwsConfig {
    /// For emulators; unset: the standard AWS environment (`AWS_ENDPOINT_URL`).
    pub endpoint_url: Option<String>,
    pub region: Option<String>,
    pub index_table: String,
    pub directory_table: String,
    pub queue_name: String,
    pub dlq_name: String,
    /// Create tables and queues that do not exist (emulators, first runs).
    pub create_resources: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            backend: BackendKind::Embedded,
            environment: "default".into(),
            data_dir: PathBuf::from("toki-data"),
            tenant_database_template: None,
            database: DatabaseConfig::default(),
            pipeline: PipelineConfig::default(),
            daemon: DaemonConfig::default(),
            mail: MailConfig::default(),
            slack: SlackConfig::default(),
            aws: AwsConfig::default(),
            flow: FlowSettings::default(),
        }
    }
}

impl Default for PipelineConfig {
    fn default() -> Self {
        let p = PipelineSettings::default();
        PipelineConfig {
            shards: p.shards,
            scan_interval_s: 60,
            window_s: p.window.as_secs(),
            lead_ms: p.lead.as_millis() as u64,
            claim_lease_s: p.claim_lease.as_secs(),
            horizon_s: p.horizon.as_secs(),
        }
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        let d = DaemonSettings::default();
        DaemonConfig {
            workers: 8,
            visibility_timeout_s: d.visibility.as_secs(),
            max_receives: 100,
            max_in_flight: d.max_in_flight,
            retry_base_ms: d.retry.base.as_millis() as u64,
            max_backoff_s: d.retry.cap.as_secs(),
            max_failures: d.retry.max_failures,
            give_up_after_s: d.retry.give_up_after.as_secs(),
            breaker_threshold: d.breaker.threshold,
            breaker_probe_ms: d.breaker.probe_every.as_millis() as u64,
            late_change_cutoff_ms: d.late_change_cutoff.as_millis() as u64,
            reconcile_takeovers: d.reconcile_takeovers,
        }
    }
}

impl MailConfig {
    /// The transport in effect: the one named, else SMTP when a server is set, else the outbox.
    pub fn effective_transport(&self) -> MailTransport {
        self.transport.unwrap_or(if self.smtp_url.is_some() {
            MailTransport::Smtp
        } else {
            MailTransport::Outbox
        })
    }
}

impl Default for MailConfig {
    fn default() -> Self {
        MailConfig {
            transport: None,
            smtp_url: None,
            ses_configuration_set: None,
            from: "Toki <reminders@toki.invalid>".into(),
            connections: 8,
            timeout_s: 10,
        }
    }
}

impl Default for SlackConfig {
    fn default() -> Self {
        SlackConfig {
            token: None,
            api_url: "https://slack.com/api".into(),
            concurrency: 32,
            http2_prior_knowledge: false,
        }
    }
}

impl Default for AwsConfig {
    fn default() -> Self {
        AwsConfig {
            endpoint_url: None,
            region: None,
            index_table: "toki-reminders".into(),
            directory_table: "toki-tenants".into(),
            queue_name: "toki-reminders".into(),
            dlq_name: "toki-reminders-dlq".into(),
            create_resources: false,
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn env_parse<T: std::str::FromStr>(name: &str) -> anyhow::Result<Option<T>>
where
    T::Err: std::fmt::Display,
{
    match env(name) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{name}: {v:?} is not valid: {e}")),
    }
}

impl Config {
    /// Loads defaults, then the file, then the environment.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Self> {
        let path = file
            .map(Path::to_path_buf)
            .or_else(|| env("TOKI_CONFIG").map(PathBuf::from))
            .or_else(|| Some(PathBuf::from("toki.toml")).filter(|p| p.exists()));
        let mut config = match path {
            Some(p) => {
                let text = std::fs::read_to_string(&p)
                    .with_context(|| format!("reading config file {}", p.display()))?;
                toml::from_str(&text).with_context(|| format!("config file {}", p.display()))?
            }
            None => Config::default(),
        };
        config.apply_env()?;
        config.validate()?;
        Ok(config)
    }

    fn apply_env(&mut self) -> anyhow::Result<()> {
        if let Some(b) = env("TOKI_BACKEND") {
            self.backend = b
                .parse()
                .map_err(|e| anyhow::anyhow!("TOKI_BACKEND: {e}"))?;
        }
        if let Some(v) = env("TOKI_ENVIRONMENT") {
            self.environment = v;
        }
        if let Some(v) = env("TOKI_DATA_DIR") {
            self.data_dir = v.into();
        }
        if let Some(v) = env("TOKI_DATABASE_URL_TEMPLATE") {
            self.tenant_database_template = Some(v.into());
        }
        if let Some(v) = env("TOKI_DATABASE_HOST") {
            self.database.host = Some(v);
        }
        if let Some(v) = env_parse("TOKI_DATABASE_PORT")? {
            self.database.port = v;
        }
        if let Some(v) = env("TOKI_DATABASE_NAME_TEMPLATE") {
            self.database.name_template = v;
        }
        if let Some(v) = env("TOKI_DATABASE_SECRET_ARN") {
            self.database.secret_arn = Some(v);
        }
        if let Some(v) = env("TOKI_DATABASE_ADMIN_SECRET_ARN") {
            self.database.admin_secret_arn = Some(v);
        }
        if let Some(v) = env("TOKI_DATABASE_SSLMODE") {
            self.database.sslmode = v;
        }
        if let Some(v) = env("TOKI_DATABASE_SSLROOTCERT") {
            self.database.sslrootcert = Some(v);
        }
        if let Some(v) = env_parse("TOKI_CLAIM_LEASE_S")? {
            self.pipeline.claim_lease_s = v;
        }
        if let Some(v) = env("TOKI_AWS_CREATE_RESOURCES") {
            self.aws.create_resources = matches!(v.as_str(), "1" | "true" | "yes");
        }
        if let Some(v) = env_parse("TOKI_SHARDS")? {
            self.pipeline.shards = v;
        }
        if let Some(v) = env_parse("TOKI_LEAD_MS")? {
            self.pipeline.lead_ms = v;
        }
        if let Some(v) = env_parse("TOKI_HORIZON_S")? {
            self.pipeline.horizon_s = v;
        }
        if let Some(v) = env_parse("TOKI_SCAN_INTERVAL_S")? {
            self.pipeline.scan_interval_s = v;
        }
        if let Some(v) = env_parse("TOKI_WORKERS")? {
            self.daemon.workers = v;
        }
        if let Some(v) = env_parse("TOKI_MAX_RECEIVES")? {
            self.daemon.max_receives = v;
        }
        if let Some(v) = env_parse("TOKI_VISIBILITY_TIMEOUT_S")? {
            self.daemon.visibility_timeout_s = v;
        }
        if let Some(v) = env_parse("TOKI_RETRY_BASE_MS")? {
            self.daemon.retry_base_ms = v;
        }
        if let Some(v) = env_parse("TOKI_MAX_BACKOFF_S")? {
            self.daemon.max_backoff_s = v;
        }
        if let Some(v) = env_parse("TOKI_MAX_FAILURES")? {
            self.daemon.max_failures = v;
        }
        if let Some(v) = env_parse("TOKI_BREAKER_PROBE_MS")? {
            self.daemon.breaker_probe_ms = v;
        }
        if let Some(v) = env_parse("TOKI_RECONCILE_TAKEOVERS")? {
            self.daemon.reconcile_takeovers = v;
        }
        if let Some(v) = env_parse("TOKI_LATE_CHANGE_CUTOFF_MS")? {
            self.daemon.late_change_cutoff_ms = v;
        }
        if let Some(v) = env("TOKI_SMTP_URL") {
            self.mail.smtp_url = Some(v.into());
        }
        if let Some(v) = env_parse("TOKI_MAIL_TRANSPORT")? {
            self.mail.transport = Some(v);
        }
        if let Some(v) = env("TOKI_SES_CONFIGURATION_SET") {
            self.mail.ses_configuration_set = Some(v);
        }
        if let Some(v) = env_parse("TOKI_SMTP_CONNECTIONS")? {
            self.mail.connections = v;
        }
        if let Some(v) = env_parse("TOKI_SMTP_TIMEOUT_S")? {
            self.mail.timeout_s = v;
        }
        if let Some(v) = env("TOKI_MAIL_FROM") {
            self.mail.from = v;
        }
        if let Some(v) = env("TOKI_SLACK_TOKEN") {
            self.slack.token = Some(v.into());
        }
        if let Some(v) = env_parse("TOKI_SLACK_CONCURRENCY")? {
            self.slack.concurrency = v;
        }
        if let Some(v) = env_parse("TOKI_SLACK_HTTP2_PRIOR_KNOWLEDGE")? {
            self.slack.http2_prior_knowledge = v;
        }
        if let Some(v) = env("TOKI_FLOW_LIMITS") {
            // JSON, the whole table: {"slack:T0123": {"rate": 50, "burst": 10}};
            // `{}` turns every limit off.
            self.flow.limits =
                serde_json::from_str(&v).map_err(|e| anyhow::anyhow!("TOKI_FLOW_LIMITS: {e}"))?;
        }
        if let Some(v) = env("TOKI_SLACK_WORKSPACE") {
            self.flow.slack_workspace = v;
        }
        if let Some(v) = env_parse("TOKI_FLOW_PARTITIONS")? {
            self.flow.partitions = v;
        }
        if let Some(v) = env_parse("TOKI_FLOW_MAX_WAIT_MS")? {
            self.flow.max_wait_ms = v;
        }
        if let Some(v) = env("TOKI_SLACK_API_URL") {
            self.slack.api_url = v;
        }
        if let Some(v) = env("TOKI_AWS_ENDPOINT_URL") {
            self.aws.endpoint_url = Some(v);
        }
        if let Some(v) = env("TOKI_INDEX_TABLE") {
            self.aws.index_table = v;
        }
        if let Some(v) = env("TOKI_DIRECTORY_TABLE") {
            self.aws.directory_table = v;
        }
        if let Some(v) = env("TOKI_QUEUE_NAME") {
            self.aws.queue_name = v;
        }
        if let Some(v) = env("TOKI_DLQ_NAME") {
            self.aws.dlq_name = v;
        }
        Ok(())
    }

    pub fn validate(&mut self) -> anyhow::Result<()> {
        if self.mail.effective_transport() == MailTransport::Ses
            && self.flow.smtp_account == "default"
        {
            // SES's sending rate is the account's: the smtp:ses limit.
            self.flow.smtp_account = "ses".into();
        }
        self.flow
            .validate()
            .map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.problem))?;
        if self.pipeline.shards == 0 || self.pipeline.shards > 1000 {
            bail!(
                "pipeline.shards: {} is out of range 1..=1000",
                self.pipeline.shards
            );
        }
        if self.pipeline.window_s == 0 || self.pipeline.window_s > 900 {
            bail!(
                "pipeline.window_s: {} is out of range 1..=900 (the SQS delay limit)",
                self.pipeline.window_s
            );
        }
        // At least an hour: the repair pass (every minute) extends a series
        // at half of it, well before its next reminders are due.
        if !(3600..=366 * 86_400).contains(&self.pipeline.horizon_s) {
            bail!(
                "pipeline.horizon_s: {} is out of range 3600..=31622400 (an hour to a year)",
                self.pipeline.horizon_s
            );
        }
        if self.pipeline.scan_interval_s == 0
            || self.pipeline.scan_interval_s > self.pipeline.window_s
        {
            bail!(
                "pipeline.scan_interval_s: {} must be 1..=window_s ({})",
                self.pipeline.scan_interval_s,
                self.pipeline.window_s
            );
        }
        if self.daemon.workers == 0 || self.daemon.workers > 1024 {
            bail!(
                "daemon.workers: {} is out of range 1..=1024",
                self.daemon.workers
            );
        }
        if Duration::from_millis(self.pipeline.lead_ms)
            >= Duration::from_secs(self.daemon.visibility_timeout_s)
        {
            bail!(
                "pipeline.lead_ms: {} ms must be shorter than daemon.visibility_timeout_s ({} s)",
                self.pipeline.lead_ms,
                self.daemon.visibility_timeout_s
            );
        }
        if !(1..=1000).contains(&self.mail.connections) {
            bail!(
                "mail.connections: {} is out of range 1..=1000 (SMTP sessions per daemon)",
                self.mail.connections
            );
        }
        match (self.mail.transport, &self.mail.smtp_url) {
            (Some(MailTransport::Smtp), None) => {
                bail!("mail.smtp_url: required when mail.transport is smtp")
            }
            (Some(t @ (MailTransport::Ses | MailTransport::Outbox)), Some(_)) => bail!(
                "mail.smtp_url: set, but mail.transport is {}; unset one of them",
                if t == MailTransport::Ses {
                    "ses"
                } else {
                    "outbox"
                }
            ),
            _ => {}
        }
        if self.daemon.max_failures == 0 {
            bail!("daemon.max_failures: must be at least 1");
        }
        if self.daemon.max_receives <= self.daemon.max_failures {
            bail!(
                "daemon.max_receives: {} must exceed daemon.max_failures ({}): the queue's own redrive is a backstop, the daemon's budget decides",
                self.daemon.max_receives,
                self.daemon.max_failures
            );
        }
        if self.daemon.late_change_cutoff_ms > self.pipeline.lead_ms {
            bail!(
                "daemon.late_change_cutoff_ms: {} ms must not exceed pipeline.lead_ms ({} ms): the last look happens while the message is held",
                self.daemon.late_change_cutoff_ms,
                self.pipeline.lead_ms
            );
        }
        if self.daemon.breaker_threshold == 0 {
            bail!("daemon.breaker_threshold: must be at least 1");
        }
        if let Some(t) = &self.tenant_database_template {
            if !t.expose().contains("{tenant}") {
                bail!("tenant_database_template: has no {{tenant}} placeholder");
            }
        }
        if !self.database.name_template.contains("{tenant}") {
            bail!(
                "database.name_template: {:?} has no {{tenant}} placeholder",
                self.database.name_template
            );
        }
        const SSLMODES: [&str; 6] = [
            "disable",
            "allow",
            "prefer",
            "require",
            "verify-ca",
            "verify-full",
        ];
        if !SSLMODES.contains(&self.database.sslmode.as_str()) {
            bail!(
                "database.sslmode: {:?} is not one of {}",
                self.database.sslmode,
                SSLMODES.join(", ")
            );
        }
        if self.database.host.is_some() && self.database.secret_arn.is_none() {
            bail!("database.secret_arn (TOKI_DATABASE_SECRET_ARN): needed with database.host, for the credentials");
        }
        if self.backend == BackendKind::Aws
            && self.tenant_database_template.is_none()
            && self.database.host.is_none()
        {
            // A Postgres server under which tenant databases are created. Without
            // either, only processes that never open a tenant database (the
            // scanner) can run; the others fail when they first need one.
            if let Some(url) = env("DATABASE_URL") {
                let (server, _) = url.rsplit_once('/').unwrap_or((url.as_str(), ""));
                let query = url
                    .split_once('?')
                    .map(|(_, q)| format!("?{q}"))
                    .unwrap_or_default();
                self.tenant_database_template =
                    Some(format!("{server}/toki_{{tenant}}{query}").into());
            }
        }
        Ok(())
    }

    pub fn pipeline_settings(&self) -> PipelineSettings {
        PipelineSettings {
            shards: self.pipeline.shards,
            window: Duration::from_secs(self.pipeline.window_s),
            lead: Duration::from_millis(self.pipeline.lead_ms),
            claim_lease: Duration::from_secs(self.pipeline.claim_lease_s),
            horizon: Duration::from_secs(self.pipeline.horizon_s),
            ..PipelineSettings::default()
        }
    }

    pub fn daemon_settings(&self) -> DaemonSettings {
        DaemonSettings {
            workers: self.daemon.workers,
            visibility: Duration::from_secs(self.daemon.visibility_timeout_s),
            lead: Duration::from_millis(self.pipeline.lead_ms),
            max_in_flight: self.daemon.max_in_flight,
            late_change_cutoff: Duration::from_millis(self.daemon.late_change_cutoff_ms),
            retry: RetryPolicy {
                base: Duration::from_millis(self.daemon.retry_base_ms.max(1)),
                cap: Duration::from_secs(self.daemon.max_backoff_s.max(1)),
                max_failures: self.daemon.max_failures,
                give_up_after: Duration::from_secs(self.daemon.give_up_after_s),
                busy_wait: Duration::from_secs(self.daemon.visibility_timeout_s) / 4,
            },
            breaker: BreakerSettings {
                threshold: self.daemon.breaker_threshold,
                probe_every: Duration::from_millis(self.daemon.breaker_probe_ms.max(10)),
                ..BreakerSettings::default()
            },
            reconcile_takeovers: self.daemon.reconcile_takeovers,
            ..DaemonSettings::default()
        }
    }
}
