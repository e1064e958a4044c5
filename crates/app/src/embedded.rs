//! The embedded backend: one SQLite control database (index, queue, tenant
//! directory) in the data folder, one SQLite file per tenant.

use std::sync::Arc;

use anyhow::Context;
use toki_ports::{Clock, TenantDirectory};
use toki_sql::{
    ControlDb, Locator, SqlTenantStores, SqliteDebounceStore, SqliteDelayQueue,
    SqliteReminderIndex, SqliteTenantDirectory,
};

use crate::config::Config;
use crate::databases::TenantDatabases;
use crate::ports::Ports;

pub(crate) async fn open(
    config: &Config,
    databases: &TenantDatabases,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Ports> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating data folder {}", config.data_dir.display()))?;
    let control = ControlDb::open(&config.data_dir.join("control.sqlite"))
        .await
        .context("opening the control database")?;
    let settings = config.pipeline_settings();
    let raw: Arc<dyn TenantDirectory> = Arc::new(SqliteTenantDirectory::new(control.pool.clone()));
    // SQLite files are found through the directory; Postgres databases by name.
    let stores = match databases {
        TenantDatabases::Postgres { runtime, .. } => {
            SqlTenantStores::with_locator(Locator::Template(runtime.clone()))
        }
        _ => SqlTenantStores::new(raw.clone()),
    }
    .with_statement_cache(config.database.statement_cache)
    .with_connection_budget(config.database.max_connections)
    .with_max_open(config.database.max_open_tenants);
    // Every read of the directory keeps the open stores true to it.
    let directory: Arc<dyn TenantDirectory> = Arc::new(stores.checked(raw));
    Ok(Ports {
        control_purge: Some(Arc::new(toki_sql::SqliteControlPurge::new(
            control.pool.clone(),
            "reminders",
        ))),
        footprints: vec![Arc::new(toki_sql::SqliteControlFootprint::new(
            control.pool.clone(),
        ))],
        debounce: Arc::new(SqliteDebounceStore::new(control.pool.clone())),
        leases: Arc::new(toki_sql::SqliteLeaseStore::new(control.pool.clone())),
        marks: Arc::new(toki_sql::SqliteWorkMarks::new(control.pool.clone())),
        stores: Arc::new(stores),
        directory,
        index: Arc::new(SqliteReminderIndex::new(
            control.pool.clone(),
            settings.shards,
            settings.retention,
        )),
        queue: Arc::new(SqliteDelayQueue::new(
            control.pool,
            "reminders",
            config.daemon.max_receives,
            clock,
        )),
    })
}
