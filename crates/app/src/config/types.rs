//! The configuration's shape: its sections, their defaults, and the
//! settings they make for the services. Loading and checking it are
//! [`super::env`]'s and [`super::validate`]'s.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toki_core::daemon::{BreakerSettings, DaemonSettings, RetryPolicy};
use toki_core::events::dispatch::DispatchSettings;
use toki_core::retention::PurgeSettings;
use toki_core::settings::{PipelineSettings, RepairSettings};
use toki_model::limits::FlowSettings;
use toki_model::quota::{ApiQuota, TenantCaps};

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
    /// The repair pass: how many tenants at once, how long each, the whole.
    pub repair: RepairConfig,
    pub daemon: DaemonConfig,
    pub mail: MailConfig,
    pub slack: SlackConfig,
    /// The webhook channel: its concurrency and the egress (SSRF) policy.
    pub webhook: WebhookConfig,
    pub aws: AwsConfig,
    /// Limits on Slack, mail and tenant databases, shared by the fleet.
    pub flow: FlowSettings,
    /// Each tenant's share of the API (rate, burst, requests at once), per
    /// process, unless its contract says otherwise.
    pub api_quota: ApiQuota,
    /// How many schedules, users and templates a tenant may store, unless
    /// its contract says otherwise.
    pub caps: TenantCaps,
    /// How `toki serve`'s listeners (and a daemon's `--metrics-listen`)
    /// take connections.
    pub http: HttpConfig,
}

/// The connections an HTTP listener of Toki's takes (`crate::http`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// A request head must be whole this long after the connection opened
    /// or its previous answer went out; else the connection is closed (a
    /// half-sent request, and an idle keep-alive connection).
    pub header_read_timeout_ms: u64,
    /// A request body must be whole this long after its head; else reading
    /// it fails (400) and the connection is closed (a body sent slowly).
    pub body_read_timeout_ms: u64,
    /// Connections open at once per listener; more wait to be accepted.
    pub max_connections: usize,
    /// Failed authentications a source may make at once (the API).
    pub auth_failure_burst: u32,
    /// Then this many more a second; past them 429 before any read.
    pub auth_failure_rate: f64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 60_000,
            max_connections: 1024,
            // api::FAILURE_BURST and FAILURE_RATE (the API is a feature).
            auth_failure_burst: 10,
            auth_failure_rate: 1.0,
        }
    }
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
    /// TOKI_DATABASE_STATEMENT_CACHE: auto (off through an RDS Proxy
    /// endpoint, where named prepared statements pin sessions), on, off.
    pub statement_cache: toki_sql::StatementCache,
    /// TOKI_DATABASE_MAX_CONNECTIONS: Postgres connections one process uses
    /// at once across all its tenants (behind RDS Proxy: the database
    /// connections it can hold, tasks × this at most).
    pub max_connections: u32,
    /// TOKI_DATABASE_MAX_OPEN_TENANTS: tenant databases one process keeps
    /// open at most (the least recently used is closed past it); each open
    /// one idle for 30 s holds no connection.
    pub max_open_tenants: usize,
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
            statement_cache: toki_sql::StatementCache::Auto,
            max_connections: toki_sql::DEFAULT_CONNECTION_BUDGET,
            max_open_tenants: toki_sql::DEFAULT_MAX_OPEN_TENANTS,
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
    /// Each further tenant enqueued for one instant has its messages visible
    /// this much earlier (a crowded instant's claims spread ahead of it).
    pub lead_per_tenant_us: u64,
    /// The longest a crowded instant's lead grows to.
    pub max_lead_ms: u64,
    /// How long a scanner's claim on an index row lasts: longer than a scanner run.
    pub claim_lease_s: u64,
    /// How far ahead a recurring schedule's reminders are in the index.
    pub horizon_s: u64,
}

/// The repair pass over the tenants (`toki_core::repair`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RepairConfig {
    /// TOKI_REPAIR_CONCURRENCY: tenants repaired at once.
    pub concurrency: usize,
    /// TOKI_REPAIR_TENANT_DEADLINE_S: a tenant's repair still running after
    /// this long is cut short, counted as timed out, and retried next pass.
    pub tenant_deadline_s: u64,
    /// TOKI_REPAIR_PASS_BUDGET_S: no tenant is begun or left running past
    /// this long into a pass; those left over are the next pass's first.
    pub pass_budget_s: u64,
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
    /// How often the tenants' delivery-event endpoints are looked at.
    pub events_poll_ms: u64,
    /// The longest delivery events are kept (listed and replayable), over
    /// every tenant's own `retention.events`: a deployment-wide cap.
    pub events_window_h: u64,
    /// Replayed delivery events a second per tenant, per process
    /// (docs/events.md: a replay is paced).
    pub events_replay_rate: f64,
    /// Replayed events at once after a quiet spell, per tenant.
    pub events_replay_burst: u32,
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

