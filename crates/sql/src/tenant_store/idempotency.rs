//! The statements of idempotent writes (`idempotency_keys`, migration 0007).

use sqlx::{Database, Encode, Executor, IntoArguments, Type};
use toki_model::idempotency::{IdempotencyKey, KeptAnswer, RequestDigest};
use toki_model::Instant;
use toki_ports::{IdempotentStart, KeyedRequest, StoreError, StoreResult};

use super::statement::Statement;
use crate::db_err;

row! {
    /// A key's request as stored: its answer's columns NULL while in progress.
    #[derive(Debug)]
    pub(crate) struct IdempotencyRow {
        digest: String,
        status: Option<i64>,
        body: Option<String>,
    }
}

impl TryFrom<IdempotencyRow> for KeyedRequest {
    type Error = StoreError;

    fn try_from(row: IdempotencyRow) -> StoreResult<Self> {
        let corrupt = |column: &str, problem: String| {
            StoreError::corrupt(format!("idempotency_keys column {column}"), problem)
        };
        let digest =
            RequestDigest::from_stored(row.digest).map_err(|e| corrupt("digest", e.problem))?;
        let answer = match (row.status, row.body) {
            (None, _) => None,
            (Some(status), Some(body)) => Some(KeptAnswer {
                status: u16::try_from(status)
                    .map_err(|_| corrupt("status", format!("{status} is not a status")))?,
                body,
            }),
            (Some(_), None) => return Err(corrupt("body", "missing beside a status".into())),
        };
        Ok(KeyedRequest::Existing { digest, answer })
    }
}

/// Takes the key for this request unless a live one holds it; that one if
/// so. On the caller's write transaction: the upsert locks the key's row, so
/// the read after it sees what made the upsert a no-op.
pub(super) async fn start<DB>(
    conn: &mut DB::Connection,
    start: &IdempotentStart<'_>,
) -> StoreResult<KeyedRequest>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> IdempotencyRow: sqlx::FromRow<'r, DB::Row>,
    for<'r> (String,): sqlx::FromRow<'r, DB::Row>,
{
    let mut s = Statement::new("INSERT INTO idempotency_keys (idem_key, digest, started_at)");
    s.values([start], |r, st| {
        r.bind(st.key.as_str())
            .bind(st.digest.as_str())
            .bind(st.now.timestamp_millis());
    });
    s.push(
        " ON CONFLICT (idem_key) DO UPDATE SET digest = excluded.digest,
            started_at = excluded.started_at, status = NULL, body = NULL
          WHERE idempotency_keys.started_at < ",
    );
    s.bind(start.expired_before.timestamp_millis());
    s.push(" OR (idempotency_keys.status IS NULL AND idempotency_keys.started_at < ");
    s.bind(start.abandoned_before.timestamp_millis());
    s.push(") RETURNING idem_key");
    let taken = s
        .query_as::<DB, (String,)>()
        .fetch_optional(&mut *conn)
        .await
        .map_err(db_err)?;
    if taken.is_some() {
        return Ok(KeyedRequest::Started);
    }
    let mut s =
        Statement::new("SELECT digest, status, body FROM idempotency_keys WHERE idem_key = ");
    s.bind(start.key.as_str());
    let row = s
        .query_as::<DB, IdempotencyRow>()
        .fetch_one(&mut *conn)
        .await
        .map_err(db_err)?;
    KeyedRequest::try_from(row)
}

/// The statement that keeps `answer` for the run of `key` started at `started`.
pub(super) fn finish(key: &IdempotencyKey, started: Instant, answer: &KeptAnswer) -> Statement {
    let mut s = Statement::new("UPDATE idempotency_keys SET status = ");
    s.bind(i64::from(answer.status))
        .push(", body = ")
        .bind(answer.body.as_str());
    s.push(" WHERE status IS NULL AND idem_key = ")
        .bind(key.as_str())
        .push(" AND started_at = ")
        .bind(started.timestamp_millis());
    s
}

/// The statement that forgets the run of `key` started at `started`, if in progress.
pub(super) fn release(key: &IdempotencyKey, started: Instant) -> Statement {
    let mut s = Statement::new("DELETE FROM idempotency_keys WHERE status IS NULL AND idem_key = ");
    s.bind(key.as_str())
        .push(" AND started_at = ")
        .bind(started.timestamp_millis());
    s
}

/// The statement that deletes up to `limit` keys started before `before`,
/// oldest first (by the `started_at` index), returning each one's key.
pub(super) fn purge(before: Instant, limit: u32) -> Statement {
    let mut s = Statement::new(
        "DELETE FROM idempotency_keys WHERE idem_key IN
           (SELECT idem_key FROM idempotency_keys WHERE started_at < ",
    );
    s.bind(before.timestamp_millis())
        .push(" ORDER BY started_at LIMIT ")
        .bind(i64::from(limit))
        .push(") RETURNING idem_key");
    s
}
