//! Recording outcomes and chat rows, fenced by what an erasure removes: an
//! outcome updates the row its claim made; only a delivery that had no row
//! (a stale verdict: never claimed) gets one inserted, and only for a user
//! who exists. A chat row is inserted only for a user who exists. So a send
//! in flight while its recipient is erased (the erasure deletes their user
//! row and their claimed rows) records nothing that names them again.
//!
//! On Postgres the user's row is read `FOR KEY SHARE SKIP LOCKED`: an
//! erasure deleting it holds its lock, and the insert passes it over rather
//! than wait (or read it from a snapshot taken before the erasure
//! committed); a user row taken first makes the erasure wait for the insert
//! and then erase what it wrote. SQLite runs one writer at a time.

use std::collections::HashSet;

use sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Type};
use toki_model::DeliveryOutcome;
use toki_ports::{ChatMessage, StoreResult};

use super::rows::{ChangedDelivery, KeyColumns};
use super::statement::Statement;
use crate::db_err;

/// The columns of an outcome's values, in order.
const OUTCOME: &str = "WITH v (schedule_id, occurrence, minutes_before, recipient, channel,
       version, status, due_at, finished_at, detail) AS (";

/// The delivery row's key in `v` and in `deliveries`, equal.
const SAME_KEY: &str = "deliveries.schedule_id = v.schedule_id
       AND deliveries.occurrence = v.occurrence
       AND deliveries.minutes_before = v.minutes_before
       AND deliveries.recipient = v.recipient AND deliveries.channel = v.channel";

/// What a changed row gives back (for its event).
const CHANGED: &str = " RETURNING deliveries.schedule_id, deliveries.occurrence,
       deliveries.minutes_before, deliveries.recipient, deliveries.channel, deliveries.failures";

fn outcome_values<'a>(s: &mut Statement, outcomes: impl IntoIterator<Item = &'a DeliveryOutcome>) {
    s.push(OUTCOME);
    s.values(outcomes, |r, o| {
        KeyColumns::from(&o.key)
            .bind(r)
            .bind(o.version)
            .bind(o.status.as_str())
            .bind(o.due_at.millis())
            .bind(o.at.timestamp_millis())
            .bind(o.detail.clone());
    });
    s.push(")");
}

/// ` AND` the user `column` names exists (locked on Postgres, see the module).
fn user_exists<DB: Database>(s: &mut Statement, column: &str) {
    s.push(" WHERE EXISTS (SELECT 1 FROM users u WHERE u.id = ")
        .push(column);
    if DB::NAME == "PostgreSQL" {
        s.push(" FOR KEY SHARE SKIP LOCKED");
    }
    s.push(")");
}

/// The update of the rows outcomes' claims made. A finished delivery is
/// final, except that a send that happened is always recorded; a stale
/// verdict never overwrites another version's send in progress (its own
/// claim's, yes: a late change).
fn update_claimed(chunk: &[DeliveryOutcome]) -> Statement {
    let mut s = Statement::default();
    outcome_values(&mut s, chunk);
    s.push(
        " UPDATE deliveries SET status = v.status, finished_at = v.finished_at,
            detail = v.detail, version = v.version,
            failures = deliveries.failures + CASE WHEN v.status = 'failed' THEN 1 ELSE 0 END
          FROM v WHERE ",
    )
    .push(SAME_KEY)
    .push(
        " AND (deliveries.status IN ('failed', 'throttled', 'deferred')
             OR (deliveries.status = 'sending'
                 AND (v.status <> 'stale' OR deliveries.version = v.version))
             OR (v.status = 'delivered' AND deliveries.status <> 'delivered'))",
    )
    .push(CHANGED);
    s
}

/// The insert of outcomes that had no row, for users who exist.
fn insert_unclaimed<DB: Database>(rest: &[&DeliveryOutcome]) -> Statement {
    let mut s = Statement::default();
    outcome_values(&mut s, rest.iter().copied());
    s.push(
        " INSERT INTO deliveries (schedule_id, occurrence, minutes_before, recipient, channel,
           version, status, due_at, finished_at, detail, attempts, failures)
         SELECT v.schedule_id, v.occurrence, v.minutes_before, v.recipient, v.channel,
           v.version, v.status, v.due_at, v.finished_at, v.detail, 1,
           CASE WHEN v.status = 'failed' THEN 1 ELSE 0 END
         FROM v",
    );
    user_exists::<DB>(&mut s, "v.recipient");
    s.push(" ON CONFLICT (schedule_id, occurrence, minutes_before, recipient, channel) DO NOTHING")
        .push(CHANGED);
    s
}

type Key = (String, i64, i64, String, String);

fn key_of(o: &DeliveryOutcome) -> Key {
    let k = KeyColumns::from(&o.key);
    (
        k.schedule_id,
        k.occurrence,
        k.minutes_before,
        k.recipient,
        k.channel.to_owned(),
    )
}

/// Records one chunk of outcomes (see the module); the rows they changed.
pub(super) async fn record_chunk<DB>(
    conn: &mut DB::Connection,
    chunk: &[DeliveryOutcome],
) -> StoreResult<Vec<ChangedDelivery>>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> ChangedDelivery: FromRow<'r, DB::Row>,
{
    let mut changed: Vec<ChangedDelivery> = update_claimed(chunk)
        .query_as::<DB, ChangedDelivery>()
        .fetch_all(&mut *conn)
        .await
        .map_err(db_err)?;
    let updated: HashSet<Key> = changed
        .iter()
        .map(|c| {
            (
                c.schedule_id.clone(),
                c.occurrence,
                c.minutes_before,
                c.recipient.clone(),
                c.channel.clone(),
            )
        })
        .collect();
    let rest: Vec<&DeliveryOutcome> = chunk
        .iter()
        .filter(|o| !updated.contains(&key_of(o)))
        .collect();
    if !rest.is_empty() {
        let inserted = insert_unclaimed::<DB>(&rest)
            .query_as::<DB, ChangedDelivery>()
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
        changed.extend(inserted);
    }
    Ok(changed)
}

/// The insert of chat rows, for users who exist (idempotent on the key).
pub(super) fn insert_chat<DB: Database>(chunk: &[ChatMessage]) -> Statement {
    let mut s = Statement::new(
        "WITH v (schedule_id, occurrence, minutes_before, user_id, version, body, created_at) AS (",
    );
    s.values(chunk, |r, m| {
        let k = KeyColumns::from(&m.key);
        r.bind(k.schedule_id)
            .bind(k.occurrence)
            .bind(k.minutes_before)
            .bind(m.user.as_str())
            .bind(m.version)
            .bind(m.text.clone())
            .bind(m.created_at.timestamp_millis());
    });
    s.push(
        ") INSERT INTO chat_messages (schedule_id, occurrence, minutes_before, user_id, version,
           body, created_at)
         SELECT v.schedule_id, v.occurrence, v.minutes_before, v.user_id, v.version, v.body,
           v.created_at
         FROM v",
    );
    user_exists::<DB>(&mut s, "v.user_id");
    s.push(" ON CONFLICT DO NOTHING");
    s
}
