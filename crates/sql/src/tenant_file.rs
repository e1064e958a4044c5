//! A tenant's SQLite file (embedded backend): opened only if it exists, with
//! `secure_delete` on, and fenced before it is removed, so that no process
//! still holding it open can write to it afterwards (docs/offboarding.md).
//!
//! The fence is a trigger on every table that aborts any insert, update or
//! delete. It is written in one write transaction before the file is
//! unlinked: SQLite serialises writers and checks the schema at the start of
//! every statement, so a write that begins after the fence committed fails,
//! and one that committed before it is in the file that is then removed.
//! It costs nothing until then (no check on the path of a write).

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use toki_ports::{StoreError, StoreResult};

use crate::{begin_write, db_err};

/// The message of the fence's abort: [`crate::db_err`] knows a write to a
/// removed database by it.
pub(crate) const REMOVED: &str = "toki: this tenant database was removed";

/// Prepared statements a tenant connection keeps (sqlx's default is 100):
/// each costs memory for as long as the connection is open, and a process
/// has hundreds open, each running the same few statements of a batch.
const STATEMENT_CACHE: usize = 16;

/// The WAL's size kept after a checkpoint, in bytes (`journal_size_limit`).
/// Set at all, it also has the last connection's close truncate the kept
/// WAL to nothing ([`keep_wal_files`]); unset (SQLite's -1), the WAL is
/// kept whole, and every open reads and checksums it back, and every close
/// copies its pages to the database again.
const WAL_SIZE_LIMIT: &str = "4194304";

/// The connection settings of a tenant file: those of the control database
/// (WAL, one connection), and `secure_delete`: deleted content is
/// overwritten with zeros, so an erased person is not left in free pages.
fn options(path: &Path, create: bool) -> StoreResult<SqliteConnectOptions> {
    Ok(
        SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .map_err(db_err)?
            .create_if_missing(create)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true)
            .pragma("secure_delete", "ON")
            .pragma("journal_size_limit", WAL_SIZE_LIMIT)
            .statement_cache_capacity(STATEMENT_CACHE),
    )
}

/// One connection, opened at once (so a missing or corrupt file fails the
/// open) and closed once idle for [`crate::TENANT_IDLE_TIMEOUT`]:
/// a tenant with nothing to do holds no file descriptor.
async fn pool(options: SqliteConnectOptions) -> StoreResult<SqlitePool> {
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .idle_timeout(Some(crate::TENANT_IDLE_TIMEOUT))
        .max_lifetime(None)
        .after_connect(|conn, _| Box::pin(keep_wal_files(conn)))
        .connect_lazy_with(options);
    drop(pool.acquire().await.map_err(db_err)?);
    Ok(pool)
}

/// Keeps the file's WAL and shared-memory files when its last connection
/// closes. SQLite otherwise deletes both then and creates them at the next
/// open: a tenant database closed and opened again in a burst over more
/// tenants than are kept open paid two file creations and deletions each
/// time (BENCHMARKS.md, "Tenants"). The WAL is still checkpointed at close
/// and truncated to nothing ([`WAL_SIZE_LIMIT`]), so that the next open
/// has nothing to read back (closing without the checkpoint left every open
/// reading the tenant's schema from it; keeping it whole, its frames).
async fn keep_wal_files(conn: &mut sqlx::SqliteConnection) -> Result<(), sqlx::Error> {
    use libsqlite3_sys as ffi;
    let mut handle = conn.lock_handle().await?;
    let db = handle.as_raw_handle().as_ptr();
    let mut on: std::ffi::c_int = 1;
    // SAFETY: `db` is the connection's open handle, held locked for the
    // call; PERSIST_WAL reads and writes one int through its pointer.
    let rc = unsafe {
        ffi::sqlite3_file_control(
            db,
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&mut on as *mut std::ffi::c_int).cast(),
        )
    };
    match rc {
        ffi::SQLITE_OK => Ok(()),
        rc => Err(sqlx::Error::Protocol(format!(
            "keeping a tenant file's WAL at close failed (code {rc})"
        ))),
    }
}

/// Opens an existing tenant file; never creates one (a removed tenant's
/// path opened by a late reader must not come back as an empty file).
pub async fn open_tenant_file(path: &Path) -> StoreResult<SqlitePool> {
    if !path.exists() {
        return Err(StoreError::NotFound(format!(
            "tenant database {} does not exist",
            path.display()
        )));
    }
    pool(options(path, false)?).await
}

