//! The reminder index on the embedded control database, keyed exactly like the
//! DynamoDB table: (partition = due minute + shard, sort key = due + identity).

use async_trait::async_trait;
use std::collections::{HashMap, HashSet};

use sqlx::sqlite::{SqliteConnection, SqlitePool, SqliteRow};
use sqlx::{QueryBuilder, Row, Sqlite};
use toki_model::index::{sort_key, Partition};
use toki_model::time::to_chrono;
use toki_model::{
    from_millis, ChannelSet, DueAt, IndexStatus, IndexedReminder, Instant, Occurrence, Reminder,
    ReminderKey, ScheduleId, TenantId,
};
use toki_ports::{IndexWrite, ReminderIndex, TenantSchedule};
use toki_ports::{StoreError, StoreResult};

use crate::db_err;

/// Rows per multi-row statement (well under SQLite's 32,766 bind parameters).
const CHUNK: usize = 500;

pub struct SqliteReminderIndex {
    pool: SqlitePool,
    shards: u16,
    retention: std::time::Duration,
}

impl SqliteReminderIndex {
    pub fn new(pool: SqlitePool, shards: u16, retention: std::time::Duration) -> Self {
        Self {
            pool,
            shards,
            retention,
        }
    }

    /// Claims rows in one transaction; whether each was claimed, in order.
    async fn claim_rows(
        &self,
        reminders: &[Reminder],
        now: Instant,
        lease_until: Instant,
    ) -> StoreResult<Vec<bool>> {
        let mut tx = crate::begin_write(&self.pool).await?;
        let mut claimed = std::collections::HashSet::new();
        for chunk in reminders.chunks(CHUNK) {
            let mut qb: QueryBuilder<Sqlite> =
                QueryBuilder::new("UPDATE reminder_index SET status = 'enqueuing', lease_until = ");
            qb.push_bind(lease_until.timestamp_millis())
                .push(" WHERE (partition, sort_key, version) IN (VALUES ");
            self.push_keys(&mut qb, chunk.iter());
            qb.push(") AND (status = 'pending' OR (status = 'enqueuing' AND lease_until < ")
                .push_bind(now.timestamp_millis())
                .push(")) RETURNING partition, sort_key");
            let rows: Vec<(String, String)> = qb
                .build_query_as()
                .fetch_all(&mut *tx)
                .await
                .map_err(db_err)?;
            claimed.extend(rows);
        }
        tx.commit().await.map_err(db_err)?;
        Ok(reminders
            .iter()
            .map(|r| claimed.contains(&self.keys(r)))
            .collect::<Vec<_>>())
    }

    /// `(partition, sort_key, version), ...` for a row-value IN list.
    fn push_keys<'r>(
        &self,
        qb: &mut QueryBuilder<'_, Sqlite>,
        rows: impl Iterator<Item = &'r Reminder>,
    ) {
        for (i, r) in rows.enumerate() {
            let (partition, sort) = self.keys(r);
            qb.push(if i == 0 { "(" } else { ", (" });
            qb.push_bind(partition)
                .push(", ")
                .push_bind(sort)
                .push(", ")
                .push_bind(r.version)
                .push(")");
        }
    }

    fn keys(&self, r: &Reminder) -> (String, String) {
        (Partition::of(r, self.shards).key(), sort_key(r))
    }

    /// Inserts the winning writes' rows as pending; rows already there stay.
    async fn insert_rows(
        &self,
        conn: &mut SqliteConnection,
        winners: &[&IndexWrite<'_>],
    ) -> StoreResult<()> {
        let rows: Vec<&Reminder> = winners.iter().flat_map(|w| w.rows).collect();
        for chunk in rows.chunks(CHUNK) {
            let mut qb: QueryBuilder<Sqlite> = QueryBuilder::new(
                "INSERT INTO reminder_index (partition, sort_key, tenant, schedule_id, occurrence,
                 minutes_before, due_at, version, channels, status, lease_until, expires_at) ",
            );
            qb.push_values(chunk, |mut b, r| {
                let (partition, sort) = self.keys(r);
                let expires = (r.due_at.0 + to_chrono(self.retention)).timestamp();
                b.push_bind(partition)
                    .push_bind(sort)
                    .push_bind(r.key.tenant.to_string())
                    .push_bind(r.key.schedule.to_string())
                    .push_bind(r.key.occurrence.millis())
                    .push_bind(i64::from(r.key.minutes_before))
                    .push_bind(r.due_at.millis())
                    .push_bind(r.version)
                    .push_bind(r.channels.encode())
                    .push_bind("pending")
                    .push_bind(None::<i64>)
                    .push_bind(expires);
            });
            qb.push(" ON CONFLICT (partition, sort_key) DO NOTHING");
            qb.build().execute(&mut *conn).await.map_err(db_err)?;
        }
        Ok(())
    }
}

