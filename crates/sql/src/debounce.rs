//! Debounce rows in the embedded control database: each write is one
//! conditional statement (SQLite runs them one at a time).

use std::time::Duration;

use async_trait::async_trait;
use sqlx::{Row, SqlitePool};
use toki_model::debounce::DebounceEntry;
use toki_model::from_millis;
use toki_ports::DebounceStore;
use toki_ports::{Conditional, StoreError, StoreResult};

use crate::db_err;

#[derive(Clone)]
pub struct SqliteDebounceStore {
    pool: SqlitePool,
}

impl SqliteDebounceStore {
    pub fn new(pool: SqlitePool) -> Self {
        SqliteDebounceStore { pool }
    }
}

/// A stored value that does not read back (the error names the column).
fn corrupt(e: toki_model::ValidationError) -> StoreError {
    StoreError::backend("debounce row", e)
}

#[async_trait]
impl DebounceStore for SqliteDebounceStore {
    async fn get(&self, key: &str) -> StoreResult<Option<DebounceEntry>> {
        let row = sqlx::query(
            "SELECT token, burst_started_ms, last_call_ms, delay_ms, pending \
             FROM debounce WHERE key = ?",
        )
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_err)?;
        let Some(row) = row else { return Ok(None) };
        let delay_ms: i64 = row.get("delay_ms");
        Ok(Some(DebounceEntry {
            key: key.to_owned(),
            token: row.get("token"),
            burst_started: from_millis("burst_started_ms", row.get("burst_started_ms"))
                .map_err(corrupt)?,
            last_call: from_millis("last_call_ms", row.get("last_call_ms")).map_err(corrupt)?,
            delay: Duration::from_millis(
                u64::try_from(delay_ms)
                    .map_err(|e| corrupt(toki_model::ValidationError::new("delay_ms", e)))?,
            ),
            pending: row.get::<i64, _>("pending") != 0,
        }))
    }

    async fn put_if(&self, e: &DebounceEntry, expected: Option<&str>) -> StoreResult<Conditional> {
        let delay_ms = i64::try_from(e.delay.as_millis()).unwrap_or(i64::MAX);
        let result = match expected {
            None => {
                sqlx::query(
                    "INSERT INTO debounce \
                     (key, token, burst_started_ms, last_call_ms, delay_ms, pending) \
                     VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
                )
                .bind(&e.key)
                .bind(&e.token)
                .bind(e.burst_started.timestamp_millis())
                .bind(e.last_call.timestamp_millis())
                .bind(delay_ms)
                .bind(e.pending)
                .execute(&self.pool)
                .await
            }
            Some(token) => {
                sqlx::query(
                    "UPDATE debounce SET token = ?, burst_started_ms = ?, last_call_ms = ?, \
                     delay_ms = ?, pending = ? WHERE key = ? AND token = ?",
                )
                .bind(&e.token)
                .bind(e.burst_started.timestamp_millis())
                .bind(e.last_call.timestamp_millis())
                .bind(delay_ms)
                .bind(e.pending)
                .bind(&e.key)
                .bind(token)
                .execute(&self.pool)
                .await
            }
        };
        Ok(Conditional::of(
            result.map_err(db_err)?.rows_affected() == 1,
        ))
    }

    async fn remove_if(&self, key: &str, token: &str) -> StoreResult<Conditional> {
        let done = sqlx::query("DELETE FROM debounce WHERE key = ? AND token = ?")
            .bind(key)
            .bind(token)
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(Conditional::of(done.rows_affected() == 1))
    }
}
