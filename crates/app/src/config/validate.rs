//! The configuration's checks, section by section in a fixed order (the
//! first that fails is the error), and the defaults that follow from the
//! rest (SES's flow account, a tenant database template from `DATABASE_URL`).

use std::time::Duration;

use anyhow::bail;

use super::env::var;
use super::types::{BackendKind, Config, MailTransport};

/// Checks `config`, filling in what follows from the rest.
pub(super) fn validate(config: &mut Config) -> anyhow::Result<()> {
    flow(config)?;
    config
        .api_quota
        .validate("api_quota")
        .map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.problem))?;
    pipeline(config)?;
    repair(config)?;
    daemon_capacity(config)?;
    mail(config)?;
    webhook(config)?;
    daemon_failures(config)?;
    databases(config)?;
    http(config)?;
    events_replay(config)?;
    default_tenant_database_template(config);
    Ok(())
}

/// The pace of replayed delivery events.
fn events_replay(config: &Config) -> anyhow::Result<()> {
    let d = &config.daemon;
    if !(d.events_replay_rate > 0.0 && d.events_replay_rate <= 10_000.0) {
        bail!(
            "daemon.events_replay_rate: {} is out of range (0, 10000] events a second",
            d.events_replay_rate
        );
    }
    if !(1..=100_000).contains(&d.events_replay_burst) {
        bail!(
            "daemon.events_replay_burst: {} is out of range 1..=100000",
            d.events_replay_burst
        );
    }
    Ok(())
}

/// The listeners' read timeouts and connections.
fn http(config: &Config) -> anyhow::Result<()> {
    let h = &config.http;
    for (name, ms) in [
        ("header_read_timeout_ms", h.header_read_timeout_ms),
        ("body_read_timeout_ms", h.body_read_timeout_ms),
    ] {
        if !(100..=600_000).contains(&ms) {
            bail!("http.{name}: {ms} is out of range 100..=600000");
        }
    }
    let rate = h.auth_failure_rate;
    if h.auth_failure_burst == 0 || rate.is_nan() || rate <= 0.0 {
        bail!(
            "http.auth_failure_burst and auth_failure_rate: {} and {} must be above 0",
            h.auth_failure_burst,
            h.auth_failure_rate
        );
    }
    if !(1..=65_536).contains(&h.max_connections) {
        bail!(
            "http.max_connections: {} is out of range 1..=65536",
            h.max_connections
        );
    }
    Ok(())
}

/// The flow limits; with SES, its account's (`smtp:ses`) unless one is named.
fn flow(config: &mut Config) -> anyhow::Result<()> {
    if config.mail.effective_transport() == MailTransport::Ses
        && config.flow.smtp_account == "default"
    {
        // SES's sending rate is the account's: the smtp:ses limit.
        config.flow.smtp_account = "ses".into();
    }
    config
        .flow
        .validate()
        .map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.problem))
}

/// Shards, the scan window and interval, the recurrence horizon.
fn pipeline(config: &Config) -> anyhow::Result<()> {
    let p = &config.pipeline;
    if p.shards == 0 || p.shards > 1000 {
        bail!("pipeline.shards: {} is out of range 1..=1000", p.shards);
    }
    if p.window_s == 0 || p.window_s > 900 {
        bail!(
            "pipeline.window_s: {} is out of range 1..=900 (the SQS delay limit)",
            p.window_s
        );
    }
    // At least an hour: the repair pass (every minute) extends a series
    // at half of it, well before its next reminders are due.
    if !(3600..=366 * 86_400).contains(&p.horizon_s) {
        bail!(
            "pipeline.horizon_s: {} is out of range 3600..=31622400 (an hour to a year)",
            p.horizon_s
        );
    }
    if p.scan_interval_s == 0 || p.scan_interval_s > p.window_s {
        bail!(
            "pipeline.scan_interval_s: {} must be 1..=window_s ({})",
            p.scan_interval_s,
            p.window_s
        );
    }
    Ok(())
}

