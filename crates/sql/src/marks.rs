//! Work marks in the embedded control database: each write is one
//! statement (SQLite runs them one at a time), the settle's condition in
//! its WHERE.

use async_trait::async_trait;
use sqlx::{Row, SqlitePool};
use toki_model::{from_millis, Instant, TenantId, ValidationError};
use toki_ports::{Conditional, StoreError, StoreResult};
use toki_ports::{WorkKind, WorkMark, WorkMarks};

use crate::db_err;

#[derive(Clone)]
pub struct SqliteWorkMarks {
    pool: SqlitePool,
}

impl SqliteWorkMarks {
    pub fn new(pool: SqlitePool) -> Self {
        SqliteWorkMarks { pool }
    }
}

/// A stored value that does not read back (the error names the column).
fn corrupt(e: ValidationError) -> StoreError {
    StoreError::backend("work mark", e)
}

#[async_trait]
impl WorkMarks for SqliteWorkMarks {
    async fn mark(&self, kind: WorkKind, tenant: &TenantId, due: Instant) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO work_marks (kind, tenant, due_ms, revision) VALUES (?, ?, ?, 1) \
             ON CONFLICT (kind, tenant) DO UPDATE \
             SET due_ms = MIN(work_marks.due_ms, excluded.due_ms), \
                 revision = work_marks.revision + 1",
        )
        .bind(kind.as_str())
        .bind(tenant.as_str())
        .bind(due.timestamp_millis())
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn due(&self, kind: WorkKind, now: Instant, limit: usize) -> StoreResult<Vec<WorkMark>> {
        let rows = sqlx::query(
            "SELECT tenant, due_ms, revision FROM work_marks \
             WHERE kind = ? AND due_ms <= ? ORDER BY due_ms, tenant LIMIT ?",
        )
        .bind(kind.as_str())
        .bind(now.timestamp_millis())
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.into_iter()
            .map(|row| {
                let revision: i64 = row.get("revision");
                Ok(WorkMark {
                    kind,
                    tenant: row
                        .get::<&str, _>("tenant")
                        .parse()
                        .map_err(|e| corrupt(ValidationError::new("tenant", e)))?,
                    due: from_millis("due_ms", row.get("due_ms")).map_err(corrupt)?,
                    revision: u64::try_from(revision)
                        .map_err(|e| corrupt(ValidationError::new("revision", e)))?,
                })
            })
            .collect()
    }

    async fn settle(&self, read: &WorkMark, next: Option<Instant>) -> StoreResult<Conditional> {
        let revision = i64::try_from(read.revision).unwrap_or(i64::MAX);
        let (kind, tenant) = (read.kind.as_str(), read.tenant.as_str());
        let done = match next {
            None => {
                sqlx::query("DELETE FROM work_marks WHERE kind = ? AND tenant = ? AND revision = ?")
                    .bind(kind)
                    .bind(tenant)
                    .bind(revision)
                    .execute(&self.pool)
                    .await
                    .map_err(db_err)?
            }
            Some(next) => sqlx::query(
                "UPDATE work_marks SET due_ms = ? WHERE kind = ? AND tenant = ? AND revision = ?",
            )
            .bind(next.timestamp_millis())
            .bind(kind)
            .bind(tenant)
            .bind(revision)
            .execute(&self.pool)
            .await
            .map_err(db_err)?,
        };
        if done.rows_affected() == 1 {
            return Ok(Conditional::Written);
        }
        if let Some(next) = next {
            // Marked again meanwhile: that work stays, no later than `next`.
            sqlx::query(
                "UPDATE work_marks SET due_ms = MIN(due_ms, ?) WHERE kind = ? AND tenant = ?",
            )
            .bind(next.timestamp_millis())
            .bind(kind)
            .bind(tenant)
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        }
        Ok(Conditional::Refused)
    }

    async fn marked(&self, kind: WorkKind) -> StoreResult<Vec<TenantId>> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT tenant FROM work_marks WHERE kind = ? ORDER BY tenant")
                .bind(kind.as_str())
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
        rows.into_iter()
            .map(|(t,)| {
                t.parse()
                    .map_err(|e| corrupt(ValidationError::new("tenant", e)))
            })
            .collect()
    }
}
