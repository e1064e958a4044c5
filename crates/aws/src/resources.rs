//! Creating the AWS resources Toki needs, if they do not exist: the index and
//! directory tables, the queue and its dead-letter queue.

use std::collections::HashMap;
use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, CreateGlobalSecondaryIndexAction, GlobalSecondaryIndex,
    GlobalSecondaryIndexUpdate, IndexStatus, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, TableStatus, TimeToLiveSpecification, TimeToLiveStatus,
};
use aws_sdk_sqs::types::QueueAttributeName;

use crate::error::{code_of, sdk, AwsError};
use crate::index::BY_SCHEDULE_INDEX;

/// Names and settings of Toki's AWS resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsNames {
    pub index_table: String,
    pub directory_table: String,
    pub queue_name: String,
    pub dlq_name: String,
    /// Receives after which a message moves to the dead-letter queue.
    pub max_receives: u32,
    /// The queue's default visibility timeout.
    pub visibility_timeout_s: u32,
}

impl Default for AwsNames {
    /// The names `localstack/init-aws.sh` and the templates use.
    fn default() -> Self {
        Self {
            index_table: "toki-reminders".into(),
            directory_table: "toki-tenants".into(),
            queue_name: "toki-reminders".into(),
            dlq_name: "toki-reminders-dlq".into(),
            max_receives: 100,
            visibility_timeout_s: 60,
        }
    }
}

/// How long to wait for a table (and its indexes) to become ACTIVE.
const TABLE_WAIT: Duration = Duration::from_secs(300);
/// The dead-letter queue keeps messages as long as SQS allows (14 days).
const DLQ_RETENTION_S: &str = "1209600";

/// The SDK configuration from the standard AWS environment (AWS_ENDPOINT_URL,
/// AWS_REGION, credentials, profiles), with `endpoint_url` and `region`, when
/// given, taking precedence.
pub async fn sdk_config(endpoint_url: Option<&str>, region: Option<&str>) -> SdkConfig {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    let https = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).http_client(https);
    if let Some(url) = endpoint_url.filter(|u| !u.is_empty()) {
        loader = loader.endpoint_url(url);
    }
    if let Some(region) = region.filter(|r| !r.is_empty()) {
        loader = loader.region(Region::new(region.to_owned()));
    }
    loader.load().await
}

/// Creates whatever is missing (tables, GSI, TTL, queues, redrive policy),
/// waits until the tables are ACTIVE, and returns the queue's URL. Running it
/// again changes nothing but the queue's redrive policy and visibility
/// timeout, which it sets to `names`.
pub async fn ensure_resources(sdk: &SdkConfig, names: &AwsNames) -> Result<String, AwsError> {
    let dynamo = aws_sdk_dynamodb::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    ensure_index_table(&dynamo, &names.index_table).await?;
    ensure_directory_table(&dynamo, &names.directory_table).await?;
    ensure_queue(
        &sqs,
        &names.queue_name,
        &names.dlq_name,
        names.max_receives,
        names.visibility_timeout_s,
    )
    .await
}

fn key(name: &str, kind: KeyType) -> Result<KeySchemaElement, AwsError> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .map_err(|e| AwsError::service("CreateTable", e.to_string()))
}

fn string_attr(name: &str) -> Result<AttributeDefinition, AwsError> {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(|e| AwsError::service("CreateTable", e.to_string()))
}

fn by_schedule_key() -> Result<Vec<KeySchemaElement>, AwsError> {
    Ok(vec![
        key("sched", KeyType::Hash)?,
        key("sk", KeyType::Range)?,
    ])
}

fn keys_only() -> Projection {
    Projection::builder()
        .projection_type(ProjectionType::KeysOnly)
        .build()
}

/// The reminder index table: `pk`/`sk`, GSI `by_schedule` (`sched`, `sk`), TTL on `expires_at`.
pub async fn ensure_index_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<(), AwsError> {
    let gsi = GlobalSecondaryIndex::builder()
        .index_name(BY_SCHEDULE_INDEX)
        .set_key_schema(Some(by_schedule_key()?))
        .projection(keys_only())
        .build()
        .map_err(|e| AwsError::service("CreateTable", e.to_string()))?;
    let created = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(string_attr("pk")?)
        .attribute_definitions(string_attr("sk")?)
        .attribute_definitions(string_attr("sched")?)
        .key_schema(key("pk", KeyType::Hash)?)
        .key_schema(key("sk", KeyType::Range)?)
        .global_secondary_indexes(gsi)
        .send()
        .await;
    match created {
        Ok(_) => tracing::info!(table, "created the reminder index table"),
        Err(e) if code_of(&e) == Some("ResourceInUseException") => {
            // It exists: add the GSI if an older version created it without.
            let desc = describe(client, table).await?;
            let has_gsi = desc
                .global_secondary_indexes()
                .iter()
                .any(|g| g.index_name() == Some(BY_SCHEDULE_INDEX));
            if !has_gsi {
                wait_active(client, table).await?;
                let action = CreateGlobalSecondaryIndexAction::builder()
                    .index_name(BY_SCHEDULE_INDEX)
                    .set_key_schema(Some(by_schedule_key()?))
                    .projection(keys_only())
                    .build()
                    .map_err(|e| AwsError::service("UpdateTable", e.to_string()))?;
                client
                    .update_table()
                    .table_name(table)
                    .attribute_definitions(string_attr("sched")?)
                    .attribute_definitions(string_attr("sk")?)
                    .global_secondary_index_updates(
                        GlobalSecondaryIndexUpdate::builder().create(action).build(),
                    )
                    .send()
                    .await
                    .map_err(|e| sdk("UpdateTable", e))?;
                tracing::info!(table, "added the {BY_SCHEDULE_INDEX} index");
            }
        }
        Err(e) => return Err(sdk("CreateTable", e)),
    }
    wait_active(client, table).await?;
    ensure_ttl(client, table, "expires_at").await;
    Ok(())
}

