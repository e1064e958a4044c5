//! The delay queue on the embedded control database, with SQS's semantics:
//! per-message delay, visibility timeout, receive count, dead-letter after N
//! receives, batches, and a receive that waits and wakes as soon as a message
//! becomes visible.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::SqlitePool;
use sqlx::{QueryBuilder, Row, Sqlite};
use toki_model::ValidationError;
use toki_ports::message::Attributes;
use toki_ports::{
    with_dead_letter_reason, with_renewal_reason, BatchSent, Clock, DelayQueue, OutgoingMessage,
    QueueDepth, ReceivedMessage,
};
use toki_ports::{StoreError, StoreResult};
use tokio::sync::Notify;

use crate::db_err;

/// How soon a waiting receive looks again for messages sent by other
/// processes (sends in this process wake it at once): after its first look,
/// then twice as long after each look that found none, up to
/// [`CROSS_PROCESS_POLL_IDLE`]. A queue long idle is looked at once a
/// second rather than five times: each look woke the daemon's threads (on a
/// small VM about a fifth of a millisecond of CPU a wake-up), and a message
/// another process sends to an idle queue is seen within a second of it.
const CROSS_PROCESS_POLL: Duration = Duration::from_millis(200);
const CROSS_PROCESS_POLL_IDLE: Duration = Duration::from_secs(1);

/// How long a receive waits for other processes' messages after `empty`
/// looks in a row found none.
fn cross_process_wait(empty: u32) -> Duration {
    CROSS_PROCESS_POLL
        .saturating_mul(1 << empty.min(8))
        .min(CROSS_PROCESS_POLL_IDLE)
}

pub struct SqliteDelayQueue {
    pool: SqlitePool,
    name: String,
    max_receives: u32,
    clock: Arc<dyn Clock>,
    /// Wakes waiting receivers when this process sends.
    sent: Arc<Notify>,
}

impl SqliteDelayQueue {
    /// `max_receives`: after this many receives a message goes to the dead-letter queue.
    pub fn new(
        pool: SqlitePool,
        name: impl Into<String>,
        max_receives: u32,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            pool,
            name: name.into(),
            max_receives: max_receives.max(1),
            clock,
            sent: Arc::new(Notify::new()),
        }
    }

    async fn try_receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> StoreResult<Vec<ReceivedMessage>> {
        let now = self.clock.now().timestamp_millis();
        let mut tx = crate::begin_write(&self.pool).await?;
        // Received too often: moved to the dead-letter queue instead of handed
        // out again. Only among the visible messages this receive would take:
        // all of them would be read at every receive, and at a burst thousands
        // are visible at once. One further back is never handed out either (the
        // receive below skips it) and goes when it reaches the front.
        sqlx::query(
            "UPDATE queue_messages SET dead = TRUE, dead_at = $1
             WHERE receive_count >= $3 AND id IN (SELECT id FROM queue_messages
                          WHERE queue = $2 AND dead = FALSE AND visible_at <= $1
                          ORDER BY visible_at, id LIMIT $4)",
        )
        .bind(now)
        .bind(&self.name)
        .bind(i64::from(self.max_receives))
        .bind(max as i64)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        let rows = sqlx::query(
            "UPDATE queue_messages SET visible_at = $1, receive_count = receive_count + 1
             WHERE id IN (SELECT id FROM queue_messages
                          WHERE queue = $2 AND dead = FALSE AND visible_at <= $3
                            AND receive_count < $5
                          ORDER BY visible_at, id LIMIT $4)
             RETURNING id, body, attributes, receive_count",
        )
        .bind(now + visibility.as_millis() as i64)
        .bind(&self.name)
        .bind(now)
        .bind(max as i64)
        .bind(i64::from(self.max_receives))
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        let mut out: Vec<ReceivedMessage> =
            rows.iter().map(to_received).collect::<StoreResult<_>>()?;
        out.sort_by_key(|m| m.receipt.clone());
        Ok(out)
    }

    async fn next_visible_at(&self) -> StoreResult<Option<i64>> {
        sqlx::query_scalar(
            "SELECT MIN(visible_at) FROM queue_messages WHERE queue = $1 AND dead = FALSE",
        )
        .bind(&self.name)
        .fetch_one(&self.pool)
        .await
        .map_err(db_err)
    }
}

