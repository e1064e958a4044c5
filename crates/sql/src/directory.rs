//! The tenant directory on the embedded control database.

use async_trait::async_trait;
use sqlx::sqlite::SqlitePool;
use sqlx::Row;
use toki_model::api_key::{keys_from_stored, keys_to_stored};
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
        api_keys: keys_from_stored(
            row.get::<Option<String>, _>("api_keys").as_deref(),
            row.get::<Option<String>, _>("api_key_sha256").as_deref(),
        )
        .map_err(|e| toki_ports::StoreError::corrupt("tenant directory column api_keys", e))?,
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
        retention: match row.get::<Option<String>, _>("retention") {
            None => Default::default(),
            Some(json) => retention_from(&json).map_err(|e| {
                toki_ports::StoreError::corrupt("tenant directory column retention", e)
            })?,
        },
    })
}

/// A stored retention setting, checked as `toki tenant set` checks it.
fn retention_from(json: &str) -> Result<toki_model::retention::RetentionSettings, String> {
    let r: toki_model::retention::RetentionSettings =
        serde_json::from_str(json).map_err(|e| e.to_string())?;
    r.validate().map_err(|e| e.to_string())?;
    Ok(r)
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

    async fn delete(&self, tenant: &TenantId) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM tenants WHERE id = $1")
            .bind(tenant.as_str())
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(done.rows_affected() > 0)
    }

    async fn put(&self, r: &TenantRecord) -> StoreResult<()> {
        sqlx::query(
            // api_key_sha256 '': the keys are in api_keys (migration 0008).
            "INSERT INTO tenants (id, reminders_enabled, active, database, api_key_sha256, api_keys, change_notices, limits, retention)
             VALUES ($1, $2, $3, $4, '', $5, $6, $7, $8)
             ON CONFLICT (id) DO UPDATE SET reminders_enabled = excluded.reminders_enabled,
               active = excluded.active, database = excluded.database,
               api_key_sha256 = excluded.api_key_sha256, api_keys = excluded.api_keys,
               change_notices = excluded.change_notices, limits = excluded.limits,
               retention = excluded.retention",
        )
        .bind(r.id.as_str())
        .bind(r.reminders_enabled)
        .bind(r.active)
        .bind(&r.database)
        .bind(keys_to_stored(&r.api_keys))
        .bind(serde_json::to_string(&r.change_notices).expect("settings serialise"))
        .bind((!r.limits.is_empty()).then(|| serde_json::to_string(&r.limits).expect("limits serialise")))
        .bind(serde_json::to_string(&r.retention).expect("retention serialises"))
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

    async fn list_page(
        &self,
        after: Option<&TenantId>,
        limit: usize,
    ) -> StoreResult<Vec<TenantRecord>> {
        let rows = sqlx::query("SELECT * FROM tenants WHERE id > $1 ORDER BY id LIMIT $2")
            .bind(after.map_or("", TenantId::as_str))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.iter().map(record).collect()
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use toki_model::api_key::{authenticate, KeyDigest};
    use toki_ports::TenantDirectory;

    use super::SqliteTenantDirectory;
    use crate::control::ControlDb;

    /// A row from before several keys (migration 0008 leaves api_keys NULL)
    /// still authenticates with its one key, now named `default`; written
    /// back, it keeps that key in the new column.
    #[tokio::test]
    async fn a_single_key_row_still_authenticates() {
        let dir = tempfile::tempdir().unwrap();
        let db = ControlDb::open(&dir.path().join("control.sqlite"))
            .await
            .unwrap();
        sqlx::query("INSERT INTO tenants (id, reminders_enabled, active, database, api_key_sha256) VALUES ('acme', 1, 1, 'x', $1)")
            .bind(KeyDigest::of("toki_old").to_hex())
            .execute(&db.pool)
            .await
            .unwrap();
        let directory = SqliteTenantDirectory::new(db.pool.clone());
        let id = "acme".parse().unwrap();
        let record = directory.get(&id).await.unwrap().unwrap();
        let now: toki_model::Instant = "2026-11-23T08:00:00Z".parse().unwrap();
        let key = authenticate(&record.api_keys, "toki_old", now).unwrap();
        assert_eq!(key.name.as_str(), "default");
        directory.put(&record).await.unwrap();
        let again = directory.get(&id).await.unwrap().unwrap();
        assert_eq!(again, record);
        let legacy: String = sqlx::query_scalar("SELECT api_key_sha256 FROM tenants")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(legacy, "", "the old column no longer holds a key");
    }
}
