//! Partition leases in the embedded control database: each write is one
//! conditional statement (SQLite runs them one at a time), so two holders
//! racing for a partition cannot both win.

use async_trait::async_trait;
use sqlx::{Row, SqlitePool};
use toki_model::{from_millis, Instant, ValidationError};
use toki_ports::{Conditional, StoreError, StoreResult};
use toki_ports::{LeaseStore, PartitionLease};

use crate::db_err;

#[derive(Clone)]
pub struct SqliteLeaseStore {
    pool: SqlitePool,
}

impl SqliteLeaseStore {
    pub fn new(pool: SqlitePool) -> Self {
        SqliteLeaseStore { pool }
    }
}

/// A stored value that does not read back (the error names the column).
fn corrupt(e: ValidationError) -> StoreError {
    StoreError::backend("lease row", e)
}

#[async_trait]
impl LeaseStore for SqliteLeaseStore {
    async fn acquire(
        &self,
        key: &str,
        partition: u32,
        holder: &str,
        until: Instant,
        now: Instant,
    ) -> StoreResult<Conditional> {
        // The upsert's WHERE is the condition: a row held by someone else
        // and still live is left as it is (0 rows affected).
        let done = sqlx::query(
            "INSERT INTO rate_leases (key, partition, holder, expires_ms) VALUES (?, ?, ?, ?) \
             ON CONFLICT (key, partition) DO UPDATE \
             SET holder = excluded.holder, expires_ms = excluded.expires_ms \
             WHERE rate_leases.holder = excluded.holder OR rate_leases.expires_ms <= ?",
        )
        .bind(key)
        .bind(i64::from(partition))
        .bind(holder)
        .bind(until.timestamp_millis())
        .bind(now.timestamp_millis())
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(Conditional::of(done.rows_affected() == 1))
    }

    async fn release(&self, key: &str, partition: u32, holder: &str) -> StoreResult<Conditional> {
        let done =
            sqlx::query("DELETE FROM rate_leases WHERE key = ? AND partition = ? AND holder = ?")
                .bind(key)
                .bind(i64::from(partition))
                .bind(holder)
                .execute(&self.pool)
                .await
                .map_err(db_err)?;
        Ok(Conditional::of(done.rows_affected() == 1))
    }

    async fn leases(&self, key: &str) -> StoreResult<Vec<PartitionLease>> {
        let rows = sqlx::query(
            "SELECT partition, holder, expires_ms FROM rate_leases \
             WHERE key = ? ORDER BY partition",
        )
        .bind(key)
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.into_iter()
            .map(|row| {
                let partition: i64 = row.get("partition");
                Ok(PartitionLease {
                    key: key.to_owned(),
                    partition: u32::try_from(partition)
                        .map_err(|e| corrupt(ValidationError::new("partition", e)))?,
                    holder: row.get("holder"),
                    expires_at: from_millis("expires_ms", row.get("expires_ms"))
                        .map_err(corrupt)?,
                })
            })
            .collect()
    }
}
