//! The report's aggregate reads (`toki_ports::report`), on Postgres and on
//! SQLite: GROUP BY in the database, so what comes back is a row per
//! channel, lateness bucket, due instant or second, never a row per delivery.

use async_trait::async_trait;
use sqlx::{Database, Decode, Encode, Executor, FromRow, IntoArguments, Type};

use toki_model::domain::{from_millis, Channel, DueAt};
use toki_ports::report::{
    ChannelDelivered, DeliveryReport, DeliverySummary, DueCount, LatenessCount, ReportWindow,
    SecondCount, EARLIEST_BUCKET_MS, LATEST_BUCKET_MS,
};
use toki_ports::{StoreError, StoreResult};

use super::statement::Statement;
use super::SqlTenantStore;
use crate::db_err;

row! {
    /// One aggregate: a text key (a channel, or empty), two numbers and a count.
    #[derive(Debug)]
    pub(crate) struct AggregateRow {
        key: String,
        a: i64,
        b: i64,
        n: i64,
    }
}

/// The delivered rows due from the first bound value on, with their
/// lateness `l` in milliseconds (as `toki_ports::report` defines it).
const DELIVERED: &str =
    "(SELECT channel, due_at, COALESCE(finished_at, claimed_at, due_at) - due_at AS l
      FROM deliveries WHERE status = 'delivered' AND due_at >= ";

/// `toki_ports::report::lateness_bucket` of `l`, in SQL (integer division
/// of non-negative numbers only: the engines round negatives differently).
fn bucket_sql() -> String {
    format!(
        "CASE WHEN l < {EARLIEST_BUCKET_MS} THEN {EARLIEST_BUCKET_MS}
              WHEN l < 0 THEN -(((999 - l) / 1000) * 1000)
              WHEN l < 100 THEN l
              WHEN l < 1000 THEN (l / 10) * 10
              WHEN l < 10000 THEN (l / 100) * 100
              WHEN l < 100000 THEN (l / 1000) * 1000
              WHEN l < {LATEST_BUCKET_MS} THEN (l / 10000) * 10000
              ELSE {LATEST_BUCKET_MS} END"
    )
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::corrupt(format!("delivery report {what}"), e.to_string())
}

fn channel(s: &str) -> StoreResult<Channel> {
    s.parse().map_err(|e| corrupt("channel", e))
}

fn count(n: i64) -> StoreResult<u64> {
    u64::try_from(n).map_err(|e| corrupt("count", e))
}

fn due(ms: i64) -> StoreResult<DueAt> {
    Ok(DueAt(
        from_millis("due_at", ms).map_err(|e| corrupt("due_at", e))?,
    ))
}

#[async_trait]
impl<DB> DeliveryReport for SqlTenantStore<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> AggregateRow: FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
{
    async fn delivery_summary(&self, window: &ReportWindow) -> StoreResult<DeliverySummary> {
        let _slot = self.connection_slot().await;
        let since = window.since.timestamp_millis();
        let mut s =
            Statement::new("SELECT channel AS key, MIN(l) AS a, MAX(l) AS b, COUNT(*) AS n FROM ");
        s.push(DELIVERED).bind(since).push(") d GROUP BY channel");
        let mut channels = aggregate(&self.pool(), s)
            .await?
            .into_iter()
            .map(|r| {
                Ok(ChannelDelivered {
                    channel: channel(&r.key)?,
                    min_ms: r.a,
                    max_ms: r.b,
                    count: count(r.n)?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        channels.sort_by_key(|c| c.channel);

        let mut s = Statement::new(
            "SELECT channel AS key, bucket AS a, CAST(0 AS BIGINT) AS b, COUNT(*) AS n FROM (SELECT channel, ",
        );
        s.push(&bucket_sql())
            .push(" AS bucket FROM ")
            .push(DELIVERED)
            .bind(since)
            .push(") d) x GROUP BY channel, bucket");
        let mut lateness = aggregate(&self.pool(), s)
            .await?
            .into_iter()
            .map(|r| {
                Ok(LatenessCount {
                    channel: channel(&r.key)?,
                    bucket_ms: r.a,
                    count: count(r.n)?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        lateness.sort();

        let mut s = Statement::new(
            "SELECT CAST('' AS TEXT) AS key, due_at AS a, CAST(0 AS BIGINT) AS b, COUNT(*) AS n
             FROM deliveries WHERE status = 'delivered' AND due_at >= ",
        );
        s.bind(since)
            .push(" GROUP BY due_at ORDER BY n DESC, due_at LIMIT ")
            .bind(window.busiest as i64);
        let busiest = aggregate(&self.pool(), s)
            .await?
            .into_iter()
            .map(|r| {
                Ok(DueCount {
                    due_at: due(r.a)?,
                    count: count(r.n)?,
                })
            })
            .collect::<StoreResult<_>>()?;

        let mut s = Statement::new(
            "SELECT COUNT(DISTINCT due_at) FROM deliveries WHERE status = 'delivered' AND due_at >= ",
        );
        s.bind(since);
        let (due_instants,): (i64,) = s
            .query_as::<DB, (i64,)>()
            .fetch_one(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(DeliverySummary {
            channels,
            lateness,
            busiest,
            due_instants: count(due_instants)?,
        })
    }

    async fn delivered_per_second(
        &self,
        due_at: &[DueAt],
        span_s: i64,
    ) -> StoreResult<Vec<SecondCount>> {
        if due_at.is_empty() {
            return Ok(Vec::new());
        }
        let _slot = self.connection_slot().await;
        let (first, last) = (-span_s - 1, span_s);
        let mut s = Statement::new(
            "SELECT CAST('' AS TEXT) AS key, due_at AS a,
                    CASE WHEN s < ",
        );
        s.bind(first).push(" THEN ").bind(first);
        s.push(" WHEN s > ").bind(last).push(" THEN ").bind(last);
        s.push(
            " ELSE s END AS b, COUNT(*) AS n FROM (
                SELECT due_at, CASE WHEN l >= 0 THEN l / 1000 ELSE -((999 - l) / 1000) END AS s
                FROM (SELECT due_at, COALESCE(finished_at, claimed_at, due_at) - due_at AS l
                      FROM deliveries WHERE status = 'delivered' AND due_at IN ",
        );
        s.list(due_at.iter().map(|d| d.0.timestamp_millis()))
            .push(") d) x GROUP BY due_at, b");
        let mut seconds = aggregate(&self.pool(), s)
            .await?
            .into_iter()
            .map(|r| {
                Ok(SecondCount {
                    due_at: due(r.a)?,
                    second: r.b,
                    count: count(r.n)?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        seconds.sort();
        Ok(seconds)
    }
}

/// The rows of an aggregate statement.
async fn aggregate<DB>(pool: &sqlx::Pool<DB>, mut s: Statement) -> StoreResult<Vec<AggregateRow>>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> AggregateRow: FromRow<'r, DB::Row>,
{
    s.query_as::<DB, AggregateRow>()
        .fetch_all(pool)
        .await
        .map_err(db_err)
}
