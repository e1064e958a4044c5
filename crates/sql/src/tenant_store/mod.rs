//! A tenant's database (the source of truth), on Postgres and on SQLite: one
//! schema (`migrations/tenant`), one implementation generic over the sqlx
//! database, typed rows. Statements are built as text plus values
//! ([`statement`]) and bound in one step, which works alike on both engines.

mod audit;
mod below;
mod claim;
mod counted;
mod erasure;
mod events;
mod idempotency;
mod offboard;
mod outcomes;
mod report;
mod retention;
mod rows;
mod schedule_write;
mod statement;
mod suppression;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, FromRow, IntoArguments, Pool, Type};
use toki_model::change::{ChangeNotice, NoticeEdge};
use toki_model::idempotency::{IdempotencyKey, KeptAnswer};
use toki_model::quota::Counted;
use toki_model::template::ReminderTemplate;
use toki_model::{
    encode_channels_off, Channel, DeliveryClaim, DeliveryCount, DeliveryOutcome, Instant,
    ReminderKey, ReminderRule, Schedule, ScheduleId, User, UserId, ValidationError,
};
use toki_ports::{
    writable_schedules, ChatMessage, Claims, DeliveryContext, IdempotentStart, KeyedRequest,
    MirrorWork, TenantStore,
};
use toki_ports::{StoreError, StoreResult};

use crate::{begin_write, db_err};
use rows::{
    participant, recurrence, snapshot, snapshot_json, BaselineRow, ChangedDelivery, ChatRow,
    ContextItem, ContextRow, CountRow, DeliveryKeyRow, DeliveryRow, MirrorRow, NoticeRow, OwnedRow,
    RuleRow, ScheduleRow, TemplateRow, UserRow, WebhookRow,
};
use statement::Statement;
use toki_model::webhook::WebhookSettings;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The tenant database's migrations (migrations/tenant), compiled in.
pub static TENANT_MIGRATIONS: std::sync::LazyLock<sqlx::migrate::Migrator> =
    std::sync::LazyLock::new(|| crate::row::migrator(crate::row::files::TENANT));

/// Rows per multi-row statement: with up to 11 values a row, well under
/// SQLite's 32,766 and Postgres's 65,535 bind parameters.
const CHUNK: usize = 500;

/// A tenant's database on engine `DB`.
#[derive(Clone)]
pub struct SqlTenantStore<DB: Database> {
    /// Replaced by a fresh one (no connection until used) when the process
    /// lets the store go while batches still hold it ([`Self::release`]).
    pool: Arc<std::sync::RwLock<Pool<DB>>>,
    /// The process's connection budget, shared with every other tenant's
    /// store (none: only the pool's own limit).
    budget: Option<ConnectionBudget>,
    /// Erasures' vacuums (Postgres), one at a time.
    vacuums: Arc<below::Vacuums>,
}

/// Connections a process may use at once across all tenant databases: each
/// operation holds one slot while it runs. Behind RDS Proxy the database
/// connections follow the transactions in progress, so this bounds them per
/// process whatever the number of tenants.
#[derive(Clone, Debug)]
pub struct ConnectionBudget(Arc<Semaphore>);

impl ConnectionBudget {
    pub fn new(connections: u32) -> Self {
        Self(Arc::new(Semaphore::new(connections.max(1) as usize)))
    }
}

#[cfg(feature = "sqlite")]
pub type SqliteTenantStore = SqlTenantStore<sqlx::Sqlite>;
pub type PostgresTenantStore = SqlTenantStore<sqlx::Postgres>;

impl<DB: Database> SqlTenantStore<DB> {
    pub fn new(pool: Pool<DB>) -> Self {
        Self {
            pool: Arc::new(std::sync::RwLock::new(pool)),
            budget: None,
            vacuums: Default::default(),
        }
    }

