//! The retention purge of a tenant's database, on Postgres and on SQLite:
//! one bounded, oldest-first DELETE per call, and the purge log.

use async_trait::async_trait;
use sqlx::{Database, Decode, Encode, Executor, FromRow, IntoArguments, Type};

use toki_model::domain::{from_millis, DeliveryStatus, Instant};
use toki_model::retention::RetentionKind;
use toki_ports::retention::{
    batch_limit, is_finished, PurgeRecord, RetentionStore, TenantRows, Trimmed,
};
use toki_ports::{StoreError, StoreResult};

use super::statement::Statement;
use super::SqlTenantStore;
use crate::db_err;

const ALL_STATUSES: [DeliveryStatus; 7] = [
    DeliveryStatus::Sending,
    DeliveryStatus::Delivered,
    DeliveryStatus::Stale,
    DeliveryStatus::Undeliverable,
    DeliveryStatus::Failed,
    DeliveryStatus::Throttled,
    DeliveryStatus::Deferred,
];

/// What one kind's purge reads: its table, key, age column and which rows
/// may go at all. The condition is repeated outside the subquery, so a row
/// a delivery claimed in the meantime is re-checked and kept (Postgres).
struct Purged {
    table: &'static str,
    key: &'static str,
    age: &'static str,
    finished_only: bool,
}

fn purged(rows: TenantRows) -> Purged {
    match rows {
        TenantRows::Deliveries => Purged {
            table: "deliveries",
            key: "schedule_id, occurrence, minutes_before, recipient, channel",
            age: "finished_at",
            finished_only: true,
        },
        TenantRows::Chat => Purged {
            table: "chat_messages",
            key: "schedule_id, occurrence, minutes_before, user_id",
            age: "created_at",
            finished_only: false,
        },
        TenantRows::Events => Purged {
            table: "delivery_events",
            key: "seq",
            age: "occurred_at",
            finished_only: false,
        },
        TenantRows::Audit => Purged {
            table: "audit_log",
            key: "seq",
            age: "at",
            finished_only: false,
        },
    }
}

/// `age < before` and, for deliveries, a finished status.
fn condition(s: &mut Statement, p: &Purged, before: Instant) {
    s.push(p.age).push(" < ").bind(before.timestamp_millis());
    if p.finished_only {
        s.push(" AND status IN ").list(
            ALL_STATUSES
                .into_iter()
                .filter(|st| is_finished(*st))
                .map(DeliveryStatus::as_str),
        );
    }
}

/// Deletes up to `limit` rows older than `before`, oldest first (by the
/// age column's index); returns one text value per row deleted.
fn purge(rows: TenantRows, before: Instant, limit: u32) -> Statement {
    let p = purged(rows);
    let mut s = Statement::new(&format!("DELETE FROM {} WHERE ", p.table));
    condition(&mut s, &p, before);
    s.push(&format!(
        " AND ({}) IN (SELECT {} FROM {} WHERE ",
        p.key, p.key, p.table
    ));
    condition(&mut s, &p, before);
    s.push(&format!(" ORDER BY {} LIMIT ", p.age))
        .bind(i64::from(batch_limit(limit)))
        .push(") RETURNING 'gone'");
    s
}

/// How many rows of `rows` there are: one COUNT.
fn count_rows(rows: Trimmed) -> Statement {
    Statement::new(&format!(
        "SELECT COUNT(*) FROM {}",
        purged(rows.rows()).table
    ))
}

/// Deletes the `n` oldest rows of `rows` (by their sequence number).
fn trim(rows: Trimmed, n: u32) -> Statement {
    let p = purged(rows.rows());
    let mut s = Statement::new(&format!(
        "DELETE FROM {} WHERE {} IN (SELECT {} FROM {} ORDER BY {} LIMIT ",
        p.table, p.key, p.key, p.table, p.key
    ));
    s.bind(i64::from(n)).push(") RETURNING 'gone'");
    s
}

row! {
    #[derive(Debug)]
    pub(crate) struct PurgeRow {
        kind: String,
        last_pass_at: i64,
        cutoff: i64,
        last_purged: i64,
        total_purged: i64,
    }
}

impl TryFrom<PurgeRow> for PurgeRecord {
    type Error = StoreError;
    fn try_from(r: PurgeRow) -> StoreResult<Self> {
        let corrupt = |e: String| StoreError::corrupt(format!("purge_log {}", r.kind), e);
        Ok(PurgeRecord {
            kind: r
                .kind
                .parse::<RetentionKind>()
                .map_err(|e| corrupt(e.to_string()))?,
            last_pass_at: from_millis("last_pass_at", r.last_pass_at)
                .map_err(|e| corrupt(e.to_string()))?,
            cutoff: from_millis("cutoff", r.cutoff).map_err(|e| corrupt(e.to_string()))?,
            last_purged: r.last_purged.max(0) as u64,
            total_purged: r.total_purged.max(0) as u64,
        })
    }
}