fn to_received(row: &sqlx::sqlite::SqliteRow) -> StoreResult<ReceivedMessage> {
    let id: i64 = row.get("id");
    let count: i64 = row.get("receive_count");
    let attrs: String = row.get("attributes");
    Ok(ReceivedMessage {
        receipt: toki_ports::receipt(id, count),
        body: row.get("body"),
        attributes: serde_json::from_str::<Attributes>(&attrs)
            .map_err(|e| StoreError::corrupt(format!("queue message {id} attributes"), e))?,
        receive_count: count as u32,
    })
}

fn parse_receipt(r: &str) -> StoreResult<(i64, i64)> {
    Ok(toki_ports::parse_receipt(r)?)
}

#[async_trait]
impl DelayQueue for SqliteDelayQueue {
    async fn send_batch(&self, messages: &[OutgoingMessage]) -> StoreResult<BatchSent> {
        toki_ports::check_batch(messages)?;
        if messages.is_empty() {
            return Ok(BatchSent::default());
        }
        let now = self.clock.now().timestamp_millis();
        let mut qb: QueryBuilder<Sqlite> = QueryBuilder::new(
            "INSERT INTO queue_messages (queue, body, attributes, sent_at, visible_at) ",
        );
        qb.push_values(messages, |mut b, m| {
            b.push_bind(&self.name)
                .push_bind(&m.body)
                .push_bind(serde_json::to_string(&m.attributes).expect("string map serialises"))
                .push_bind(now)
                .push_bind(now + m.delay.as_millis() as i64);
        });
        // One statement: all of the batch or none of it.
        qb.build().execute(&self.pool).await.map_err(db_err)?;
        self.sent.notify_waiters();
        Ok(BatchSent::default())
    }