    /// Sharing `budget` with the other tenants' stores.
    pub fn with_budget(mut self, budget: ConnectionBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// A slot of the process's budget, held for one operation.
    async fn connection_slot(&self) -> Option<OwnedSemaphorePermit> {
        let budget = self.budget.as_ref()?;
        Some(
            budget
                .0
                .clone()
                .acquire_owned()
                .await
                .expect("the budget is never closed"),
        )
    }

    /// The pool now (a handle: cheap to clone).
    pub fn pool(&self) -> Pool<DB> {
        self.pool.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Closes the store's connections once the operations running on them
    /// end, and leaves it a fresh pool that connects when next used and
    /// closes each connection after its use: a process lets go of a store
    /// (its open databases are bounded) that a held batch may still use.
    pub fn release(&self) {
        let mut pool = self.pool.write().unwrap_or_else(|e| e.into_inner());
        let options = pool.options().clone();
        let connect = (*pool.connect_options()).clone();
        // Its connections close after each use: the process no longer
        // counts this store among those it keeps open. With nothing idle to
        // time out, no maintenance task either: a burst over 10,000
        // tenants holds that many let-go stores until their outcomes are
        // written, and a task apiece was a tenth of the daemon's heap.
        let options = options
            .after_release(|_, _| Box::pin(async { Ok(false) }))
            .idle_timeout(None)
            .max_lifetime(None)
            .min_connections(0);
        let old = std::mem::replace(&mut *pool, options.connect_lazy_with(connect));
        tokio::spawn(async move { old.close().await });
    }
}

impl<DB: Database> SqlTenantStore<DB>
where
    DB: sqlx::migrate::MigrateDatabase,
    <DB as Database>::Connection: sqlx::migrate::Migrate,
{
    pub async fn migrate(&self) -> StoreResult<()> {
        TENANT_MIGRATIONS
            .run(&self.pool())
            .await
            .map_err(|e| StoreError::backend("migrating a tenant database", e))
    }
}

/// The process a claim token names (see [`claim_token`]).
fn claim_holder(token: &str) -> &str {
    token.split('-').next().unwrap_or(token)
}

/// Names one batch's claims: unique per process and call (`pid-ms-n`).
fn claim_token(now: Instant) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{}-{n}", std::process::id(), now.timestamp_millis())
}

#[async_trait]
impl<DB> TenantStore for SqlTenantStore<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> UserRow: FromRow<'r, DB::Row>,
    for<'r> ScheduleRow: FromRow<'r, DB::Row>,
    for<'r> RuleRow: FromRow<'r, DB::Row>,
    for<'r> MirrorRow: FromRow<'r, DB::Row>,
    for<'r> ContextRow: FromRow<'r, DB::Row>,
    for<'r> suppression::SuppressionRow: FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
    for<'r> (Option<String>, Option<String>): FromRow<'r, DB::Row>,
    for<'r> DeliveryKeyRow: FromRow<'r, DB::Row>,
    for<'r> OwnedRow: FromRow<'r, DB::Row>,
    for<'r> (String, i64): FromRow<'r, DB::Row>,
    for<'r> DeliveryRow: FromRow<'r, DB::Row>,
    for<'r> CountRow: FromRow<'r, DB::Row>,
    for<'r> ChatRow: FromRow<'r, DB::Row>,
    for<'r> NoticeRow: FromRow<'r, DB::Row>,
    for<'r> BaselineRow: FromRow<'r, DB::Row>,
    for<'r> TemplateRow: FromRow<'r, DB::Row>,
    for<'r> ChangedDelivery: FromRow<'r, DB::Row>,
    for<'r> events::EventRow: FromRow<'r, DB::Row>,
    for<'r> audit::AuditRow: FromRow<'r, DB::Row>,
    for<'r> events::EndpointRow: FromRow<'r, DB::Row>,
    for<'r> retention::PurgeRow: FromRow<'r, DB::Row>,
    for<'r> report::AggregateRow: FromRow<'r, DB::Row>,
    for<'r> idempotency::IdempotencyRow: FromRow<'r, DB::Row>,
    for<'r> WebhookRow: FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    usize: ColumnIndex<DB::Row>,
    DB::QueryResult: crate::RowsAffected,
{
    async fn put_user(&self, u: &User, now: Instant) -> StoreResult<()> {
        let _slot = self.connection_slot().await;
        let mut conn = self.pool().acquire().await.map_err(db_err)?;
        // An erased person's address given again: suppressed again.
        suppression::restore_erased::<DB>(&mut conn, u).await?;
        let mut s = Statement::new(
            "INSERT INTO users (id, name, email, slack_user_id, webhook_url, time_zone, locale, channels_off, updated_at)",
        );
        s.values([u], |r, u| {
            r.bind(u.id.as_str())
                .bind(u.name.clone())
                .bind(u.email.clone())
                .bind(u.slack_user_id.clone())
                .bind(u.webhook_url.as_ref().map(|w| w.to_string()))
                .bind(u.time_zone.name())
                .bind(u.locale.clone())
                .bind(encode_channels_off(&u.channels_off))
                .bind(now.timestamp_millis());
        });
        s.push(
            " ON CONFLICT (id) DO UPDATE SET name = excluded.name, email = excluded.email,
               slack_user_id = excluded.slack_user_id, webhook_url = excluded.webhook_url,
               time_zone = excluded.time_zone,
               locale = excluded.locale, channels_off = excluded.channels_off,
               updated_at = excluded.updated_at",
        );
        s.query::<DB>().execute(&mut *conn).await.map_err(db_err)?;
        Ok(())
    }

    async fn get_user(&self, id: &UserId) -> StoreResult<Option<User>> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new(
            "SELECT id, name, email, slack_user_id, webhook_url, time_zone, locale, channels_off FROM users WHERE id = ",
        );
        s.bind(id.as_str());
        let row = s
            .query_as::<DB, UserRow>()
            .fetch_optional(&self.pool())
            .await
            .map_err(db_err)?;
        row.map(User::try_from).transpose()
    }

