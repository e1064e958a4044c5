//! The reminder index on DynamoDB.
//!
//! Table keys: `pk` (S) = [`Partition::key`] (`R#2026-11-23T08:55#07`), `sk` (S) =
//! [`sort_key`] (due millis, 15 digits, then the reminder's identity). GSI
//! `by_schedule`: `sched` (S) = `<tenant>#<schedule>`, `sk`, keys only (it is read for keys only).
//! Attributes: tenant, schedule, occurrence (N ms), minutes_before (N), due
//! (N ms), version (N), channels (S), status (S:
//! pending | enqueuing | enqueued), lease_until (N ms, while enqueuing),
//! expires_at (N epoch seconds = due + retention; the table's TTL attribute).
//! The repair pass's cursor is one item beside them (`pk` = `C#repair`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use futures::stream::{self, StreamExt};
use toki_model::index::{sort_key, Partition};
use toki_model::time::to_chrono;
use toki_model::{
    from_millis, ChannelSet, DueAt, IndexStatus, IndexedReminder, Instant, Occurrence, Reminder,
    ReminderKey, ScheduleId, TenantId,
};
use toki_ports::StoreResult;
use toki_ports::{Clock, ReminderIndex, TenantSchedule};

use crate::error::{sdk, AwsError};

/// The GSI that finds a schedule's rows.
pub const BY_SCHEDULE_INDEX: &str = "by_schedule";

const STATUS_PENDING: &str = "pending";
const STATUS_ENQUEUING: &str = "enqueuing";
const STATUS_ENQUEUED: &str = "enqueued";

pub struct DynamoReminderIndex {
    client: Client,
    table: String,
    shards: u16,
    retention: Duration,
    clock: Arc<dyn Clock>,
}

impl DynamoReminderIndex {
    /// `shards`: write shards per due minute; `retention`: how long after its
    /// due instant a row is kept (its `expires_at`).
    pub fn new(
        client: Client,
        table: impl Into<String>,
        shards: u16,
        retention: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            client,
            table: table.into(),
            shards: shards.max(1),
            retention,
            clock,
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

    fn marker_key(tenant: &TenantId, schedule: &ScheduleId) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (
                "pk".to_owned(),
                s(format!("V#{}", sched_key(tenant, schedule))),
            ),
            ("sk".to_owned(), s("version")),
        ])
    }

    /// Records that `version` writes the schedule's rows now, with their keys,
    /// unless a newer version has: a marker item (`V#<tenant>#<schedule>`,
    /// never in a scanned partition) updated on condition. Returns None if a
    /// newer version holds it; else the keys the previous writer recorded
    /// (None if it recorded none: read them through the GSI).
    #[allow(clippy::type_complexity)]
    async fn claim_version(
        &self,
        tenant: &TenantId,
        schedule: &ScheduleId,
        version: i64,
        keys: &[(String, String)],
    ) -> Result<Option<Option<Vec<(String, String)>>>, AwsError> {
        // Kept a while after the last write: long past any write that could race it.
        let expires = (self.clock.now() + chrono::Duration::days(30)).timestamp();
        let rows = encode_keys(keys);
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::marker_key(tenant, schedule)))
            .condition_expression("attribute_not_exists(#v) OR #v <= :v")
            .expression_attribute_names("#v", "version")
            .expression_attribute_values(":v", n(version))
            .expression_attribute_values(":exp", n(expires))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld);
        req = match &rows {
            Some(rows) => req
                .update_expression("SET #v = :v, expires_at = :exp, #rows = :rows")
                .expression_attribute_names("#rows", "rows")
                .expression_attribute_values(":rows", s(rows.as_str())),
            None => req
                .update_expression("SET #v = :v, expires_at = :exp REMOVE #rows")
                .expression_attribute_names("#rows", "rows"),
        };
        match req.send().await {
            Ok(out) => Ok(Some(
                out.attributes()
                    .and_then(|a| a.get("rows"))
                    .and_then(|v| v.as_s().ok())
                    // No marker, or one without keys (rows written before
                    // markers recorded them): the GSI knows.
                    .map(|rows| decode_keys(rows)),
            )),
            Err(e) if crate::error::code_of(&e) == Some("ConditionalCheckFailedException") => {
                Ok(None)
            }
            Err(e) => Err(sdk("UpdateItem(version)", e)),
        }
    }

    /// The version the marker holds now (a strongly consistent read).
    async fn marker_version(
        &self,
        tenant: &TenantId,
        schedule: &ScheduleId,
    ) -> Result<Option<i64>, AwsError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(Self::marker_key(tenant, schedule)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk("GetItem(version)", e))?;
        Ok(out.item().and_then(|i| get_n::<i64>(i, "version").ok()))
    }

    /// Deletes a row unless it belongs to `version` or a newer one.
    async fn delete_if_older(
        &self,
        pk: String,
        sk: String,
        version: i64,
    ) -> Result<bool, AwsError> {
        self.delete_where(pk, sk, "#v < :v", version).await
    }

    /// Deletes a row if it is `version`'s.
    async fn delete_if_version(
        &self,
        pk: String,
        sk: String,
        version: i64,
    ) -> Result<bool, AwsError> {
        self.delete_where(pk, sk, "#v = :v", version).await
    }

    /// Deletes a row if its version (`#v`) meets `condition` against `:v`.
    async fn delete_where(
        &self,
        pk: String,
        sk: String,
        condition: &str,
        version: i64,
    ) -> Result<bool, AwsError> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(pk))
            .key("sk", s(sk))
            .condition_expression(condition)
            .expression_attribute_names("#v", "version")
            .expression_attribute_values(":v", n(version))
            .send()
            .await;
        crate::error::conditional(result, "DeleteItem")
    }

    /// Writes a row unless one of `version` or a newer one is there.
    async fn put_if_older(
        &self,
        item: HashMap<String, AttributeValue>,
        version: i64,
    ) -> Result<bool, AwsError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk) OR #v < :v")
            .expression_attribute_names("#v", "version")
            .expression_attribute_values(":v", n(version))
            .send()
            .await;
        crate::error::conditional(result, "PutItem")
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

