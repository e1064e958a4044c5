//! [`Erasure`] on SQL: every statement of one person's erasure on one write
//! transaction, so nothing is left half-erased. A place added to the
//! erasure is one more step of [`SqlTenantStore::erase_user`].

use async_trait::async_trait;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, FromRow, IntoArguments, Type};
use toki_model::audit::AuditAction;
use toki_model::change::ChangeNotice;
use toki_model::erasure::{
    drop_participant, id_needles, json_needles, pseudonymise_event, ErasureReport, SCRUBBED,
    UNFINISHED,
};
use toki_model::event::StoredEvent;
use toki_model::suppression::ListedAddress;
use toki_model::{Instant, User, UserId};
use toki_ports::{Erasure, StoreResult};

use super::events::EventRow;
use super::rows::{snapshot, snapshot_json, BaselineRow, NoticeRow, UserRow};
use super::statement::Statement;
use super::{SqlTenantStore, CHUNK};
use crate::{begin_write, db_err};

/// `value` inside a LIKE pattern, with `\` as the escape character.
fn like_escaped(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    for c in value.chars() {
        if matches!(c, '\\' | '%' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A LIKE pattern matching a text that contains `needle`.
fn containing(needle: &str) -> String {
    format!("%{}%", like_escaped(needle))
}

/// The bounds every step shares: the engine runs [`Statement`]s on a connection.
macro_rules! step {
    ($(#[$m:meta])* async fn $name:ident($conn:ident $(, $arg:ident: $ty:ty)*) -> $ret:ty $body:block) => {
        $(#[$m])*
        async fn $name<DB>($conn: &mut DB::Connection, $($arg: $ty),*) -> StoreResult<$ret>
        where
            DB: Database,
            for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
            for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
            for<'q> i64: Encode<'q, DB> + Type<DB>,
            for<'q> String: Encode<'q, DB> + Type<DB>,
            for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
            for<'q> bool: Encode<'q, DB> + Type<DB>,
            for<'r> UserRow: FromRow<'r, DB::Row>,
            for<'r> NoticeRow: FromRow<'r, DB::Row>,
            for<'r> BaselineRow: FromRow<'r, DB::Row>,
            for<'r> EventRow: FromRow<'r, DB::Row>,
            for<'r> (String,): FromRow<'r, DB::Row>,
            for<'r> (String, i64): FromRow<'r, DB::Row>,
        $body
    };
}

/// Runs a statement ending in `RETURNING <one text column>`; how many rows it changed.
async fn changed<DB>(conn: &mut DB::Connection, mut s: Statement) -> StoreResult<u64>
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
    Ok(texts::<DB>(conn, s.query_as::<DB, (String,)>())
        .await?
        .len() as u64)
}

async fn texts<'q, DB>(
    conn: &mut DB::Connection,
    q: sqlx::query::QueryAs<'q, DB, (String,), DB::Arguments<'q>>,
) -> StoreResult<Vec<String>>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'r> (String,): FromRow<'r, DB::Row>,
{
    let rows = q.fetch_all(&mut *conn).await.map_err(db_err)?;
    Ok(rows.into_iter().map(|(t,)| t).collect())
}

step! {
    /// Takes `user` out of every schedule, each moved to its next version
    /// and marked unmirrored. The versions move first, in id order (the
    /// lock order of schedule writes, so the two wait for each other on
    /// Postgres rather than deadlock); a schedule a write gave them since is
    /// moved after.
    async fn leave_schedules(conn, user: &UserId, now: Instant, report: &mut ErasureReport) -> () {
        let mut s = Statement::new("SELECT schedule_id FROM participants WHERE user_id = ");
        s.bind(user.as_str());
        let mut theirs = texts::<DB>(conn, s.query_as::<DB, (String,)>()).await?;
        theirs.sort();
        report.schedules_changed = next_versions::<DB>(conn, &theirs, now).await?;
        let mut s = Statement::new("DELETE FROM participants WHERE user_id = ");
        s.bind(user.as_str()).push(" RETURNING schedule_id");
        let mut left = texts::<DB>(conn, s.query_as::<DB, (String,)>()).await?;
        report.participations = left.len() as u64;
        left.retain(|id| theirs.binary_search(id).is_err());
        left.sort();
        report.schedules_changed += next_versions::<DB>(conn, &left, now).await?;
        Ok(())
    }
}

step! {
    /// Moves each of `schedules` (sorted) to its next version, unmirrored,
    /// its row and its mirror row alike; how many moved.
    async fn next_versions(conn, schedules: &[String], now: Instant) -> u64 {
        let mut moved = 0;
        for chunk in schedules.chunks(CHUNK) {
            // An upsert as schedule writes take the lock: row by row, in order.
            let mut s = Statement::new(
                "INSERT INTO schedule_mirror (schedule_id, version, deleted, mirrored, changed_at)",
            );
            s.values(chunk, |r, id| {
                r.bind(id.as_str()).bind(1_i64).bind(false).bind(false).bind(now.timestamp_millis());
            });
            s.push(
                " ON CONFLICT (schedule_id) DO UPDATE SET version = schedule_mirror.version + 1,
                   mirrored = FALSE, changed_at = excluded.changed_at
                 RETURNING schedule_id, version",
            );
            let rows: Vec<(String, i64)> = s
                .query_as::<DB, (String, i64)>()
                .fetch_all(&mut *conn)
                .await
                .map_err(db_err)?;
            moved += rows.len() as u64;
            let mut s = Statement::new(
                "UPDATE schedules SET version = (SELECT m.version FROM schedule_mirror m
                   WHERE m.schedule_id = schedules.id), updated_at = ",
            );
            s.bind(now.timestamp_millis()).push(" WHERE id IN ");
            s.list(chunk.iter().map(String::as_str)).push(" RETURNING id");
            changed::<DB>(conn, s).await?;
        }
        Ok(moved)
    }
}

step! {
    /// Deletes the user row; the user it held, if any.
    async fn delete_user(conn, user: &UserId) -> Option<User> {
        let mut s = Statement::new("DELETE FROM users WHERE id = ");
        s.bind(user.as_str()).push(
            " RETURNING id, name, email, slack_user_id, webhook_url, time_zone, locale, channels_off",
        );
        let row = s
            .query_as::<DB, UserRow>()
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_err)?;
        row.map(User::try_from).transpose()
    }
}

step! {
    /// Deletes the unfinished deliveries to `user`; keeps the finished ones
    /// under `pseudonym`, their detail scrubbed.
    async fn erase_deliveries(conn, user: &UserId, pseudonym: &UserId, report: &mut ErasureReport) -> () {
        let mut s = Statement::new("DELETE FROM deliveries WHERE recipient = ");
        s.bind(user.as_str()).push(" AND status IN ");
        s.list(UNFINISHED.iter().map(|st| st.as_str())).push(" RETURNING recipient");
        report.deliveries_cancelled = changed::<DB>(conn, s).await?;
        let mut s = Statement::new("UPDATE deliveries SET recipient = ");
        s.bind(pseudonym.as_str())
            .push(", detail = CASE WHEN detail IS NULL THEN NULL ELSE ")
            .bind(SCRUBBED)
            .push(" END WHERE recipient = ")
            .bind(user.as_str())
            .push(" RETURNING recipient");
        report.deliveries_pseudonymised = changed::<DB>(conn, s).await?;
        let mut s = Statement::new("DELETE FROM chat_messages WHERE user_id = ");
        s.bind(user.as_str()).push(" RETURNING user_id");
        report.chat_messages = changed::<DB>(conn, s).await?;
        Ok(())
    }
}

step! {
    /// Rewrites the delivery events whose recipient is `user` under `pseudonym`.
    async fn erase_events(conn, user: &UserId, pseudonym: &UserId) -> u64 {
        let field = format!("\"recipient\":{}", id_needles(user)[0]);
        let mut s = Statement::new(
            "SELECT seq, kind, occurred_at, data FROM delivery_events WHERE data LIKE ",
        );
        s.bind(containing(&field)).push(" ESCAPE '\\'");
        let rows: Vec<EventRow> = s
            .query_as::<DB, EventRow>()
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
        let mut n = 0;
        for row in rows {
            let mut e = StoredEvent::try_from(row)?;
            if !pseudonymise_event(&mut e.data, user, pseudonym) {
                continue;
            }
            let mut s = Statement::new("UPDATE delivery_events SET data = ");
            s.bind(serde_json::to_string(&e.data).expect("event data serialises"))
                .push(" WHERE seq = ")
                .bind(e.seq as i64)
                .push(" RETURNING kind");
            n += changed::<DB>(conn, s).await?;
        }
        Ok(n)
    }
}

step! {
    /// Drops `user` from the change-notice baselines that list them.
    async fn erase_baselines(conn, user: &UserId) -> u64 {
        let mut s = Statement::new("SELECT schedule_id FROM change_baselines WHERE snapshot LIKE ");
        s.bind(containing(&id_needles(user)[0])).push(" ESCAPE '\\'");
        let ids = texts::<DB>(conn, s.query_as::<DB, (String,)>()).await?;
        let mut n = 0;
        for id in ids {
            let mut s = Statement::new(
                "SELECT snapshot, last_notice_at FROM change_baselines WHERE schedule_id = ",
            );
            s.bind(id.as_str());
            let row: BaselineRow = s
                .query_as::<DB, BaselineRow>()
                .fetch_one(&mut *conn)
                .await
                .map_err(db_err)?;
            let Some(mut kept) = snapshot("snapshot", row.snapshot.as_deref())? else {
                continue;
            };
            if !drop_participant(&mut kept, user) {
                continue;
            }
            let mut s = Statement::new("UPDATE change_baselines SET snapshot = ");
            s.bind(snapshot_json(Some(&kept)))
                .push(" WHERE schedule_id = ")
                .bind(id)
                .push(" RETURNING schedule_id");
            n += changed::<DB>(conn, s).await?;
        }
        Ok(n)
    }
}

step! {
    /// Drops `user` from the frozen change notices that list them.
    async fn erase_notices(conn, user: &UserId) -> u64 {
        let pattern = containing(&id_needles(user)[0]);
        let mut s = Statement::new(
            "SELECT schedule_id, token, edge, at, before_snapshot, after_snapshot
             FROM change_notices WHERE before_snapshot LIKE ",
        );
        s.bind(pattern.clone())
            .push(" ESCAPE '\\' OR after_snapshot LIKE ")
            .bind(pattern)
            .push(" ESCAPE '\\'");
        let rows: Vec<NoticeRow> = s
            .query_as::<DB, NoticeRow>()
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
        let mut n = 0;
        for row in rows {
            let mut notice = ChangeNotice::try_from(row)?;
            let before = notice.before.as_mut().is_some_and(|s| drop_participant(s, user));
            let after = notice.after.as_mut().is_some_and(|s| drop_participant(s, user));
            if !(before || after) {
                continue;
            }
            let mut s = Statement::new("UPDATE change_notices SET before_snapshot = ");
            s.bind(snapshot_json(notice.before.as_ref()))
                .push(", after_snapshot = ")
                .bind(snapshot_json(notice.after.as_ref()))
                .push(" WHERE schedule_id = ")
                .bind(notice.schedule.as_str())
                .push(" AND token = ")
                .bind(notice.token)
                .push(" RETURNING token");
            n += changed::<DB>(conn, s).await?;
        }
        Ok(n)
    }
}

step! {
    /// Deletes the kept answers that quote any of `needles`.
    async fn erase_idempotency_keys(conn, needles: &[String]) -> u64 {
        let mut s = Statement::new("DELETE FROM idempotency_keys WHERE ");
        for (i, needle) in needles.iter().enumerate() {
            s.push(if i == 0 { "body LIKE " } else { " OR body LIKE " })
                .bind(containing(needle))
                .push(" ESCAPE '\\'");
        }
        s.push(" RETURNING idem_key");
        changed::<DB>(conn, s).await
    }
}

step! {
    /// Puts the pseudonym in place of their id in the audit entries about
    /// their user row (who did what stays; to whom does not).
    async fn erase_audit(conn, user: &UserId, pseudonym: &UserId) -> u64 {
        let mut s = Statement::new("UPDATE audit_log SET resource = ");
        s.bind(pseudonym.as_str())
            .push(" WHERE resource = ")
            .bind(user.as_str())
            .push(" AND action IN ");
        s.list(AuditAction::ON_USERS.iter().map(|a| a.as_str()));
        s.push(" RETURNING action");
        changed::<DB>(conn, s).await
    }
}

step! {
    /// Takes their mail address off the suppression list, kept as a keyed
    /// hash so that it stays suppressed (suppression::erase_entry).
    async fn erase_suppression(conn, user: &User, now: Instant) -> u64 {
        let Some(address) = user
            .email
            .as_deref()
            .and_then(|e| ListedAddress::parse("email", e).ok())
        else {
            return Ok(0);
        };
        super::suppression::erase_entry::<DB>(conn, &address, now).await
    }
}

#[async_trait]
impl<DB> Erasure for SqlTenantStore<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> UserRow: FromRow<'r, DB::Row>,
    for<'r> NoticeRow: FromRow<'r, DB::Row>,
    for<'r> BaselineRow: FromRow<'r, DB::Row>,
    for<'r> EventRow: FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, i64): FromRow<'r, DB::Row>,
    usize: ColumnIndex<DB::Row>,
{
    async fn erase_user(
        &self,
        user: &UserId,
        pseudonym: &UserId,
        now: Instant,
    ) -> StoreResult<ErasureReport> {
        let _slot = self.connection_slot().await;
        let mut tx = begin_write(&self.pool()).await?;
        let mut report = ErasureReport::default();
        // Participants first: they reference the user row.
        leave_schedules::<DB>(&mut tx, user, now, &mut report).await?;
        let needles = match delete_user::<DB>(&mut tx, user).await? {
            Some(u) => {
                report.users = 1;
                report.suppressions = erase_suppression::<DB>(&mut tx, &u, now).await?;
                json_needles(&u)
            }
            None => id_needles(user),
        };
        erase_deliveries::<DB>(&mut tx, user, pseudonym, &mut report).await?;
        report.delivery_events = erase_events::<DB>(&mut tx, user, pseudonym).await?;
        report.change_baselines = erase_baselines::<DB>(&mut tx, user).await?;
        report.change_notices = erase_notices::<DB>(&mut tx, user).await?;
        report.idempotency_keys = erase_idempotency_keys::<DB>(&mut tx, &needles).await?;
        report.audit_entries = erase_audit::<DB>(&mut tx, user, pseudonym).await?;
        tx.commit().await.map_err(db_err)?;
        drop(_slot);
        if report.total() > 0 {
            self.clear_below_tables(&report).await;
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns_escape_their_wildcards() {
        assert_eq!(containing("a_b%c\\d"), "%a\\_b\\%c\\\\d%");
        assert_eq!(containing("\"ana\""), "%\"ana\"%");
    }
}