/// Each version's claim on its schedule's rows, only where no newer version
/// holds them; the ids of the schedules whose version won.
async fn claim_versions(
    conn: &mut SqliteConnection,
    tenant: &TenantId,
    writes: &[IndexWrite<'_>],
) -> StoreResult<HashSet<String>> {
    // The rows an upsert touched come back.
    let mut won = HashSet::new();
    for chunk in writes.chunks(CHUNK) {
        let mut qb: QueryBuilder<Sqlite> =
            QueryBuilder::new("INSERT INTO index_versions (tenant, schedule_id, version) ");
        qb.push_values(chunk, |mut b, w| {
            b.push_bind(tenant.as_str())
                .push_bind(w.schedule.as_str())
                .push_bind(w.version);
        });
        qb.push(
            " ON CONFLICT (tenant, schedule_id) DO UPDATE SET version = excluded.version
             WHERE index_versions.version <= excluded.version RETURNING schedule_id",
        );
        let ids: Vec<(String,)> = qb
            .build_query_as()
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
        won.extend(ids.into_iter().map(|(id,)| id));
    }
    Ok(won)
}

/// Deletes the rows of older versions of the winning writes' schedules; this
/// version's rows already there stay as they are (a repeat of the same write
/// changes nothing).
async fn delete_older_rows(
    conn: &mut SqliteConnection,
    tenant: &TenantId,
    winners: &[&IndexWrite<'_>],
) -> StoreResult<()> {
    for chunk in winners.chunks(CHUNK) {
        let mut qb: QueryBuilder<Sqlite> =
            QueryBuilder::new("DELETE FROM reminder_index WHERE tenant = ");
        qb.push_bind(tenant.as_str()).push(" AND schedule_id IN (");
        let mut ids = qb.separated(", ");
        for w in chunk {
            ids.push_bind(w.schedule.as_str());
        }
        qb.push(
            ") AND version < (SELECT v.version FROM index_versions v
               WHERE v.tenant = reminder_index.tenant AND v.schedule_id = reminder_index.schedule_id)",
        );
        qb.build().execute(&mut *conn).await.map_err(db_err)?;
    }
    Ok(())
}

fn bad(field: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::corrupt(format!("index row column {field}"), e.to_string())
}

pub(crate) fn row_to_indexed(row: &SqliteRow) -> StoreResult<IndexedReminder> {
    let tenant: String = row.get("tenant");
    let schedule: String = row.get("schedule_id");
    let channels: String = row.get("channels");
    let status: String = row.get("status");
    let lease_until: Option<i64> = row.get("lease_until");
    let reminder = Reminder {
        key: ReminderKey {
            tenant: TenantId::parse_field("tenant", &tenant).map_err(|e| bad("tenant", e))?,
            schedule: ScheduleId::parse_field("schedule", &schedule)
                .map_err(|e| bad("schedule", e))?,
            occurrence: Occurrence(
                from_millis("occurrence", row.get("occurrence"))
                    .map_err(|e| bad("occurrence", e))?,
            ),
            minutes_before: row.get::<i64, _>("minutes_before") as u32,
        },
        due_at: DueAt(from_millis("due_at", row.get("due_at")).map_err(|e| bad("due_at", e))?),
        version: row.get("version"),
        channels: ChannelSet::decode("channels", &channels).map_err(|e| bad("channels", e))?,
    };
    let status = match status.as_str() {
        "pending" => IndexStatus::Pending,
        "enqueued" => IndexStatus::Enqueued,
        "enqueuing" => IndexStatus::Enqueuing {
            lease_until: from_millis("lease_until", lease_until.unwrap_or(0))
                .map_err(|e| bad("lease_until", e))?,
        },
        other => return Err(bad("status", other)),
    };
    Ok(IndexedReminder { reminder, status })
}

#[async_trait]
impl ReminderIndex for SqliteReminderIndex {
    async fn replace_schedule(
        &self,
        tenant: &TenantId,
        schedule: &ScheduleId,
        version: i64,
        rows: &[Reminder],
    ) -> StoreResult<bool> {
        let write = IndexWrite {
            schedule,
            version,
            rows,
        };
        Ok(self.replace_schedules(tenant, &[write]).await?[0])
    }

    /// One transaction for the whole batch: SQLite pays for a commit, not for a row.
    async fn replace_schedules(
        &self,
        tenant: &TenantId,
        writes: &[IndexWrite<'_>],
    ) -> StoreResult<Vec<bool>> {
        let mut tx = crate::begin_write(&self.pool).await?;
        let won = claim_versions(&mut tx, tenant, writes).await?;
        let claimed: Vec<bool> = writes
            .iter()
            .map(|w| won.contains(w.schedule.as_str()))
            .collect();
        let winners: Vec<&IndexWrite<'_>> = writes
            .iter()
            .zip(&claimed)
            .filter_map(|(w, c)| c.then_some(w))
            .collect();
        delete_older_rows(&mut tx, tenant, &winners).await?;
        self.insert_rows(&mut tx, &winners).await?;
        tx.commit().await.map_err(db_err)?;
        Ok(claimed)
    }

    async fn query_partition(
        &self,
        partition: &Partition,
        from: Instant,
        to: Instant,
    ) -> StoreResult<Vec<IndexedReminder>> {
        let rows = sqlx::query(
            "SELECT * FROM reminder_index WHERE partition = $1 AND sort_key BETWEEN $2 AND $3
             ORDER BY sort_key",
        )
        .bind(partition.key())
        .bind(format!("{:015}", from.timestamp_millis()))
        .bind(format!("{:015}~", to.timestamp_millis()))
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter().map(row_to_indexed).collect()
    }

    async fn claim(&self, r: &Reminder, now: Instant, lease_until: Instant) -> StoreResult<bool> {
        let claimed = self
            .claim_rows(std::slice::from_ref(r), now, lease_until)
            .await?;
        Ok(claimed == [true])
    }

    /// One transaction: a claim is one UPDATE, and the commit is what costs.
    async fn claim_all(
        &self,
        reminders: &[Reminder],
        now: Instant,
        lease_until: Instant,
    ) -> Vec<StoreResult<bool>> {
        match self.claim_rows(reminders, now, lease_until).await {
            Ok(claimed) => claimed.into_iter().map(Ok).collect(),
            // Nothing was claimed: the same failure for every row, as
            // retryable as the one the transaction met.
            Err(e) => {
                let why = toki_model::error::chain(&e);
                let again = |why: String| {
                    if e.is_transient() {
                        StoreError::unavailable("claiming index rows", why)
                    } else {
                        StoreError::backend("claiming index rows", why)
                    }
                };
                reminders.iter().map(|_| Err(again(why.clone()))).collect()
            }
        }
    }

    async fn mark_enqueued(&self, r: &Reminder) -> StoreResult<()> {
        self.mark_all_enqueued(&[r]).await
    }

    async fn mark_all_enqueued(&self, reminders: &[&Reminder]) -> StoreResult<()> {
        let mut tx = crate::begin_write(&self.pool).await?;
        for chunk in reminders.chunks(CHUNK) {
            let mut qb: QueryBuilder<Sqlite> = QueryBuilder::new(
                "UPDATE reminder_index SET status = 'enqueued', lease_until = NULL
                 WHERE (partition, sort_key, version) IN (VALUES ",
            );
            self.push_keys(&mut qb, chunk.iter().copied());
            qb.push(")");
            qb.build().execute(&mut *tx).await.map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)?;
        Ok(())
    }

    async fn release(&self, r: &Reminder) -> StoreResult<()> {
        let (partition, sort) = self.keys(r);
        sqlx::query(
            "UPDATE reminder_index SET status = 'pending', lease_until = NULL
             WHERE partition = $1 AND sort_key = $2 AND version = $3 AND status = 'enqueuing'",
        )
        .bind(partition)
        .bind(sort)
        .bind(r.version)
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn repair_cursor(&self) -> StoreResult<Option<TenantId>> {
        let next: Option<String> =
            sqlx::query_scalar("SELECT next_tenant FROM repair_cursor WHERE id = 1")
                .fetch_optional(&self.pool)
                .await
                .map_err(db_err)?;
        next.map(|t| {
            TenantId::parse_field("next_tenant", &t)
                .map_err(|e| StoreError::corrupt("repair_cursor row", e))
        })
        .transpose()
    }

    async fn set_repair_cursor(&self, next: &TenantId) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO repair_cursor (id, next_tenant) VALUES (1, $1)
             ON CONFLICT (id) DO UPDATE SET next_tenant = excluded.next_tenant",
        )
        .bind(next.as_str())
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    /// One query for every tenant's schedules (a row value each).
    async fn mirrored_versions(
        &self,
        schedules: &[TenantSchedule],
    ) -> StoreResult<HashMap<TenantSchedule, i64>> {
        let mut out = HashMap::with_capacity(schedules.len());
        for chunk in schedules.chunks(CHUNK) {
            let mut qb: QueryBuilder<Sqlite> = QueryBuilder::new(
                "SELECT tenant, schedule_id, version FROM index_versions
                 WHERE (tenant, schedule_id) IN (VALUES ",
            );
            let mut pairs = qb.separated(", ");
            for k in chunk {
                pairs
                    .push("(")
                    .push_bind_unseparated(k.tenant.as_str())
                    .push_unseparated(", ")
                    .push_bind_unseparated(k.schedule.as_str())
                    .push_unseparated(")");
            }
            qb.push(")");
            let rows: Vec<(String, String, i64)> = qb
                .build_query_as()
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
            for (tenant, schedule, version) in rows {
                let key = TenantSchedule {
                    tenant: TenantId::parse_field("tenant", &tenant)
                        .map_err(|e| bad("tenant", e))?,
                    schedule: ScheduleId::parse_field("schedule", &schedule)
                        .map_err(|e| bad("schedule", e))?,
                };
                out.insert(key, version);
            }
        }
        Ok(out)
    }
}
