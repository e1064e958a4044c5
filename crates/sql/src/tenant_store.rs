//! A tenant's database (the source of truth) on SQLite and on Postgres. The
//! schema and the SQL are the same for both (`migrations/tenant`), so one
//! implementation is instantiated per engine by a macro.

use async_trait::async_trait;
use chrono_tz::Tz;
use toki_core::ports::{
    ChatMessage, Claims, DeliveryContext, MirrorWork, ScheduleSnapshot, TenantStore,
};
use toki_core::{
    from_millis, Channel, ChannelSet, DeliveryCount, DeliveryKey, DeliveryOutcome, DeliveryStatus,
    DueAt, Instant, Occurrence, ReminderRule, Schedule, ScheduleId, StoreError, StoreResult, User,
    UserId, ValidationError,
};

use crate::db_err;

pub static TENANT_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/tenant");

/// Rows per multi-row statement: well under both engines' bind-parameter limits.
const CHUNK: usize = 500;

/// Names one batch's claims: unique per process and call.
fn claim_token(now: Instant) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{}-{n}", std::process::id(), now.timestamp_millis())
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!("corrupt row in tenant database: {what}: {e}"))
}

fn instant(what: &str, ms: i64) -> StoreResult<Instant> {
    from_millis(what, ms).map_err(|e| corrupt(what, e))
}

fn tz(s: &str) -> StoreResult<Tz> {
    s.parse().map_err(|_| corrupt("time_zone", s))
}

fn user_id(s: &str) -> StoreResult<UserId> {
    UserId::parse_field("user", s).map_err(|e| corrupt("user id", e))
}

fn schedule_id(s: &str) -> StoreResult<ScheduleId> {
    ScheduleId::parse_field("schedule", s).map_err(|e| corrupt("schedule id", e))
}

fn channel(s: &str) -> StoreResult<Channel> {
    s.parse().map_err(|e| corrupt("channel", e))
}

/// A delivery key as the columns of the tables that use it.
struct KeyCols {
    schedule: String,
    occurrence: i64,
    minutes_before: i64,
    version: i64,
    recipient: String,
    channel: &'static str,
}

fn cols(k: &DeliveryKey) -> KeyCols {
    KeyCols {
        schedule: k.schedule.to_string(),
        occurrence: k.occurrence.millis(),
        minutes_before: i64::from(k.minutes_before),
        version: k.version,
        recipient: k.recipient.to_string(),
        channel: k.channel.as_str(),
    }
}

fn key_from(
    schedule: &str,
    occurrence: i64,
    minutes_before: i64,
    version: i64,
    recipient: &str,
    ch: &str,
) -> StoreResult<DeliveryKey> {
    Ok(DeliveryKey {
        schedule: schedule_id(schedule)?,
        occurrence: Occurrence(instant("occurrence", occurrence)?),
        minutes_before: minutes_before as u32,
        version,
        recipient: user_id(recipient)?,
        channel: channel(ch)?,
    })
}