/// The repair pass's concurrency, and a tenant deadline within the pass budget.
fn repair(config: &Config) -> anyhow::Result<()> {
    let r = &config.repair;
    if !(1..=256).contains(&r.concurrency) {
        bail!(
            "repair.concurrency: {} is out of range 1..=256",
            r.concurrency
        );
    }
    if r.pass_budget_s == 0 {
        bail!("repair.pass_budget_s: must be at least 1");
    }
    if r.tenant_deadline_s == 0 || r.tenant_deadline_s > r.pass_budget_s {
        bail!(
            "repair.tenant_deadline_s: {} must be 1..=pass_budget_s ({})",
            r.tenant_deadline_s,
            r.pass_budget_s
        );
    }
    Ok(())
}

/// The daemon's workers, and a lead shorter than a message's visibility.
fn daemon_capacity(config: &Config) -> anyhow::Result<()> {
    if config.daemon.workers == 0 || config.daemon.workers > 1024 {
        bail!(
            "daemon.workers: {} is out of range 1..=1024",
            config.daemon.workers
        );
    }
    if Duration::from_millis(config.pipeline.lead_ms)
        >= Duration::from_secs(config.daemon.visibility_timeout_s)
    {
        bail!(
            "pipeline.lead_ms: {} ms must be shorter than daemon.visibility_timeout_s ({} s)",
            config.pipeline.lead_ms,
            config.daemon.visibility_timeout_s
        );
    }
    crowded_lead(&config.pipeline)
}

/// The longest lead: no shorter than the plain one, and well within the
/// queue's 15-minute delay (a message visible earlier is held in memory).
fn crowded_lead(p: &super::types::PipelineConfig) -> anyhow::Result<()> {
    if p.max_lead_ms < p.lead_ms || p.max_lead_ms > MAX_LEAD_MS {
        bail!(
            "pipeline.max_lead_ms: {} ms is out of range pipeline.lead_ms ({} ms) ..= {MAX_LEAD_MS} ms",
            p.max_lead_ms,
            p.lead_ms
        );
    }
    if p.lead_per_tenant_us > MAX_LEAD_PER_TENANT_US {
        bail!(
            "pipeline.lead_per_tenant_us: {} µs is over {MAX_LEAD_PER_TENANT_US} µs",
            p.lead_per_tenant_us
        );
    }
    Ok(())
}

/// The longest `pipeline.max_lead_ms` (5 minutes).
const MAX_LEAD_MS: u64 = 300_000;
/// The largest `pipeline.lead_per_tenant_us` (1 s a tenant).
const MAX_LEAD_PER_TENANT_US: u64 = 1_000_000;

/// The webhook channel's requests in flight and timeout.
fn webhook(config: &Config) -> anyhow::Result<()> {
    let w = &config.webhook;
    if !(1..=4096).contains(&w.concurrency) {
        bail!(
            "webhook.concurrency: {} is out of range 1..=4096",
            w.concurrency
        );
    }
    if !(1..=w.concurrency).contains(&w.per_host) {
        bail!(
            "webhook.per_host: {} is out of range 1..=webhook.concurrency ({})",
            w.per_host,
            w.concurrency
        );
    }
    if !(100..=60_000).contains(&w.timeout_ms) {
        bail!(
            "webhook.timeout_ms: {} is out of range 100..=60000",
            w.timeout_ms
        );
    }
    Ok(())
}

/// SMTP sessions, and a transport that agrees with `smtp_url`.
fn mail(config: &Config) -> anyhow::Result<()> {
    let m = &config.mail;
    if !(1..=1000).contains(&m.connections) {
        bail!(
            "mail.connections: {} is out of range 1..=1000 (SMTP sessions per daemon)",
            m.connections
        );
    }
    match (m.transport, &m.smtp_url) {
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
        _ => Ok(()),
    }
}

/// The failure budget, the queue's own redrive beyond it, the late-change
/// cut-off and the circuit breaker.
fn daemon_failures(config: &Config) -> anyhow::Result<()> {
    let d = &config.daemon;
    if d.max_failures == 0 {
        bail!("daemon.max_failures: must be at least 1");
    }
    if d.max_receives <= d.max_failures {
        bail!(
            "daemon.max_receives: {} must exceed daemon.max_failures ({}): the queue's own redrive is a backstop, the daemon's budget decides",
            d.max_receives,
            d.max_failures
        );
    }
    if d.late_change_cutoff_ms > config.pipeline.lead_ms {
        bail!(
            "daemon.late_change_cutoff_ms: {} ms must not exceed pipeline.lead_ms ({} ms): the last look happens while the message is held",
            d.late_change_cutoff_ms,
            config.pipeline.lead_ms
        );
    }
    if d.breaker_threshold == 0 {
        bail!("daemon.breaker_threshold: must be at least 1");
    }
    Ok(())
}

