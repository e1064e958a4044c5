//! The reminder index on DynamoDB.
//!
//! Table keys: `pk` (S) = [`Partition::key`] (`R#2026-11-23T08:55#07`), `sk` (S) =
//! [`sort_key`] (due millis, 15 digits, then the reminder's identity). GSI
//! `by_schedule`: `sched` (S) = `<tenant>#<schedule>`, `sk`, projection ALL.
//! Attributes: tenant, schedule, occurrence (N ms), minutes_before (N), due
//! (N ms), version (N), recipients (S, comma-joined), channels (S), status (S:
//! pending | enqueuing | enqueued), lease_until (N ms, while enqueuing),
//! expires_at (N epoch seconds = due + retention; the table's TTL attribute).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, DeleteRequest, PutRequest, WriteRequest};
use aws_sdk_dynamodb::Client;
use toki_core::plan::{sort_key, to_chrono, Partition};
use toki_core::ports::ReminderIndex;
use toki_core::{
    from_millis, ChannelSet, DueAt, IndexStatus, IndexedReminder, Instant, Occurrence, Reminder,
    ReminderKey, ScheduleId, StoreResult, TenantId,
};

use crate::error::{sdk, AwsError};

/// The GSI that finds a schedule's rows.
pub const BY_SCHEDULE_INDEX: &str = "by_schedule";

const STATUS_PENDING: &str = "pending";
const STATUS_ENQUEUING: &str = "enqueuing";
const STATUS_ENQUEUED: &str = "enqueued";

/// BatchWriteItem takes at most 25 requests.
const BATCH_WRITE_MAX: usize = 25;
/// Attempts at writing a batch's unprocessed items before giving up.
const BATCH_WRITE_ATTEMPTS: u32 = 8;

pub struct DynamoReminderIndex {
    client: Client,
    table: String,
    shards: u16,
    retention: Duration,
}

impl DynamoReminderIndex {
    /// `shards`: write shards per due minute; `retention`: how long after its
    /// due instant a row is kept (its `expires_at`).
    pub fn new(client: Client, table: impl Into<String>, shards: u16, retention: Duration) -> Self {
        Self {
            client,
            table: table.into(),
            shards: shards.max(1),
            retention,
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    fn key(&self, r: &Reminder) -> HashMap<String, AttributeValue> {
        HashMap::from([
            ("pk".to_owned(), s(Partition::of(r, self.shards).key())),
            ("sk".to_owned(), s(sort_key(r))),
        ])
    }

    fn item(&self, r: &Reminder) -> HashMap<String, AttributeValue> {
        let k = &r.key;
        let mut item = self.key(r);
        item.insert("sched".into(), s(sched_key(&k.tenant, &k.schedule)));
        item.insert("tenant".into(), s(k.tenant.as_str()));
        item.insert("schedule".into(), s(k.schedule.as_str()));
        item.insert("occurrence".into(), n(k.occurrence.millis()));
        item.insert("minutes_before".into(), n(k.minutes_before));
        item.insert("due".into(), n(r.due_at.millis()));
        item.insert("version".into(), n(r.version));
        item.insert("recipients".into(), s(r.encode_recipients()));
        item.insert("channels".into(), s(r.channels.encode()));
        item.insert("status".into(), s(STATUS_PENDING));
        item.insert(
            "expires_at".into(),
            n((r.due_at.0 + to_chrono(self.retention)).timestamp()),
        );
        item
    }

    /// Keys (pk, sk) of every row of one schedule, through the GSI.
    async fn schedule_keys(
        &self,
        tenant: &TenantId,
        schedule: &ScheduleId,
    ) -> Result<Vec<(String, String)>, AwsError> {
        let mut out = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let resp = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(BY_SCHEDULE_INDEX)
                .key_condition_expression("sched = :s")
                .expression_attribute_values(":s", s(sched_key(tenant, schedule)))
                .projection_expression("pk, sk")
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| sdk("Query(by_schedule)", e))?;
            for item in resp.items() {
                out.push((
                    get_s(item, "pk").map_err(corrupt)?.to_owned(),
                    get_s(item, "sk").map_err(corrupt)?.to_owned(),
                ));
            }
            match resp.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        Ok(out)
    }

    /// BatchWriteItem in chunks of 25, retrying unprocessed items with backoff.
    async fn batch_write(&self, requests: Vec<WriteRequest>) -> Result<(), AwsError> {
        for chunk in requests.chunks(BATCH_WRITE_MAX) {
            let mut pending = chunk.to_vec();
            let mut attempt = 0;
            while !pending.is_empty() {
                if attempt > 0 {
                    if attempt >= BATCH_WRITE_ATTEMPTS {
                        return Err(AwsError::Unavailable {
                            operation: "BatchWriteItem",
                            message: format!(
                                "{} items still unprocessed after {attempt} attempts",
                                pending.len()
                            ),
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(50 << attempt.min(6))).await;
                }
                attempt += 1;
                let resp = self
                    .client
                    .batch_write_item()
                    .request_items(&self.table, pending)
                    .send()
                    .await
                    .map_err(|e| sdk("BatchWriteItem", e))?;
                pending = resp
                    .unprocessed_items
                    .and_then(|mut m| m.remove(&self.table))
                    .unwrap_or_default();
            }
        }
        Ok(())
    }

    /// UpdateItem with a condition; Ok(false) when the condition failed.
    async fn conditional_update(
        &self,
        r: &Reminder,
        update: &str,
        condition: &str,
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<bool, AwsError> {
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key(r)))
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_names("#st", "status")
            .expression_attribute_names("#v", "version");
        for (name, value) in values {
            req = req.expression_attribute_values(name, value);
        }
        match req.send().await {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(e) => Err(sdk("UpdateItem", e)),
        }
    }
}

pub(crate) fn sched_key(tenant: &TenantId, schedule: &ScheduleId) -> String {
    format!("{tenant}#{schedule}")
}

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(crate) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// A missing or mistyped attribute: (attribute, problem).
pub(crate) type FieldError = (&'static str, String);

pub(crate) fn get_s<'a>(
    item: &'a HashMap<String, AttributeValue>,
    name: &'static str,
) -> Result<&'a str, FieldError> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Ok(v),
        Some(other) => Err((name, format!("expected a string, got {other:?}"))),
        None => Err((name, "missing".into())),
    }
}

