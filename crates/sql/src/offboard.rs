//! What the embedded control database holds of a tenant, and its removal
//! (offboarding): index rows and versions, queued messages, debounce and
//! lease rows, the repair cursor. The directory entry is the directory's.

use async_trait::async_trait;
use sqlx::sqlite::SqlitePool;
use sqlx::Row;

use toki_model::TenantId;
use toki_ports::message::{Attributes, ATTR_KEY, ATTR_TENANT};
use toki_ports::offboard::{is_tenants_debounce_key, is_tenants_lease_key, Holding};
use toki_ports::{StoreResult, TenantFootprint};

use crate::{begin_write, db_err};

/// Queue messages read per page when looking for a tenant's.
const PAGE: i64 = 1_000;

pub struct SqliteControlFootprint {
    pool: SqlitePool,
}

impl SqliteControlFootprint {
    pub fn new(pool: SqlitePool) -> Self {
        SqliteControlFootprint { pool }
    }

    /// The ids of the tenant's queue messages (live and dead letters): a
    /// reminder or a notice names the tenant, a debounce check its key.
    async fn queue_ids(&self, tenant: &TenantId) -> StoreResult<Vec<i64>> {
        let mut out = Vec::new();
        let mut after = 0_i64;
        loop {
            let rows = sqlx::query(
                "SELECT id, attributes FROM queue_messages WHERE id > $1 ORDER BY id LIMIT $2",
            )
            .bind(after)
            .bind(PAGE)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
            for row in &rows {
                let id: i64 = row.get("id");
                let attrs: Attributes =
                    serde_json::from_str(row.get::<&str, _>("attributes")).unwrap_or_default();
                let named = attrs.get(ATTR_TENANT).map(String::as_str) == Some(tenant.as_str())
                    || attrs
                        .get(ATTR_KEY)
                        .is_some_and(|k| is_tenants_debounce_key(k, tenant));
                if named {
                    out.push(id);
                }
                after = id;
            }
            if (rows.len() as i64) < PAGE {
                return Ok(out);
            }
        }
    }

    /// Keys of `table`'s rows (its `key` column) that are the tenant's.
    async fn keys(
        &self,
        table: &str,
        tenant: &TenantId,
        is_tenants: fn(&str, &TenantId) -> bool,
    ) -> StoreResult<Vec<String>> {
        let keys: Vec<(String,)> = sqlx::query_as(&format!("SELECT DISTINCT key FROM {table}"))
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(keys
            .into_iter()
            .map(|(k,)| k)
            .filter(|k| is_tenants(k, tenant))
            .collect())
    }

    async fn count(&self, sql: &str, tenant: &TenantId) -> StoreResult<u64> {
        let (n,): (i64,) = sqlx::query_as(sql)
            .bind(tenant.as_str())
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(n as u64)
    }
}

/// The tables with a `tenant` column (and the cursor's), by place.
const BY_COLUMN: [(&str, &str); 4] = [
    ("control.reminder_index", "reminder_index WHERE tenant = $1"),
    ("control.index_versions", "index_versions WHERE tenant = $1"),
    (
        "control.repair_cursor",
        "repair_cursor WHERE next_tenant = $1",
    ),
    ("control.work_marks", "work_marks WHERE tenant = $1"),
];

#[async_trait]
impl TenantFootprint for SqliteControlFootprint {
    async fn holdings(&self, tenant: &TenantId) -> StoreResult<Vec<Holding>> {
        let mut out = Vec::new();
        for (place, from) in BY_COLUMN {
            let n = self
                .count(&format!("SELECT COUNT(*) FROM {from}"), tenant)
                .await?;
            out.push(Holding::new(place, n));
        }
        out.push(Holding::new(
            "control.queue_messages",
            self.queue_ids(tenant).await?.len() as u64,
        ));
        let debounce = self
            .keys("debounce", tenant, is_tenants_debounce_key)
            .await?;
        out.push(Holding::new("control.debounce", debounce.len() as u64));
        let leases = self
            .keys("rate_leases", tenant, is_tenants_lease_key)
            .await?;
        let mut lease_rows = 0;
        for key in &leases {
            let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM rate_leases WHERE key = $1")
                .bind(key)
                .fetch_one(&self.pool)
                .await
                .map_err(db_err)?;
            lease_rows += n as u64;
        }
        out.push(Holding::new("control.rate_leases", lease_rows));
        Ok(out)
    }

    async fn delete_tenant(&self, tenant: &TenantId) -> StoreResult<Vec<Holding>> {
        let held = self.holdings(tenant).await?;
        let queued = self.queue_ids(tenant).await?;
        let debounce = self
            .keys("debounce", tenant, is_tenants_debounce_key)
            .await?;
        let leases = self
            .keys("rate_leases", tenant, is_tenants_lease_key)
            .await?;
        let mut tx = begin_write(&self.pool).await?;
        for (_, from) in BY_COLUMN {
            sqlx::query(&format!("DELETE FROM {from}"))
                .bind(tenant.as_str())
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        for id in queued {
            sqlx::query("DELETE FROM queue_messages WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        for (table, keys) in [("debounce", debounce), ("rate_leases", leases)] {
            for key in keys {
                sqlx::query(&format!("DELETE FROM {table} WHERE key = $1"))
                    .bind(key)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_err)?;
            }
        }
        tx.commit().await.map_err(db_err)?;
        Ok(held)
    }
}