    async fn get_users(&self, ids: &[UserId]) -> StoreResult<HashMap<UserId, User>> {
        let _slot = self.connection_slot().await;
        let mut out = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(CHUNK) {
            let mut s = Statement::new(
                "SELECT id, name, email, slack_user_id, webhook_url, time_zone, locale, channels_off FROM users WHERE id IN ",
            );
            s.list(chunk.iter().map(UserId::as_str));
            let rows = s
                .query_as::<DB, UserRow>()
                .fetch_all(&self.pool())
                .await
                .map_err(db_err)?;
            for row in rows {
                let user = User::try_from(row)?;
                out.insert(user.id.clone(), user);
            }
        }
        Ok(out)
    }

    async fn put_schedules(
        &self,
        schedules: &[Schedule],
        now: Instant,
    ) -> StoreResult<Vec<Result<Schedule, ValidationError>>> {
        let _slot = self.connection_slot().await;
        let mut tx = begin_write(&self.pool()).await?;
        // Every participant must be a user of this tenant.
        let known = schedule_write::known_users::<DB>(&mut tx, schedules).await?;
        let verdicts = writable_schedules(schedules, |u| known.contains(u.as_str()));
        // In id order: two batches sharing schedules lock their rows in the
        // same order on Postgres, so they wait for each other, never deadlock.
        let mut writable: Vec<&Schedule> = verdicts.iter().filter_map(|v| v.clone().ok()).collect();
        writable.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        let now_ms = now.timestamp_millis();
        let versions = schedule_write::next_versions::<DB>(&mut tx, &writable, now_ms).await?;
        schedule_write::upsert_schedules::<DB>(&mut tx, &writable, &versions, now_ms).await?;
        schedule_write::insert_participants::<DB>(&mut tx, &writable).await?;
        schedule_write::insert_rules::<DB>(&mut tx, &writable).await?;
        tx.commit().await.map_err(db_err)?;
        Ok(verdicts
            .into_iter()
            .map(|v| {
                v.map(|sch| Schedule {
                    version: schedule_write::version_of(&versions, sch),
                    ..sch.clone()
                })
            })
            .collect())
    }

    async fn get_schedule(&self, id: &ScheduleId) -> StoreResult<Option<Schedule>> {
        let _slot = self.connection_slot().await;
        let mut conn = self.pool().acquire().await.map_err(db_err)?;
        load_schedule::<DB>(&mut conn, id).await
    }

    async fn delete_schedule(&self, id: &ScheduleId, now: Instant) -> StoreResult<Option<i64>> {
        let _slot = self.connection_slot().await;
        let mut tx = begin_write(&self.pool()).await?;
        let mut s = Statement::new("DELETE FROM schedules WHERE id = ");
        s.bind(id.as_str()).push(" RETURNING id");
        let deleted = s
            .query_as::<DB, (String,)>()
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_err)?;
        if deleted.is_none() {
            return Ok(None);
        }
        let mut s = Statement::new("UPDATE schedule_mirror SET version = version + 1, deleted = TRUE, mirrored = FALSE, changed_at = ");
        s.bind(now.timestamp_millis());
        s.push(" WHERE schedule_id = ")
            .bind(id.as_str())
            .push(" RETURNING version");
        let (version,): (i64,) = s
            .query_as::<DB, (i64,)>()
            .fetch_one(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        Ok(Some(version))
    }

    async fn unmirrored(&self, extend_before: Instant) -> StoreResult<Vec<MirrorWork>> {
        let _slot = self.connection_slot().await;
        let mut conn = self.pool().acquire().await.map_err(db_err)?;
        let mut s = Statement::new(
            "SELECT schedule_id, version, deleted, mirrored FROM schedule_mirror
             WHERE mirrored = FALSE OR (deleted = FALSE AND mirrored_until < ",
        );
        s.bind(extend_before.timestamp_millis());
        s.push(") ORDER BY changed_at");
        let rows: Vec<MirrorRow> = s
            .query_as::<DB, MirrorRow>()
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let id = row.schedule()?;
            if row.deleted {
                out.push(MirrorWork::Delete {
                    schedule: id,
                    version: row.version,
                });
            } else if let Some(s) = load_schedule::<DB>(&mut conn, &id).await? {
                out.push(if row.mirrored {
                    MirrorWork::Extend(s)
                } else {
                    MirrorWork::Upsert(s)
                });
            }
        }
        Ok(out)
    }

    async fn earliest_mirrored_until(&self) -> StoreResult<Option<Instant>> {
        let _slot = self.connection_slot().await;
        // The column's index answers MIN; a deleted series has no extension.
        let (ms,): (Option<i64>,) =
            Statement::new("SELECT MIN(mirrored_until) FROM schedule_mirror WHERE deleted = FALSE")
                .query_as::<DB, (Option<i64>,)>()
                .fetch_one(&self.pool())
                .await
                .map_err(db_err)?;
        ms.map(|ms| {
            toki_model::from_millis("mirrored_until", ms)
                .map_err(|e| StoreError::backend("schedule_mirror", e))
        })
        .transpose()
    }

    async fn mark_mirrored(
        &self,
        id: &ScheduleId,
        version: i64,
        until: Option<Instant>,
    ) -> StoreResult<()> {
        self.mark_all_mirrored(&[(id.clone(), version, until)])
            .await
    }

