//! The repair pass as an AWS Lambda: EventBridge invokes it every minute
//! (`infra/template.yaml`). A schedule write commits to the tenant database
//! first, with a row saying its index mirror is due (an outbox); when the
//! mirror then fails, the registrar answers 202 and this pass finishes it, so
//! no write is ever silently left out of the index.

use std::time::Duration;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{Error, LambdaEvent};
use toki_app::{Config, Toki};
use toki_core::repair::RepairSummary;

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

/// The pass stops this long before the function's deadline: the cursor is
/// recorded and the figures written before the function is cut off.
const DEADLINE_MARGIN: Duration = Duration::from_secs(5);

/// One invocation: the pass due this minute (`toki_core::repair`): over
/// the tenants whose repair mark is due; ending within the pass budget and before the
/// function's deadline. A pass in which some tenant failed or passed its
/// deadline is an error (the `Errors` alarm sees it); the next pass, a
/// minute later, retries. Deferred tenants are no error: the next pass
/// starts with them.
pub async fn handle(
    toki: &Toki,
    event: LambdaEvent<ScheduledEvent>,
) -> Result<RepairSummary, Error> {
    let (_, context) = event.into_parts();
    let deadline = deadline_of(context.deadline, toki.clock.now().timestamp_millis());
    let summary = toki.registrar().repair_marked(deadline).await?;
    println!(
        "{}",
        toki_app::emf::line(
            &toki.config.environment,
            "repair",
            toki.clock.now().timestamp_millis(),
            &[
                ("Repaired", summary.repaired as f64),
                // Tenants not repaired for a reason of their own: the alarm's metric.
                ("RepairFailed", summary.unfinished_tenants() as f64),
                ("RepairTimedOut", summary.timed_out_tenants as f64),
                ("RepairDeferred", summary.deferred_tenants as f64),
            ],
        )
    );
    tracing::info!(
        request_id = %context.request_id,
        tenants = summary.tenants,
        repaired = summary.repaired,
        failed_tenants = summary.failed_tenants,
        timed_out_tenants = summary.timed_out_tenants,
        deferred_tenants = summary.deferred_tenants,
        "repair pass"
    );
    purge_if_due(toki, deadline).await;
    if summary.unfinished_tenants() > 0 {
        return Err(format!(
            "repair failed for {} and timed out for {} of {} tenants (retried next pass)",
            summary.failed_tenants, summary.timed_out_tenants, summary.tenants
        )
        .into());
    }
    Ok(summary)
}

/// The retention purge of the tenant databases, every few minutes (at the
/// multiples of its period), in what is left of the invocation after the
/// repair. Dead letters are bounded by the DLQ's retention and index rows
/// by DynamoDB's TTL: this purges delivery rows, chat rows and events.
/// A tenant it could not purge is retried at its next pass, not an error.
async fn purge_if_due(toki: &Toki, deadline: Option<tokio::time::Instant>) {
    let purger = toki.purger();
    if !purger.due(toki.clock.now()) {
        return;
    }
    let pass = purger.pass(deadline).await;
    let figure = |kind| pass.purged.get(&kind).copied().unwrap_or(0) as f64;
    use toki_model::retention::RetentionKind as K;
    println!(
        "{}",
        toki_app::emf::line(
            &toki.config.environment,
            "repair",
            toki.clock.now().timestamp_millis(),
            &[
                ("PurgedDeliveries", figure(K::Deliveries)),
                ("PurgedChat", figure(K::Chat)),
                ("PurgedEvents", figure(K::Events)),
                ("PurgeFailed", pass.failed_tenants as f64),
                ("PurgeDeferred", pass.deferred_tenants as f64),
            ],
        )
    );
    tracing::info!(
        tenants = pass.tenants,
        purged = pass.total(),
        failed_tenants = pass.failed_tenants,
        deferred_tenants = pass.deferred_tenants,
        "retention purge pass"
    );
}

/// The Lambda's deadline (`deadline_ms` since the epoch, `now_ms` the time
/// now), less the margin, on tokio's clock; None if the context has none.
pub fn deadline_of(deadline_ms: u64, now_ms: i64) -> Option<tokio::time::Instant> {
    if deadline_ms == 0 {
        return None;
    }
    let left_ms = (deadline_ms as i64).saturating_sub(now_ms).max(0) as u64;
    let left = Duration::from_millis(left_ms).saturating_sub(DEADLINE_MARGIN);
    Some(tokio::time::Instant::now() + left)
}
