//! Opening tenant databases: lazily, one bounded pool per tenant, found
//! through the tenant directory. A database location is either a Postgres URL
//! or a SQLite file path.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::ConnectOptions;
use toki_model::{TenantId, TenantRecord};
use toki_ports::{StoreError, StoreResult};
use toki_ports::{TenantDirectory, TenantStore, TenantStores};
use tokio::sync::Mutex;
use tracing::info;

use crate::db_err;
#[cfg(feature = "sqlite")]
use crate::tenant_file::{create_tenant_file, open_tenant_file, remove_tenant_file};
#[cfg(feature = "sqlite")]
use crate::tenant_store::SqliteTenantStore;
use crate::tenant_store::{ConnectionBudget, PostgresTenantStore};

pub fn is_postgres(database: &str) -> bool {
    database.starts_with("postgres://") || database.starts_with("postgresql://")
}

/// Whether Postgres connections keep named prepared statements (sqlx's
/// statement cache). Behind RDS Proxy a named prepared statement pins the
/// client's session to one database connection for its life, which defeats
/// the proxy's multiplexing; without the cache every statement is prepared
/// unnamed, each time it runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StatementCache {
    /// Off for an RDS Proxy endpoint (a host with `.proxy-` in it), on elsewhere.
    #[default]
    Auto,
    On,
    Off,
}

impl StatementCache {
    /// sqlx's default cache size when on.
    const ON: usize = 100;

    /// The statement cache's capacity for connections to `host`.
    pub fn capacity_for(self, host: &str) -> usize {
        match self {
            StatementCache::On => Self::ON,
            StatementCache::Off => 0,
            StatementCache::Auto if is_rds_proxy(host) => 0,
            StatementCache::Auto => Self::ON,
        }
    }
}

impl std::str::FromStr for StatementCache {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(StatementCache::Auto),
            "on" => Ok(StatementCache::On),
            "off" => Ok(StatementCache::Off),
            other => Err(format!("{other:?} is not one of auto, on, off")),
        }
    }
}

/// An RDS Proxy endpoint: `<name>.proxy-<id>.<region>.rds.amazonaws.com`.
fn is_rds_proxy(host: &str) -> bool {
    host.contains(".proxy-") && host.ends_with(".rds.amazonaws.com")
}

/// How a tenant's database is found.
pub enum Locator {
    /// Its directory record says where it is.
    Directory(Arc<dyn TenantDirectory>),
    /// A URL template with `{tenant}`: no directory read at all (the AWS
    /// daemon has no access to the directory table).
    Template(String),
    /// Not configured: opening any tenant database is an error naming the setting.
    Unconfigured(&'static str),
}

/// A store this process opened, and where: the directory's `database` when
/// it was found through the directory (None: by a template, whose name for a
/// tenant never changes).
struct Opened {
    location: Option<String>,
    store: Arc<dyn TenantStore>,
    /// Closes the store's connections when it is let go (a held batch that
    /// still has it connects again).
    release: Release,
    /// When it was last opened through the port (the least recent goes first).
    used: std::time::Instant,
}

/// What letting a store go does to its connections.
type Release = Box<dyn Fn() + Send + Sync>;

/// A store as the port hands it out, and how to close its connections.
fn releasable<DB: sqlx::Database>(
    store: crate::tenant_store::SqlTenantStore<DB>,
) -> (Arc<dyn TenantStore>, Release)
where
    crate::tenant_store::SqlTenantStore<DB>: TenantStore,
{
    let store = Arc::new(store);
    let kept = store.clone();
    (store, Box::new(move || kept.release()))
}

/// The stores a process keeps open, per tenant: shared with the
/// [`CheckedDirectory`] that drops the stale ones.
#[derive(Clone, Default)]
struct Handles(Arc<Mutex<HashMap<TenantId, Opened>>>);

/// Tenant stores a process keeps open at most unless configured: past it
/// the least recently used is let go, its connections closed once the
/// operations on them end. Each open one costs about 400 KB (a thread, the
/// schema, caches) and three descriptors, so few are kept: a burst over
/// many tenants opens each one to claim and once more to record, and
/// nothing in between (held deliveries look at the index; claims made
/// ahead are not renewed before their instant). BENCHMARKS.md, "Tenants":
/// at 1,000 tenants 32 kept open gave the lowest p99 and RSS of 32, 64,
/// 128 and 1,024.
pub const DEFAULT_MAX_OPEN_TENANTS: usize = 32;

impl Opened {
    /// Whether `record` (what the directory says now) contradicts this
    /// store: the tenant is gone, or its database is elsewhere (it was
    /// deleted and created again, a new file).
    fn stale(&self, record: Option<&TenantRecord>) -> bool {
        match record {
            None => true,
            Some(r) => self.location.as_ref().is_some_and(|at| at != &r.database),
        }
    }
}

impl Handles {
    /// `tenant`'s store, if open, marked as used now.
    async fn get(&self, tenant: &TenantId) -> Option<Arc<dyn TenantStore>> {
        let mut open = self.0.lock().await;
        let o = open.get_mut(tenant)?;
        o.used = std::time::Instant::now();
        Some(o.store.clone())
    }

