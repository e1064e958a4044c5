//! The statements of a delivery claim (`claim_deliveries`), each run on the
//! claim's transaction for one chunk of claims.

use std::collections::HashSet;

use sqlx::{Database, Encode, Executor, IntoArguments, Type};
use toki_model::{DeliveryClaim, DeliveryKey, Instant};
use toki_ports::{OwnedDelivery, StoreResult};

use super::rows::{DeliveryKeyRow, KeyColumns, OwnedRow};
use super::statement::Statement;
use crate::{db_err, RowsAffected};

/// Claims the deliveries of `chunk` for `token`: new ones, ones that failed
/// or were put off, and ones whose holder has not renewed them since
/// `takeover_before`. The deliveries it got, none of them among `earlier`
/// (what the call's earlier chunks got, under the same token).
pub(super) async fn claim_chunk<DB>(
    conn: &mut DB::Connection,
    chunk: &[DeliveryClaim],
    earlier: &[OwnedDelivery],
    token: &str,
    now: Instant,
    takeover_before: Instant,
) -> StoreResult<Vec<OwnedDelivery>>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> OwnedRow: sqlx::FromRow<'r, DB::Row>,
    DB::QueryResult: RowsAffected,
{
    let mut s = insert_claims(chunk, token, now);
    s.push(" ON CONFLICT (schedule_id, occurrence, minutes_before, recipient, channel) DO NOTHING");
    let inserted = s
        .query::<DB>()
        .execute(&mut *conn)
        .await
        .map_err(db_err)?
        .rows_affected();
    if inserted == chunk.len() as u64 {
        // All new (the usual case): no failures, no holder before, and no
        // row has to come back to say so.
        return Ok(chunk
            .iter()
            .map(|c| OwnedDelivery {
                key: c.key.clone(),
                failures: 0,
                taken_over: false,
            })
            .collect());
    }
    claim_existing::<DB>(conn, chunk, earlier, token, now, takeover_before).await
}

/// A chunk some of whose deliveries had rows already: those a claim may take
/// are taken over, then every row `token` holds (new or taken) is read back.
async fn claim_existing<DB>(
    conn: &mut DB::Connection,
    chunk: &[DeliveryClaim],
    earlier: &[OwnedDelivery],
    token: &str,
    now: Instant,
    takeover_before: Instant,
) -> StoreResult<Vec<OwnedDelivery>>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> OwnedRow: sqlx::FromRow<'r, DB::Row>,
{
    let mut s = insert_claims(chunk, token, now);
    s.push(
        " ON CONFLICT (schedule_id, occurrence, minutes_before, recipient, channel)
          DO UPDATE SET status = 'sending', version = excluded.version,
            due_at = excluded.due_at, claimed_at = excluded.claimed_at,
            claim_token = excluded.claim_token, attempts = deliveries.attempts + 1,
            taken_over = (deliveries.status = 'sending')
          WHERE deliveries.status IN ('failed', 'stale', 'throttled', 'deferred')
             OR (deliveries.status = 'sending' AND deliveries.claimed_at < ",
    );
    s.bind(takeover_before.timestamp_millis()).push(")");
    s.query::<DB>().execute(&mut *conn).await.map_err(db_err)?;
    let mut s = Statement::new(
        "SELECT schedule_id, occurrence, minutes_before, recipient, channel, failures, taken_over
         FROM deliveries WHERE status = 'sending' AND claim_token = ",
    );
    s.bind(token);
    in_chunk(&mut s, chunk);
    let rows = s
        .query_as::<DB, OwnedRow>()
        .fetch_all(&mut *conn)
        .await
        .map_err(db_err)?;
    // A key repeated from an earlier chunk reads back that chunk's row: it
    // was got once already.
    let earlier: HashSet<&DeliveryKey> = earlier.iter().map(|o| &o.key).collect();
    let mut owned = Vec::with_capacity(rows.len());
    for row in rows {
        let got = OwnedDelivery::try_from(row)?;
        if !earlier.contains(&got.key) {
            owned.push(got);
        }
    }
    Ok(owned)
}

/// The insert of `chunk`'s rows as claimed by `token`, up to its conflict clause.
fn insert_claims(chunk: &[DeliveryClaim], token: &str, now: Instant) -> Statement {
    let mut s = Statement::new(
        "INSERT INTO deliveries (schedule_id, occurrence, minutes_before, recipient, channel,
           version, status, due_at, claimed_at, attempts, claim_token)",
    );
    s.values(chunk, |r, c| {
        KeyColumns::from(&c.key)
            .bind(r)
            .bind(c.version)
            .bind("sending")
            .bind(c.due_at.millis())
            .bind(now.timestamp_millis())
            .bind(1_i64)
            .bind(token);
    });
    s
}

/// ` AND (key columns) IN (…)` for the keys of `chunk`.
fn in_chunk(s: &mut Statement, chunk: &[DeliveryClaim]) {
    s.push(" AND (schedule_id, occurrence, minutes_before, recipient, channel) IN (");
    s.tuples(chunk, |r, c| {
        KeyColumns::from(&c.key).bind(r);
    });
    s.push(")");
}

/// The deliveries of `chunk` that another holder (not `token`) is sending.
pub(super) async fn busy_in_chunk<DB>(
    conn: &mut DB::Connection,
    chunk: &[DeliveryClaim],
    token: &str,
) -> StoreResult<Vec<DeliveryKeyRow>>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> DeliveryKeyRow: sqlx::FromRow<'r, DB::Row>,
{
    let mut s = Statement::new(
        "SELECT schedule_id, occurrence, minutes_before, recipient, channel
         FROM deliveries WHERE status = 'sending' AND claim_token <> ",
    );
    s.bind(token);
    in_chunk(&mut s, chunk);
    s.query_as::<DB, DeliveryKeyRow>()
        .fetch_all(&mut *conn)
        .await
        .map_err(db_err)
}