pub(crate) fn get_n<T: std::str::FromStr>(
    item: &HashMap<String, AttributeValue>,
    name: &'static str,
) -> Result<T, FieldError> {
    match item.get(name) {
        Some(AttributeValue::N(v)) => v
            .parse()
            .map_err(|_| (name, format!("{v:?} is not a valid number here"))),
        Some(other) => Err((name, format!("expected a number, got {other:?}"))),
        None => Err((name, "missing".into())),
    }
}

fn corrupt((field, problem): FieldError) -> AwsError {
    AwsError::service("index", format!("corrupt index row: {field}: {problem}"))
}

fn bad(field: &'static str) -> impl Fn(toki_core::ValidationError) -> FieldError {
    move |e| (field, e.to_string())
}

fn to_indexed(item: &HashMap<String, AttributeValue>) -> Result<IndexedReminder, FieldError> {
    let reminder = Reminder {
        key: ReminderKey {
            tenant: TenantId::parse_field("tenant", get_s(item, "tenant")?)
                .map_err(bad("tenant"))?,
            schedule: ScheduleId::parse_field("schedule", get_s(item, "schedule")?)
                .map_err(bad("schedule"))?,
            occurrence: Occurrence(
                from_millis("occurrence", get_n(item, "occurrence")?).map_err(bad("occurrence"))?,
            ),
            minutes_before: get_n(item, "minutes_before")?,
        },
        due_at: DueAt(from_millis("due", get_n(item, "due")?).map_err(bad("due"))?),
        version: get_n(item, "version")?,
        recipients: Reminder::decode_recipients("recipients", get_s(item, "recipients")?)
            .map_err(bad("recipients"))?,
        channels: ChannelSet::decode("channels", get_s(item, "channels")?)
            .map_err(bad("channels"))?,
    };
    let status = match get_s(item, "status")? {
        STATUS_PENDING => IndexStatus::Pending,
        STATUS_ENQUEUED => IndexStatus::Enqueued,
        STATUS_ENQUEUING => IndexStatus::Enqueuing {
            lease_until: from_millis("lease_until", get_n(item, "lease_until").unwrap_or(0))
                .map_err(bad("lease_until"))?,
        },
        other => return Err(("status", format!("unknown status {other:?}"))),
    };
    Ok(IndexedReminder { reminder, status })
}