    /// Keeps `opened` for `tenant` (or the store another task kept first),
    /// letting the least recently used go past `max_open`.
    async fn keep(
        &self,
        tenant: &TenantId,
        opened: Opened,
        max_open: usize,
    ) -> Arc<dyn TenantStore> {
        let mut open = self.0.lock().await;
        let kept = open.entry(tenant.clone()).or_insert(opened).store.clone();
        while open.len() > max_open.max(1) {
            let oldest = open
                .iter()
                .filter(|(t, _)| *t != tenant)
                .min_by_key(|(_, o)| o.used)
                .map(|(t, _)| t.clone());
            match oldest.and_then(|t| open.remove(&t)) {
                Some(gone) => (gone.release)(),
                None => break,
            }
        }
        kept
    }

    /// Drops `tenant`'s store if `record` contradicts it.
    async fn observe(&self, tenant: &TenantId, record: Option<&TenantRecord>) {
        let mut open = self.0.lock().await;
        if open.get(tenant).is_some_and(|o| o.stale(record)) {
            open.remove(tenant);
            info!(%tenant, "tenant store dropped: its directory entry changed");
        }
    }

    /// Drops every store a whole listing of the directory contradicts: one
    /// pass over the open stores, each looked up in the listing.
    async fn observe_all(&self, records: &[TenantRecord]) {
        let by_id: HashMap<&TenantId, &TenantRecord> = records.iter().map(|r| (&r.id, r)).collect();
        self.0.lock().await.retain(|tenant, o| {
            let stale = o.stale(by_id.get(tenant).copied());
            if stale {
                info!(%tenant, "tenant store dropped: its directory entry changed");
            }
            !stale
        });
    }
}

/// Tenant stores opened on demand and kept per tenant. A kept store is
/// checked against the directory whenever this process reads the tenant's
/// entry through the [`CheckedDirectory`] (every API request does, to
/// authenticate): a deleted tenant's store is dropped, and a re-created
/// one's is opened afresh at its new location.
pub struct SqlTenantStores {
    locator: Locator,
    open: Handles,
    /// Stores kept open at most (LRU).
    max_open: usize,
    /// Connections per tenant pool (Postgres).
    pub max_connections: u32,
    /// Idle Postgres connections are closed after this long.
    pub idle_timeout: Duration,
    /// Named prepared statements on Postgres connections, or not.
    pub statement_cache: StatementCache,
    /// Postgres connections in use at once across all tenants of this process.
    budget: ConnectionBudget,
    /// SQLite connections in use at once across all tenants: with the
    /// bound on stores kept open, what bounds the descriptors in a burst
    /// over more tenants than that.
    sqlite_budget: ConnectionBudget,
}

/// SQLite tenant connections in use at once in a process.
pub const SQLITE_IN_USE: u32 = 64;

/// Postgres connections a process uses at once across all its tenants, unless configured.
pub const DEFAULT_CONNECTION_BUDGET: u32 = 16;

impl SqlTenantStores {
    pub fn new(directory: Arc<dyn TenantDirectory>) -> Self {
        Self::with_locator(Locator::Directory(directory))
    }

    pub fn with_locator(locator: Locator) -> Self {
        Self {
            locator,
            open: Handles::default(),
            max_open: DEFAULT_MAX_OPEN_TENANTS,
            max_connections: 4,
            idle_timeout: crate::TENANT_IDLE_TIMEOUT,
            statement_cache: StatementCache::Auto,
            budget: ConnectionBudget::new(DEFAULT_CONNECTION_BUDGET),
            sqlite_budget: ConnectionBudget::new(SQLITE_IN_USE),
        }
    }

