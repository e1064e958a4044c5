//! Offboarding on a tenant database (Postgres or SQLite): every table's
//! rows, the fence that leaves no delivery anything to be built from, and
//! the claims still live.

use async_trait::async_trait;
use sqlx::{Database, Decode, Encode, Executor, FromRow, IntoArguments, Type};

use toki_model::Instant;
use toki_ports::offboard::{Fenced, Holding, TenantOffboard};
use toki_ports::StoreResult;

use super::statement::Statement;
use super::SqlTenantStore;
use crate::{begin_write, db_err};

/// Every table of the database but the migrator's own.
fn tables_query<DB: Database>() -> &'static str {
    if DB::NAME == "SQLite" {
        "SELECT name FROM sqlite_master WHERE type = 'table'
           AND name NOT LIKE 'sqlite_%' AND name <> '_sqlx_migrations' ORDER BY name"
    } else {
        "SELECT table_name::text FROM information_schema.tables
          WHERE table_schema = 'public' AND table_type = 'BASE TABLE'
            AND table_name <> '_sqlx_migrations' ORDER BY table_name"
    }
}

/// What the fence deletes, children before parents (participants and rules
/// go with their schedules), and which figure of [`Fenced`] each counts in.
const FENCED: [(&str, Part); 6] = [
    ("schedules", Part::Schedules),
    ("users", Part::Users),
    ("change_baselines", Part::Notices),
    ("change_notices", Part::Notices),
    ("event_endpoints", Part::Endpoints),
    ("webhook_settings", Part::Endpoints),
];

#[derive(Clone, Copy)]
enum Part {
    Schedules,
    Users,
    Notices,
    Endpoints,
}

impl Part {
    fn add(self, f: &mut Fenced, n: u64) {
        match self {
            Part::Schedules => f.schedules += n,
            Part::Users => f.users += n,
            Part::Notices => f.notice_rows += n,
            Part::Endpoints => f.endpoints += n,
        }
    }
}

#[async_trait]
impl<DB> TenantOffboard for SqlTenantStore<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
{
    async fn table_counts(&self) -> StoreResult<Vec<Holding>> {
        let _slot = self.connection_slot().await;
        let tables: Vec<(String,)> = Statement::new(tables_query::<DB>())
            .query_as::<DB, (String,)>()
            .fetch_all(&self.pool())
            .await
            .map_err(db_err)?;
        let mut out = Vec::with_capacity(tables.len());
        for (table,) in tables {
            // A name the catalogue gave, quoted: no input of anyone's.
            let sql = format!("SELECT COUNT(*) FROM \"{}\"", table.replace('"', "\"\""));
            let (n,): (i64,) = Statement::new(&sql)
                .query_as::<DB, (i64,)>()
                .fetch_one(&self.pool())
                .await
                .map_err(db_err)?;
            out.push(Holding::new(format!("tenant.{table}"), n as u64));
        }
        Ok(out)
    }

    async fn fence(&self) -> StoreResult<Fenced> {
        let _slot = self.connection_slot().await;
        let mut tx = begin_write(&self.pool()).await?;
        let mut fenced = Fenced::default();
        for (table, part) in FENCED {
            let (n,): (i64,) = Statement::new(&format!("SELECT COUNT(*) FROM {table}"))
                .query_as::<DB, (i64,)>()
                .fetch_one(&mut *tx)
                .await
                .map_err(db_err)?;
            Statement::new(&format!("DELETE FROM {table}"))
                .query::<DB>()
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
            part.add(&mut fenced, n as u64);
        }
        tx.commit().await.map_err(db_err)?;
        Ok(fenced)
    }

    async fn live_claims(&self, renewed_since: Instant) -> StoreResult<u64> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new(
            "SELECT COUNT(*) FROM deliveries WHERE status = 'sending' AND claimed_at >= ",
        );
        s.bind(renewed_since.timestamp_millis());
        let (n,): (i64,) = s
            .query_as::<DB, (i64,)>()
            .fetch_one(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(n as u64)
    }
}
