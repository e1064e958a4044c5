//! The tenant's suppression list and mail settings (migration 0012), on
//! Postgres and on SQLite.

use async_trait::async_trait;
use sqlx::{Database, Decode, Encode, Executor, FromRow, IntoArguments, Type};

use toki_model::domain::{Instant, User};
use toki_model::suppression::{bounded_detail, ListUnsubscribe, ListedAddress, Suppression};
use toki_model::suppression_hash::{SuppressionHashKey, SUPPRESSION_HASH_KEY};
use toki_ports::suppression::{RefusedRecipient, SuppressionList};
use toki_ports::{StoreError, StoreResult};

use super::rows::suppression;
use super::statement::Statement;
use super::{SqlTenantStore, CHUNK};
use crate::db_err;

row! {
    #[derive(Debug)]
    pub(crate) struct SuppressionRow {
        address: String,
        reason: String,
        detail: Option<String>,
        created_at: i64,
    }
}

impl SuppressionRow {
    fn read(self) -> StoreResult<Suppression> {
        suppression(&self.address, &self.reason, self.detail, self.created_at)
    }
}

/// The delivery context's rows for the list: the entries of the schedules'
/// participants' addresses, and the tenant's `List-Unsubscribe`, in the
/// context's columns (rows::ContextItem).
pub(super) fn context_parts<'a>(s: &mut Statement, schedules: impl Iterator<Item = &'a str>) {
    s.push(
        " UNION ALL
         SELECT 'suppressed' AS kind, '' AS schedule_id, reason AS title, detail AS body,
                CAST(NULL AS TEXT) AS recurrence, created_at AS version,
                CAST(NULL AS TEXT) AS user_id, CAST(NULL AS TEXT) AS name,
                address AS email, CAST(NULL AS TEXT) AS slack_user_id,
                CAST(NULL AS TEXT) AS webhook_url,
                CAST(NULL AS TEXT) AS time_zone, CAST(NULL AS TEXT) AS locale,
                CAST(NULL AS TEXT) AS channels_off, CAST(-1 AS BIGINT) AS position
         FROM suppressed_addresses WHERE address IN (
             SELECT lower(trim(u.email)) FROM participants p JOIN users u ON u.id = p.user_id
             WHERE u.email IS NOT NULL AND p.schedule_id IN ",
    );
    s.list(schedules);
    s.push(
        ")
         UNION ALL
         SELECT 'unsubscribe' AS kind, '' AS schedule_id, unsubscribe_url AS title,
                unsubscribe_mailto AS body, CAST(NULL AS TEXT) AS recurrence,
                CAST(NULL AS BIGINT) AS version,
                CAST(NULL AS TEXT) AS user_id, CAST(NULL AS TEXT) AS name,
                CAST(NULL AS TEXT) AS email, CAST(NULL AS TEXT) AS slack_user_id,
                CAST(NULL AS TEXT) AS webhook_url,
                CAST(NULL AS TEXT) AS time_zone, CAST(NULL AS TEXT) AS locale,
                CAST(NULL AS TEXT) AS channels_off, CAST(-1 AS BIGINT) AS position
         FROM mail_settings",
    );
}

const COLUMNS: &str = "SELECT address, reason, detail, created_at FROM suppressed_addresses";

#[async_trait]
impl<DB> SuppressionList for SqlTenantStore<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> SuppressionRow: FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
    for<'r> (String, i64): FromRow<'r, DB::Row>,
    for<'r> (Option<String>, Option<String>): FromRow<'r, DB::Row>,
{
    async fn suppress(&self, entries: &[Suppression]) -> StoreResult<u64> {
        let _slot = self.connection_slot().await;
        let mut added = 0;
        for chunk in entries.chunks(CHUNK) {
            let mut s = Statement::new(
                "INSERT INTO suppressed_addresses (address, reason, detail, created_at)",
            );
            s.values(chunk, |r, e| {
                r.bind(e.address.as_str())
                    .bind(e.reason.as_str())
                    .bind(e.detail.as_deref().map(bounded_detail))
                    .bind(e.at.timestamp_millis());
            });
            s.push(" ON CONFLICT (address) DO NOTHING RETURNING address");
            let rows: Vec<(String,)> = s
                .query_as::<DB, (String,)>()
                .fetch_all(&self.pool())
                .await
                .map_err(db_err)?;
            added += rows.len() as u64;
        }
        Ok(added)
    }

    async fn suppress_recipients(
        &self,
        refused: &[RefusedRecipient],
        at: Instant,
    ) -> StoreResult<u64> {
        if refused.is_empty() {
            return Ok(0);
        }
        let emails: Vec<(String, String)> = {
            let _slot = self.connection_slot().await;
            let mut s =
                Statement::new("SELECT id, email FROM users WHERE email IS NOT NULL AND id IN ");
            s.list(refused.iter().map(|r| r.user.as_str()));
            s.query_as::<DB, (String, String)>()
                .fetch_all(&self.pool())
                .await
                .map_err(db_err)?
        };
        let entries: Vec<Suppression> = refused
            .iter()
            .filter_map(|r| {
                let (_, email) = emails.iter().find(|(id, _)| id == r.user.as_str())?;
                Some(Suppression {
                    address: ListedAddress::parse("email", email).ok()?,
                    reason: r.reason,
                    detail: Some(bounded_detail(&r.detail)),
                    at,
                })
            })
            .collect();
        self.suppress(&entries).await
    }

    async fn unsuppress(&self, address: &ListedAddress) -> StoreResult<bool> {
        let _slot = self.connection_slot().await;
        let mut conn = self.pool().acquire().await.map_err(db_err)?;
        let mut s = Statement::new("DELETE FROM suppressed_addresses WHERE address = ");
        s.bind(address.as_str()).push(" RETURNING address");
        let rows: Vec<(String,)> = s
            .query_as::<DB, (String,)>()
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
        // An erased person's entry, kept as a hash, is lifted too.
        let erased = erased_entry::<DB>(&mut conn, address, true).await?;
        Ok(!rows.is_empty() || erased.is_some())
    }

    async fn suppression(&self, address: &ListedAddress) -> StoreResult<Option<Suppression>> {
        let _slot = self.connection_slot().await;
        let mut conn = self.pool().acquire().await.map_err(db_err)?;
        let mut s = Statement::new(COLUMNS);
        s.push(" WHERE address = ").bind(address.as_str());
        let listed = s
            .query_as::<DB, SuppressionRow>()
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_err)?;
        if let Some(row) = listed {
            return row.read().map(Some);
        }
        erased_entry::<DB>(&mut conn, address, false)
            .await?
            .map(|entry| erased_suppression(address, entry))
            .transpose()
    }

    async fn suppressions(
        &self,
        after: Option<&ListedAddress>,
        limit: usize,
    ) -> StoreResult<Vec<Suppression>> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new(COLUMNS);
        s.push(" WHERE address > ")
            .bind(after.map_or("", ListedAddress::as_str))
            .push(" ORDER BY address LIMIT ")
            .bind(limit as i64);
        s.query_as::<DB, SuppressionRow>()
            .fetch_all(&self.pool())
            .await
            .map_err(db_err)?
            .into_iter()
            .map(SuppressionRow::read)
            .collect()
    }

    async fn list_unsubscribe(&self) -> StoreResult<ListUnsubscribe> {
        let _slot = self.connection_slot().await;
        let row: Option<(Option<String>, Option<String>)> = Statement::new(
            "SELECT unsubscribe_url, unsubscribe_mailto FROM mail_settings WHERE id = 1",
        )
        .query_as::<DB, (Option<String>, Option<String>)>()
        .fetch_optional(&self.pool())
        .await
        .map_err(db_err)?;
        let (url, mailto) = row.unwrap_or_default();
        Ok(ListUnsubscribe { url, mailto })
    }

    async fn put_list_unsubscribe(
        &self,
        settings: &ListUnsubscribe,
        now: Instant,
    ) -> StoreResult<()> {
        let _slot = self.connection_slot().await;
        let mut s = Statement::new(
            "INSERT INTO mail_settings (id, unsubscribe_url, unsubscribe_mailto, updated_at)",
        );
        s.values([settings], |r, l| {
            r.bind(1_i64)
                .bind(l.url.clone())
                .bind(l.mailto.clone())
                .bind(now.timestamp_millis());
        });
        s.push(
            " ON CONFLICT (id) DO UPDATE SET unsubscribe_url = excluded.unsubscribe_url,
               unsubscribe_mailto = excluded.unsubscribe_mailto, updated_at = excluded.updated_at",
        );
        s.query::<DB>()
            .execute(&self.pool())
            .await
            .map_err(db_err)?;
        Ok(())
    }
}