    /// At most `connections` Postgres connections in use at once across all
    /// tenants (each tenant's pool keeps its own smaller limit too).
    pub fn with_connection_budget(mut self, connections: u32) -> Self {
        self.budget = ConnectionBudget::new(connections);
        self.max_connections = self.max_connections.min(connections.max(1));
        self
    }

    /// At most `max_open` tenant stores kept open; past it the least
    /// recently used is let go.
    pub fn with_max_open(mut self, max_open: usize) -> Self {
        self.max_open = max_open.max(1);
        self
    }

    /// With named prepared statements on Postgres connections, or not.
    pub fn with_statement_cache(mut self, statement_cache: StatementCache) -> Self {
        self.statement_cache = statement_cache;
        self
    }

    /// Forgets a tenant's open store (its database is being dropped).
    pub async fn forget(&self, tenant: &TenantId) {
        self.open.0.lock().await.remove(tenant);
    }

    /// `directory`, reading through which keeps these stores true to it:
    /// what the process uses as its directory.
    pub fn checked(&self, directory: Arc<dyn TenantDirectory>) -> CheckedDirectory {
        CheckedDirectory {
            inner: directory,
            handles: self.open.clone(),
        }
    }

    /// Tenants whose databases this process has opened (for tests of isolation).
    pub async fn opened(&self) -> Vec<TenantId> {
        let mut v: Vec<_> = self.open.0.lock().await.keys().cloned().collect();
        v.sort();
        v
    }

    async fn connect(&self, database: &str) -> StoreResult<(Arc<dyn TenantStore>, Release)> {
        if is_postgres(database) {
            let options = PgConnectOptions::from_str(database)
                .map_err(|e| StoreError::backend("parsing a tenant database URL", e))?
                .disable_statement_logging();
            let cache = self.statement_cache.capacity_for(options.get_host());
            let options = options.statement_cache_capacity(cache);
            let pool = PgPoolOptions::new()
                .max_connections(self.max_connections)
                .min_connections(0)
                .idle_timeout(Some(self.idle_timeout))
                .acquire_timeout(Duration::from_secs(10))
                .connect_lazy_with(options);
            Ok(releasable(
                PostgresTenantStore::new(pool).with_budget(self.budget.clone()),
            ))
        } else {
            open_sqlite_store(database, self.sqlite_budget.clone()).await
        }
    }
}

#[cfg(feature = "sqlite")]
async fn open_sqlite_store(
    database: &str,
    budget: ConnectionBudget,
) -> StoreResult<(Arc<dyn TenantStore>, Release)> {
    let pool = open_tenant_file(std::path::Path::new(database)).await?;
    Ok(releasable(SqliteTenantStore::new(pool).with_budget(budget)))
}

#[cfg(not(feature = "sqlite"))]
async fn open_sqlite_store(
    database: &str,
    _: ConnectionBudget,
) -> StoreResult<(Arc<dyn TenantStore>, Release)> {
    Err(without_sqlite(database))
}

#[cfg(not(feature = "sqlite"))]
fn without_sqlite(database: &str) -> StoreError {
    StoreError::Unconfigured(format!(
        "{database:?} is not a Postgres URL, and this build has no SQLite (embedded) backend"
    ))
}

#[async_trait]
impl TenantStores for SqlTenantStores {
    async fn open(&self, tenant: &TenantId) -> StoreResult<Arc<dyn TenantStore>> {
        if let Some(store) = self.open.get(tenant).await {
            return Ok(store);
        }
        let (database, location) = match &self.locator {
            Locator::Directory(directory) => {
                let at = directory
                    .get(tenant)
                    .await?
                    .ok_or_else(|| StoreError::NotFound(format!("tenant {tenant}")))?
                    .database;
                (at.clone(), Some(at))
            }
            Locator::Template(t) => (database_for(t, tenant), None),
            Locator::Unconfigured(setting) => {
                return Err(StoreError::Unconfigured(format!(
                    "{setting} is not set: cannot open the database of tenant {tenant}"
                )))
            }
        };
        let (store, release) = self.connect(&database).await?;
        let opened = Opened {
            location,
            store,
            release,
            used: std::time::Instant::now(),
        };
        Ok(self.open.keep(tenant, opened, self.max_open).await)
    }
}

/// A tenant directory read through which keeps a process's open tenant
/// stores ([`SqlTenantStores`]) true to it: each entry read drops a store
/// of a tenant that is gone or whose database is now elsewhere. No read
/// of its own: it looks at what the process reads anyway.
pub struct CheckedDirectory {
    inner: Arc<dyn TenantDirectory>,
    handles: Handles,
}

#[async_trait]
impl TenantDirectory for CheckedDirectory {
    async fn get(&self, tenant: &TenantId) -> StoreResult<Option<TenantRecord>> {
        let record = self.inner.get(tenant).await?;
        self.handles.observe(tenant, record.as_ref()).await;
        Ok(record)
    }

