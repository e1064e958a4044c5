//! The AWS backend family: DynamoDB reminder index and tenant directory, SQS
//! delay queue, tenant databases on Postgres (one per tenant).

use std::sync::Arc;

use anyhow::Context;
use toki_aws::{
    ensure_resources, sdk_config, AwsNames, DynamoReminderIndex, DynamoTenantDirectory,
    SqsDelayQueue,
};
use toki_core::ports::{SystemClock, TenantDirectory};
use toki_sql::{Locator, SqlTenantStores};

use crate::app::Toki;
use crate::config::Config;

pub fn names(config: &Config) -> AwsNames {
    AwsNames {
        index_table: config.aws.index_table.clone(),
        directory_table: config.aws.directory_table.clone(),
        queue_name: config.aws.queue_name.clone(),
        dlq_name: config.aws.dlq_name.clone(),
        max_receives: config.daemon.max_receives,
        visibility_timeout_s: config.daemon.visibility_timeout_s as u32,
    }
}

pub async fn open(config: Config) -> anyhow::Result<Toki> {
    let sdk = sdk_config(
        config.aws.endpoint_url.as_deref(),
        config.aws.region.as_deref(),
    )
    .await;
    let names = names(&config);
    let sqs = toki_aws::aws_sdk_sqs::Client::new(&sdk);
    let queue_url = if config.aws.create_resources {
        ensure_resources(&sdk, &names)
            .await
            .context("creating the AWS resources")?
    } else {
        sqs.get_queue_url()
            .queue_name(&names.queue_name)
            .send()
            .await
            .with_context(|| {
                format!(
                    "queue {} (create it with localstack/init-aws.sh or set aws.create_resources)",
                    names.queue_name
                )
            })?
            .queue_url()
            .map(str::to_owned)
            .with_context(|| format!("queue {} has no URL", names.queue_name))?
    };
    let dynamo = toki_aws::aws_sdk_dynamodb::Client::new(&sdk);
    let settings = config.pipeline_settings();
    let directory: Arc<dyn TenantDirectory> = Arc::new(DynamoTenantDirectory::new(
        dynamo.clone(),
        names.directory_table.clone(),
    ));
    // Tenant databases are found by template: the daemon never reads DynamoDB.
    let locator = match &config.tenant_database_template {
        Some(t) => Locator::Template(t.clone()),
        None => Locator::Unconfigured("TOKI_DATABASE_URL_TEMPLATE (or DATABASE_URL)"),
    };
    Ok(Toki {
        stores: Arc::new(SqlTenantStores::with_locator(locator)),
        directory,
        index: Arc::new(DynamoReminderIndex::new(
            dynamo,
            names.index_table.clone(),
            settings.shards,
            settings.retention,
        )),
        queue: Arc::new(SqsDelayQueue::new(sqs, queue_url)),
        clock: Arc::new(SystemClock),
        config,
    })
}
