//! The tenant's audit log, on Postgres and on SQLite: append, list, purge.

use async_trait::async_trait;
use sqlx::{Database, Decode, Encode, Executor, FromRow, IntoArguments, Type};

use toki_model::audit::{AuditEntry, StoredAuditEntry};
use toki_model::domain::{from_millis, Instant};
use toki_ports::audit::AuditLog;
use toki_ports::{StoreError, StoreResult};

use super::statement::Statement;
use super::{SqlTenantStore, CHUNK};
use crate::{begin_write, db_err};

row! {
    #[derive(Debug)]
    pub(crate) struct AuditRow {
        seq: i64,
        at: i64,
        actor: String,
        action: String,
        resource: Option<String>,
        version_before: Option<i64>,
        version_after: Option<i64>,
    }
}

impl TryFrom<AuditRow> for StoredAuditEntry {
    type Error = StoreError;
    fn try_from(r: AuditRow) -> StoreResult<Self> {
        let corrupt = |e: String| StoreError::corrupt(format!("audit entry {}", r.seq), e);
        Ok(StoredAuditEntry {
            seq: r.seq as u64,
            entry: AuditEntry {
                at: from_millis("at", r.at).map_err(|e| corrupt(e.to_string()))?,
                actor: r.actor.parse().map_err(corrupt)?,
                action: r.action.parse().map_err(corrupt)?,
                resource: r.resource,
                version_before: r.version_before,
                version_after: r.version_after,
            },
        })
    }
}

/// A version as a bound value: text, cast back to a number in the
/// statement (the builder binds no nullable integers).
fn version(v: Option<i64>) -> Option<String> {
    v.map(|v| v.to_string())
}

#[async_trait]
impl<DB> AuditLog for SqlTenantStore<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> AuditRow: FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
{
    async fn append_audit(&self, entries: &[AuditEntry]) -> StoreResult<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let _slot = self.connection_slot().await;
        let mut tx = begin_write(&self.pool()).await?;
        let mut s = Statement::new("UPDATE audit_sequence SET last = last + ");
        s.bind(entries.len() as i64)
            .push(" WHERE id = 1 RETURNING last");
        let (last,): (i64,) = s
            .query_as::<DB, (i64,)>()
            .fetch_one(&mut *tx)
            .await
            .map_err(db_err)?;
        let first = last - entries.len() as i64 + 1;
        for (c, chunk) in entries.chunks(CHUNK).enumerate() {
            let mut s = Statement::new(
                "INSERT INTO audit_log (seq, at, actor, action, resource, version_before, version_after)",
            );
            s.push(" VALUES ");
            for (i, e) in chunk.iter().enumerate() {
                s.push(if i == 0 { "(" } else { ", (" })
                    .bind(first + (c * CHUNK + i) as i64)
                    .push(", ")
                    .bind(e.at.timestamp_millis())
                    .push(", ")
                    .bind(e.actor.to_string())
                    .push(", ")
                    .bind(e.action.as_str())
                    .push(", ")
                    .bind(e.resource.clone())
                    .push(", CAST(")
                    .bind(version(e.version_before))
                    .push(" AS BIGINT), CAST(")
                    .bind(version(e.version_after))
                    .push(" AS BIGINT))");
            }
            s.query::<DB>().execute(&mut *tx).await.map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)
    }

    async fn audit_after(&self, after: u64, limit: usize) -> StoreResult<Vec<StoredAuditEntry>> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new(
            "SELECT seq, at, actor, action, resource, version_before, version_after
             FROM audit_log WHERE seq > ",
        );
        s.bind(i64::try_from(after).unwrap_or(i64::MAX))
            .push(" ORDER BY seq LIMIT ")
            .bind(i64::try_from(limit).unwrap_or(i64::MAX));
        let rows: Vec<AuditRow> = s
            .query_as::<DB, AuditRow>()
            .fetch_all(&self.pool())
            .await
            .map_err(db_err)?;
        rows.into_iter().map(StoredAuditEntry::try_from).collect()
    }

    async fn purge_audit(&self, before: Instant, limit: u32) -> StoreResult<u64> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new(
            "DELETE FROM audit_log WHERE seq IN (SELECT seq FROM audit_log WHERE at < ",
        );
        s.bind(before.timestamp_millis())
            .push(" ORDER BY seq LIMIT ")
            .bind(i64::from(limit))
            .push(") RETURNING seq");
        let rows: Vec<(i64,)> = s
            .query_as::<DB, (i64,)>()
            .fetch_all(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(rows.len() as u64)
    }
}
