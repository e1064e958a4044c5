//! The Toki scanner as an AWS Lambda: EventBridge invokes it every minute
//! (`rate(1 minute)` in `infra/template.yaml`); each invocation is one scan run
//! over the reminder index (rows due in the next 15 minutes, tenant contracts
//! checked once per run), sending due reminders to the delay queue.
//!
//! The clients (DynamoDB, SQS) are built once per cold start by [`open`]; the
//! handler [`handle`] only runs the scan and reports it.

use std::time::Duration;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{Error, LambdaEvent};
use toki_app::{Config, Toki};
use toki_core::scanner::ScanSummary;

/// What the scheduled rule sends: an EventBridge "Scheduled Event"
/// (`source` = `aws.events`, `detail` = `{}`). Any other EventBridge event is
/// accepted too: whatever triggers the scanner, it scans.
pub type ScheduledEvent = EventBridgeEvent<serde_json::Value>;

/// Loads the configuration from the environment (`TOKI_BACKEND=aws`,
/// `TOKI_INDEX_TABLE`, `TOKI_DIRECTORY_TABLE`, `TOKI_QUEUE_NAME`,
/// `TOKI_DLQ_NAME`, `TOKI_SHARDS`, ...; see `toki_app::Config`). The scanner never
/// opens a tenant database, so it needs no database template.
pub fn load_config() -> anyhow::Result<Config> {
    Config::load(None)
}

/// Logging for CloudWatch (shared with the other Lambda).
pub fn init_tracing() {
    toki_app::init_lambda_tracing();
}

/// Builds the ports once per cold start.
pub async fn open(config: Config) -> anyhow::Result<Toki> {
    Toki::open(config).await
}

/// Nothing new is claimed this long before the function's deadline: the
/// claims made are sent and marked before the run is cut off.
const DEADLINE_MARGIN: Duration = Duration::from_secs(10);

/// One invocation: one scan run, claiming nothing new once the deadline (less
/// a margin) is near. Writes the run's figures as an embedded-metric line.
/// A run in which a partition query, a contract lookup or a send failed is an
/// error (the function's `Errors` metric and alarm see it, and the
/// `FailedPartitions` metric names the cause); what it could not do stays
/// pending in the index for the next run, a minute later.
pub async fn handle(toki: &Toki, event: LambdaEvent<ScheduledEvent>) -> Result<ScanSummary, Error> {
    let (event, context) = event.into_parts();
    let deadline = deadline_of(context.deadline);
    let summary = toki.scanner().scan(deadline).await?;
    println!(
        "{}",
        toki_app::emf::line(
            &toki.config.environment,
            "scanner",
            toki.clock.now().timestamp_millis(),
            &[
                ("Scanned", summary.scanned as f64),
                ("Enqueued", summary.enqueued as f64),
                ("Failed", summary.failed as f64),
                ("FailedPartitions", summary.failed_partitions as f64),
                ("Deferred", summary.deferred as f64),
            ],
        )
    );
    tracing::info!(
        request_id = %context.request_id,
        event_time = ?event.time,
        scanned = summary.scanned,
        pending = summary.pending,
        enqueued = summary.enqueued,
        already_claimed = summary.already_claimed,
        skipped_by_contract = summary.skipped_by_contract,
        failed = summary.failed,
        failed_partitions = summary.failed_partitions,
        deferred = summary.deferred,
        duration_ms = summary.duration_ms,
        "scanner run"
    );
    if summary.had_failures() {
        return Err(format!(
            "scanner run failed: {} rows not enqueued, {} partitions not read (left for the next run): {}",
            summary.failed,
            summary.failed_partitions,
            serde_json::to_string(&summary)?
        )
        .into());
    }
    Ok(summary)
}

/// The Lambda's deadline (ms since the epoch), less the margin, on tokio's clock.
pub fn deadline_of(deadline_ms: u64) -> Option<tokio::time::Instant> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_millis() as u64;
    let left = Duration::from_millis(deadline_ms.checked_sub(now_ms)?);
    Some(tokio::time::Instant::now() + left.saturating_sub(DEADLINE_MARGIN))
}
