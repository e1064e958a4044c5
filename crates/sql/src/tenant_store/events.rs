//! The tenant's event log and event endpoints, on Postgres and on SQLite.

use async_trait::async_trait;
use sqlx::{Database, Decode, Encode, Executor, FromRow, IntoArguments, Type};

use toki_model::domain::{from_millis, EndpointId, Instant};
use toki_model::event::{
    EndpointProgress, EndpointSecrets, EndpointSpec, EndpointStatus, EndpointUrl, EventData,
    EventEndpoint, EventKinds, EventOrdering, NewEvent, StoredEvent,
};
use toki_ports::events::{EventLog, ProgressWrite};
use toki_ports::{StoreError, StoreResult};

use super::statement::Statement;
use super::{SqlTenantStore, CHUNK};
use crate::{begin_write, db_err};

row! {
    #[derive(Debug)]
    pub(crate) struct EventRow {
        seq: i64,
        kind: String,
        occurred_at: i64,
        data: String,
    }
}

impl TryFrom<EventRow> for StoredEvent {
    type Error = StoreError;
    fn try_from(r: EventRow) -> StoreResult<Self> {
        let corrupt = |e: String| StoreError::corrupt(format!("event {}", r.seq), e);
        Ok(StoredEvent {
            seq: r.seq as u64,
            kind: r.kind.parse().map_err(corrupt)?,
            occurred_at: from_millis("occurred_at", r.occurred_at)
                .map_err(|e| corrupt(e.to_string()))?,
            data: serde_json::from_str::<EventData>(&r.data).map_err(|e| corrupt(e.to_string()))?,
        })
    }
}

row! {
    #[derive(Debug)]
    pub(crate) struct EndpointRow {
        id: String,
        url: String,
        kinds: String,
        ordering: String,
        secret: String,
        previous_secret: Option<String>,
        previous_until: i64,
        disabled_reason: Option<String>,
        cursor_seq: i64,
        failures: i64,
        next_attempt_at: i64,
        last_error: Option<String>,
        revision: i64,
        created_at: i64,
        replay_through: i64,
    }
}

const ENDPOINT_COLUMNS: &str = "id, url, kinds, ordering, secret, previous_secret, previous_until,
    disabled_reason, cursor_seq, failures, next_attempt_at, last_error, revision, created_at,
    replay_through";

fn ordering_str(o: EventOrdering) -> &'static str {
    match o {
        EventOrdering::InOrder => "in_order",
        EventOrdering::Unordered => "unordered",
    }
}

impl EndpointRow {
    fn into_endpoint(self) -> StoreResult<(EventEndpoint, u64)> {
        let what = format!("event endpoint {}", self.id);
        let corrupt = |e: String| StoreError::corrupt(what.clone(), e);
        let instant =
            |field: &str, ms: i64| from_millis(field, ms).map_err(|e| corrupt(e.to_string()));
        let previous = match self.previous_secret {
            Some(s) => Some((
                s.parse()
                    .map_err(|e: toki_model::webhook_signature::SecretError| {
                        corrupt(e.to_string())
                    })?,
                instant("previous_until", self.previous_until)?,
            )),
            None => None,
        };
        let endpoint = EventEndpoint {
            id: self
                .id
                .parse()
                .map_err(|e: toki_model::ValidationError| corrupt(e.to_string()))?,
            spec: EndpointSpec {
                url: EndpointUrl::parse("url", &self.url).map_err(|e| corrupt(e.to_string()))?,
                kinds: EventKinds::decode("kinds", &self.kinds)
                    .map_err(|e| corrupt(e.to_string()))?,
                ordering: match self.ordering.as_str() {
                    "in_order" => EventOrdering::InOrder,
                    _ => EventOrdering::Unordered,
                },
            },
            secrets: EndpointSecrets {
                current: self.secret.parse().map_err(
                    |e: toki_model::webhook_signature::SecretError| corrupt(e.to_string()),
                )?,
                previous,
            },
            progress: EndpointProgress {
                status: match self.disabled_reason {
                    None => EndpointStatus::Enabled,
                    Some(reason) => EndpointStatus::Disabled { reason },
                },
                cursor: self.cursor_seq as u64,
                failures: self.failures as u32,
                next_attempt_at: instant("next_attempt_at", self.next_attempt_at)?,
                last_error: self.last_error,
                replay_through: self.replay_through.max(0) as u64,
            },
            created_at: instant("created_at", self.created_at)?,
        };
        Ok((endpoint, self.revision as u64))
    }
}