    async fn mark_all_mirrored(
        &self,
        writes: &[(ScheduleId, i64, Option<Instant>)],
    ) -> StoreResult<()> {
        let _slot = self.connection_slot().await;
        // One statement per distinct horizon (one for a batch of single meetings).
        let mut by_until: HashMap<Option<i64>, Vec<(&ScheduleId, i64)>> = HashMap::new();
        for (id, version, until) in writes {
            by_until
                .entry(until.map(|u| u.timestamp_millis()))
                .or_default()
                .push((id, *version));
        }
        let mut tx = begin_write(&self.pool()).await?;
        for (until, marks) in by_until {
            for chunk in marks.chunks(CHUNK) {
                let mut s =
                    Statement::new("UPDATE schedule_mirror SET mirrored = TRUE, mirrored_until = ");
                match until {
                    Some(u) => s.bind(u),
                    None => s.push("NULL"),
                };
                // Only where no newer write came in meanwhile.
                s.push(" WHERE (schedule_id, version) IN (VALUES ");
                s.tuples(chunk, |r, (id, version)| {
                    r.bind(id.as_str()).bind(*version);
                });
                s.push(")");
                s.query::<DB>().execute(&mut *tx).await.map_err(db_err)?;
            }
        }
        tx.commit().await.map_err(db_err)?;
        Ok(())
    }

    async fn delivery_context(&self, schedules: &[ScheduleId]) -> StoreResult<DeliveryContext> {
        let _slot = self.connection_slot().await;
        let mut ctx = DeliveryContext::default();
        if schedules.is_empty() {
            return Ok(ctx);
        }
        // One round trip: the schedules, and their participants joined with
        // their users, a row each. Not sorted there: a sort would copy every
        // row once more; participants are put in order below.
        let ids = || schedules.iter().map(ScheduleId::as_str);
        let mut s = Statement::new(
            "SELECT 'schedule' AS kind, id AS schedule_id, title, body, recurrence, version,
                    CAST(NULL AS TEXT) AS user_id, CAST(NULL AS TEXT) AS name,
                    CAST(NULL AS TEXT) AS email, CAST(NULL AS TEXT) AS slack_user_id,
                    CAST(NULL AS TEXT) AS webhook_url,
                    CAST(NULL AS TEXT) AS time_zone, CAST(NULL AS TEXT) AS locale,
                    CAST(NULL AS TEXT) AS channels_off, CAST(-1 AS BIGINT) AS position
             FROM schedules WHERE id IN ",
        );
        s.list(ids());
        // The tenant's webhook settings ride in the schedule's columns (rows::ContextItem::Webhook).
        s.push(
            " UNION ALL
             SELECT 'webhook' AS kind, '' AS schedule_id, default_url AS title, secret AS body,
                    previous_secret AS recurrence, previous_until AS version,
                    CAST(NULL AS TEXT) AS user_id, CAST(NULL AS TEXT) AS name,
                    CAST(NULL AS TEXT) AS email, CAST(NULL AS TEXT) AS slack_user_id,
                    CAST(NULL AS TEXT) AS webhook_url,
                    CAST(NULL AS TEXT) AS time_zone, CAST(NULL AS TEXT) AS locale,
                    CAST(NULL AS TEXT) AS channels_off, CAST(-1 AS BIGINT) AS position
             FROM webhook_settings",
        );
        s.push(
            " UNION ALL
             SELECT 'participant' AS kind, p.schedule_id, CAST(NULL AS TEXT) AS title,
                    CAST(NULL AS TEXT) AS body, CAST(NULL AS TEXT) AS recurrence,
                    CAST(NULL AS BIGINT) AS version, u.id AS user_id, u.name, u.email,
                    u.slack_user_id, u.webhook_url, u.time_zone, u.locale, u.channels_off,
                    p.position
             FROM participants p JOIN users u ON u.id = p.user_id
             WHERE p.schedule_id IN ",
        );
        s.list(ids());
        suppression::context_parts(&mut s, ids());
        let rows: Vec<ContextRow> = s
            .query_as::<DB, ContextRow>()
            .fetch_all(&self.pool())
            .await
            .map_err(db_err)?;
        let mut participants: Vec<(ScheduleId, i64, UserId)> = Vec::new();
        for row in rows {
            match ContextItem::try_from(row)? {
                ContextItem::Schedule(s) => {
                    ctx.schedules.insert(s.id.clone(), s);
                }
                ContextItem::Participant(schedule, position, user) => {
                    participants.push((schedule, position, user.id.clone()));
                    ctx.users.insert(user.id.clone(), std::sync::Arc::new(user));
                }
                ContextItem::Webhook(settings) => ctx.webhook = Some(std::sync::Arc::new(settings)),
                ContextItem::Suppressed(entry) => {
                    ctx.suppressed.insert(entry.address.clone(), entry);
                }
                ContextItem::Unsubscribe(l) => {
                    ctx.list_unsubscribe = l.is_enabled().then(|| std::sync::Arc::new(l));
                }
            }
        }
        participants.sort_unstable_by_key(|&(_, position, _)| position);
        for (schedule, _, user) in participants {
            if let Some(s) = ctx.schedules.get_mut(&schedule) {
                s.participants.push(user);
            }
        }
        Ok(ctx)
    }