/// The tenant databases' templates, TLS mode and credentials.
fn databases(config: &Config) -> anyhow::Result<()> {
    if let Some(t) = &config.tenant_database_template {
        if !t.expose().contains("{tenant}") {
            bail!("tenant_database_template: has no {{tenant}} placeholder");
        }
    }
    let db = &config.database;
    if !db.name_template.contains("{tenant}") {
        bail!(
            "database.name_template: {:?} has no {{tenant}} placeholder",
            db.name_template
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
    if !SSLMODES.contains(&db.sslmode.as_str()) {
        bail!(
            "database.sslmode: {:?} is not one of {}",
            db.sslmode,
            SSLMODES.join(", ")
        );
    }
    if db.max_connections == 0 {
        bail!("database.max_connections (TOKI_DATABASE_MAX_CONNECTIONS): must be at least 1");
    }
    if !(1..=100_000).contains(&db.max_open_tenants) {
        bail!(
            "database.max_open_tenants (TOKI_DATABASE_MAX_OPEN_TENANTS): {} is out of range 1..=100000",
            db.max_open_tenants
        );
    }
    if db.host.is_some() && db.secret_arn.is_none() {
        bail!("database.secret_arn (TOKI_DATABASE_SECRET_ARN): needed with database.host, for the credentials");
    }
    Ok(())
}

/// On the aws backend with neither a template nor a server: tenant
/// databases beside `DATABASE_URL`'s, if it is set.
fn default_tenant_database_template(config: &mut Config) {
    if config.backend != BackendKind::Aws
        || config.tenant_database_template.is_some()
        || config.database.host.is_some()
    {
        return;
    }
    // A Postgres server under which tenant databases are created. Without
    // either, only processes that never open a tenant database (the
    // scanner) can run; the others fail when they first need one.
    if let Some(url) = var("DATABASE_URL") {
        let (server, _) = url.rsplit_once('/').unwrap_or((url.as_str(), ""));
        let query = url
            .split_once('?')
            .map(|(_, q)| format!("?{q}"))
            .unwrap_or_default();
        config.tenant_database_template = Some(format!("{server}/toki_{{tenant}}{query}").into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repair_defaults_pass_and_a_deadline_past_the_budget_is_named() {
        let mut config = Config::default();
        repair(&config).unwrap();
        assert_eq!(
            config.pipeline_settings().repair,
            toki_core::settings::RepairSettings::default()
        );
        config.repair.tenant_deadline_s = config.repair.pass_budget_s + 1;
        let e = repair(&config).unwrap_err().to_string();
        assert!(e.starts_with("repair.tenant_deadline_s: 51"), "{e}");
        config.repair.tenant_deadline_s = 20;
        config.repair.concurrency = 0;
        let e = repair(&config).unwrap_err().to_string();
        assert!(e.starts_with("repair.concurrency: 0"), "{e}");
    }

    /// `[webhook] allow_ports`: numbers or ranges, into the egress policy;
    /// 443 only by default.
    #[test]
    fn the_operator_allows_ports_besides_443() {
        let policy = Config::default().webhook.egress_policy();
        assert!(policy.admits_port(443) && !policy.admits_port(8443));
        let config: Config =
            toml::from_str("[webhook]\nallow_ports = [8443, \"9000-9100\"]\n").unwrap();
        let policy = config.webhook.egress_policy();
        assert!(policy.admits_port(8443) && policy.admits_port(9050));
        assert!(!policy.admits_port(80) && !policy.admits_port(9101));
        let bad = toml::from_str::<Config>("[webhook]\nallow_ports = [\"9100-9000\"]\n");
        assert!(bad.unwrap_err().to_string().contains("9100"), "named");
    }
}