/// A marker records its rows' keys up to this size (an item may hold 400 KB);
/// beyond it the GSI is read instead.
const MAX_RECORDED_KEYS_BYTES: usize = 300_000;

/// Row keys as one string: `pk<TAB>sk` lines. None when too large to record.
fn encode_keys(keys: &[(String, String)]) -> Option<String> {
    let mut out = String::new();
    for (pk, sk) in keys {
        out.push_str(pk);
        out.push('\t');
        out.push_str(sk);
        out.push('\n');
    }
    (out.len() <= MAX_RECORDED_KEYS_BYTES).then_some(out)
}

fn decode_keys(rows: &str) -> Vec<(String, String)> {
    rows.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(pk, sk)| (pk.to_owned(), sk.to_owned()))
        .collect()
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

fn bad(field: &'static str) -> impl Fn(toki_model::ValidationError) -> FieldError {
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
        version: i64,
        rows: &[Reminder],
    ) -> StoreResult<bool> {
        let mut by_key: HashMap<(String, String), &Reminder> = HashMap::new();
        for r in rows {
            by_key.insert((Partition::of(r, self.shards).key(), sort_key(r)), r);
        }
        let keys: Vec<(String, String)> = by_key.keys().cloned().collect();
        // The version's claim on the schedule's rows, unless a newer one holds them.
        let Some(recorded) = self.claim_version(tenant, schedule, version, &keys).await? else {
            return Ok(false);
        };
        let old = match recorded {
            Some(old) => old,
            None => self.schedule_keys(tenant, schedule).await?,
        };
        // Every write is conditional on the version: an older version's rows
        // go, a newer one's stay; rows of this version already there are kept
        // as they are (a repeat changes nothing).
        let deletes: Vec<(String, String)> = old
            .into_iter()
            .filter(|k| !by_key.contains_key(k))
            .collect();
        let results: Vec<Result<bool, AwsError>> = stream::iter(deletes)
            .map(|(pk, sk)| self.delete_if_older(pk, sk, version))
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().collect::<Result<Vec<_>, _>>()?;
        let items: Vec<HashMap<String, AttributeValue>> =
            by_key.values().map(|r| self.item(r)).collect();
        let results: Vec<Result<bool, AwsError>> = stream::iter(items)
            .map(|item| self.put_if_older(item, version))
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().collect::<Result<Vec<_>, _>>()?;
        // A newer version that claimed the schedule while these rows were
        // written deleted the keys recorded until then, but cannot know of
        // rows written after: this writer removes its own.
        if self
            .marker_version(tenant, schedule)
            .await?
            .is_some_and(|v| v > version)
        {
            let mine: Vec<(String, String)> = keys;
            let results: Vec<Result<bool, AwsError>> = stream::iter(mine)
                .map(|(pk, sk)| self.delete_if_version(pk, sk, version))
                .buffer_unordered(16)
                .collect()
                .await;
            results.into_iter().collect::<Result<Vec<_>, _>>()?;
            return Ok(false);
        }
        Ok(true)
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
        let now_s = self.clock.now().timestamp();
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

    async fn repair_cursor(&self) -> StoreResult<Option<TenantId>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(repair_cursor_key()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk("GetItem(repair cursor)", e))?;
        let Some(item) = out.item() else {
            return Ok(None);
        };
        let corrupt = |(field, problem): FieldError| {
            AwsError::service(
                "index",
                format!("corrupt repair cursor: {field}: {problem}"),
            )
        };
        let next = get_s(item, "next_tenant").map_err(corrupt)?;
        let next = TenantId::parse_field("next_tenant", next)
            .map_err(|e| corrupt(("next_tenant", e.problem)))?;
        Ok(Some(next))
    }

    async fn set_repair_cursor(&self, next: &TenantId) -> StoreResult<()> {
        let mut item = repair_cursor_key();
        item.insert("next_tenant".into(), s(next.as_str()));
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| sdk("PutItem(repair cursor)", e))?;
        Ok(())
    }

    /// The version markers, read 100 at a time (BatchGetItem's bound),
    /// consistently. Keys DynamoDB leaves unprocessed (throttled) are not
    /// in the answer: a caller reads those where they are kept.
    async fn mirrored_versions(
        &self,
        schedules: &[TenantSchedule],
    ) -> StoreResult<HashMap<TenantSchedule, i64>> {
        let reads = schedules.chunks(100).map(|chunk| self.markers(chunk));
        let mut out = HashMap::with_capacity(schedules.len());
        for read in futures::future::join_all(reads).await {
            out.extend(read?);
        }
        Ok(out)
    }
}

