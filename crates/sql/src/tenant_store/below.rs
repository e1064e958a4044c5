//! What an erasure leaves below the tables, cleared once it committed
//! (docs/erasure.md). On SQLite the connections delete with `secure_delete`
//! (a freed cell or page is overwritten with zeros), so the pages the
//! erasure wrote hold nothing of the person; what still does is the
//! write-ahead log's older frames, which a `TRUNCATE` checkpoint copies
//! into the file and cuts off. On Postgres the deleted and rewritten rows
//! stay as dead tuples until `VACUUM`: the erasure vacuums the tables it
//! changed, outside its transaction, one vacuum at a time per database.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sqlx::{ColumnIndex, Database, Decode, Executor, Row, Type};
use toki_model::erasure::ErasureReport;
use toki_ports::StoreResult;
use tokio::sync::Mutex;
use tracing::warn;

use super::SqlTenantStore;
use crate::db_err;

/// The vacuums of one Postgres database: erasures committed, and how many
/// of them the last vacuum to start covered. An erasure whose commit a
/// later-started vacuum covered has nothing left to vacuum: erasures that
/// queue behind a vacuum share the next one.
#[derive(Debug, Default)]
pub(crate) struct Vacuums {
    committed: AtomicU64,
    covered: Mutex<u64>,
}

impl Vacuums {
    /// Notes an erasure's commit; its number.
    fn committed(&self) -> u64 {
        self.committed.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// The tables an erasure changed, by its report (Postgres vacuums those).
fn changed_tables(r: &ErasureReport) -> Vec<&'static str> {
    let places = [
        (r.users, &["users"][..]),
        (r.participations, &["participants"]),
        (r.schedules_changed, &["schedules", "schedule_mirror"]),
        (
            r.deliveries_cancelled + r.deliveries_pseudonymised,
            &["deliveries"],
        ),
        (r.chat_messages, &["chat_messages"]),
        (r.delivery_events, &["delivery_events"]),
        (r.change_baselines, &["change_baselines"]),
        (r.change_notices, &["change_notices"]),
        (r.idempotency_keys, &["idempotency_keys"]),
        (r.suppressions, &["suppressed_addresses"]),
        (r.audit_entries, &["audit_log"]),
    ];
    places
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .flat_map(|(_, tables)| tables.iter().copied())
        .collect()
}

impl<DB> SqlTenantStore<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> i64: Decode<'q, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    /// After an erasure committed: the WAL truncated (SQLite) or the
    /// changed tables vacuumed (Postgres). A failure is logged, not
    /// returned: the erasure itself is done, and the tables hold nothing
    /// of the person.
    pub(super) async fn clear_below_tables(&self, report: &ErasureReport) {
        let cleared = if DB::NAME == "SQLite" {
            self.truncate_wal().await
        } else {
            self.vacuum(&changed_tables(report)).await
        };
        if let Err(e) = cleared {
            warn!(error = %toki_model::error::chain(&e), "clearing below the tables after an erasure failed; the old rows' bytes stay until reused");
        }
    }

    /// `PRAGMA wal_checkpoint(TRUNCATE)`: every frame copied into the file,
    /// the WAL cut to nothing. A reader in another process holding an older
    /// snapshot keeps it from finishing: said in the log.
    async fn truncate_wal(&self) -> StoreResult<()> {
        let _slot = self.connection_slot().await;
        // One row: (busy, frames in the WAL, frames checkpointed).
        let row = sqlx::raw_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            .fetch_one(&self.pool())
            .await
            .map_err(db_err)?;
        let busy = row.try_get::<i64, usize>(0).map_err(db_err)?;
        if busy != 0 {
            warn!("the WAL was not truncated after an erasure (another process was reading); the next complete checkpoint overwrites it");
        }
        Ok(())
    }

    /// `VACUUM` of `tables`, unless a vacuum that started after this
    /// erasure's commit has run already (one at a time per database).
    async fn vacuum(&self, tables: &[&str]) -> StoreResult<()> {
        if tables.is_empty() {
            return Ok(());
        }
        let vacuums: &Arc<Vacuums> = &self.vacuums;
        let mine = vacuums.committed();
        let mut covered = vacuums.covered.lock().await;
        if *covered >= mine {
            return Ok(());
        }
        // Every erasure committed by now is covered by this vacuum.
        let starting = vacuums.committed.load(Ordering::SeqCst);
        let _slot = self.connection_slot().await;
        // The table names are this module's own: no input reaches the text.
        let sql = format!("VACUUM {}", tables.join(", "));
        sqlx::raw_sql(&sql)
            .execute(&self.pool())
            .await
            .map_err(db_err)?;
        *covered = starting;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_tables_an_erasure_changed_are_vacuumed() {
        let report = ErasureReport {
            users: 1,
            deliveries_pseudonymised: 3,
            ..ErasureReport::default()
        };
        assert_eq!(changed_tables(&report), ["users", "deliveries"]);
        assert!(changed_tables(&ErasureReport::default()).is_empty());
    }
}