    async fn claim_deliveries(
        &self,
        claims: &[DeliveryClaim],
        now: Instant,
        takeover_before: Instant,
    ) -> StoreResult<Claims> {
        let _slot = self.connection_slot().await;
        let token = claim_token(now);
        let mut out = Claims::default();
        // All chunks or none: a half-made claim would strand `sending` rows.
        let mut tx = begin_write(&self.pool()).await?;
        for chunk in claims.chunks(CHUNK) {
            let owned =
                claim::claim_chunk::<DB>(&mut tx, chunk, &out.owned, &token, now, takeover_before)
                    .await?;
            out.owned.extend(owned);
        }
        if out.owned.len() < claims.len() {
            // Which of the others another holder is still sending.
            for chunk in claims.chunks(CHUNK) {
                let busy = claim::busy_in_chunk::<DB>(&mut tx, chunk, &token).await?;
                for row in busy {
                    out.busy.push(row.try_into()?);
                }
            }
        }
        tx.commit().await.map_err(db_err)?;
        out.token = token;
        Ok(out)
    }

    async fn renew_claims(&self, tokens: &[String], now: Instant) -> StoreResult<()> {
        let _slot = self.connection_slot().await;
        for chunk in tokens.chunks(CHUNK) {
            let mut s = Statement::new("UPDATE deliveries SET claimed_at = ");
            s.bind(now.timestamp_millis());
            s.push(" WHERE status = 'sending' AND claim_token IN ");
            s.list(chunk.iter().map(String::as_str));
            s.query::<DB>()
                .execute(&self.pool())
                .await
                .map_err(db_err)?;
        }
        Ok(())
    }

    async fn schedule_versions(
        &self,
        schedules: &[ScheduleId],
    ) -> StoreResult<HashMap<ScheduleId, i64>> {
        let _slot = self.connection_slot().await;
        let mut out = HashMap::with_capacity(schedules.len());
        for chunk in schedules.chunks(CHUNK) {
            let mut s = Statement::new("SELECT id, version FROM schedules WHERE id IN ");
            s.list(chunk.iter().map(ScheduleId::as_str));
            let rows: Vec<(String, i64)> = s
                .query_as::<DB, (String, i64)>()
                .fetch_all(&self.pool())
                .await
                .map_err(db_err)?;
            for (id, version) in rows {
                out.insert(rows::schedule_id(&id)?, version);
            }
        }
        Ok(out)
    }

    async fn record_outcomes(&self, outcomes: &[DeliveryOutcome]) -> StoreResult<usize> {
        let _slot = self.connection_slot().await;
        let mut conn = self.pool().acquire().await.map_err(db_err)?;
        let kinds = events::subscribed::<DB>(&mut conn).await?;
        if kinds.is_empty() {
            for chunk in outcomes.chunks(CHUNK) {
                outcomes::record_chunk::<DB>(&mut conn, chunk).await?;
            }
            return Ok(0);
        }
        drop(conn);
        // The outcomes and their events together, or neither.
        let mut tx = begin_write(&self.pool()).await?;
        let mut made = Vec::new();
        for chunk in outcomes.chunks(CHUNK) {
            let changed = outcomes::record_chunk::<DB>(&mut tx, chunk).await?;
            made.extend(ChangedDelivery::events(chunk, changed));
        }
        let logged = events::append::<DB>(&mut tx, kinds, &made).await?;
        tx.commit().await.map_err(db_err)?;
        Ok(logged)
    }

    async fn webhook_settings(&self) -> StoreResult<Option<WebhookSettings>> {
        let _slot = self.connection_slot().await;
        let row = Statement::new(
            "SELECT default_url, secret, previous_secret, previous_until FROM webhook_settings",
        )
        .query_as::<DB, WebhookRow>()
        .fetch_optional(&self.pool())
        .await
        .map_err(db_err)?;
        row.map(|r| {
            rows::webhook_settings(
                r.default_url.as_deref(),
                &r.secret,
                r.previous_secret.as_deref(),
                r.previous_until,
            )
        })
        .transpose()
    }

