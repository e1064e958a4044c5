//! The repair pass as an AWS Lambda: EventBridge invokes it every minute
//! (`infra/template.yaml`). A schedule write commits to the tenant database
//! first, with a row saying its index mirror is due (an outbox); when the
//! mirror then fails, the registrar answers 202 and this pass finishes it, so
//! no write is ever silently left out of the index.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{Error, LambdaEvent};
use toki_app::{Config, Toki};
use toki_core::registrar::RepairSummary;

pub type ScheduledEvent = EventBridgeEvent<serde_json::Value>;

/// The configuration from the environment (see `toki_app::Config`).
pub fn load_config() -> anyhow::Result<Config> {
    Config::load(None)
}

/// Builds the ports once per cold start (the database credentials are read
/// from Secrets Manager here).
pub async fn open(config: Config) -> anyhow::Result<Toki> {
    Toki::open(config).await
}

/// One invocation: one pass over every tenant. A pass in which some tenant
/// could not be repaired is an error (the `Errors` alarm sees it); the next
/// pass, a minute later, retries.
pub async fn handle(
    toki: &Toki,
    event: LambdaEvent<ScheduledEvent>,
) -> Result<RepairSummary, Error> {
    let (_, context) = event.into_parts();
    let summary = toki.registrar().repair_all().await?;
    println!(
        "{}",
        toki_app::emf::line(
            &toki.config.environment,
            "repair",
            toki.clock.now().timestamp_millis(),
            &[
                ("Repaired", summary.repaired as f64),
                ("RepairFailed", summary.failed_tenants as f64),
            ],
        )
    );
    tracing::info!(
        request_id = %context.request_id,
        tenants = summary.tenants,
        repaired = summary.repaired,
        failed_tenants = summary.failed_tenants,
        "repair pass"
    );
    if summary.failed_tenants > 0 {
        return Err(format!(
            "repair failed for {} of {} tenants (retried next pass)",
            summary.failed_tenants, summary.tenants
        )
        .into());
    }
    Ok(summary)
}