    async fn get_many(&self, tenants: &[TenantId]) -> StoreResult<HashMap<TenantId, TenantRecord>> {
        let records = self.inner.get_many(tenants).await?;
        for tenant in tenants {
            self.handles.observe(tenant, records.get(tenant)).await;
        }
        Ok(records)
    }

    async fn put(&self, record: &TenantRecord) -> StoreResult<()> {
        self.inner.put(record).await?;
        self.handles.observe(&record.id, Some(record)).await;
        Ok(())
    }

    async fn list(&self) -> StoreResult<Vec<TenantRecord>> {
        let records = self.inner.list().await?;
        self.handles.observe_all(&records).await;
        Ok(records)
    }

    async fn list_page(
        &self,
        after: Option<&TenantId>,
        limit: usize,
    ) -> StoreResult<Vec<TenantRecord>> {
        let records = self.inner.list_page(after, limit).await?;
        for r in &records {
            self.handles.observe(&r.id, Some(r)).await;
        }
        Ok(records)
    }

    async fn delete(&self, tenant: &TenantId) -> StoreResult<bool> {
        let deleted = self.inner.delete(tenant).await?;
        self.handles.observe(tenant, None).await;
        Ok(deleted)
    }
}

/// A tenant's database from a template with `{tenant}` (`-` becomes `_`, as
/// database names allow).
pub fn database_for(template: &str, tenant: &TenantId) -> String {
    template.replace("{tenant}", tenant.canonical().as_str())
}

/// Drops a tenant database (Postgres) or deletes its file (SQLite), if it exists.
pub async fn drop_tenant_database(database: &str) -> StoreResult<()> {
    if is_postgres(database) {
        let options = PgConnectOptions::from_str(database)
            .map_err(|e| StoreError::backend("parsing a tenant database URL", e))?
            .disable_statement_logging();
        let name = options.get_database().unwrap_or_default().to_owned();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(StoreError::Unconfigured(format!(
                "cannot drop database {name:?}: not a plain name"
            )));
        }
        let mut admin = options
            .database("postgres")
            .connect()
            .await
            .map_err(db_err)?;
        sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
            .execute(&mut admin)
            .await
            .map_err(db_err)?;
    } else {
        drop_sqlite_database(database).await?;
    }
    Ok(())
}

/// A SQLite file (embedded backend): fenced, then removed.
#[cfg(feature = "sqlite")]
async fn drop_sqlite_database(database: &str) -> StoreResult<()> {
    remove_tenant_file(std::path::Path::new(database)).await
}

#[cfg(not(feature = "sqlite"))]
async fn drop_sqlite_database(database: &str) -> StoreResult<()> {
    Err(without_sqlite(database))
}

/// Creates (if needed) and migrates a tenant database.
pub async fn create_tenant_database(database: &str) -> StoreResult<()> {
    if is_postgres(database) {
        let options = PgConnectOptions::from_str(database)
            .map_err(|e| StoreError::backend("parsing a tenant database URL", e))?
            .disable_statement_logging();
        let name = options
            .get_database()
            .ok_or_else(|| {
                StoreError::Unconfigured("the tenant database URL names no database".into())
            })?
            .to_owned();
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(StoreError::Unconfigured(format!(
                "database name {name:?} may contain only letters, digits and '_'"
            )));
        }
        let mut admin = options
            .clone()
            .database("postgres")
            .connect()
            .await
            .map_err(db_err)?;
        let exists: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
                .bind(&name)
                .fetch_optional(&mut admin)
                .await
                .map_err(db_err)?;
        if exists.is_none() {
            match sqlx::query(&format!("CREATE DATABASE \"{name}\""))
                .execute(&mut admin)
                .await
            {
                Ok(_) => info!(database = %name, "created tenant database"),
                // Created concurrently by someone else: fine.
                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => {}
                Err(e) => return Err(db_err(e)),
            }
        }
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .map_err(db_err)?;
        let store = PostgresTenantStore::new(pool.clone());
        store.migrate().await?;
        pool.close().await;
    } else {
        create_sqlite_database(database).await?;
    }
    Ok(())
}

