//! The AWS backend family: DynamoDB reminder index and tenant directory, SQS
//! delay queue, tenant databases on Postgres (one per tenant).

use std::sync::Arc;

use anyhow::Context;
use toki_aws::{
    ensure_resources, sdk_config, AwsNames, DynamoDebounceStore, DynamoReminderIndex,
    DynamoTenantDirectory, SqsDelayQueue,
};
use toki_ports::{Clock, TenantDirectory};
use toki_sql::{Locator, SqlTenantStores};

use crate::config::Config;
use crate::databases::TenantDatabases;
use crate::ports::Ports;

pub(crate) fn names(config: &Config) -> AwsNames {
    AwsNames {
        index_table: config.aws.index_table.clone(),
        directory_table: config.aws.directory_table.clone(),
        queue_name: config.aws.queue_name.clone(),
        dlq_name: config.aws.dlq_name.clone(),
        max_receives: config.daemon.max_receives,
        visibility_timeout_s: config.daemon.visibility_timeout_s as u32,
    }
}

pub(crate) async fn open(
    config: &Config,
    databases: &TenantDatabases,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Ports> {
    let sdk = sdk_config(
        config.aws.endpoint_url.as_deref(),
        config.aws.region.as_deref(),
    )
    .await;
    let names = names(config);
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
    let raw: Arc<dyn TenantDirectory> = Arc::new(DynamoTenantDirectory::new(
        dynamo.clone(),
        names.directory_table.clone(),
    ));
    // Tenant databases are found by name, not through the directory (which
    // the daemon reads only for contracts and readiness).
    let locator = match databases {
        TenantDatabases::Postgres { runtime, .. } => Locator::Template(runtime.clone()),
        _ => Locator::Unconfigured(
            "TOKI_DATABASE_HOST + TOKI_DATABASE_SECRET_ARN (or TOKI_DATABASE_URL_TEMPLATE)",
        ),
    };
    let stores = SqlTenantStores::with_locator(locator)
        .with_statement_cache(config.database.statement_cache)
        .with_connection_budget(config.database.max_connections)
        .with_max_open(config.database.max_open_tenants);
    Ok(Ports {
        // SQS's retention bounds the dead letters, DynamoDB's TTL the index.
        control_purge: None,
        // The index table holds index, debounce and lease items.
        footprints: vec![Arc::new(toki_aws::DynamoIndexFootprint::new(
            dynamo.clone(),
            names.index_table.clone(),
        ))],
        // In the index table, under keys of their own (`D#<key>`).
        debounce: Arc::new(DynamoDebounceStore::new(
            dynamo.clone(),
            names.index_table.clone(),
        )),
        // Which tenants have work waiting, under keys of their own (`W#<kind>`).
        marks: Arc::new(toki_aws::DynamoWorkMarks::new(
            dynamo.clone(),
            names.index_table.clone(),
        )),
        // Rate-limit partitions' leases, under keys of their own (`L#<key>`).
        leases: Arc::new(toki_aws::DynamoLeaseStore::new(
            dynamo.clone(),
            names.index_table.clone(),
        )),
        // Every read of the directory drops the pool of a tenant it no longer lists.
        directory: Arc::new(stores.checked(raw)),
        stores: Arc::new(stores),
        index: Arc::new(DynamoReminderIndex::new(
            dynamo,
            names.index_table.clone(),
            settings.shards,
            settings.retention,
            clock,
        )),
        queue: Arc::new(SqsDelayQueue::new(sqs, queue_url)),
    })
}