impl DynamoReminderIndex {
    /// The versions of up to 100 schedules' markers, in one BatchGetItem.
    async fn markers(
        &self,
        chunk: &[TenantSchedule],
    ) -> Result<HashMap<TenantSchedule, i64>, AwsError> {
        let by_pk: HashMap<String, &TenantSchedule> = chunk
            .iter()
            .map(|k| (format!("V#{}", sched_key(&k.tenant, &k.schedule)), k))
            .collect();
        let keys = chunk
            .iter()
            .map(|k| Self::marker_key(&k.tenant, &k.schedule))
            .collect();
        let read = aws_sdk_dynamodb::types::KeysAndAttributes::builder()
            .set_keys(Some(keys))
            .consistent_read(true)
            .projection_expression("pk, #v")
            .expression_attribute_names("#v", "version")
            .build()
            .map_err(|e| AwsError::service("BatchGetItem(versions)", e.to_string()))?;
        let out = self
            .client
            .batch_get_item()
            .request_items(&self.table, read)
            .send()
            .await
            .map_err(|e| sdk("BatchGetItem(versions)", e))?;
        let items = out
            .responses()
            .and_then(|r| r.get(&self.table))
            .map(Vec::as_slice)
            .unwrap_or_default();
        Ok(items
            .iter()
            .filter_map(|item| {
                let pk = item.get("pk")?.as_s().ok()?;
                let version = get_n::<i64>(item, "version").ok()?;
                Some(((*by_pk.get(pk.as_str())?).clone(), version))
            })
            .collect())
    }
}

/// The repair cursor's item: a partition of its own (`C#repair`), which the
/// scanner's queries (by due minute) and `by_schedule` (rows with `sched`
/// only) never see. No TTL: it is overwritten every pass.
fn repair_cursor_key() -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("pk".to_owned(), s("C#repair")),
        ("sk".to_owned(), s("cursor")),
    ])
}