macro_rules! tenant_store {
    ($name:ident, $db:ty, $pool:ty, $row:ty) => {
        /// A tenant's database.
        #[derive(Clone)]
        pub struct $name {
            pool: $pool,
        }

        impl $name {
            pub fn new(pool: $pool) -> Self {
                Self { pool }
            }

            pub fn pool(&self) -> &$pool {
                &self.pool
            }

            pub async fn migrate(&self) -> StoreResult<()> {
                TENANT_MIGRATIONS
                    .run(&self.pool)
                    .await
                    .map_err(|e| StoreError::Backend(format!("migrating tenant database: {e}")))
            }

            fn user_from(row: &$row) -> StoreResult<User> {
                use sqlx::Row;
                Ok(User {
                    id: user_id(row.get("id"))?,
                    name: row.get("name"),
                    email: row.get("email"),
                    slack_user_id: row.get("slack_user_id"),
                    time_zone: tz(row.get("time_zone"))?,
                    locale: row.get("locale"),
                })
            }

            async fn load_schedule(
                conn: &mut <$db as sqlx::Database>::Connection,
                id: &ScheduleId,
            ) -> StoreResult<Option<Schedule>> {
                use sqlx::Row;
                let Some(row) = sqlx::query(
                    "SELECT id, title, body, starts_at, time_zone, version FROM schedules WHERE id = $1",
                )
                .bind(id.as_str())
                .fetch_optional(&mut *conn)
                .await
                .map_err(db_err)?
                else {
                    return Ok(None);
                };
                let participants = sqlx::query_scalar::<_, String>(
                    "SELECT user_id FROM participants WHERE schedule_id = $1 ORDER BY position",
                )
                .bind(id.as_str())
                .fetch_all(&mut *conn)
                .await
                .map_err(db_err)?;
                let rules = sqlx::query(
                    "SELECT minutes_before, channels FROM reminder_rules WHERE schedule_id = $1
                     ORDER BY minutes_before DESC",
                )
                .bind(id.as_str())
                .fetch_all(&mut *conn)
                .await
                .map_err(db_err)?;
                Ok(Some(Schedule {
                    id: id.clone(),
                    title: row.get("title"),
                    body: row.get("body"),
                    starts_at: instant("starts_at", row.get("starts_at"))?,
                    time_zone: tz(row.get("time_zone"))?,
                    participants: participants.iter().map(|p| user_id(p)).collect::<StoreResult<_>>()?,
                    rules: rules
                        .iter()
                        .map(|r| {
                            Ok(ReminderRule {
                                minutes_before: r.get::<i64, _>("minutes_before") as u32,
                                channels: ChannelSet::decode("channels", r.get("channels"))
                                    .map_err(|e| corrupt("channels", e))?,
                            })
                        })
                        .collect::<StoreResult<_>>()?,
                    version: row.get("version"),
                }))
            }
        }

        #[async_trait]
        impl TenantStore for $name {
            async fn put_user(&self, u: &User) -> StoreResult<()> {
                sqlx::query(
                    "INSERT INTO users (id, name, email, slack_user_id, time_zone, locale, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (id) DO UPDATE SET name = excluded.name, email = excluded.email,
                       slack_user_id = excluded.slack_user_id, time_zone = excluded.time_zone,
                       locale = excluded.locale, updated_at = excluded.updated_at",
                )
                .bind(u.id.as_str())
                .bind(&u.name)
                .bind(&u.email)
                .bind(&u.slack_user_id)
                .bind(u.time_zone.name())
                .bind(&u.locale)
                .bind(crate::now_millis())
                .execute(&self.pool)
                .await
                .map_err(db_err)?;
                Ok(())
            }

            async fn get_user(&self, id: &UserId) -> StoreResult<Option<User>> {
                let row = sqlx::query("SELECT * FROM users WHERE id = $1")
                    .bind(id.as_str())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(db_err)?;
                row.as_ref().map(Self::user_from).transpose()
            }

            async fn put_schedule(&self, s: &Schedule, now: Instant) -> StoreResult<Schedule> {
                let mut tx = self.pool.begin().await.map_err(db_err)?;
                // Every participant must be a user of this tenant.
                if !s.participants.is_empty() {
                    let mut qb = sqlx::QueryBuilder::<$db>::new("SELECT id FROM users WHERE id IN (");
                    let mut sep = qb.separated(", ");
                    for p in &s.participants {
                        sep.push_bind(p.as_str());
                    }
                    qb.push(")");
                    let known: std::collections::HashSet<String> = qb
                        .build_query_scalar::<String>()
                        .fetch_all(&mut *tx)
                        .await
                        .map_err(db_err)?
                        .into_iter()
                        .collect();
                    if let Some((i, p)) = s
                        .participants
                        .iter()
                        .enumerate()
                        .find(|(_, p)| !known.contains(p.as_str()))
                    {
                        return Err(ValidationError::new(
                            format!("participants[{i}]"),
                            format!("no user {p:?} in this tenant"),
                        )
                        .into());
                    }
                }
                // Versions never repeat, even across a delete and re-create; the
                // upsert takes the row lock, so concurrent writes of one schedule
                // get distinct versions and serialise.
                let now_ms = now.timestamp_millis();
                let version: i64 = sqlx::query_scalar(
                    "INSERT INTO schedule_mirror (schedule_id, version, deleted, mirrored, changed_at)
                     VALUES ($1, 1, FALSE, FALSE, $2)
                     ON CONFLICT (schedule_id) DO UPDATE SET version = schedule_mirror.version + 1,
                       deleted = FALSE, mirrored = FALSE, changed_at = excluded.changed_at
                     RETURNING version",
                )
                .bind(s.id.as_str())
                .bind(now_ms)
                .fetch_one(&mut *tx)
                .await
                .map_err(db_err)?;
                sqlx::query(
                    "INSERT INTO schedules (id, title, body, starts_at, time_zone, version, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (id) DO UPDATE SET title = excluded.title, body = excluded.body,
                       starts_at = excluded.starts_at, time_zone = excluded.time_zone,
                       version = excluded.version, updated_at = excluded.updated_at",
                )
                .bind(s.id.as_str())
                .bind(&s.title)
                .bind(&s.body)
                .bind(s.starts_at.timestamp_millis())
                .bind(s.time_zone.name())
                .bind(version)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
                for table in ["participants", "reminder_rules"] {
                    sqlx::query(&format!("DELETE FROM {table} WHERE schedule_id = $1"))
                        .bind(s.id.as_str())
                        .execute(&mut *tx)
                        .await
                        .map_err(db_err)?;
                }
                for (c, chunk) in s.participants.chunks(CHUNK).enumerate() {
                    let mut qb = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO participants (schedule_id, user_id, position) ",
                    );
                    qb.push_values(chunk.iter().enumerate(), |mut b, (i, p)| {
                        b.push_bind(s.id.as_str())
                            .push_bind(p.as_str())
                            .push_bind((c * CHUNK + i) as i64);
                    });
                    qb.build().execute(&mut *tx).await.map_err(db_err)?;
                }
                if !s.rules.is_empty() {
                    let mut qb = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO reminder_rules (schedule_id, minutes_before, channels) ",
                    );
                    qb.push_values(&s.rules, |mut b, r| {
                        b.push_bind(s.id.as_str())
                            .push_bind(i64::from(r.minutes_before))
                            .push_bind(r.channels.encode());
                    });
                    qb.build().execute(&mut *tx).await.map_err(db_err)?;
                }
                tx.commit().await.map_err(db_err)?;
                Ok(Schedule {
                    version,
                    ..s.clone()
                })
            }

            async fn get_schedule(&self, id: &ScheduleId) -> StoreResult<Option<Schedule>> {
                let mut conn = self.pool.acquire().await.map_err(db_err)?;
                Self::load_schedule(&mut conn, id).await
            }

            async fn delete_schedule(&self, id: &ScheduleId, now: Instant) -> StoreResult<Option<i64>> {
                let mut tx = self.pool.begin().await.map_err(db_err)?;
                let deleted = sqlx::query("DELETE FROM schedules WHERE id = $1")
                    .bind(id.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(db_err)?;
                if deleted.rows_affected() == 0 {
                    return Ok(None);
                }
                let version: i64 = sqlx::query_scalar(
                    "UPDATE schedule_mirror SET version = version + 1, deleted = TRUE,
                       mirrored = FALSE, changed_at = $2
                     WHERE schedule_id = $1 RETURNING version",
                )
                .bind(id.as_str())
                .bind(now.timestamp_millis())
                .fetch_one(&mut *tx)
                .await
                .map_err(db_err)?;
                tx.commit().await.map_err(db_err)?;
                Ok(Some(version))
            }

            async fn unmirrored(&self) -> StoreResult<Vec<MirrorWork>> {
                use sqlx::Row;
                let mut conn = self.pool.acquire().await.map_err(db_err)?;
                let rows = sqlx::query(
                    "SELECT schedule_id, version, deleted FROM schedule_mirror
                     WHERE mirrored = FALSE ORDER BY changed_at",
                )
                .fetch_all(&mut *conn)
                .await
                .map_err(db_err)?;
                let mut out = Vec::with_capacity(rows.len());
                for row in rows {
                    let id = schedule_id(row.get("schedule_id"))?;
                    let version: i64 = row.get("version");
                    if row.get::<bool, _>("deleted") {
                        out.push(MirrorWork::Delete { schedule: id, version });
                    } else if let Some(s) = Self::load_schedule(&mut conn, &id).await? {
                        out.push(MirrorWork::Upsert(s));
                    }
                }
                Ok(out)
            }

            async fn mark_mirrored(&self, id: &ScheduleId, version: i64) -> StoreResult<()> {
                // Only if no newer write came in meanwhile.
                sqlx::query(
                    "UPDATE schedule_mirror SET mirrored = TRUE WHERE schedule_id = $1 AND version = $2",
                )
                .bind(id.as_str())
                .bind(version)
                .execute(&self.pool)
                .await
                .map_err(db_err)?;
                Ok(())
            }

            async fn delivery_context(
                &self,
                schedules: &[ScheduleId],
                users: &[UserId],
            ) -> StoreResult<DeliveryContext> {
                use sqlx::Row;
                let mut ctx = DeliveryContext::default();
                if schedules.is_empty() && users.is_empty() {
                    return Ok(ctx);
                }
                // One round trip: schedules and users in one UNION ALL.
                let mut qb = sqlx::QueryBuilder::<$db>::new(
                    "SELECT 's' AS kind, id, title AS a, body AS b, CAST(NULL AS TEXT) AS c,
                            time_zone AS d, CAST(NULL AS TEXT) AS e, starts_at AS n1, version AS n2
                     FROM schedules WHERE id IN (",
                );
                let mut sep = qb.separated(", ");
                sep.push_bind("");
                for s in schedules {
                    sep.push_bind(s.as_str());
                }
                qb.push(
                    ") UNION ALL
                     SELECT 'u' AS kind, id, name AS a, email AS b, slack_user_id AS c,
                            time_zone AS d, locale AS e, CAST(NULL AS BIGINT) AS n1, CAST(NULL AS BIGINT) AS n2
                     FROM users WHERE id IN (",
                );
                let mut sep = qb.separated(", ");
                sep.push_bind("");
                for u in users {
                    sep.push_bind(u.as_str());
                }
                qb.push(")");
                let rows = qb.build().fetch_all(&self.pool).await.map_err(db_err)?;
                for row in rows {
                    let kind: String = row.get("kind");
                    let id: String = row.get("id");
                    if kind == "s" {
                        let id = schedule_id(&id)?;
                        ctx.schedules.insert(
                            id.clone(),
                            ScheduleSnapshot {
                                id,
                                title: row.get("a"),
                                body: row.get::<Option<String>, _>("b").unwrap_or_default(),
                                starts_at: instant("starts_at", row.get::<Option<i64>, _>("n1").unwrap_or(0))?,
                                version: row.get::<Option<i64>, _>("n2").unwrap_or(0),
                            },
                        );
                    } else {
                        let id = user_id(&id)?;
                        ctx.users.insert(
                            id.clone(),
                            User {
                                id,
                                name: row.get("a"),
                                email: row.get("b"),
                                slack_user_id: row.get("c"),
                                time_zone: tz(row.get("d"))?,
                                locale: row.get::<Option<String>, _>("e").unwrap_or_default(),
                            },
                        );
                    }
                }
                Ok(ctx)
            }

            async fn claim_deliveries(
                &self,
                claims: &[(DeliveryKey, DueAt)],
                now: Instant,
                stale_claim_before: Instant,
            ) -> StoreResult<Claims> {
                use sqlx::Row;
                let token = claim_token(now);
                let mut out = Claims::default();
                // All chunks or none: a half-made claim would strand `sending` rows.
                let mut tx = self.pool.begin().await.map_err(db_err)?;
                for chunk in claims.chunks(CHUNK) {
                    let mut qb = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO deliveries (schedule_id, occurrence, minutes_before, version,
                           recipient, channel, status, due_at, claimed_at, attempts, claim_token) ",
                    );
                    qb.push_values(chunk, |mut b, (k, due)| {
                        let c = cols(k);
                        b.push_bind(c.schedule)
                            .push_bind(c.occurrence)
                            .push_bind(c.minutes_before)
                            .push_bind(c.version)
                            .push_bind(c.recipient)
                            .push_bind(c.channel)
                            .push_bind("sending")
                            .push_bind(due.millis())
                            .push_bind(now.timestamp_millis())
                            .push_bind(1_i64)
                            .push_bind(token.clone());
                    });
                    qb.push(
                        " ON CONFLICT (schedule_id, occurrence, minutes_before, recipient, channel)
                          DO UPDATE SET status = 'sending', version = excluded.version,
                            due_at = excluded.due_at, claimed_at = excluded.claimed_at,
                            claim_token = excluded.claim_token, attempts = deliveries.attempts + 1
                          WHERE deliveries.status IN ('failed', 'stale')
                             OR (deliveries.status = 'sending' AND deliveries.claimed_at < ",
                    );
                    qb.push_bind(stale_claim_before.timestamp_millis());
                    qb.push(
                        ") RETURNING schedule_id, occurrence, minutes_before, version, recipient, channel",
                    );
                    for row in qb.build().fetch_all(&mut *tx).await.map_err(db_err)? {
                        out.owned.push(key_from(
                            row.get("schedule_id"),
                            row.get("occurrence"),
                            row.get("minutes_before"),
                            row.get("version"),
                            row.get("recipient"),
                            row.get("channel"),
                        )?);
                    }
                }
                if out.owned.len() < claims.len() {
                    // Which of the others someone else is still sending.
                    for chunk in claims.chunks(CHUNK) {
                        let mut qb = sqlx::QueryBuilder::<$db>::new(
                            "SELECT schedule_id, occurrence, minutes_before, version, recipient, channel
                             FROM deliveries WHERE status = 'sending' AND claim_token <> ",
                        );
                        qb.push_bind(token.clone());
                        qb.push(" AND (schedule_id, occurrence, minutes_before, recipient, channel) IN (");
                        qb.push_values(chunk, |mut b, (k, _)| {
                            let c = cols(k);
                            b.push_bind(c.schedule)
                                .push_bind(c.occurrence)
                                .push_bind(c.minutes_before)
                                .push_bind(c.recipient)
                                .push_bind(c.channel);
                        });
                        qb.push(")");
                        for row in qb.build().fetch_all(&mut *tx).await.map_err(db_err)? {
                            out.busy.push(key_from(
                                row.get("schedule_id"),
                                row.get("occurrence"),
                                row.get("minutes_before"),
                                row.get("version"),
                                row.get("recipient"),
                                row.get("channel"),
                            )?);
                        }
                    }
                }
                tx.commit().await.map_err(db_err)?;
                Ok(out)
            }

            async fn record_outcomes(&self, outcomes: &[DeliveryOutcome]) -> StoreResult<()> {
                for chunk in outcomes.chunks(CHUNK) {
                    let mut qb = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO deliveries (schedule_id, occurrence, minutes_before, version,
                           recipient, channel, status, due_at, finished_at, detail, attempts) ",
                    );
                    qb.push_values(chunk, |mut b, o| {
                        let c = cols(&o.key);
                        b.push_bind(c.schedule)
                            .push_bind(c.occurrence)
                            .push_bind(c.minutes_before)
                            .push_bind(c.version)
                            .push_bind(c.recipient)
                            .push_bind(c.channel)
                            .push_bind(o.status.as_str())
                            .push_bind(o.due_at.millis())
                            .push_bind(o.at.timestamp_millis())
                            .push_bind(o.detail.clone())
                            .push_bind(1_i64);
                    });
                    // A finished delivery is final; a stale verdict never overwrites a send in progress.
                    qb.push(
                        " ON CONFLICT (schedule_id, occurrence, minutes_before, recipient, channel)
                          DO UPDATE SET status = excluded.status, finished_at = excluded.finished_at,
                            detail = excluded.detail, version = excluded.version
                          WHERE deliveries.status = 'failed'
                             OR (deliveries.status = 'sending' AND excluded.status <> 'stale')",
                    );
                    qb.build().execute(&self.pool).await.map_err(db_err)?;
                }
                Ok(())
            }

            async fn insert_chat_messages(&self, messages: &[ChatMessage]) -> StoreResult<()> {
                for chunk in messages.chunks(CHUNK) {
                    let mut qb = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO chat_messages (schedule_id, occurrence, minutes_before, version,
                           user_id, body, created_at) ",
                    );
                    qb.push_values(chunk, |mut b, m| {
                        let c = cols(&m.key);
                        b.push_bind(c.schedule)
                            .push_bind(c.occurrence)
                            .push_bind(c.minutes_before)
                            .push_bind(c.version)
                            .push_bind(m.user.to_string())
                            .push_bind(m.text.clone())
                            .push_bind(m.created_at.timestamp_millis());
                    });
                    qb.push(" ON CONFLICT DO NOTHING");
                    qb.build().execute(&self.pool).await.map_err(db_err)?;
                }
                Ok(())
            }

            async fn delivery_counts(&self) -> StoreResult<Vec<DeliveryCount>> {
                use sqlx::Row;
                let rows = sqlx::query(
                    "SELECT channel, status, COUNT(*) AS n FROM deliveries
                     GROUP BY channel, status ORDER BY channel, status",
                )
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
                rows.iter()
                    .map(|r| {
                        Ok(DeliveryCount {
                            channel: channel(r.get("channel"))?,
                            status: r
                                .get::<String, _>("status")
                                .parse::<DeliveryStatus>()
                                .map_err(|e| corrupt("status", e))?,
                            count: r.get::<i64, _>("n") as u64,
                        })
                    })
                    .collect()
            }

            async fn deliveries(&self) -> StoreResult<Vec<DeliveryOutcome>> {
                use sqlx::Row;
                let rows = sqlx::query(
                    "SELECT schedule_id, occurrence, minutes_before, version, recipient, channel,
                            status, due_at, COALESCE(finished_at, claimed_at, due_at) AS at, detail
                     FROM deliveries",
                )
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
                rows.iter()
                    .map(|r| {
                        Ok(DeliveryOutcome {
                            key: key_from(
                                r.get("schedule_id"),
                                r.get("occurrence"),
                                r.get("minutes_before"),
                                r.get("version"),
                                r.get("recipient"),
                                r.get("channel"),
                            )?,
                            due_at: DueAt(instant("due_at", r.get("due_at"))?),
                            status: r
                                .get::<String, _>("status")
                                .parse()
                                .map_err(|e| corrupt("status", e))?,
                            at: instant("at", r.get("at"))?,
                            detail: r.get("detail"),
                        })
                    })
                    .collect()
            }

            async fn chat_messages(&self, user: &UserId) -> StoreResult<Vec<ChatMessage>> {
                use sqlx::Row;
                let rows = sqlx::query(
                    "SELECT * FROM chat_messages WHERE user_id = $1 ORDER BY created_at",
                )
                .bind(user.as_str())
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
                rows.iter()
                    .map(|r| {
                        Ok(ChatMessage {
                            key: key_from(
                                r.get("schedule_id"),
                                r.get("occurrence"),
                                r.get("minutes_before"),
                                r.get("version"),
                                r.get("user_id"),
                                "chat",
                            )?,
                            user: user_id(r.get("user_id"))?,
                            text: r.get("body"),
                            created_at: instant("created_at", r.get("created_at"))?,
                        })
                    })
                    .collect()
            }
        }
    };
}

tenant_store!(
    SqliteTenantStore,
    sqlx::Sqlite,
    sqlx::SqlitePool,
    sqlx::sqlite::SqliteRow
);
tenant_store!(
    PostgresTenantStore,
    sqlx::Postgres,
    sqlx::PgPool,
    sqlx::postgres::PgRow
);
