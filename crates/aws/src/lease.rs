//! Partition leases on DynamoDB, in the reminder index table under partitions
//! of their own (`pk` = `L#<key>`, `sk` = `p#<partition, 4 digits>`): one
//! Query reads a key's leases, and the scanner's queries (by due minute) and
//! the `by_schedule` index (rows with `sched` only) never see them. Every
//! write is conditional; rows expire through the table's TTL a day after
//! their lease, in case a holder died without giving it back.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use toki_model::{from_millis, Instant};
use toki_ports::{Conditional, StoreResult};
use toki_ports::{LeaseStore, PartitionLease};

use crate::error::{conditional, sdk, AwsError};
use crate::index::{get_n, get_s, n, s};

/// How long a row is kept past its lease (a safety net: holders release them).
const ROW_TTL_S: i64 = 86_400;

#[derive(Clone)]
pub struct DynamoLeaseStore {
    client: Client,
    table: String,
}

impl DynamoLeaseStore {
    /// Rows in `table`, the reminder index table.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoLeaseStore {
            client,
            table: table.into(),
        }
    }
}

fn pk(key: &str) -> AttributeValue {
    s(format!("L#{key}"))
}

fn sk(partition: u32) -> AttributeValue {
    s(format!("p#{partition:04}"))
}

fn corrupt((field, problem): (&'static str, String)) -> AwsError {
    AwsError::service("lease", format!("corrupt lease row: {field}: {problem}"))
}

fn lease(key: &str, item: &HashMap<String, AttributeValue>) -> Result<PartitionLease, AwsError> {
    let expires_ms: i64 = get_n(item, "expires_ms").map_err(corrupt)?;
    Ok(PartitionLease {
        key: key.to_owned(),
        partition: get_n(item, "partition").map_err(corrupt)?,
        holder: get_s(item, "holder").map_err(corrupt)?.to_owned(),
        expires_at: from_millis("expires_ms", expires_ms)
            .map_err(|e| corrupt(("expires_ms", e.problem)))?,
    })
}

#[async_trait]
impl LeaseStore for DynamoLeaseStore {
    async fn acquire(
        &self,
        key: &str,
        partition: u32,
        holder: &str,
        until: Instant,
        now: Instant,
    ) -> StoreResult<Conditional> {
        let item = HashMap::from([
            ("pk".to_owned(), pk(key)),
            ("sk".to_owned(), sk(partition)),
            ("holder".to_owned(), s(holder)),
            ("partition".to_owned(), n(partition)),
            ("expires_ms".to_owned(), n(until.timestamp_millis())),
            ("expires_at".to_owned(), n(until.timestamp() + ROW_TTL_S)),
        ]);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            // Names aliased: DynamoDB reserves many plain words.
            .condition_expression("attribute_not_exists(pk) OR #h = :me OR #e <= :now")
            .expression_attribute_names("#h", "holder")
            .expression_attribute_names("#e", "expires_ms")
            .expression_attribute_values(":me", s(holder))
            .expression_attribute_values(":now", n(now.timestamp_millis()))
            .send()
            .await;
        Ok(Conditional::of(conditional(result, "PutItem(lease)")?))
    }

    async fn release(&self, key: &str, partition: u32, holder: &str) -> StoreResult<Conditional> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key("pk", pk(key))
            .key("sk", sk(partition))
            .condition_expression("#h = :me")
            .expression_attribute_names("#h", "holder")
            .expression_attribute_values(":me", s(holder))
            .send()
            .await;
        Ok(Conditional::of(conditional(result, "DeleteItem(lease)")?))
    }

    async fn leases(&self, key: &str) -> StoreResult<Vec<PartitionLease>> {
        let mut out = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let resp = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :p")
                .expression_attribute_values(":p", pk(key))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| sdk("Query(lease)", e))?;
            for item in resp.items() {
                out.push(lease(key, item)?);
            }
            match resp.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        // `sk` sorts by partition only up to 9999 (4 digits): sort by the number.
        out.sort_by_key(|l| l.partition);
        Ok(out)
    }
}