    async fn put_webhook_settings(&self, w: &WebhookSettings, now: Instant) -> StoreResult<()> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new(
            "INSERT INTO webhook_settings (id, default_url, secret, previous_secret, previous_until, updated_at)",
        );
        s.values([w], |r, w| {
            r.bind(1_i64)
                .bind(w.default_url.as_ref().map(|u| u.to_string()))
                .bind(w.secret.expose())
                .bind(w.previous.as_ref().map(|(p, _)| p.expose()))
                // 0 (long past) without a previous secret: the binder has no nullable integer.
                .bind(
                    w.previous
                        .as_ref()
                        .map_or(0, |(_, until)| until.timestamp_millis()),
                )
                .bind(now.timestamp_millis());
        });
        s.push(
            " ON CONFLICT (id) DO UPDATE SET default_url = excluded.default_url,
               secret = excluded.secret, previous_secret = excluded.previous_secret,
               previous_until = excluded.previous_until, updated_at = excluded.updated_at",
        );
        s.query::<DB>()
            .execute(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn insert_chat_messages(&self, messages: &[ChatMessage]) -> StoreResult<()> {
        let _slot = self.connection_slot().await;
        for chunk in messages.chunks(CHUNK) {
            let mut s = outcomes::insert_chat::<DB>(chunk);
            s.query::<DB>()
                .execute(&self.pool())
                .await
                .map_err(db_err)?;
        }
        Ok(())
    }

    async fn delivery_counts(&self) -> StoreResult<Vec<DeliveryCount>> {
        let _slot = self.connection_slot().await;
        let rows: Vec<CountRow> = sqlx::query_as(
            "SELECT channel, status, COUNT(*) AS n FROM deliveries
             GROUP BY channel, status ORDER BY channel, status",
        )
        .fetch_all(&self.pool())
        .await
        .map_err(db_err)?;
        rows.into_iter().map(DeliveryCount::try_from).collect()
    }

    async fn delivered_by_holder(&self) -> StoreResult<Vec<(String, u64)>> {
        let _slot = self.connection_slot().await;
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT claim_token, COUNT(*) FROM deliveries
             WHERE status = 'delivered' AND claim_token IS NOT NULL GROUP BY claim_token",
        )
        .fetch_all(&self.pool())
        .await
        .map_err(db_err)?;
        let mut by_holder: HashMap<String, u64> = HashMap::new();
        for (token, n) in rows {
            *by_holder
                .entry(claim_holder(&token).to_owned())
                .or_default() += n as u64;
        }
        Ok(by_holder.into_iter().collect())
    }

    async fn deliveries(&self) -> StoreResult<Vec<DeliveryOutcome>> {
        let _slot = self.connection_slot().await;
        let rows: Vec<DeliveryRow> = sqlx::query_as(
            "SELECT schedule_id, occurrence, minutes_before, recipient, channel, version,
                    status, due_at, COALESCE(finished_at, claimed_at, due_at) AS at, detail
             FROM deliveries",
        )
        .fetch_all(&self.pool())
        .await
        .map_err(db_err)?;
        rows.into_iter().map(DeliveryOutcome::try_from).collect()
    }

