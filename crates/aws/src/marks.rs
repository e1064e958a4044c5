//! Work marks on DynamoDB, in the reminder index table under a partition per
//! kind (`pk` = `W#<kind>`, `sk` = the tenant): one Query reads a kind's
//! marks (all of them, filtered by due time: a page holds thousands, so an
//! idle fleet makes one request per read whatever its size), and the
//! scanner's queries and the `by_schedule` index never see them. Every
//! settle is conditional on the revision read.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use toki_model::{from_millis, Instant, TenantId};
use toki_ports::{Conditional, StoreResult};
use toki_ports::{WorkKind, WorkMark, WorkMarks};

use crate::error::{conditional, sdk, AwsError};
use crate::index::{get_n, get_s, n, s};

/// Attempts at a mark racing a settle that removes the row (each attempt
/// is one or two requests; a third race in a row is an error).
const MARK_ATTEMPTS: usize = 3;

#[derive(Clone)]
pub struct DynamoWorkMarks {
    client: Client,
    table: String,
}

impl DynamoWorkMarks {
    /// Rows in `table`, the reminder index table.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoWorkMarks {
            client,
            table: table.into(),
        }
    }

    fn update(
        &self,
        kind: WorkKind,
        tenant: &str,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("pk", pk(kind))
            .key("sk", s(tenant))
    }

    /// Moves the mark to `next` if that is earlier; nothing if it is gone.
    async fn bring_forward(&self, kind: WorkKind, tenant: &str, next: Instant) -> StoreResult<()> {
        let result = self
            .update(kind, tenant)
            .update_expression("SET #d = :d")
            .condition_expression("attribute_exists(pk) AND #d > :d")
            .expression_attribute_names("#d", "due_ms")
            .expression_attribute_values(":d", n(next.timestamp_millis()))
            .send()
            .await;
        conditional(result, "UpdateItem(work mark)")?;
        Ok(())
    }
}

/// The partition of a kind's marks.
pub const PK_PREFIX: &str = "W#";

fn pk(kind: WorkKind) -> AttributeValue {
    s(format!("{PK_PREFIX}{}", kind.as_str()))
}

/// Every item a Query finds, page after page.
async fn all_items(
    query: aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
) -> Result<Vec<HashMap<String, AttributeValue>>, AwsError> {
    query
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| sdk("Query(work marks)", e))
}

fn corrupt((field, problem): (&'static str, String)) -> AwsError {
    AwsError::service(
        "work marks",
        format!("corrupt work mark: {field}: {problem}"),
    )
}

fn mark_of(kind: WorkKind, item: &HashMap<String, AttributeValue>) -> Result<WorkMark, AwsError> {
    let due_ms: i64 = get_n(item, "due_ms").map_err(corrupt)?;
    Ok(WorkMark {
        kind,
        tenant: get_s(item, "sk")
            .map_err(corrupt)?
            .parse()
            .map_err(|e: toki_model::ValidationError| corrupt(("sk", e.problem)))?,
        due: from_millis("due_ms", due_ms).map_err(|e| corrupt(("due_ms", e.problem)))?,
        revision: get_n(item, "revision").map_err(corrupt)?,
    })
}

#[async_trait]
impl WorkMarks for DynamoWorkMarks {
    async fn mark(&self, kind: WorkKind, tenant: &TenantId, due: Instant) -> StoreResult<()> {
        for _ in 0..MARK_ATTEMPTS {
            // No MIN in an update expression: set the time where it is
            // later (or absent), else only bump the revision.
            let earlier = self
                .update(kind, tenant.as_str())
                .update_expression("SET #d = :d ADD #r :one")
                .condition_expression("attribute_not_exists(pk) OR #d > :d")
                .expression_attribute_names("#d", "due_ms")
                .expression_attribute_names("#r", "revision")
                .expression_attribute_values(":d", n(due.timestamp_millis()))
                .expression_attribute_values(":one", n(1))
                .send()
                .await;
            if conditional(earlier, "UpdateItem(work mark)")? {
                return Ok(());
            }
            let bumped = self
                .update(kind, tenant.as_str())
                .update_expression("ADD #r :one")
                .condition_expression("attribute_exists(pk)")
                .expression_attribute_names("#r", "revision")
                .expression_attribute_values(":one", n(1))
                .send()
                .await;
            if conditional(bumped, "UpdateItem(work mark)")? {
                return Ok(());
            }
        }
        Err(AwsError::service("work marks", "a mark kept racing its removal").into())
    }

    async fn due(&self, kind: WorkKind, now: Instant, limit: usize) -> StoreResult<Vec<WorkMark>> {
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :p")
            .filter_expression("#d <= :now")
            .expression_attribute_names("#d", "due_ms")
            .expression_attribute_values(":p", pk(kind))
            .expression_attribute_values(":now", n(now.timestamp_millis()))
            .consistent_read(true);
        let mut out = all_items(query)
            .await?
            .iter()
            .map(|item| mark_of(kind, item))
            .collect::<Result<Vec<_>, _>>()?;
        out.sort_by(|a, b| (a.due, &a.tenant).cmp(&(b.due, &b.tenant)));
        out.truncate(limit);
        Ok(out)
    }

    async fn settle(&self, read: &WorkMark, next: Option<Instant>) -> StoreResult<Conditional> {
        let revision = n(read.revision);
        let result = match next {
            None => {
                let r = self
                    .client
                    .delete_item()
                    .table_name(&self.table)
                    .key("pk", pk(read.kind))
                    .key("sk", s(read.tenant.as_str()))
                    .condition_expression("#r = :r")
                    .expression_attribute_names("#r", "revision")
                    .expression_attribute_values(":r", revision)
                    .send()
                    .await;
                conditional(r, "DeleteItem(work mark)")?
            }
            Some(next) => {
                let r = self
                    .update(read.kind, read.tenant.as_str())
                    .update_expression("SET #d = :d")
                    .condition_expression("#r = :r")
                    .expression_attribute_names("#d", "due_ms")
                    .expression_attribute_names("#r", "revision")
                    .expression_attribute_values(":d", n(next.timestamp_millis()))
                    .expression_attribute_values(":r", revision)
                    .send()
                    .await;
                conditional(r, "UpdateItem(work mark)")?
            }
        };
        if result {
            return Ok(Conditional::Written);
        }
        if let Some(next) = next {
            self.bring_forward(read.kind, read.tenant.as_str(), next)
                .await?;
        }
        Ok(Conditional::Refused)
    }

    async fn marked(&self, kind: WorkKind) -> StoreResult<Vec<TenantId>> {
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :p")
            .expression_attribute_values(":p", pk(kind))
            .projection_expression("sk")
            .consistent_read(true);
        all_items(query)
            .await?
            .iter()
            .map(|item| {
                let tenant = get_s(item, "sk").map_err(corrupt)?;
                tenant
                    .parse()
                    .map_err(|e: toki_model::ValidationError| corrupt(("sk", e.problem)).into())
            })
            .collect()
    }
}