/// The tenant directory table: partition key `tenant`.
pub async fn ensure_directory_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<(), AwsError> {
    let created = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(string_attr("tenant")?)
        .key_schema(key("tenant", KeyType::Hash)?)
        .send()
        .await;
    match created {
        Ok(_) => tracing::info!(table, "created the tenant directory table"),
        Err(e) if code_of(&e) == Some("ResourceInUseException") => {}
        Err(e) => return Err(sdk("CreateTable", e)),
    }
    wait_active(client, table).await
}

async fn describe(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<aws_sdk_dynamodb::types::TableDescription, AwsError> {
    client
        .describe_table()
        .table_name(table)
        .send()
        .await
        .map_err(|e| sdk("DescribeTable", e))?
        .table
        .ok_or_else(|| AwsError::service("DescribeTable", format!("no description of {table}")))
}

/// Waits until the table and all its GSIs are ACTIVE.
async fn wait_active(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<(), AwsError> {
    let deadline = tokio::time::Instant::now() + TABLE_WAIT;
    let mut pause = Duration::from_millis(100);
    loop {
        let desc = describe(client, table).await?;
        let table_ok = desc.table_status() == Some(&TableStatus::Active);
        let gsis_ok = desc
            .global_secondary_indexes()
            .iter()
            .all(|g| !matches!(g.index_status(), Some(s) if *s != IndexStatus::Active));
        if table_ok && gsis_ok {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(AwsError::Unavailable {
                operation: "DescribeTable",
                message: format!(
                    "{table} not ACTIVE after {} s (status {:?})",
                    TABLE_WAIT.as_secs(),
                    desc.table_status()
                ),
            });
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// Enables TTL on `attribute` where the service supports it; failures are
/// logged, not fatal (rows are filtered on their expiry when read anyway).
async fn ensure_ttl(client: &aws_sdk_dynamodb::Client, table: &str, attribute: &str) {
    let current = client
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await;
    if let Ok(resp) = &current {
        if let Some(d) = resp.time_to_live_description() {
            if matches!(
                d.time_to_live_status(),
                Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
            ) {
                return;
            }
        }
    }
    let spec = match TimeToLiveSpecification::builder()
        .enabled(true)
        .attribute_name(attribute)
        .build()
    {
        Ok(spec) => spec,
        Err(e) => {
            tracing::warn!(table, "TTL not enabled: {e}");
            return;
        }
    };
    match client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(spec)
        .send()
        .await
    {
        Ok(_) => tracing::info!(table, attribute, "enabled TTL"),
        Err(e) => tracing::warn!(table, "TTL not enabled: {}", sdk("UpdateTimeToLive", e)),
    }
}

/// The queue URL of `name`, if it exists.
async fn queue_url(client: &aws_sdk_sqs::Client, name: &str) -> Result<Option<String>, AwsError> {
    match client.get_queue_url().queue_name(name).send().await {
        Ok(r) => Ok(r.queue_url),
        Err(e)
            if e.as_service_error()
                .is_some_and(|se| se.is_queue_does_not_exist())
                || code_of(&e).is_some_and(|c| c.contains("NonExistentQueue")) =>
        {
            Ok(None)
        }
        Err(e) => Err(sdk("GetQueueUrl", e)),
    }
}

/// Creates the queue `name` with `attributes`, or sets them if it exists.
async fn create_or_update_queue(
    client: &aws_sdk_sqs::Client,
    name: &str,
    attributes: HashMap<QueueAttributeName, String>,
) -> Result<String, AwsError> {
    if let Some(url) = queue_url(client, name).await? {
        client
            .set_queue_attributes()
            .queue_url(&url)
            .set_attributes(Some(attributes))
            .send()
            .await
            .map_err(|e| sdk("SetQueueAttributes", e))?;
        return Ok(url);
    }
    let url = client
        .create_queue()
        .queue_name(name)
        .set_attributes(Some(attributes))
        .send()
        .await
        .map_err(|e| sdk("CreateQueue", e))?
        .queue_url
        .ok_or_else(|| AwsError::service("CreateQueue", "no QueueUrl in the answer"))?;
    tracing::info!(queue = name, "created the queue");
    Ok(url)
}

/// The dead-letter queue `dlq_name` and the queue `name` redriving to it after
/// `max_receives` receives; returns the queue's URL.
pub async fn ensure_queue(
    client: &aws_sdk_sqs::Client,
    name: &str,
    dlq_name: &str,
    max_receives: u32,
    visibility_timeout_s: u32,
) -> Result<String, AwsError> {
    let dlq_url = create_or_update_queue(
        client,
        dlq_name,
        HashMap::from([(
            QueueAttributeName::MessageRetentionPeriod,
            DLQ_RETENTION_S.to_owned(),
        )]),
    )
    .await?;
    let dlq_arn = client
        .get_queue_attributes()
        .queue_url(&dlq_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| sdk("GetQueueAttributes", e))?
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .ok_or_else(|| {
            AwsError::service("GetQueueAttributes", format!("no QueueArn for {dlq_name}"))
        })?;
    let redrive = serde_json::json!({
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": max_receives.max(1).to_string(),
    })
    .to_string();
    create_or_update_queue(
        client,
        name,
        HashMap::from([
            (QueueAttributeName::RedrivePolicy, redrive),
            (
                QueueAttributeName::VisibilityTimeout,
                visibility_timeout_s.to_string(),
            ),
        ]),
    )
    .await
}