/// The bounds of the erased-entry statements: [`Statement`]s on a connection.
macro_rules! erased_step {
    ($(#[$m:meta])* $v:vis async fn $name:ident($conn:ident $(, $arg:ident: $ty:ty)*) -> $ret:ty $body:block) => {
        $(#[$m])*
        $v async fn $name<DB>($conn: &mut DB::Connection, $($arg: $ty),*) -> StoreResult<$ret>
        where
            DB: Database,
            for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
            for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
            for<'q> i64: Encode<'q, DB> + Type<DB>,
            for<'q> String: Encode<'q, DB> + Type<DB>,
            for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
            for<'q> bool: Encode<'q, DB> + Type<DB>,
            for<'r> (String,): FromRow<'r, DB::Row>,
            for<'r> (String, i64): FromRow<'r, DB::Row>,
        $body
    };
}

erased_step! {
    /// The tenant's key for erased addresses, if one was made.
    async fn hash_key(conn) -> Option<SuppressionHashKey> {
        let mut s = Statement::new("SELECT value FROM tenant_secrets WHERE name = ");
        s.bind(SUPPRESSION_HASH_KEY);
        let stored: Option<(String,)> = s
            .query_as::<DB, (String,)>()
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_err)?;
        stored
            .map(|(v,)| SuppressionHashKey::parse(&v))
            .transpose()
            .map_err(|e| StoreError::corrupt("tenant_secrets", e))
    }
}

erased_step! {
    /// The key, made now if there is none (on the erasure's transaction:
    /// a key made concurrently elsewhere wins, and is the one read back).
    async fn hash_key_or_new(conn) -> SuppressionHashKey {
        if let Some(key) = hash_key::<DB>(conn).await? {
            return Ok(key);
        }
        let mut s = Statement::new("INSERT INTO tenant_secrets (name, value)");
        s.values([()], |r, ()| {
            r.bind(SUPPRESSION_HASH_KEY)
                .bind(SuppressionHashKey::generate(&mut rand::thread_rng()).to_stored());
        });
        s.push(" ON CONFLICT (name) DO NOTHING");
        s.query::<DB>().execute(&mut *conn).await.map_err(db_err)?;
        hash_key::<DB>(conn)
            .await?
            .ok_or_else(|| StoreError::corrupt("tenant_secrets", "the key just made is not there"))
    }
}

erased_step! {
    /// Replaces the list's entry of an erased person's `address` by its
    /// keyed hash (the reason and the instant stay, the detail goes); 1 if
    /// there was an entry. Another user with the address keeps it listed as
    /// it is: then it is not the erased person's alone (0).
    pub(super) async fn erase_entry(conn, address: &ListedAddress, now: Instant) -> u64 {
        let mut s = Statement::new("SELECT id FROM users WHERE lower(trim(email)) = ");
        s.bind(address.as_str()).push(" LIMIT 1");
        let shared: Option<(String,)> = s
            .query_as::<DB, (String,)>()
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_err)?;
        if shared.is_some() {
            return Ok(0);
        }
        let mut s = Statement::new("DELETE FROM suppressed_addresses WHERE address = ");
        s.bind(address.as_str()).push(" RETURNING reason, created_at");
        let Some((reason, created_at)) = s
            .query_as::<DB, (String, i64)>()
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_err)?
        else {
            return Ok(0);
        };
        let digest = hash_key_or_new::<DB>(conn).await?.digest(address);
        let mut s = Statement::new(
            "INSERT INTO erased_suppressions (digest, reason, created_at, erased_at)",
        );
        s.values([()], |r, ()| {
            r.bind(digest.as_str())
                .bind(reason.clone())
                .bind(created_at)
                .bind(now.timestamp_millis());
        });
        s.push(" ON CONFLICT (digest) DO NOTHING");
        s.query::<DB>().execute(&mut *conn).await.map_err(db_err)?;
        Ok(1)
    }
}

