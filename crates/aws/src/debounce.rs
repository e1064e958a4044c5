//! Debounce rows on DynamoDB, in the reminder index table under partitions of
//! their own (`pk` = `D#<key>`, `sk` = `state`): no table to add, and the
//! scanner's queries (by due minute) and the `by_schedule` index (rows with
//! `sched` only) never see them. Every write is conditional on the row's
//! token; rows expire through the table's TTL a day after their last call,
//! in case a timer was lost with its message.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use toki_model::debounce::DebounceEntry;
use toki_model::from_millis;
use toki_ports::DebounceStore;
use toki_ports::{Conditional, StoreResult};

use crate::error::{conditional, sdk, AwsError};
use crate::index::{get_n, get_s, n, s};

/// How long an untouched row is kept (a safety net: rows are removed by their checks).
const ROW_TTL_S: i64 = 86_400;

#[derive(Clone)]
pub struct DynamoDebounceStore {
    client: Client,
    table: String,
}

impl DynamoDebounceStore {
    /// Rows in `table`, the reminder index table.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoDebounceStore {
            client,
            table: table.into(),
        }
    }
}

fn pk(key: &str) -> AttributeValue {
    s(format!("D#{key}"))
}

const SK: &str = "state";

fn corrupt((field, problem): (&'static str, String)) -> AwsError {
    AwsError::service(
        "debounce",
        format!("corrupt debounce row: {field}: {problem}"),
    )
}

fn entry(key: &str, item: &HashMap<String, AttributeValue>) -> Result<DebounceEntry, AwsError> {
    let millis = |name: &'static str| -> Result<_, AwsError> {
        let ms: i64 = get_n(item, name).map_err(corrupt)?;
        from_millis(name, ms).map_err(|e| corrupt((name, e.problem)))
    };
    Ok(DebounceEntry {
        key: key.to_owned(),
        token: get_s(item, "token").map_err(corrupt)?.to_owned(),
        burst_started: millis("burst_started_ms")?,
        last_call: millis("last_call_ms")?,
        delay: Duration::from_millis(get_n(item, "delay_ms").map_err(corrupt)?),
        pending: matches!(item.get("pending"), Some(AttributeValue::Bool(true))),
    })
}

fn item(e: &DebounceEntry) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("pk".to_owned(), pk(&e.key)),
        ("sk".to_owned(), s(SK)),
        ("token".to_owned(), s(&e.token)),
        (
            "burst_started_ms".to_owned(),
            n(e.burst_started.timestamp_millis()),
        ),
        ("last_call_ms".to_owned(), n(e.last_call.timestamp_millis())),
        ("delay_ms".to_owned(), n(e.delay.as_millis())),
        ("pending".to_owned(), AttributeValue::Bool(e.pending)),
        (
            "expires_at".to_owned(),
            n(e.last_call.timestamp() + ROW_TTL_S),
        ),
    ])
}

#[async_trait]
impl DebounceStore for DynamoDebounceStore {
    async fn get(&self, key: &str) -> StoreResult<Option<DebounceEntry>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", pk(key))
            .key("sk", s(SK))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk("GetItem(debounce)", e))?;
        Ok(out.item().map(|i| entry(key, i)).transpose()?)
    }

    async fn put_if(&self, e: &DebounceEntry, expected: Option<&str>) -> StoreResult<Conditional> {
        let req = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item(e)));
        let req = match expected {
            None => req.condition_expression("attribute_not_exists(pk)"),
            Some(token) => req
                .condition_expression("#t = :expected")
                .expression_attribute_names("#t", "token")
                .expression_attribute_values(":expected", s(token)),
        };
        Ok(Conditional::of(conditional(
            req.send().await,
            "PutItem(debounce)",
        )?))
    }

    async fn remove_if(&self, key: &str, token: &str) -> StoreResult<Conditional> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key("pk", pk(key))
            .key("sk", s(SK))
            .condition_expression("#t = :token")
            .expression_attribute_names("#t", "token")
            .expression_attribute_values(":token", s(token))
            .send()
            .await;
        Ok(Conditional::of(conditional(
            result,
            "DeleteItem(debounce)",
        )?))
    }
}
