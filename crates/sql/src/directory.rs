//! The tenant directory on the embedded control database.

use async_trait::async_trait;
use sqlx::sqlite::SqlitePool;
use sqlx::Row;
use toki_model::{TenantId, TenantRecord, ValidationError};
use toki_ports::StoreResult;
use toki_ports::TenantDirectory;

use crate::db_err;

pub struct SqliteTenantDirectory {
    pool: SqlitePool,
}

impl SqliteTenantDirectory {
    pub fn new(pool: SqlitePool) -> Self {
        Self { pool }
    }
}

fn record(row: &sqlx::sqlite::SqliteRow) -> StoreResult<TenantRecord> {
    let id: String = row.get("id");
    Ok(TenantRecord {
        id: TenantId::parse_field("tenant", &id).map_err(|e: ValidationError| {
            toki_ports::StoreError::corrupt("tenant directory row", e)
        })?,
        reminders_enabled: row.get("reminders_enabled"),
        active: row.get("active"),
        database: row.get("database"),
        api_key_sha256: row.get("api_key_sha256"),
        change_notices: match row.get::<Option<String>, _>("change_notices") {
            None => Default::default(),
            Some(json) => serde_json::from_str(&json).map_err(|e| {
                toki_ports::StoreError::corrupt(
                    "tenant directory column change_notices",
                    e.to_string(),
                )
            })?,
        },
        limits: match row.get::<Option<String>, _>("limits") {
            None => Default::default(),
            Some(json) => serde_json::from_str(&json).map_err(|e| {
                toki_ports::StoreError::corrupt("tenant directory column limits", e.to_string())
            })?,
        },
    })
}

#[async_trait]
impl TenantDirectory for SqliteTenantDirectory {
    async fn get(&self, tenant: &TenantId) -> StoreResult<Option<TenantRecord>> {
        let row = sqlx::query("SELECT * FROM tenants WHERE id = $1")
            .bind(tenant.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        row.as_ref().map(record).transpose()
    }

    async fn put(&self, r: &TenantRecord) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO tenants (id, reminders_enabled, active, database, api_key_sha256, change_notices, limits)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (id) DO UPDATE SET reminders_enabled = excluded.reminders_enabled,
               active = excluded.active, database = excluded.database,
               api_key_sha256 = excluded.api_key_sha256, change_notices = excluded.change_notices,
               limits = excluded.limits",
        )
        .bind(r.id.as_str())
        .bind(r.reminders_enabled)
        .bind(r.active)
        .bind(&r.database)
        .bind(&r.api_key_sha256)
        .bind(serde_json::to_string(&r.change_notices).expect("settings serialise"))
        .bind((!r.limits.is_empty()).then(|| serde_json::to_string(&r.limits).expect("limits serialise")))
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn list(&self) -> StoreResult<Vec<TenantRecord>> {
        let rows = sqlx::query("SELECT * FROM tenants ORDER BY id")
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.iter().map(record).collect()
    }
}