#[async_trait]
impl ReminderIndex for DynamoReminderIndex {
    async fn replace_schedule(
        &self,
        tenant: &TenantId,
        schedule: &ScheduleId,
        rows: &[Reminder],
    ) -> StoreResult<()> {
        let old = self.schedule_keys(tenant, schedule).await?;
        // New rows, deduplicated by key (BatchWriteItem refuses duplicate keys; the last wins).
        let mut by_key: HashMap<(String, String), &Reminder> = HashMap::new();
        let mut order = Vec::new();
        for r in rows {
            let k = (Partition::of(r, self.shards).key(), sort_key(r));
            if by_key.insert(k.clone(), r).is_none() {
                order.push(k);
            }
        }
        // Old rows that no new row overwrites are deleted first, then the new
        // rows are written (a put replaces a row with the same key and resets it to pending).
        let new_keys: HashSet<&(String, String)> = order.iter().collect();
        let deletes: Vec<WriteRequest> = old
            .into_iter()
            .filter(|k| !new_keys.contains(k))
            .map(|(pk, sk)| {
                let req = DeleteRequest::builder()
                    .key("pk", s(pk))
                    .key("sk", s(sk))
                    .build()
                    .map_err(|e| AwsError::service("BatchWriteItem", e.to_string()))?;
                Ok(WriteRequest::builder().delete_request(req).build())
            })
            .collect::<Result<_, AwsError>>()?;
        self.batch_write(deletes).await?;
        let puts: Vec<WriteRequest> = order
            .iter()
            .map(|k| {
                let req = PutRequest::builder()
                    .set_item(Some(self.item(by_key[k])))
                    .build()
                    .map_err(|e| AwsError::service("BatchWriteItem", e.to_string()))?;
                Ok(WriteRequest::builder().put_request(req).build())
            })
            .collect::<Result<_, AwsError>>()?;
        self.batch_write(puts).await?;
        Ok(())
    }

    async fn query_partition(
        &self,
        partition: &Partition,
        from: Instant,
        to: Instant,
    ) -> StoreResult<Vec<IndexedReminder>> {
        if from > to {
            return Ok(Vec::new()); // DynamoDB refuses BETWEEN with bounds reversed
        }
        let lower = format!("{:015}", from.timestamp_millis());
        let upper = format!("{:015}~", to.timestamp_millis());
        // Emulators (and DynamoDB, for up to days) keep expired rows: skip them.
        let now_s = chrono::Utc::now().timestamp();
        let mut out = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let resp = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :p AND sk BETWEEN :a AND :b")
                .expression_attribute_values(":p", s(partition.key()))
                .expression_attribute_values(":a", s(lower.as_str()))
                .expression_attribute_values(":b", s(upper.as_str()))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| sdk("Query", e))?;
            for item in resp.items() {
                if get_n::<i64>(item, "expires_at").is_ok_and(|exp| exp < now_s) {
                    continue;
                }
                out.push(to_indexed(item).map_err(corrupt)?);
            }
            match resp.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        Ok(out)
    }

    async fn claim(&self, r: &Reminder, now: Instant, lease_until: Instant) -> StoreResult<bool> {
        Ok(self
            .conditional_update(
                r,
                "SET #st = :enqueuing, lease_until = :lease",
                "#v = :v AND (#st = :pending OR (#st = :enqueuing AND lease_until < :now))",
                vec![
                    (":enqueuing", s(STATUS_ENQUEUING)),
                    (":pending", s(STATUS_PENDING)),
                    (":lease", n(lease_until.timestamp_millis())),
                    (":now", n(now.timestamp_millis())),
                    (":v", n(r.version)),
                ],
            )
            .await?)
    }

    async fn mark_enqueued(&self, r: &Reminder) -> StoreResult<()> {
        // A row that is gone or has another version is left alone (like the SQL index).
        self.conditional_update(
            r,
            "SET #st = :enqueued REMOVE lease_until",
            "#v = :v",
            vec![(":enqueued", s(STATUS_ENQUEUED)), (":v", n(r.version))],
        )
        .await?;
        Ok(())
    }

    async fn release(&self, r: &Reminder) -> StoreResult<()> {
        self.conditional_update(
            r,
            "SET #st = :pending REMOVE lease_until",
            "#v = :v AND #st = :enqueuing",
            vec![
                (":pending", s(STATUS_PENDING)),
                (":enqueuing", s(STATUS_ENQUEUING)),
                (":v", n(r.version)),
            ],
        )
        .await?;
        Ok(())
    }
}