fn disabled_reason(p: &EndpointProgress) -> Option<String> {
    match &p.status {
        EndpointStatus::Enabled => None,
        EndpointStatus::Disabled { reason } => Some(reason.clone()),
    }
}

/// What the tenant's enabled endpoints subscribe to, together.
pub(super) async fn subscribed<DB>(conn: &mut DB::Connection) -> StoreResult<EventKinds>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    let rows: Vec<(String,)> =
        Statement::new("SELECT kinds FROM event_endpoints WHERE disabled_reason IS NULL")
            .query_as::<DB, (String,)>()
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
    rows.iter().try_fold(EventKinds::NONE, |all, (kinds,)| {
        EventKinds::decode("kinds", kinds)
            .map(|k| all.union(k))
            .map_err(|e| StoreError::corrupt("event endpoint kinds", e))
    })
}

/// Appends the events of `kinds` among `events`, numbered after the last.
pub(super) async fn append<DB>(
    conn: &mut DB::Connection,
    kinds: EventKinds,
    events: &[NewEvent],
) -> StoreResult<usize>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
{
    let kept: Vec<&NewEvent> = events.iter().filter(|e| kinds.contains(e.kind)).collect();
    if kept.is_empty() {
        return Ok(0);
    }
    let mut s = Statement::new("UPDATE event_sequence SET last = last + ");
    s.bind(kept.len() as i64)
        .push(" WHERE id = 1 RETURNING last");
    let (last,): (i64,) = s
        .query_as::<DB, (i64,)>()
        .fetch_one(&mut *conn)
        .await
        .map_err(db_err)?;
    let first = last - kept.len() as i64 + 1;
    for (c, chunk) in kept.chunks(CHUNK).enumerate() {
        let mut s = Statement::new("INSERT INTO delivery_events (seq, kind, occurred_at, data)");
        s.values(chunk.iter().enumerate(), |r, (i, e)| {
            r.bind(first + (c * CHUNK + i) as i64)
                .bind(e.kind.as_str())
                .bind(e.occurred_at.timestamp_millis())
                .bind(serde_json::to_string(&e.data).expect("event data serialises"));
        });
        s.query::<DB>().execute(&mut *conn).await.map_err(db_err)?;
    }
    Ok(kept.len())
}