/// Creates (if missing) and opens a tenant file.
pub async fn create_tenant_file(path: &Path) -> StoreResult<SqlitePool> {
    pool(options(path, true)?).await
}

/// Fences a tenant file (see the module's comment): from when this returns,
/// every write to it fails, in every process. Nothing if there is no file.
pub async fn fence_tenant_file(path: &Path) -> StoreResult<()> {
    if !path.exists() {
        return Ok(());
    }
    let pool = pool(options(path, false)?).await?;
    let fenced = fence(&pool).await;
    pool.close().await;
    fenced
}

async fn fence(pool: &SqlitePool) -> StoreResult<()> {
    let mut tx = begin_write(pool).await?;
    let tables: Vec<(String,)> = sqlx::query_as(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(db_err)?;
    for (table,) in tables {
        // The names are the schema's own (letters, digits, '_'): quoted all the same.
        let quoted = table.replace('"', "\"\"");
        for op in ["INSERT", "UPDATE", "DELETE"] {
            let trigger = format!("toki_removed_{}_{}", quoted, op.to_lowercase());
            sqlx::query(&format!(
                "CREATE TRIGGER IF NOT EXISTS \"{trigger}\" BEFORE {op} ON \"{quoted}\"
                 BEGIN SELECT RAISE(ABORT, '{REMOVED}'); END"
            ))
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        }
    }
    tx.commit().await.map_err(db_err)
}

/// Fences, then deletes a tenant file with its WAL and shared-memory files.
pub async fn remove_tenant_file(path: &Path) -> StoreResult<()> {
    fence_tenant_file(path).await?;
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{}{suffix}", path.display());
        match std::fs::remove_file(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::backend(format!("removing {file}"), e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Closing the last connection leaves the WAL and shared-memory files
    /// (SQLite's default deletes them), the WAL emptied, and the file opens
    /// again with its rows.
    #[tokio::test]
    async fn the_wal_files_outlive_the_last_connection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.abc.sqlite");
        let pool = create_tenant_file(&path).await.unwrap();
        sqlx::query("CREATE TABLE t (v INTEGER)")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO t VALUES (7)")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
        for suffix in ["-wal", "-shm"] {
            let file = format!("{}{suffix}", path.display());
            assert!(std::path::Path::new(&file).exists(), "{file} was deleted");
        }
        let wal = std::fs::metadata(format!("{}-wal", path.display())).unwrap();
        assert_eq!(wal.len(), 0, "the kept WAL was not emptied at close");
        let again = open_tenant_file(&path).await.unwrap();
        let (v,): (i64,) = sqlx::query_as("SELECT v FROM t")
            .fetch_one(&again)
            .await
            .unwrap();
        assert_eq!(v, 7);
    }

    /// A handle opened before the fence cannot write after it (a process
    /// that kept its handle while another deleted the tenant), and the
    /// error says the database was removed; reads still work until the
    /// file is gone.
    #[tokio::test]
    async fn a_fenced_file_refuses_every_write_through_an_old_handle() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.abc.sqlite");
        let held = create_tenant_file(&path).await.unwrap();
        sqlx::query("CREATE TABLE t (v INTEGER)")
            .execute(&held)
            .await
            .unwrap();
        sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&held)
            .await
            .unwrap();
        fence_tenant_file(&path).await.unwrap();
        for write in [
            "INSERT INTO t VALUES (2)",
            "UPDATE t SET v = 3",
            "DELETE FROM t",
        ] {
            let e = sqlx::query(write).execute(&held).await.unwrap_err();
            let e = db_err(e);
            assert!(e.is_transient(), "{write}: {e}");
            assert!(
                toki_model::error::chain(&e).contains("removed"),
                "{write}: {e}"
            );
        }
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM t")
            .fetch_one(&held)
            .await
            .unwrap();
        assert_eq!(n, 1, "the write before the fence is there, none after it");
        remove_tenant_file(&path).await.unwrap();
        assert!(!path.exists());
        assert!(
            sqlx::query("INSERT INTO t VALUES (4)")
                .execute(&held)
                .await
                .is_err(),
            "nor after the file is gone"
        );
        assert!(matches!(
            open_tenant_file(&path).await,
            Err(StoreError::NotFound(_))
        ));
        assert!(!path.exists(), "opening a removed file does not create it");
    }
}
