//! Configuration: defaults that run the embedded mode, then a TOML file
//! (`--config`, `TOKI_CONFIG`, or `toki.toml` in the working directory),
//! then `TOKI_*` environment variables, then command-line flags.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use toki_core::daemon::DaemonSettings;
use toki_core::settings::PipelineSettings;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// SQLite files in the data folder: no AWS, no database server.
    Embedded,
    /// DynamoDB + SQS (or an emulator), tenant databases on Postgres.
    Aws,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub backend: BackendKind,
    /// Embedded state (control database, tenant databases, outboxes).
    pub data_dir: PathBuf,
    /// Where a new tenant's database goes: a Postgres URL with `{tenant}`
    /// (e.g. `postgres://toki@db:5432/toki_{tenant}`). Unset: a SQLite file in the data folder.
    pub tenant_database_template: Option<String>,
    pub pipeline: PipelineConfig,
    pub daemon: DaemonConfig,
    pub mail: MailConfig,
    pub slack: SlackConfig,
    pub aws: AwsConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineConfig {
    pub shards: u16,
    pub scan_interval_s: u64,
    pub window_s: u64,
    /// Messages become visible this long before due; the daemon prepares then fires on time.
    pub lead_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DaemonConfig {
    pub workers: usize,
    pub visibility_timeout_s: u64,
    /// Receives before a message goes to the dead-letter queue.
    pub max_receives: u32,
    pub max_in_flight: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MailConfig {
    /// `smtp://host:port`, `smtps://user:pass@host:465`; unset: .eml files in `<data_dir>/outbox/mail`.
    pub smtp_url: Option<String>,
    pub from: String,
    pub connections: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlackConfig {
    /// Bot token; unset: JSON lines in `<data_dir>/outbox/slack.jsonl`.
    pub token: Option<String>,
    pub api_url: String,
    /// Requests in flight (and pooled connections) to the Slack API.
    pub concurrency: usize,
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
            data_dir: PathBuf::from("toki-data"),
            tenant_database_template: None,
            pipeline: PipelineConfig::default(),
            daemon: DaemonConfig::default(),
            mail: MailConfig::default(),
            slack: SlackConfig::default(),
            aws: AwsConfig::default(),
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
        }
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        let d = DaemonSettings::default();
        DaemonConfig {
            workers: 8,
            visibility_timeout_s: d.visibility.as_secs(),
            max_receives: 5,
            max_in_flight: d.max_in_flight,
        }
    }
}

impl Default for MailConfig {
    fn default() -> Self {
        MailConfig {
            smtp_url: None,
            from: "Toki <reminders@toki.invalid>".into(),
            connections: 8,
        }
    }
}

impl Default for SlackConfig {
    fn default() -> Self {
        SlackConfig {
            token: None,
            api_url: "https://slack.com/api".into(),
            concurrency: 32,
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
            self.backend = match b.as_str() {
                "embedded" => BackendKind::Embedded,
                "aws" => BackendKind::Aws,
                other => bail!("TOKI_BACKEND: {other:?} is not embedded or aws"),
            };
        }
        if let Some(v) = env("TOKI_DATA_DIR") {
            self.data_dir = v.into();
        }
        if let Some(v) = env("TOKI_DATABASE_URL_TEMPLATE") {
            self.tenant_database_template = Some(v);
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
        if let Some(v) = env_parse("TOKI_SCAN_INTERVAL_S")? {
            self.pipeline.scan_interval_s = v;
        }
        if let Some(v) = env_parse("TOKI_WORKERS")? {
            self.daemon.workers = v;
        }
        if let Some(v) = env_parse("TOKI_MAX_RECEIVES")? {
            self.daemon.max_receives = v;
        }
        if let Some(v) = env("TOKI_SMTP_URL") {
            self.mail.smtp_url = Some(v);
        }
        if let Some(v) = env("TOKI_MAIL_FROM") {
            self.mail.from = v;
        }
        if let Some(v) = env("TOKI_SLACK_TOKEN") {
            self.slack.token = Some(v);
        }
        if let Some(v) = env_parse("TOKI_SLACK_CONCURRENCY")? {
            self.slack.concurrency = v;
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
        if self.daemon.max_receives == 0 {
            bail!("daemon.max_receives: must be at least 1");
        }
        if let Some(t) = &self.tenant_database_template {
            if !t.contains("{tenant}") {
                bail!("tenant_database_template: {t:?} has no {{tenant}} placeholder");
            }
        }
        if self.backend == BackendKind::Aws && self.tenant_database_template.is_none() {
            // A Postgres server under which tenant databases are created. Without
            // either, only processes that never open a tenant database (the
            // scanner) can run; the others fail when they first need one.
            if let Some(url) = env("DATABASE_URL") {
                let (server, _) = url.rsplit_once('/').unwrap_or((url.as_str(), ""));
                let query = url
                    .split_once('?')
                    .map(|(_, q)| format!("?{q}"))
                    .unwrap_or_default();
                self.tenant_database_template = Some(format!("{server}/toki_{{tenant}}{query}"));
            }
        }
        Ok(())
    }

    pub fn pipeline_settings(&self) -> PipelineSettings {
        PipelineSettings {
            shards: self.pipeline.shards,
            window: Duration::from_secs(self.pipeline.window_s),
            lead: Duration::from_millis(self.pipeline.lead_ms),
            ..PipelineSettings::default()
        }
    }

    pub fn daemon_settings(&self) -> DaemonSettings {
        DaemonSettings {
            workers: self.daemon.workers,
            visibility: Duration::from_secs(self.daemon.visibility_timeout_s),
            lead: Duration::from_millis(self.pipeline.lead_ms),
            max_in_flight: self.daemon.max_in_flight,
            ..DaemonSettings::default()
        }
    }

    /// Where tenant `id`'s database lives.
    pub fn tenant_database(&self, id: &toki_core::TenantId) -> String {
        match &self.tenant_database_template {
            Some(t) => toki_sql::database_for(t, id),
            None => self
                .data_dir
                .join("tenants")
                .join(format!("{id}.sqlite"))
                .display()
                .to_string(),
        }
    }
}
