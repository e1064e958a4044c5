//! The statements of a schedule write (`put_schedules`), each run on the
//! write's transaction, a chunk of rows at a time.

use std::collections::{HashMap, HashSet};

use sqlx::{Database, Encode, Executor, IntoArguments, Type};
use toki_model::{ReminderRule, Schedule, UserId};
use toki_ports::StoreResult;

use super::rows::recurrence_json;
use super::statement::Statement;
use super::CHUNK;
use crate::db_err;

/// The participants of `schedules` that are users of this tenant.
pub(super) async fn known_users<DB>(
    conn: &mut DB::Connection,
    schedules: &[Schedule],
) -> StoreResult<HashSet<String>>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> (String,): sqlx::FromRow<'r, DB::Row>,
{
    let wanted: Vec<&str> = schedules
        .iter()
        .flat_map(|s| s.participants.iter().map(UserId::as_str))
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let mut known = HashSet::new();
    for chunk in wanted.chunks(CHUNK) {
        let mut s = Statement::new("SELECT id FROM users WHERE id IN ");
        s.list(chunk.iter().copied());
        let found: Vec<(String,)> = s
            .query_as::<DB, (String,)>()
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
        known.extend(found.into_iter().map(|(id,)| id));
    }
    Ok(known)
}

/// Moves each schedule's mirror row to its next version (1 for a new
/// schedule) and marks it unmirrored; the new versions by schedule id.
pub(super) async fn next_versions<DB>(
    conn: &mut DB::Connection,
    writable: &[&Schedule],
    now_ms: i64,
) -> StoreResult<HashMap<String, i64>>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> (String, i64): sqlx::FromRow<'r, DB::Row>,
{
    let mut versions: HashMap<String, i64> = HashMap::with_capacity(writable.len());
    for chunk in writable.chunks(CHUNK) {
        // Versions never repeat, even across a delete and re-create; the
        // upsert takes the row lock, so concurrent writes of one schedule serialise.
        let mut s = Statement::new(
            "INSERT INTO schedule_mirror (schedule_id, version, deleted, mirrored, changed_at)",
        );
        s.values(chunk, |r, sch| {
            r.bind(sch.id.as_str())
                .bind(1_i64)
                .bind(false)
                .bind(false)
                .bind(now_ms);
        });
        s.push(
            " ON CONFLICT (schedule_id) DO UPDATE SET version = schedule_mirror.version + 1,
               deleted = FALSE, mirrored = FALSE, changed_at = excluded.changed_at
             RETURNING schedule_id, version",
        );
        let rows: Vec<(String, i64)> = s
            .query_as::<DB, (String, i64)>()
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
        versions.extend(rows);
    }
    Ok(versions)
}

/// A schedule's version from [`next_versions`] (0 if it has none).
pub(super) fn version_of(versions: &HashMap<String, i64>, sch: &Schedule) -> i64 {
    versions.get(sch.id.as_str()).copied().unwrap_or(0)
}

/// Writes each schedule's row at its new version and clears its
/// participants and reminder rules (written again after).
pub(super) async fn upsert_schedules<DB>(
    conn: &mut DB::Connection,
    writable: &[&Schedule],
    versions: &HashMap<String, i64>,
    now_ms: i64,
) -> StoreResult<()>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
{
    for chunk in writable.chunks(CHUNK) {
        let mut s = Statement::new(
            "INSERT INTO schedules (id, title, body, starts_at, time_zone, recurrence, version, updated_at)",
        );
        s.values(chunk, |r, sch| {
            r.bind(sch.id.as_str())
                .bind(sch.title.clone())
                .bind(sch.body.clone())
                .bind(sch.starts_at.timestamp_millis())
                .bind(sch.time_zone.name())
                .bind(recurrence_json(sch.recurrence.as_ref()))
                .bind(version_of(versions, sch))
                .bind(now_ms);
        });
        s.push(
            " ON CONFLICT (id) DO UPDATE SET title = excluded.title, body = excluded.body,
               starts_at = excluded.starts_at, time_zone = excluded.time_zone,
               recurrence = excluded.recurrence,
               version = excluded.version, updated_at = excluded.updated_at",
        );
        s.query::<DB>().execute(&mut *conn).await.map_err(db_err)?;
        for table in ["participants", "reminder_rules"] {
            let mut s = Statement::new(&format!("DELETE FROM {table} WHERE schedule_id IN "));
            s.list(chunk.iter().map(|sch| sch.id.as_str()));
            s.query::<DB>().execute(&mut *conn).await.map_err(db_err)?;
        }
    }
    Ok(())
}

/// Inserts every schedule's participants, each with its position.
pub(super) async fn insert_participants<DB>(
    conn: &mut DB::Connection,
    writable: &[&Schedule],
) -> StoreResult<()>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
{
    let participants: Vec<(&str, usize, &str)> = writable
        .iter()
        .flat_map(|sch| {
            sch.participants
                .iter()
                .enumerate()
                .map(|(i, p)| (sch.id.as_str(), i, p.as_str()))
        })
        .collect();
    for chunk in participants.chunks(CHUNK) {
        let mut s = Statement::new("INSERT INTO participants (schedule_id, user_id, position)");
        s.values(chunk, |r, (schedule, i, user)| {
            r.bind(*schedule).bind(*user).bind(*i as i64);
        });
        s.query::<DB>().execute(&mut *conn).await.map_err(db_err)?;
    }
    Ok(())
}

/// Inserts every schedule's reminder rules.
pub(super) async fn insert_rules<DB>(
    conn: &mut DB::Connection,
    writable: &[&Schedule],
) -> StoreResult<()>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
{
    let rules: Vec<(&str, &ReminderRule)> = writable
        .iter()
        .flat_map(|sch| sch.rules.iter().map(|r| (sch.id.as_str(), r)))
        .collect();
    for chunk in rules.chunks(CHUNK) {
        let mut s =
            Statement::new("INSERT INTO reminder_rules (schedule_id, minutes_before, channels)");
        s.values(chunk, |r, (schedule, rule)| {
            r.bind(*schedule)
                .bind(i64::from(rule.minutes_before))
                .bind(rule.channels.encode());
        });
        s.query::<DB>().execute(&mut *conn).await.map_err(db_err)?;
    }
    Ok(())
}
