//! `TOKI_*` environment variables over the configuration: a table of each
//! variable and where its value goes, applied in order (an empty variable
//! counts as unset).

use std::fmt::Display;
use std::str::FromStr;

use toki_model::quota::{Cap, PerSecond};

use super::types::Config;

/// An environment variable's value, unless unset or empty.
pub(super) fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A variable's value, with its name for the error that names it.
struct EnvValue {
    name: &'static str,
    text: String,
}

impl EnvValue {
    /// The value parsed: `NAME: "value" is not valid: why` when it does not.
    fn parse<T: FromStr>(&self) -> anyhow::Result<T>
    where
        T::Err: Display,
    {
        self.text
            .parse()
            .map_err(|e| anyhow::anyhow!("{}: {:?} is not valid: {e}", self.name, self.text))
    }
}

/// Where a variable's value goes.
type Apply = fn(&mut Config, EnvValue) -> anyhow::Result<()>;

fn set<T>(field: &mut T, value: T) -> anyhow::Result<()> {
    *field = value;
    Ok(())
}

/// Every variable, in the order applied (the first that is not valid is the error).
const VARS: &[(&str, Apply)] = &[
    ("TOKI_BACKEND", |c, v| {
        let backend = v
            .text
            .parse()
            .map_err(|e| anyhow::anyhow!("TOKI_BACKEND: {e}"))?;
        set(&mut c.backend, backend)
    }),
    ("TOKI_ENVIRONMENT", |c, v| set(&mut c.environment, v.text)),
    ("TOKI_DATA_DIR", |c, v| set(&mut c.data_dir, v.text.into())),
    ("TOKI_DATABASE_URL_TEMPLATE", |c, v| {
        set(&mut c.tenant_database_template, Some(v.text.into()))
    }),
    ("TOKI_DATABASE_HOST", |c, v| {
        set(&mut c.database.host, Some(v.text))
    }),
    ("TOKI_DATABASE_PORT", |c, v| {
        set(&mut c.database.port, v.parse()?)
    }),
    ("TOKI_DATABASE_NAME_TEMPLATE", |c, v| {
        set(&mut c.database.name_template, v.text)
    }),
    ("TOKI_DATABASE_SECRET_ARN", |c, v| {
        set(&mut c.database.secret_arn, Some(v.text))
    }),
    ("TOKI_DATABASE_ADMIN_SECRET_ARN", |c, v| {
        set(&mut c.database.admin_secret_arn, Some(v.text))
    }),
    ("TOKI_DATABASE_SSLMODE", |c, v| {
        set(&mut c.database.sslmode, v.text)
    }),
    ("TOKI_DATABASE_SSLROOTCERT", |c, v| {
        set(&mut c.database.sslrootcert, Some(v.text))
    }),
    ("TOKI_DATABASE_STATEMENT_CACHE", |c, v| {
        set(&mut c.database.statement_cache, v.parse()?)
    }),
    ("TOKI_DATABASE_MAX_CONNECTIONS", |c, v| {
        set(&mut c.database.max_connections, v.parse()?)
    }),
    ("TOKI_DATABASE_MAX_OPEN_TENANTS", |c, v| {
        set(&mut c.database.max_open_tenants, v.parse()?)
    }),
    ("TOKI_CLAIM_LEASE_S", |c, v| {
        set(&mut c.pipeline.claim_lease_s, v.parse()?)
    }),
    ("TOKI_AWS_CREATE_RESOURCES", |c, v| {
        let on = matches!(v.text.as_str(), "1" | "true" | "yes");
        set(&mut c.aws.create_resources, on)
    }),
    ("TOKI_SHARDS", |c, v| {
        set(&mut c.pipeline.shards, v.parse()?)
    }),
    ("TOKI_LEAD_MS", |c, v| {
        set(&mut c.pipeline.lead_ms, v.parse()?)
    }),
    ("TOKI_LEAD_PER_TENANT_US", |c, v| {
        set(&mut c.pipeline.lead_per_tenant_us, v.parse()?)
    }),
    ("TOKI_MAX_LEAD_MS", |c, v| {
        set(&mut c.pipeline.max_lead_ms, v.parse()?)
    }),
    ("TOKI_HORIZON_S", |c, v| {
        set(&mut c.pipeline.horizon_s, v.parse()?)
    }),
    ("TOKI_SCAN_INTERVAL_S", |c, v| {
        set(&mut c.pipeline.scan_interval_s, v.parse()?)
    }),
    ("TOKI_REPAIR_CONCURRENCY", |c, v| {
        set(&mut c.repair.concurrency, v.parse()?)
    }),
    ("TOKI_REPAIR_TENANT_DEADLINE_S", |c, v| {
        set(&mut c.repair.tenant_deadline_s, v.parse()?)
    }),
    ("TOKI_REPAIR_PASS_BUDGET_S", |c, v| {
        set(&mut c.repair.pass_budget_s, v.parse()?)
    }),
    ("TOKI_WORKERS", |c, v| {
        set(&mut c.daemon.workers, v.parse()?)
    }),
    ("TOKI_MAX_RECEIVES", |c, v| {
        set(&mut c.daemon.max_receives, v.parse()?)
    }),
    ("TOKI_VISIBILITY_TIMEOUT_S", |c, v| {
        set(&mut c.daemon.visibility_timeout_s, v.parse()?)
    }),
    ("TOKI_EVENTS_POLL_MS", |c, v| {
        set(&mut c.daemon.events_poll_ms, v.parse()?)
    }),
    ("TOKI_EVENTS_WINDOW_H", |c, v| {
        set(&mut c.daemon.events_window_h, v.parse()?)
    }),
    ("TOKI_EVENTS_REPLAY_RATE", |c, v| {
        set(&mut c.daemon.events_replay_rate, v.parse()?)
    }),
    ("TOKI_EVENTS_REPLAY_BURST", |c, v| {
        set(&mut c.daemon.events_replay_burst, v.parse()?)
    }),
    ("TOKI_RETRY_BASE_MS", |c, v| {
        set(&mut c.daemon.retry_base_ms, v.parse()?)
    }),
    ("TOKI_MAX_BACKOFF_S", |c, v| {
        set(&mut c.daemon.max_backoff_s, v.parse()?)
    }),
    ("TOKI_MAX_FAILURES", |c, v| {
        set(&mut c.daemon.max_failures, v.parse()?)
    }),
    ("TOKI_BREAKER_PROBE_MS", |c, v| {
        set(&mut c.daemon.breaker_probe_ms, v.parse()?)
    }),
    ("TOKI_RECONCILE_TAKEOVERS", |c, v| {
        set(&mut c.daemon.reconcile_takeovers, v.parse()?)
    }),
    ("TOKI_LATE_CHANGE_CUTOFF_MS", |c, v| {
        set(&mut c.daemon.late_change_cutoff_ms, v.parse()?)
    }),
    ("TOKI_HTTP_HEADER_READ_TIMEOUT_MS", |c, v| {
        set(&mut c.http.header_read_timeout_ms, v.parse()?)
    }),
    ("TOKI_HTTP_BODY_READ_TIMEOUT_MS", |c, v| {
        set(&mut c.http.body_read_timeout_ms, v.parse()?)
    }),
    ("TOKI_AUTH_FAILURE_BURST", |c, v| {
        set(&mut c.http.auth_failure_burst, v.parse()?)
    }),
    ("TOKI_AUTH_FAILURE_RATE", |c, v| {
        set(&mut c.http.auth_failure_rate, v.parse()?)
    }),
    ("TOKI_HTTP_MAX_CONNECTIONS", |c, v| {
        set(&mut c.http.max_connections, v.parse()?)
    }),
    ("TOKI_SMTP_URL", |c, v| {
        set(&mut c.mail.smtp_url, Some(v.text.into()))
    }),
    ("TOKI_MAIL_TRANSPORT", |c, v| {
        set(&mut c.mail.transport, Some(v.parse()?))
    }),
    ("TOKI_SES_CONFIGURATION_SET", |c, v| {
        set(&mut c.mail.ses_configuration_set, Some(v.text))
    }),
    ("TOKI_SMTP_CONNECTIONS", |c, v| {
        set(&mut c.mail.connections, v.parse()?)
    }),
    ("TOKI_SMTP_TIMEOUT_S", |c, v| {
        set(&mut c.mail.timeout_s, v.parse()?)
    }),
    ("TOKI_MAIL_FROM", |c, v| set(&mut c.mail.from, v.text)),
    ("TOKI_SLACK_TOKEN", |c, v| {
        set(&mut c.slack.token, Some(v.text.into()))
    }),
    ("TOKI_SLACK_CONCURRENCY", |c, v| {
        set(&mut c.slack.concurrency, v.parse()?)
    }),
    ("TOKI_SLACK_HTTP2_PRIOR_KNOWLEDGE", |c, v| {
        set(&mut c.slack.http2_prior_knowledge, v.parse()?)
    }),
    ("TOKI_WEBHOOK_CONCURRENCY", |c, v| {
        set(&mut c.webhook.concurrency, v.parse()?)
    }),
    ("TOKI_WEBHOOK_PER_HOST", |c, v| {
        set(&mut c.webhook.per_host, v.parse()?)
    }),
    ("TOKI_WEBHOOK_TIMEOUT_MS", |c, v| {
        set(&mut c.webhook.timeout_ms, v.parse()?)
    }),
    // Comma-separated ranges: `127.0.0.1/32,fd00::/8`.
    ("TOKI_WEBHOOK_ALLOW_ADDRESSES", |c, v| {
        let ranges = v
            .text
            .split(',')
            .filter(|r| !r.trim().is_empty())
            .map(|r| {
                r.parse()
                    .map_err(|e| anyhow::anyhow!("TOKI_WEBHOOK_ALLOW_ADDRESSES: {e}"))
            })
            .collect::<anyhow::Result<_>>()?;
        set(&mut c.webhook.allow_addresses, ranges)
    }),
    ("TOKI_WEBHOOK_ALLOW_HTTP", |c, v| {
        set(&mut c.webhook.allow_http, v.parse()?)
    }),
    // Comma-separated ports and ranges: `8443,9000-9100`.
    ("TOKI_WEBHOOK_ALLOW_PORTS", |c, v| {
        let ports = v
            .text
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .map(|p| {
                p.parse()
                    .map_err(|e| anyhow::anyhow!("TOKI_WEBHOOK_ALLOW_PORTS: {e}"))
            })
            .collect::<anyhow::Result<_>>()?;
        set(&mut c.webhook.allow_ports, ports)
    }),
    // JSON, the whole table: {"slack:T0123": {"rate": 50, "burst": 10}};
    // `{}` turns every limit off.
    ("TOKI_FLOW_LIMITS", |c, v| {
        let limits =
            serde_json::from_str(&v.text).map_err(|e| anyhow::anyhow!("TOKI_FLOW_LIMITS: {e}"))?;
        set(&mut c.flow.limits, limits)
    }),
    ("TOKI_SLACK_WORKSPACE", |c, v| {
        set(&mut c.flow.slack_workspace, v.text)
    }),
    ("TOKI_FLOW_PARTITIONS", |c, v| {
        set(&mut c.flow.partitions, v.parse()?)
    }),
    ("TOKI_FLOW_MAX_WAIT_MS", |c, v| {
        set(&mut c.flow.max_wait_ms, v.parse()?)
    }),
    ("TOKI_API_RATE", |c, v| {
        set(&mut c.api_quota.rate, PerSecond(v.parse()?))
    }),
    ("TOKI_API_BURST", |c, v| {
        set(&mut c.api_quota.burst, v.parse()?)
    }),
    ("TOKI_API_CONCURRENCY", |c, v| {
        set(&mut c.api_quota.concurrency, v.parse()?)
    }),
    ("TOKI_MAX_SCHEDULES", |c, v| {
        set(&mut c.caps.max_schedules, Cap(v.parse()?))
    }),
    ("TOKI_MAX_USERS", |c, v| {
        set(&mut c.caps.max_users, Cap(v.parse()?))
    }),
    ("TOKI_MAX_TEMPLATES", |c, v| {
        set(&mut c.caps.max_templates, Cap(v.parse()?))
    }),
    ("TOKI_MAX_SUPPRESSIONS", |c, v| {
        set(&mut c.caps.max_suppressions, Cap(v.parse()?))
    }),
    ("TOKI_MAX_EVENT_ENDPOINTS", |c, v| {
        set(&mut c.caps.max_event_endpoints, Cap(v.parse()?))
    }),
    ("TOKI_MAX_IDEMPOTENCY_KEYS", |c, v| {
        set(&mut c.caps.max_idempotency_keys, Cap(v.parse()?))
    }),
    ("TOKI_MAX_AUDIT_ENTRIES", |c, v| {
        set(&mut c.caps.max_audit_entries, Cap(v.parse()?))
    }),
    ("TOKI_MAX_EVENTS", |c, v| {
        set(&mut c.caps.max_events, Cap(v.parse()?))
    }),
    ("TOKI_SLACK_API_URL", |c, v| {
        set(&mut c.slack.api_url, v.text)
    }),
    ("TOKI_AWS_ENDPOINT_URL", |c, v| {
        set(&mut c.aws.endpoint_url, Some(v.text))
    }),
    ("TOKI_INDEX_TABLE", |c, v| {
        set(&mut c.aws.index_table, v.text)
    }),
    ("TOKI_DIRECTORY_TABLE", |c, v| {
        set(&mut c.aws.directory_table, v.text)
    }),
    ("TOKI_QUEUE_NAME", |c, v| set(&mut c.aws.queue_name, v.text)),
    ("TOKI_DLQ_NAME", |c, v| set(&mut c.aws.dlq_name, v.text)),
];

/// Applies every `TOKI_*` variable that is set, in [`VARS`]' order.
pub(super) fn apply(config: &mut Config) -> anyhow::Result<()> {
    for &(name, apply) in VARS {
        if let Some(text) = var(name) {
            apply(config, EnvValue { name, text })?;
        }
    }
    Ok(())
}