/// Requests to tenants' endpoints: how many at once, how long each may take,
/// and which non-public addresses the operator allows (none by default:
/// loopback, private, link-local and metadata addresses are refused).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookConfig {
    /// Requests in flight across every endpoint.
    pub concurrency: usize,
    /// Requests in flight to one host.
    pub per_host: usize,
    pub timeout_ms: u64,
    /// Address ranges allowed although not public (`127.0.0.1/32`).
    pub allow_addresses: Vec<toki_model::egress::Cidr>,
    /// Plain http endpoints allowed (tests, stand-ins); https only by default.
    pub allow_http: bool,
    /// Ports allowed besides 443 (`8443`, `"8000-8999"`); none by default.
    pub allow_ports: Vec<toki_model::egress::PortRange>,
}

impl WebhookConfig {
    pub fn egress_policy(&self) -> toki_model::egress::EgressPolicy {
        toki_model::egress::EgressPolicy {
            allow: self.allow_addresses.clone(),
            schemes: match self.allow_http {
                true => toki_model::egress::Schemes::HttpAllowed,
                false => toki_model::egress::Schemes::HttpsOnly,
            },
            ports: self.allow_ports.clone(),
        }
    }
}

impl Default for WebhookConfig {
    fn default() -> Self {
        WebhookConfig {
            concurrency: 64,
            per_host: 16,
            timeout_ms: 5_000,
            allow_addresses: Vec::new(),
            allow_http: false,
            allow_ports: Vec::new(),
        }
    }
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
            repair: RepairConfig::default(),
            daemon: DaemonConfig::default(),
            mail: MailConfig::default(),
            slack: SlackConfig::default(),
            webhook: WebhookConfig::default(),
            aws: AwsConfig::default(),
            flow: FlowSettings::default(),
            api_quota: ApiQuota::default(),
            caps: TenantCaps::default(),
            http: HttpConfig::default(),
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
            lead_per_tenant_us: p.lead_per_tenant.as_micros() as u64,
            max_lead_ms: p.max_lead.as_millis() as u64,
            claim_lease_s: p.claim_lease.as_secs(),
            horizon_s: p.horizon.as_secs(),
        }
    }
}

impl Default for RepairConfig {
    fn default() -> Self {
        let r = RepairSettings::default();
        RepairConfig {
            concurrency: r.concurrency,
            tenant_deadline_s: r.tenant_deadline.as_secs(),
            pass_budget_s: r.pass_budget.as_secs(),
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
            events_poll_ms: DispatchSettings::default().poll.as_millis() as u64,
            events_window_h: 7 * 24,
            events_replay_rate: DispatchSettings::default().replay_rate,
            events_replay_burst: DispatchSettings::default().replay_burst,
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

impl Config {
    pub fn pipeline_settings(&self) -> PipelineSettings {
        PipelineSettings {
            shards: self.pipeline.shards,
            window: Duration::from_secs(self.pipeline.window_s),
            lead: Duration::from_millis(self.pipeline.lead_ms),
            lead_per_tenant: Duration::from_micros(self.pipeline.lead_per_tenant_us),
            max_lead: Duration::from_millis(self.pipeline.max_lead_ms),
            claim_lease: Duration::from_secs(self.pipeline.claim_lease_s),
            horizon: Duration::from_secs(self.pipeline.horizon_s),
            caps: self.caps,
            egress: self.webhook.egress_policy(),
            repair: RepairSettings {
                concurrency: self.repair.concurrency,
                tenant_deadline: Duration::from_secs(self.repair.tenant_deadline_s),
                pass_budget: Duration::from_secs(self.repair.pass_budget_s),
            },
            ..PipelineSettings::default()
        }
    }

    pub fn events_settings(&self) -> DispatchSettings {
        DispatchSettings {
            poll: Duration::from_millis(self.daemon.events_poll_ms.max(10)),
            replay_rate: self.daemon.events_replay_rate,
            replay_burst: self.daemon.events_replay_burst,
            // Half the databases kept open: the deliveries use them too.
            tenants_at_once: (self.database.max_open_tenants / 2).max(1),
            ..DispatchSettings::default()
        }
    }

    /// The retention purge's pass, events capped at `daemon.events_window_h`.
    pub fn purge_settings(&self) -> PurgeSettings {
        PurgeSettings {
            events_cap: Some(Duration::from_secs(
                self.daemon.events_window_h.max(1) * 3600,
            )),
            caps: self.caps,
            ..PurgeSettings::default()
        }
    }

    pub fn daemon_settings(&self) -> DaemonSettings {
        DaemonSettings {
            workers: self.daemon.workers,
            visibility: Duration::from_secs(self.daemon.visibility_timeout_s),
            // A crowded instant's messages arrive up to the longest lead early.
            lead: Duration::from_millis(self.pipeline.lead_ms.max(self.pipeline.max_lead_ms)),
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
