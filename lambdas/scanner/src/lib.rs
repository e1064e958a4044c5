//! The Toki scanner as an AWS Lambda: EventBridge invokes it every minute
//! (`rate(1 minute)` in `infra/template.yaml`); each invocation is one scan run
//! over the reminder index (rows due in the next 15 minutes, tenant contracts
//! checked once per run), sending due reminders to the delay queue.
//!
//! The clients (DynamoDB, SQS) are built once per cold start by [`open`]; the
//! handler [`handle`] only runs the scan and reports it.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{Error, LambdaEvent};
use toki::{Config, Toki};
use toki_core::scanner::ScanSummary;

/// What the scheduled rule sends: an EventBridge "Scheduled Event"
/// (`source` = `aws.events`, `detail` = `{}`). Any other EventBridge event is
/// accepted too: whatever triggers the scanner, it scans.
pub type ScheduledEvent = EventBridgeEvent<serde_json::Value>;

/// Loads the configuration from the environment (`TOKI_BACKEND=aws`,
/// `TOKI_INDEX_TABLE`, `TOKI_DIRECTORY_TABLE`, `TOKI_QUEUE_NAME`,
/// `TOKI_DLQ_NAME`, `TOKI_SHARDS`, ...; see `toki::Config`). The scanner never
/// opens a tenant database, so it needs no database template.
pub fn load_config() -> anyhow::Result<Config> {
    Config::load(None)
}

/// Logging for CloudWatch (shared with the other Lambda).
pub fn init_tracing() {
    toki::init_lambda_tracing();
}

/// Builds the ports once per cold start.
pub async fn open(config: Config) -> anyhow::Result<Toki> {
    Toki::open(config).await
}

/// One invocation: one scan run. Returns the run's summary (the Lambda's
/// result, as JSON). A run in which some sends failed is an error (so the
/// function's `Errors` metric and alarm see it); the rows it could not send
/// stay pending in the index and the next run, a minute later, retries them.
pub async fn handle(toki: &Toki, event: LambdaEvent<ScheduledEvent>) -> Result<ScanSummary, Error> {
    let (event, context) = event.into_parts();
    let summary = toki.scanner().scan_once().await?;
    tracing::info!(
        request_id = %context.request_id,
        event_time = ?event.time,
        scanned = summary.scanned,
        pending = summary.pending,
        enqueued = summary.enqueued,
        already_claimed = summary.already_claimed,
        skipped_by_contract = summary.skipped_by_contract,
        failed = summary.failed,
        duration_ms = summary.duration_ms,
        "scanner run"
    );
    if summary.failed > 0 {
        return Err(format!(
            "{} of {} reminders could not be enqueued (left pending for the next run): {}",
            summary.failed,
            summary.pending,
            serde_json::to_string(&summary)?
        )
        .into());
    }
    Ok(summary)
}
