//! The retention purge in the embedded control database: the queue's dead
//! letters, per tenant (a message names its tenant in its attributes), and
//! index rows past their expiry (what DynamoDB's TTL does on AWS). Each call
//! deletes one bounded batch, oldest first.

use async_trait::async_trait;
use sqlx::sqlite::SqlitePool;
use toki_model::{Instant, TenantId};
use toki_ports::message::ATTR_TENANT;
use toki_ports::retention::{batch_limit, ControlPurge};
use toki_ports::StoreResult;

use crate::db_err;

pub struct SqliteControlPurge {
    pool: SqlitePool,
    /// The delay queue whose dead letters are purged.
    queue: String,
}

impl SqliteControlPurge {
    pub fn new(pool: SqlitePool, queue: impl Into<String>) -> Self {
        Self {
            pool,
            queue: queue.into(),
        }
    }
}

#[async_trait]
impl ControlPurge for SqliteControlPurge {
    async fn purge_dead_letters(
        &self,
        tenant: Option<&TenantId>,
        before: Instant,
        limit: u32,
    ) -> StoreResult<u64> {
        // The (queue, dead, visible_at) index narrows this to the dead letters.
        let r = sqlx::query(&format!(
            "DELETE FROM queue_messages WHERE id IN (
               SELECT id FROM queue_messages
               WHERE queue = $1 AND dead = TRUE AND dead_at < $2
                 AND json_extract(attributes, '$.{ATTR_TENANT}') IS $3
               ORDER BY dead_at, id LIMIT $4)"
        ))
        .bind(&self.queue)
        .bind(before.timestamp_millis())
        .bind(tenant.map(TenantId::as_str))
        .bind(i64::from(batch_limit(limit)))
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(r.rows_affected())
    }

    async fn purge_expired_index(&self, now: Instant, limit: u32) -> StoreResult<u64> {
        // expires_at is in seconds, as DynamoDB's TTL attribute is.
        let r = sqlx::query(
            "DELETE FROM reminder_index WHERE (partition, sort_key) IN (
               SELECT partition, sort_key FROM reminder_index WHERE expires_at < $1
               ORDER BY expires_at LIMIT $2)",
        )
        .bind(now.timestamp())
        .bind(i64::from(batch_limit(limit)))
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(r.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::ControlDb;

    async fn db() -> (tempfile::TempDir, SqlitePool) {
        let dir = tempfile::tempdir().unwrap();
        let db = ControlDb::open(&dir.path().join("control.sqlite"))
            .await
            .unwrap();
        (dir, db.pool)
    }

    async fn dead_letter(pool: &SqlitePool, tenant: Option<&str>, dead_at: i64) {
        let attributes = match tenant {
            Some(t) => format!(r#"{{"tenant":"{t}"}}"#),
            None => "{}".to_owned(),
        };
        sqlx::query(
            "INSERT INTO queue_messages (queue, body, attributes, sent_at, visible_at, dead, dead_at)
             VALUES ('reminders', '{}', $1, 0, 0, TRUE, $2)",
        )
        .bind(attributes)
        .bind(dead_at)
        .execute(pool)
        .await
        .unwrap();
    }

    /// Only the tenant's own dead letters older than the cutoff go, a
    /// batch at a time; live messages and younger letters stay.
    #[tokio::test]
    async fn dead_letters_go_per_tenant_and_older_than_the_cutoff() {
        let (_dir, pool) = db().await;
        for at in [1_000, 2_000, 3_000, 9_000] {
            dead_letter(&pool, Some("acme"), at).await;
        }
        dead_letter(&pool, Some("beta"), 1_000).await;
        dead_letter(&pool, None, 1_000).await;
        sqlx::query(
            "INSERT INTO queue_messages (queue, body, attributes, sent_at, visible_at)
             VALUES ('reminders', '{}', '{\"tenant\":\"acme\"}', 0, 0)",
        )
        .execute(&pool)
        .await
        .unwrap();
        let purge = SqliteControlPurge::new(pool.clone(), "reminders");
        let acme: TenantId = "acme".parse().unwrap();
        let before = toki_model::from_millis("b", 5_000).unwrap();
        assert_eq!(
            purge
                .purge_dead_letters(Some(&acme), before, 2)
                .await
                .unwrap(),
            2
        );
        assert_eq!(
            purge
                .purge_dead_letters(Some(&acme), before, 2)
                .await
                .unwrap(),
            1
        );
        assert_eq!(
            purge
                .purge_dead_letters(Some(&acme), before, 2)
                .await
                .unwrap(),
            0
        );
        assert_eq!(purge.purge_dead_letters(None, before, 2).await.unwrap(), 1);
        let left: Vec<(Option<String>, bool)> = sqlx::query_as(
            "SELECT json_extract(attributes, '$.tenant'), dead FROM queue_messages ORDER BY id",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(
            left,
            vec![
                (Some("acme".into()), true),
                (Some("beta".into()), true),
                (Some("acme".into()), false)
            ]
        );
    }

    #[tokio::test]
    async fn expired_index_rows_go_in_batches() {
        let (_dir, pool) = db().await;
        for (i, expires) in [10_i64, 20, 30, 99].iter().enumerate() {
            sqlx::query(
                "INSERT INTO reminder_index (partition, sort_key, tenant, schedule_id, occurrence,
                   minutes_before, due_at, version, channels, status, expires_at)
                 VALUES ('p', $1, 'acme', 's', 0, 5, 0, 1, '', 'pending', $2)",
            )
            .bind(format!("k{i}"))
            .bind(expires)
            .execute(&pool)
            .await
            .unwrap();
        }
        let purge = SqliteControlPurge::new(pool.clone(), "reminders");
        let now = toki_model::from_millis("now", 50_000).unwrap();
        assert_eq!(purge.purge_expired_index(now, 2).await.unwrap(), 2);
        assert_eq!(purge.purge_expired_index(now, 2).await.unwrap(), 1);
        assert_eq!(purge.purge_expired_index(now, 2).await.unwrap(), 0);
        let (left,): (i64,) = sqlx::query_as("SELECT expires_at FROM reminder_index")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(left, 99);
    }
}