#[cfg(feature = "sqlite")]
async fn create_sqlite_database(database: &str) -> StoreResult<()> {
    let path = std::path::Path::new(database);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::backend(format!("creating {}", dir.display()), e))?;
    }
    let pool = create_tenant_file(path).await?;
    SqliteTenantStore::new(pool.clone()).migrate().await?;
    pool.close().await;
    Ok(())
}

#[cfg(not(feature = "sqlite"))]
async fn create_sqlite_database(database: &str) -> StoreResult<()> {
    Err(without_sqlite(database))
}

/// Lets `role` (created with `password` if missing) connect to the Postgres
/// database at `admin_url` and read and write its tables, now and after later
/// migrations. Run with the provisioning credentials, after migrating.
pub async fn grant_runtime_role(admin_url: &str, role: &str, password: &str) -> StoreResult<()> {
    if role.is_empty() || !role.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(StoreError::Unconfigured(format!(
            "runtime role {role:?} may contain only letters, digits and '_'"
        )));
    }
    let options = PgConnectOptions::from_str(admin_url)
        .map_err(|e| StoreError::backend("parsing a tenant database URL", e))?
        .disable_statement_logging();
    let database = options
        .get_database()
        .ok_or_else(|| {
            StoreError::Unconfigured("the tenant database URL names no database".into())
        })?
        .to_owned();
    let mut server = options
        .clone()
        .database("postgres")
        .connect()
        .await
        .map_err(db_err)?;
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_roles WHERE rolname = $1")
        .bind(role)
        .fetch_optional(&mut server)
        .await
        .map_err(db_err)?;
    // Role DDL takes no bind parameters: the literal is quoted by the server.
    let quoted: String = sqlx::query_scalar("SELECT quote_literal($1)")
        .bind(password)
        .fetch_one(&mut server)
        .await
        .map_err(db_err)?;
    let verb = if exists.is_some() { "ALTER" } else { "CREATE" };
    match sqlx::query(&format!("{verb} ROLE \"{role}\" LOGIN PASSWORD {quoted}"))
        .execute(&mut server)
        .await
    {
        Ok(_) => {}
        // Created concurrently by another provisioning run: fine.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42710") => {}
        Err(e) => return Err(db_err(e)),
    }
    sqlx::query(&format!(
        "GRANT CONNECT ON DATABASE \"{database}\" TO \"{role}\""
    ))
    .execute(&mut server)
    .await
    .map_err(db_err)?;
    let mut tenant = options.connect().await.map_err(db_err)?;
    for grant in [
        format!("GRANT USAGE ON SCHEMA public TO \"{role}\""),
        format!("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO \"{role}\""),
        format!(
            "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO \"{role}\""
        ),
    ] {
        sqlx::query(&grant)
            .execute(&mut tenant)
            .await
            .map_err(db_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod statement_cache_tests {
    use super::StatementCache;

    #[test]
    fn auto_turns_the_cache_off_behind_rds_proxy_only() {
        let proxy = "toki-prod.proxy-abc123.eu-west-1.rds.amazonaws.com";
        let writer = "toki-prod.cluster-abc123.eu-west-1.rds.amazonaws.com";
        assert_eq!(StatementCache::Auto.capacity_for(proxy), 0);
        assert_eq!(StatementCache::Auto.capacity_for(writer), 100);
        assert_eq!(StatementCache::Auto.capacity_for("127.0.0.1"), 100);
        assert_eq!(StatementCache::On.capacity_for(proxy), 100);
        assert_eq!(StatementCache::Off.capacity_for("127.0.0.1"), 0);
        assert_eq!("off".parse::<StatementCache>(), Ok(StatementCache::Off));
        assert!("maybe".parse::<StatementCache>().is_err());
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod incarnation_tests {
    use std::sync::Arc;

    use toki_model::input::UserInput;
    use toki_model::{TenantRecord, User};
    use toki_ports::{StoreError, TenantDirectory, TenantStores};

    use super::{create_tenant_database, drop_tenant_database, SqlTenantStores};
    use crate::control::ControlDb;
    use crate::SqliteTenantDirectory;

    fn user(id: &str) -> User {
        UserInput {
            name: format!("User {id}"),
            email: Some(format!("{id}@example.com")),
            slack_user_id: None,
            webhook_url: None,
            time_zone: "Europe/Paris".into(),
            locale: "en".into(),
            channels: Default::default(),
        }
        .validate(&id.parse().unwrap())
        .unwrap()
    }

    fn record(database: &std::path::Path) -> TenantRecord {
        TenantRecord {
            id: "gone".parse().unwrap(),
            reminders_enabled: true,
            active: true,
            database: database.display().to_string(),
            api_keys: Vec::new(),
            change_notices: Default::default(),
            limits: Default::default(),
            retention: Default::default(),
        }
    }

    /// A serving process's stores over a fresh control database, and the
    /// directory as its API reads it.
    struct Serving {
        dir: tempfile::TempDir,
        raw: Arc<dyn TenantDirectory>,
        serving: SqlTenantStores,
        directory: super::CheckedDirectory,
    }

    async fn serving() -> Serving {
        let dir = tempfile::tempdir().unwrap();
        let control = ControlDb::open(&dir.path().join("control.sqlite"))
            .await
            .unwrap();
        let raw: Arc<dyn TenantDirectory> =
            Arc::new(SqliteTenantDirectory::new(control.pool.clone()));
        let serving = SqlTenantStores::new(raw.clone());
        let directory = serving.checked(raw.clone());
        Serving {
            dir,
            raw,
            serving,
            directory,
        }
    }

    /// `toki tenant create gone` at `file`: the database and its entry.
    async fn created(raw: &Arc<dyn TenantDirectory>, file: &std::path::Path) -> std::path::PathBuf {
        create_tenant_database(file.to_str().unwrap())
            .await
            .unwrap();
        raw.put(&record(file)).await.unwrap();
        file.to_path_buf()
    }

    /// One process (a serving one) keeps its stores while another deletes
    /// the tenant and creates it again at a new file: the serving one's
    /// next read of the directory drops the old store, its writes land in
    /// the new file (a fresh process reads them), and a write through the
    /// handle it held fails rather than landing in the removed file.
    #[tokio::test]
    async fn a_recreated_tenant_is_written_in_its_new_file_by_a_process_that_kept_running() {
        let Serving {
            dir,
            raw,
            serving,
            directory,
        } = serving().await;
        let tenant = "gone".parse().unwrap();
        let first = created(&raw, &dir.path().join("gone.0001.sqlite")).await;
        let now: toki_model::Instant = "2026-11-23T08:00:00Z".parse().unwrap();

        directory.get(&tenant).await.unwrap();
        let held = serving.open(&tenant).await.unwrap();
        held.put_user(&user("before"), now).await.unwrap();

        // Another process: `toki tenant delete`, then `toki tenant create`.
        drop_tenant_database(first.to_str().unwrap()).await.unwrap();
        raw.delete(&tenant).await.unwrap();
        created(&raw, &dir.path().join("gone.0002.sqlite")).await;

        let racing = held.put_user(&user("late"), now).await.unwrap_err();
        assert!(
            matches!(racing, StoreError::Unavailable { .. }),
            "a write through the old handle fails: {racing}"
        );
        // An API request: the key checked against the entry, then the write.
        directory.get(&tenant).await.unwrap();
        let store = serving.open(&tenant).await.unwrap();
        store.put_user(&user("w1"), now).await.unwrap();

        let fresh = SqlTenantStores::new(raw.clone());
        let reread = fresh.open(&tenant).await.unwrap();
        assert!(reread
            .get_user(&"w1".parse().unwrap())
            .await
            .unwrap()
            .is_some());
        for absent in ["before", "late"] {
            let id = absent.parse().unwrap();
            assert!(reread.get_user(&id).await.unwrap().is_none(), "{absent}");
        }
        assert!(!first.exists(), "the old file stays removed");
    }

    /// A tenant the directory no longer lists loses its open store at the
    /// next read, and opening it again fails.
    #[tokio::test]
    async fn a_deleted_tenant_store_is_dropped_at_the_next_directory_read() {
        let Serving {
            dir,
            raw,
            serving,
            directory,
        } = serving().await;
        let tenant = "gone".parse().unwrap();
        let file = created(&raw, &dir.path().join("gone.0001.sqlite")).await;
        serving.open(&tenant).await.unwrap();
        assert_eq!(serving.opened().await, vec![tenant.clone()]);
        drop_tenant_database(file.to_str().unwrap()).await.unwrap();
        raw.delete(&tenant).await.unwrap();
        assert!(directory.get(&tenant).await.unwrap().is_none());
        assert!(serving.opened().await.is_empty());
        assert!(serving.open(&tenant).await.is_err());
        assert!(!file.exists(), "not created again by the open");
    }
}