    async fn reminder_deliveries(
        &self,
        reminder: &ReminderKey,
    ) -> StoreResult<Vec<DeliveryOutcome>> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new(
            "SELECT schedule_id, occurrence, minutes_before, recipient, channel, version,
                    status, due_at, COALESCE(finished_at, claimed_at, due_at) AS at, detail
             FROM deliveries WHERE schedule_id = ",
        );
        s.bind(reminder.schedule.as_str())
            .push(" AND occurrence = ")
            .bind(reminder.occurrence.millis())
            .push(" AND minutes_before = ")
            .bind(i64::from(reminder.minutes_before));
        let rows: Vec<DeliveryRow> = s
            .query_as::<DB, DeliveryRow>()
            .fetch_all(&self.pool())
            .await
            .map_err(db_err)?;
        rows.into_iter().map(DeliveryOutcome::try_from).collect()
    }

    async fn chat_messages(&self, user: &UserId) -> StoreResult<Vec<ChatMessage>> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new(
            "SELECT schedule_id, occurrence, minutes_before, user_id AS recipient, 'chat' AS channel,
                    version, body, created_at
             FROM chat_messages WHERE user_id = ",
        );
        s.bind(user.as_str()).push(" ORDER BY created_at");
        let rows: Vec<ChatRow> = s
            .query_as::<DB, ChatRow>()
            .fetch_all(&self.pool())
            .await
            .map_err(db_err)?;
        rows.into_iter().map(ChatMessage::try_from).collect()
    }

    async fn put_template(&self, t: &ReminderTemplate, now: Instant) -> StoreResult<()> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new(
            "INSERT INTO reminder_templates (channel, locale, subject, text, html, updated_at)",
        );
        s.values([t], |r, t| {
            r.bind(t.channel.as_str())
                .bind(t.locale.clone())
                .bind(t.subject.clone())
                .bind(t.text.clone())
                .bind(t.html.clone())
                .bind(now.timestamp_millis());
        });
        s.push(
            " ON CONFLICT (channel, locale) DO UPDATE SET subject = excluded.subject,
               text = excluded.text, html = excluded.html, updated_at = excluded.updated_at",
        );
        s.query::<DB>()
            .execute(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn delete_template(&self, channel: Channel, locale: &str) -> StoreResult<bool> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new("DELETE FROM reminder_templates WHERE channel = ");
        s.bind(channel.as_str())
            .push(" AND locale = ")
            .bind(locale.to_string())
            .push(" RETURNING channel");
        let gone: Vec<(String,)> = s
            .query_as::<DB, (String,)>()
            .fetch_all(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(!gone.is_empty())
    }

    async fn templates(&self) -> StoreResult<Vec<ReminderTemplate>> {
        let _slot = self.connection_slot().await;
        let rows: Vec<TemplateRow> = Statement::new(
            "SELECT channel, locale, subject, text, html FROM reminder_templates
             ORDER BY channel, locale",
        )
        .query_as::<DB, TemplateRow>()
        .fetch_all(&self.pool())
        .await
        .map_err(db_err)?;
        rows.into_iter().map(ReminderTemplate::try_from).collect()
    }

    async fn count(&self, what: Counted) -> StoreResult<u64> {
        let _slot = self.connection_slot().await;
        let (n,): (i64,) = Statement::new(counted::count_of(what))
            .query_as::<DB, (i64,)>()
            .fetch_one(&self.pool())
            .await
            .map_err(db_err)?;
        u64::try_from(n).map_err(|_| StoreError::corrupt("a row count", format!("{n} rows")))
    }

    async fn keep_change_baselines(
        &self,
        schedules: &[ScheduleId],
    ) -> StoreResult<HashSet<ScheduleId>> {
        let _slot = self.connection_slot().await;
        let mut existing = HashSet::new();
        if schedules.is_empty() {
            return Ok(existing);
        }
        let mut tx = begin_write(&self.pool()).await?;
        for chunk in schedules.chunks(CHUNK) {
            let ids = || chunk.iter().map(ScheduleId::as_str);
            let mut s = Statement::new("SELECT id FROM schedules WHERE id IN ");
            s.list(ids());
            let found: Vec<(String,)> = s
                .query_as::<DB, (String,)>()
                .fetch_all(&mut *tx)
                .await
                .map_err(db_err)?;
            if found.is_empty() {
                continue;
            }
            // Those with a baseline to keep: none yet, or a cancellation's.
            let mut s = Statement::new(
                "SELECT schedule_id FROM change_baselines WHERE snapshot IS NOT NULL AND schedule_id IN ",
            );
            s.list(found.iter().map(|(id,)| id.as_str()));
            let kept: HashSet<String> = s
                .query_as::<DB, (String,)>()
                .fetch_all(&mut *tx)
                .await
                .map_err(db_err)?
                .into_iter()
                .map(|(id,)| id)
                .collect();
            for (id,) in found {
                let id = rows::schedule_id(&id)?;
                if !kept.contains(id.as_str()) {
                    if let Some(current) = load_schedule::<DB>(&mut tx, &id).await? {
                        let mut s = Statement::new(
                            "INSERT INTO change_baselines (schedule_id, snapshot, revision, last_notice_at)",
                        );
                        s.values([&current], |r, c| {
                            r.bind(c.id.as_str())
                                .bind(snapshot_json(Some(c)))
                                .bind(0_i64)
                                .bind(0_i64);
                        });
                        s.push(
                            " ON CONFLICT (schedule_id) DO UPDATE SET snapshot = excluded.snapshot
                             WHERE change_baselines.snapshot IS NULL",
                        );
                        s.query::<DB>().execute(&mut *tx).await.map_err(db_err)?;
                    }
                }
                existing.insert(id);
            }
        }
        tx.commit().await.map_err(db_err)?;
        Ok(existing)
    }

    async fn freeze_change_notice(
        &self,
        schedule: &ScheduleId,
        token: &str,
        edge: NoticeEdge,
        now: Instant,
    ) -> StoreResult<Option<ChangeNotice>> {
        let _slot = self.connection_slot().await;
        let mut tx = begin_write(&self.pool()).await?;
        // The row lock first: a concurrent freeze of this schedule waits here
        // and then reads the baseline this one leaves.
        let mut s = Statement::new(
            "UPDATE change_baselines SET revision = revision + 1 WHERE schedule_id = ",
        );
        s.bind(schedule.as_str())
            .push(" RETURNING snapshot, last_notice_at");
        let Some(baseline) = s
            .query_as::<DB, BaselineRow>()
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_err)?
        else {
            return Ok(None);
        };
        let mut s = Statement::new(
            "SELECT schedule_id, token, edge, at, before_snapshot, after_snapshot
             FROM change_notices WHERE schedule_id = ",
        );
        s.bind(schedule.as_str()).push(" AND token = ").bind(token);
        if let Some(frozen) = s
            .query_as::<DB, NoticeRow>()
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_err)?
        {
            return ChangeNotice::try_from(frozen).map(Some);
        }
        // Waits for a write of the schedule in flight (it holds this row), so
        // the state read next is one version, not parts of two.
        let mut s =
            Statement::new("UPDATE schedule_mirror SET version = version WHERE schedule_id = ");
        s.bind(schedule.as_str());
        s.query::<DB>().execute(&mut *tx).await.map_err(db_err)?;
        let after = load_schedule::<DB>(&mut tx, schedule).await?;
        let at = now.timestamp_millis().max(baseline.last_notice_at + 1);
        let mut s = Statement::new(
            "INSERT INTO change_notices (schedule_id, token, edge, at, before_snapshot, after_snapshot)",
        );
        s.values([()], |r, ()| {
            r.bind(schedule.as_str())
                .bind(token)
                .bind(edge.as_str())
                .bind(at)
                .bind(baseline.snapshot.clone())
                .bind(snapshot_json(after.as_ref()));
        });
        s.query::<DB>().execute(&mut *tx).await.map_err(db_err)?;
        let mut s = Statement::new("UPDATE change_baselines SET snapshot = ");
        s.bind(snapshot_json(after.as_ref()))
            .push(", last_notice_at = ")
            .bind(at)
            .push(" WHERE schedule_id = ")
            .bind(schedule.as_str());
        s.query::<DB>().execute(&mut *tx).await.map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        Ok(Some(ChangeNotice {
            schedule: schedule.clone(),
            token: token.to_owned(),
            edge,
            at: rows::instant("at", at)?,
            before: snapshot("before_snapshot", baseline.snapshot.as_deref())?,
            after,
        }))
    }

    async fn clear_change_baselines(&self) -> StoreResult<u64> {
        let _slot = self.connection_slot().await;
        let mut tx = begin_write(&self.pool()).await?;
        let (n,): (i64,) = Statement::new("SELECT COUNT(*) FROM change_baselines")
            .query_as::<DB, (i64,)>()
            .fetch_one(&mut *tx)
            .await
            .map_err(db_err)?;
        Statement::new("DELETE FROM change_baselines")
            .query::<DB>()
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        Ok(n as u64)
    }

    async fn change_notices(&self, schedule: &ScheduleId) -> StoreResult<Vec<ChangeNotice>> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new(
            "SELECT schedule_id, token, edge, at, before_snapshot, after_snapshot
             FROM change_notices WHERE schedule_id = ",
        );
        s.bind(schedule.as_str()).push(" ORDER BY at");
        let rows: Vec<NoticeRow> = s
            .query_as::<DB, NoticeRow>()
            .fetch_all(&self.pool())
            .await
            .map_err(db_err)?;
        rows.into_iter().map(ChangeNotice::try_from).collect()
    }

    async fn start_idempotent(&self, start: &IdempotentStart<'_>) -> StoreResult<KeyedRequest> {
        let _slot = self.connection_slot().await;
        let mut tx = begin_write(&self.pool()).await?;
        let keyed = idempotency::start::<DB>(&mut tx, start).await?;
        tx.commit().await.map_err(db_err)?;
        Ok(keyed)
    }

    async fn finish_idempotent(
        &self,
        key: &IdempotencyKey,
        started: Instant,
        answer: &KeptAnswer,
    ) -> StoreResult<()> {
        let _slot = self.connection_slot().await;
        let mut s = idempotency::finish(key, started, answer);
        s.query::<DB>()
            .execute(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn release_idempotent(&self, key: &IdempotencyKey, started: Instant) -> StoreResult<()> {
        let _slot = self.connection_slot().await;
        let mut s = idempotency::release(key, started);
        s.query::<DB>()
            .execute(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn purge_idempotency_keys(&self, before: Instant, limit: u32) -> StoreResult<u64> {
        let _slot = self.connection_slot().await;
        let gone: Vec<(String,)> = idempotency::purge(before, limit)
            .query_as::<DB, (String,)>()
            .fetch_all(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(gone.len() as u64)
    }
}

/// A schedule with its participants and rules, on one connection.
async fn load_schedule<DB>(
    conn: &mut DB::Connection,
    id: &ScheduleId,
) -> StoreResult<Option<Schedule>>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> ScheduleRow: FromRow<'r, DB::Row>,
    for<'r> RuleRow: FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    let mut s = Statement::new(
        "SELECT title, body, starts_at, time_zone, recurrence, version FROM schedules WHERE id = ",
    );
    s.bind(id.as_str());
    let Some(row) = s
        .query_as::<DB, ScheduleRow>()
        .fetch_optional(&mut *conn)
        .await
        .map_err(db_err)?
    else {
        return Ok(None);
    };
    let mut s = Statement::new("SELECT user_id FROM participants WHERE schedule_id = ");
    s.bind(id.as_str()).push(" ORDER BY position");
    let participants: Vec<(String,)> = s
        .query_as::<DB, (String,)>()
        .fetch_all(&mut *conn)
        .await
        .map_err(db_err)?;
    let mut s =
        Statement::new("SELECT minutes_before, channels FROM reminder_rules WHERE schedule_id = ");
    s.bind(id.as_str()).push(" ORDER BY minutes_before DESC");
    let rules: Vec<RuleRow> = s
        .query_as::<DB, RuleRow>()
        .fetch_all(&mut *conn)
        .await
        .map_err(db_err)?;
    Ok(Some(Schedule {
        id: id.clone(),
        starts_at: row.starts_at()?,
        time_zone: row.time_zone()?,
        recurrence: recurrence(row.recurrence.as_deref())?,
        title: row.title,
        body: row.body,
        version: row.version,
        participants: participants
            .iter()
            .map(|(p,)| participant(p))
            .collect::<StoreResult<_>>()?,
        rules: rules
            .into_iter()
            .map(ReminderRule::try_from)
            .collect::<StoreResult<_>>()?,
    }))
}