#[async_trait]
impl<DB> EventLog for SqlTenantStore<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> EventRow: FromRow<'r, DB::Row>,
    for<'r> EndpointRow: FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
{
    async fn append_events(&self, events: &[NewEvent]) -> StoreResult<usize> {
        let _slot = self.connection_slot().await;
        let mut tx = begin_write(&self.pool()).await?;
        let kinds = subscribed::<DB>(&mut tx).await?;
        let kept = append::<DB>(&mut tx, kinds, events).await?;
        tx.commit().await.map_err(db_err)?;
        Ok(kept)
    }

    async fn events_after(&self, after: u64, limit: usize) -> StoreResult<Vec<StoredEvent>> {
        let _slot = self.connection_slot().await;
        let mut s =
            Statement::new("SELECT seq, kind, occurred_at, data FROM delivery_events WHERE seq > ");
        s.bind(after as i64)
            .push(" ORDER BY seq LIMIT ")
            .bind(limit as i64);
        let rows: Vec<EventRow> = s
            .query_as::<DB, EventRow>()
            .fetch_all(&self.pool())
            .await
            .map_err(db_err)?;
        rows.into_iter().map(StoredEvent::try_from).collect()
    }

    async fn last_event_seq(&self) -> StoreResult<u64> {
        let _slot = self.connection_slot().await;
        let (last,): (i64,) = Statement::new("SELECT last FROM event_sequence WHERE id = 1")
            .query_as::<DB, (i64,)>()
            .fetch_one(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(last as u64)
    }

    async fn event_seq_before(&self, since: Instant) -> StoreResult<u64> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new(
            "SELECT COALESCE(MAX(seq), 0) FROM delivery_events WHERE occurred_at < ",
        );
        s.bind(since.timestamp_millis());
        let (seq,): (i64,) = s
            .query_as::<DB, (i64,)>()
            .fetch_one(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(seq as u64)
    }

    async fn put_event_endpoint(&self, e: &EventEndpoint) -> StoreResult<()> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new(&format!(
            "INSERT INTO event_endpoints ({ENDPOINT_COLUMNS}, holder, held_until)"
        ));
        s.values([e], |r, e| {
            let previous = e.secrets.previous.as_ref();
            r.bind(e.id.as_str())
                .bind(e.spec.url.as_str())
                .bind(e.spec.kinds.encode())
                .bind(ordering_str(e.spec.ordering))
                .bind(e.secrets.current.expose())
                .bind(previous.map(|(s, _)| s.expose()))
                .bind(previous.map_or(0, |(_, until)| until.timestamp_millis()))
                .bind(disabled_reason(&e.progress))
                .bind(e.progress.cursor as i64)
                .bind(i64::from(e.progress.failures))
                .bind(e.progress.next_attempt_at.timestamp_millis())
                .bind(e.progress.last_error.clone())
                .bind(1_i64)
                .bind(e.created_at.timestamp_millis())
                .bind(e.progress.replay_through as i64)
                .bind("")
                .bind(0_i64);
        });
        s.push(
            " ON CONFLICT (id) DO UPDATE SET url = excluded.url, kinds = excluded.kinds,
               ordering = excluded.ordering, secret = excluded.secret,
               previous_secret = excluded.previous_secret, previous_until = excluded.previous_until,
               disabled_reason = excluded.disabled_reason, cursor_seq = excluded.cursor_seq,
               failures = excluded.failures, next_attempt_at = excluded.next_attempt_at,
               last_error = excluded.last_error, replay_through = excluded.replay_through,
               revision = event_endpoints.revision + 1",
        );
        s.query::<DB>()
            .execute(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn event_endpoint(&self, id: &EndpointId) -> StoreResult<Option<(EventEndpoint, u64)>> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new(&format!(
            "SELECT {ENDPOINT_COLUMNS} FROM event_endpoints WHERE id = "
        ));
        s.bind(id.as_str());
        let row: Option<EndpointRow> = s
            .query_as::<DB, EndpointRow>()
            .fetch_optional(&self.pool())
            .await
            .map_err(db_err)?;
        row.map(EndpointRow::into_endpoint).transpose()
    }

    async fn event_endpoints(&self) -> StoreResult<Vec<(EventEndpoint, u64)>> {
        let _slot = self.connection_slot().await;
        let rows: Vec<EndpointRow> = Statement::new(&format!(
            "SELECT {ENDPOINT_COLUMNS} FROM event_endpoints ORDER BY id"
        ))
        .query_as::<DB, EndpointRow>()
        .fetch_all(&self.pool())
        .await
        .map_err(db_err)?;
        rows.into_iter().map(EndpointRow::into_endpoint).collect()
    }

    async fn delete_event_endpoint(&self, id: &EndpointId) -> StoreResult<bool> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new("DELETE FROM event_endpoints WHERE id = ");
        s.bind(id.as_str()).push(" RETURNING id");
        Ok(changed::<DB>(&self.pool(), s).await? > 0)
    }

    async fn set_endpoint_progress(&self, w: ProgressWrite<'_>) -> StoreResult<bool> {
        let _slot = self.connection_slot().await;
        let p = w.progress;
        let mut s = Statement::new("UPDATE event_endpoints SET disabled_reason = ");
        s.bind(disabled_reason(p))
            .push(", cursor_seq = ")
            .bind(p.cursor as i64)
            .push(", failures = ")
            .bind(i64::from(p.failures))
            .push(", next_attempt_at = ")
            .bind(p.next_attempt_at.timestamp_millis())
            .push(", last_error = ")
            .bind(p.last_error.clone())
            .push(", replay_through = ")
            .bind(p.replay_through as i64)
            .push(", revision = revision + 1 WHERE id = ")
            .bind(w.id.as_str())
            .push(" AND revision = ")
            .bind(w.read_revision as i64)
            .push(" RETURNING id");
        Ok(changed::<DB>(&self.pool(), s).await? > 0)
    }

    async fn hold_endpoint(
        &self,
        id: &EndpointId,
        holder: &str,
        until: Instant,
        now: Instant,
    ) -> StoreResult<bool> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new("UPDATE event_endpoints SET holder = ");
        s.bind(holder)
            .push(", held_until = ")
            .bind(until.timestamp_millis())
            .push(" WHERE id = ")
            .bind(id.as_str())
            .push(" AND (holder = ")
            .bind(holder)
            .push(" OR held_until <= ")
            .bind(now.timestamp_millis())
            .push(") RETURNING id");
        Ok(changed::<DB>(&self.pool(), s).await? > 0)
    }
}

/// Rows a statement ending in `RETURNING <one text column>` changed.
async fn changed<DB>(pool: &sqlx::Pool<DB>, mut s: Statement) -> StoreResult<u64>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    let rows: Vec<(String,)> = s
        .query_as::<DB, (String,)>()
        .fetch_all(pool)
        .await
        .map_err(db_err)?;
    Ok(rows.len() as u64)
}