    async fn receive(
        &self,
        max: usize,
        wait: Duration,
        visibility: Duration,
    ) -> StoreResult<Vec<ReceivedMessage>> {
        if !(1..=10).contains(&max) {
            return Err(ValidationError::new("max", format!("must be 1..=10, got {max}")).into());
        }
        let deadline = tokio::time::Instant::now() + wait;
        let mut first = true;
        let mut empty_looks = 0;
        loop {
            let notified = self.sent.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // After the first look, a read first: the receive's write
            // transaction only once a message is visible (a long poll of an
            // idle queue costs one indexed read a look; a busy queue's
            // receives take their messages at the first look, as before).
            let mut next = None;
            let mut look = first;
            if !first {
                next = self.next_visible_at().await?;
                look = next.is_some_and(|at| at <= self.clock.now().timestamp_millis());
            }
            first = false;
            if look {
                let got = self.try_receive(max, visibility).await?;
                if !got.is_empty() {
                    return Ok(got);
                }
                next = self.next_visible_at().await?;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            // Sleep until the next message becomes visible, a send in this
            // process, or the deadline; and look again for messages other
            // processes sent, less often the longer none came.
            let mut wake = deadline.min(now + cross_process_wait(empty_looks));
            empty_looks += 1;
            if let Some(at) = next {
                let in_ms = (at - self.clock.now().timestamp_millis()).max(0) as u64;
                wake = wake.min(now + Duration::from_millis(in_ms));
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    async fn delete_batch(&self, receipts: &[String]) -> StoreResult<()> {
        if receipts.is_empty() {
            return Ok(());
        }
        let parsed = receipts
            .iter()
            .map(|r| parse_receipt(r))
            .collect::<StoreResult<Vec<_>>>()?;
        let mut qb: QueryBuilder<Sqlite> =
            QueryBuilder::new("DELETE FROM queue_messages WHERE (id, receive_count) IN (");
        let mut sep = qb.separated(", ");
        for (id, count) in parsed {
            sep.push("(");
            sep.push_bind_unseparated(id);
            sep.push_unseparated(", ");
            sep.push_bind_unseparated(count);
            sep.push_unseparated(")");
        }
        qb.push(")");
        qb.build().execute(&self.pool).await.map_err(db_err)?;
        Ok(())
    }

    async fn extend_visibility(&self, receipts: &[String], timeout: Duration) -> StoreResult<()> {
        let parsed = receipts
            .iter()
            .map(|r| parse_receipt(r))
            .collect::<StoreResult<Vec<_>>>()?;
        let visible_at = self.clock.now().timestamp_millis() + timeout.as_millis() as i64;
        for chunk in parsed.chunks(400) {
            let mut qb: QueryBuilder<Sqlite> =
                QueryBuilder::new("UPDATE queue_messages SET visible_at = ");
            qb.push_bind(visible_at);
            qb.push(" WHERE dead = FALSE AND (id, receive_count) IN (");
            let mut sep = qb.separated(", ");
            for (id, count) in chunk {
                sep.push("(");
                sep.push_bind_unseparated(*id);
                sep.push_unseparated(", ");
                sep.push_bind_unseparated(*count);
                sep.push_unseparated(")");
            }
            qb.push(")");
            qb.build().execute(&self.pool).await.map_err(db_err)?;
        }
        // No wake-up: a later visibility never makes a message visible sooner.
        Ok(())
    }

    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> StoreResult<()> {
        let (id, count) = parse_receipt(receipt)?;
        sqlx::query(
            "UPDATE queue_messages SET visible_at = $1
             WHERE id = $2 AND receive_count = $3 AND dead = FALSE",
        )
        .bind(self.clock.now().timestamp_millis() + timeout.as_millis() as i64)
        .bind(id)
        .bind(count)
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        // Visible now: receivers waiting in this process look at once. Not
        // for a later instant: they would wake exactly then while other
        // processes' receivers look only at their next poll, and a message
        // sent back for a moment would come back to this process every time.
        if timeout.is_zero() {
            self.sent.notify_waiters();
        }
        Ok(())
    }

    async fn dead_letter(&self, message: &ReceivedMessage, reason: &str) -> StoreResult<()> {
        let (id, count) = parse_receipt(&message.receipt)?;
        let attributes = with_dead_letter_reason(&message.attributes, reason);
        sqlx::query(
            "UPDATE queue_messages SET dead = TRUE, dead_at = $1, attributes = $2
             WHERE id = $3 AND receive_count = $4 AND dead = FALSE",
        )
        .bind(self.clock.now().timestamp_millis())
        .bind(serde_json::to_string(&attributes).expect("string map serialises"))
        .bind(id)
        .bind(count)
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn receive_limit(&self) -> StoreResult<Option<u32>> {
        Ok(Some(self.max_receives))
    }

    async fn renew(
        &self,
        message: &ReceivedMessage,
        delay: Duration,
        why: &str,
    ) -> StoreResult<()> {
        let (id, count) = parse_receipt(&message.receipt)?;
        let attributes = with_renewal_reason(&message.attributes, why);
        let now = self.clock.now().timestamp_millis();
        // A new row (a new id, as SQS gives the copy, so that no old receipt
        // ever matches it) in place of the one the receipt holds, in one
        // transaction; nothing when the receipt is no longer current.
        let mut tx = crate::begin_write(&self.pool).await?;
        let gone = sqlx::query(
            "DELETE FROM queue_messages WHERE id = $1 AND receive_count = $2 AND dead = FALSE",
        )
        .bind(id)
        .bind(count)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        if gone.rows_affected() == 1 {
            sqlx::query(
                "INSERT INTO queue_messages (queue, body, attributes, sent_at, visible_at)
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&self.name)
            .bind(&message.body)
            .bind(serde_json::to_string(&attributes).expect("string map serialises"))
            .bind(now)
            .bind(now + delay.as_millis() as i64)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)?;
        if delay.is_zero() {
            self.sent.notify_waiters();
        }
        Ok(())
    }

    async fn depth(&self) -> StoreResult<QueueDepth> {
        let row = sqlx::query(
            "SELECT COALESCE(SUM(CASE WHEN dead THEN 0 ELSE 1 END), 0) AS live,
                    COALESCE(SUM(CASE WHEN dead THEN 1 ELSE 0 END), 0) AS dead,
                    COALESCE(SUM(CASE WHEN NOT dead AND visible_at <= $2 THEN 1 ELSE 0 END), 0) AS visible,
                    COALESCE(SUM(CASE WHEN NOT dead AND visible_at > $2 AND receive_count > 0 THEN 1 ELSE 0 END), 0) AS in_flight
             FROM queue_messages WHERE queue = $1",
        )
        .bind(&self.name)
        .bind(self.clock.now().timestamp_millis())
        .fetch_one(&self.pool)
        .await
        .map_err(db_err)?;
        let count = |name: &str| row.get::<i64, _>(name) as u64;
        let (messages, visible, in_flight) = (count("live"), count("visible"), count("in_flight"));
        Ok(QueueDepth {
            messages,
            dead_letters: count("dead"),
            visible,
            in_flight,
            delayed: messages - visible - in_flight,
        })
    }

    /// Dead rows, oldest first (nothing else reads them, so nothing to hold).
    async fn dead_letters(&self, max: usize, _hold: Duration) -> StoreResult<Vec<ReceivedMessage>> {
        let rows = sqlx::query(
            "SELECT id, body, attributes, receive_count FROM queue_messages
             WHERE queue = $1 AND dead = TRUE ORDER BY dead_at, id LIMIT $2",
        )
        .bind(&self.name)
        .bind(max as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter().map(to_received).collect()
    }

    async fn redrive(&self, letters: &[ReceivedMessage]) -> StoreResult<usize> {
        if letters.is_empty() {
            return Ok(0);
        }
        let ids = letters
            .iter()
            .map(|l| parse_receipt(&l.receipt).map(|(id, _)| id))
            .collect::<StoreResult<Vec<_>>>()?;
        let mut qb: QueryBuilder<Sqlite> = QueryBuilder::new(
            "UPDATE queue_messages SET dead = FALSE, dead_at = NULL, receive_count = 0,
               attributes = json_remove(attributes, '$.dead_letter_reason'), visible_at = ",
        );
        qb.push_bind(self.clock.now().timestamp_millis());
        qb.push(" WHERE queue = ").push_bind(&self.name);
        qb.push(" AND dead = TRUE AND id IN (");
        let mut sep = qb.separated(", ");
        for id in ids {
            sep.push_bind(id);
        }
        qb.push(")");
        let moved = qb.build().execute(&self.pool).await.map_err(db_err)?;
        self.sent.notify_waiters();
        Ok(moved.rows_affected() as usize)
    }

    async fn release_dead_letters(&self, _letters: &[ReceivedMessage]) -> StoreResult<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use toki_model::Instant;

    struct HandClock(Mutex<Instant>);

    impl Clock for HandClock {
        fn now(&self) -> Instant {
            *self.0.lock().unwrap()
        }
    }

    fn message(body: &str, delay: Duration) -> OutgoingMessage {
        OutgoingMessage {
            id: body.to_owned(),
            body: body.to_owned(),
            attributes: Attributes::new(),
            delay,
            group: None,
        }
    }

    #[test]
    fn an_idle_queue_is_looked_at_less_often_down_to_once_a_second() {
        let ms = |looks: u32| cross_process_wait(looks).as_millis();
        assert_eq!(
            [ms(0), ms(1), ms(2), ms(3), ms(4)],
            [200, 400, 800, 1000, 1000]
        );
        assert_eq!(ms(u32::MAX), 1000);
    }

    /// The dead-letter sweep looks only where the receive takes from, and
    /// the receive passes over a message over its limit: neither of two
    /// such messages is handed out, whichever place it has in the queue.
    #[tokio::test]
    async fn a_message_over_its_limit_is_never_handed_out_wherever_it_waits() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::control::open_sqlite(&dir.path().join("c.sqlite"))
            .await
            .unwrap();
        crate::control::CONTROL_MIGRATIONS.run(&pool).await.unwrap();
        let at =
            |s: i64| toki_model::domain::from_millis("at", 1_800_000_000_000 + s * 1000).unwrap();
        let clock = Arc::new(HandClock(Mutex::new(at(0))));
        let q = SqliteDelayQueue::new(pool, "q", 1, clock.clone());
        let secs = Duration::from_secs;
        let bodies =
            |got: &[ReceivedMessage]| got.iter().map(|m| m.body.clone()).collect::<Vec<_>>();
        // Once received each (the limit): over1 visible again at 10 s, over2
        // at 30 s; fresh is visible at 20 s, between them.
        q.send_batch(&[message("over1", secs(0))]).await.unwrap();
        assert_eq!(
            bodies(&q.try_receive(1, secs(10)).await.unwrap()),
            ["over1"]
        );
        q.send_batch(&[message("over2", secs(0))]).await.unwrap();
        assert_eq!(
            bodies(&q.try_receive(1, secs(30)).await.unwrap()),
            ["over2"]
        );
        q.send_batch(&[message("fresh", secs(20))]).await.unwrap();
        *clock.0.lock().unwrap() = at(40);
        // The first two in line are over1 and fresh: over1 goes to the dead
        // letters, and the receive takes fresh and passes over over2.
        assert_eq!(
            bodies(&q.try_receive(2, secs(60)).await.unwrap()),
            ["fresh"]
        );
        assert_eq!(q.depth().await.unwrap().dead_letters, 1);
        // Now over2 is at the front: it goes too, nothing is handed out.
        assert!(q.try_receive(2, secs(60)).await.unwrap().is_empty());
        let depth = q.depth().await.unwrap();
        assert_eq!((depth.messages, depth.dead_letters), (1, 2), "{depth:?}");
    }
}