erased_step! {
    /// The erased entry of `address` (reason, since when), if there is one;
    /// `take` removes it too.
    async fn erased_entry(conn, address: &ListedAddress, take: bool) -> Option<(String, i64)> {
        let Some(key) = hash_key::<DB>(conn).await? else {
            return Ok(None);
        };
        let mut s = Statement::new(if take {
            "DELETE FROM erased_suppressions WHERE digest = "
        } else {
            "SELECT reason, created_at FROM erased_suppressions WHERE digest = "
        });
        s.bind(key.digest(address).as_str());
        if take {
            s.push(" RETURNING reason, created_at");
        }
        s.query_as::<DB, (String, i64)>()
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_err)
    }
}

erased_step! {
    /// A user written with an address an erased person's entry hashes:
    /// the entry is listed again, by address (the tenant gave it back).
    pub(super) async fn restore_erased(conn, user: &User) -> () {
        let Some(address) = user.email.as_deref().and_then(|e| ListedAddress::parse("email", e).ok()) else {
            return Ok(());
        };
        let Some((reason, created_at)) = erased_entry::<DB>(conn, &address, true).await? else {
            return Ok(());
        };
        let mut s = Statement::new(
            "INSERT INTO suppressed_addresses (address, reason, detail, created_at)",
        );
        s.values([()], |r, ()| {
            r.bind(address.as_str())
                .bind(reason.clone())
                .bind(None::<String>)
                .bind(created_at);
        });
        s.push(" ON CONFLICT (address) DO NOTHING");
        s.query::<DB>().execute(&mut *conn).await.map_err(db_err)?;
        Ok(())
    }
}

/// An erased entry as the list answers for its address.
fn erased_suppression(
    address: &ListedAddress,
    (reason, created_at): (String, i64),
) -> StoreResult<Suppression> {
    suppression(address.as_str(), &reason, None, created_at)
}