#[async_trait]
impl<DB> RetentionStore for SqlTenantStore<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> PurgeRow: FromRow<'r, DB::Row>,
{
    async fn purge_rows(&self, rows: TenantRows, before: Instant, limit: u32) -> StoreResult<u64> {
        let _slot = self.connection_slot().await;
        let gone: Vec<(String,)> = purge(rows, before, limit)
            .query_as::<DB, (String,)>()
            .fetch_all(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(gone.len() as u64)
    }

    async fn oldest_row(&self, rows: TenantRows) -> StoreResult<Option<Instant>> {
        let _slot = self.connection_slot().await;
        let p = purged(rows);
        let mut s = Statement::new(&format!("SELECT {} FROM {} WHERE ", p.age, p.table));
        // Every row is younger than the far future: the condition alone.
        condition(&mut s, &p, Instant::MAX_UTC);
        s.push(&format!(" ORDER BY {} LIMIT 1", p.age));
        let oldest: Option<(i64,)> = s
            .query_as::<DB, (i64,)>()
            .fetch_optional(&self.pool())
            .await
            .map_err(db_err)?;
        oldest
            .map(|(ms,)| from_millis(p.age, ms).map_err(|e| StoreError::backend(p.table, e)))
            .transpose()
    }

    async fn trim_rows(&self, rows: Trimmed, keep: u64, limit: u32) -> StoreResult<u64> {
        let _slot = self.connection_slot().await;
        let (have,): (i64,) = count_rows(rows)
            .query_as::<DB, (i64,)>()
            .fetch_one(&self.pool())
            .await
            .map_err(db_err)?;
        let beyond = (have.max(0) as u64).saturating_sub(keep);
        if beyond == 0 {
            return Ok(0);
        }
        let n = batch_limit(limit).min(u32::try_from(beyond).unwrap_or(u32::MAX));
        let gone: Vec<(String,)> = trim(rows, n)
            .query_as::<DB, (String,)>()
            .fetch_all(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(gone.len() as u64)
    }

    async fn record_purge(&self, r: &PurgeRecord) -> StoreResult<()> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new(
            "INSERT INTO purge_log (kind, last_pass_at, cutoff, last_purged, total_purged)",
        );
        s.values([r], |v, r| {
            v.bind(r.kind.as_str())
                .bind(r.last_pass_at.timestamp_millis())
                .bind(r.cutoff.timestamp_millis())
                .bind(r.last_purged as i64)
                .bind(r.last_purged as i64);
        });
        s.push(
            " ON CONFLICT (kind) DO UPDATE SET last_pass_at = excluded.last_pass_at,
               cutoff = excluded.cutoff, last_purged = excluded.last_purged,
               total_purged = purge_log.total_purged + excluded.last_purged",
        );
        s.query::<DB>()
            .execute(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn purge_log(&self) -> StoreResult<Vec<PurgeRecord>> {
        let _slot = self.connection_slot().await;
        let rows: Vec<PurgeRow> = Statement::new(
            "SELECT kind, last_pass_at, cutoff, last_purged, total_purged FROM purge_log ORDER BY kind",
        )
        .query_as::<DB, PurgeRow>()
        .fetch_all(&self.pool())
        .await
        .map_err(db_err)?;
        rows.into_iter().map(PurgeRecord::try_from).collect()
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;
    use crate::tenant_store::TENANT_MIGRATIONS;

    /// The purge's oldest-first read of deliveries stays on the index of
    /// finished rows (partial since migration 0013): `finished_at < cutoff`
    /// must keep implying `finished_at IS NOT NULL`, or it reads the table.
    #[tokio::test]
    async fn the_delivery_purge_reads_the_index_of_finished_rows() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::control::open_sqlite(&dir.path().join("t.sqlite"))
            .await
            .unwrap();
        TENANT_MIGRATIONS.run(&pool).await.unwrap();
        let mut s = purge(TenantRows::Deliveries, from_millis("t", 1).unwrap(), 10);
        s.sql.insert_str(0, "EXPLAIN QUERY PLAN ");
        let plan: Vec<(i64, i64, i64, String)> = s
            .query_as::<sqlx::Sqlite, (i64, i64, i64, String)>()
            .fetch_all(&pool)
            .await
            .unwrap();
        assert!(
            plan.iter()
                .any(|(.., step)| step.contains("INDEX deliveries_by_finish")),
            "{plan:?}"
        );
    }
}
