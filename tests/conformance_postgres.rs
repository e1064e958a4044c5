//! The tenant-store conformance suite on Postgres (one database per test).

use crate::common;

use std::sync::Arc;

use toki_ports::TenantStore;

async fn store() -> Arc<dyn TenantStore> {
    common::services::postgres_store().await
}

store_conformance!(
    #[ignore = "needs Postgres: scripts/test.sh runs it"]
    store
);
retention_conformance!(
    #[ignore = "needs Postgres: scripts/test.sh runs it"]
    store
);

erasure_conformance!(
    #[ignore = "needs Postgres: scripts/test.sh runs it"]
    common::erasure::postgres
);

/// The same suite through the stores the services open, with sqlx's named
/// prepared statements off, as behind RDS Proxy (`StatementCache::Auto`
/// turns them off for a proxy endpoint).
mod without_statement_cache {
    use super::*;
    use toki_ports::TenantStores;
    use toki_sql::{Locator, SqlTenantStores, StatementCache};

    async fn store() -> Arc<dyn TenantStore> {
        let url = common::services::postgres_database().await;
        SqlTenantStores::with_locator(Locator::Template(url))
            .with_statement_cache(StatementCache::Off)
            .open(&"acme".parse().unwrap())
            .await
            .unwrap()
    }

    store_conformance!(
        #[ignore = "needs Postgres: scripts/test.sh runs it"]
        store
    );
}

/// One connection budget for the process: while every slot waits on one
/// tenant's database, another tenant's work waits for a slot rather than
/// opening connections of its own.
#[tokio::test]
#[ignore = "needs Postgres: scripts/test.sh runs it"]
async fn the_connection_budget_is_shared_across_tenants() {
    use toki_ports::TenantStores;
    use toki_sql::{Locator, SqlTenantStores};

    let name = common::conformance::unique("toki_test_budget_");
    let template = common::services::postgres_url_for(&format!("{name}_{{tenant}}"));
    let (a, b): (toki_model::TenantId, toki_model::TenantId) =
        ("a".parse().unwrap(), "b".parse().unwrap());
    for t in [&a, &b] {
        toki_sql::create_tenant_database(&toki_sql::database_for(&template, t))
            .await
            .unwrap();
    }
    let stores = SqlTenantStores::with_locator(Locator::Template(template.clone()))
        .with_connection_budget(2);
    let (store_a, store_b) = (
        stores.open(&a).await.unwrap(),
        stores.open(&b).await.unwrap(),
    );

    // Tenant a's users table locked from outside: two reads wait on it,
    // each holding one of the two slots.
    let admin_url = common::services::postgres_base_url();
    use sqlx::Connection;
    let mut locker = sqlx::PgConnection::connect(&toki_sql::database_for(&template, &a))
        .await
        .unwrap();
    sqlx::query("BEGIN").execute(&mut locker).await.unwrap();
    sqlx::query("LOCK TABLE users IN ACCESS EXCLUSIVE MODE")
        .execute(&mut locker)
        .await
        .unwrap();
    let id: toki_model::UserId = "u0".parse().unwrap();
    let waiting: Vec<_> = (0..2)
        .map(|_| {
            let (s, id) = (store_a.clone(), id.clone());
            tokio::spawn(async move { s.get_user(&id).await })
        })
        .collect();
    let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    let sessions =
        |db: String| format!("SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}'");
    let (db_a, db_b) = (format!("{name}_a"), format!("{name}_b"));
    let lock_waits = format!("SELECT count(*) FROM pg_stat_activity WHERE datname = '{db_a}' AND wait_event_type = 'Lock'");
    for _ in 0..500 {
        let n: i64 = sqlx::query_scalar(&lock_waits)
            .fetch_one(&mut admin)
            .await
            .unwrap();
        if n == 2 {
            break;
        }
        tokio::task::yield_now().await;
    }
    let n: i64 = sqlx::query_scalar(&lock_waits)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(n, 2, "both reads of tenant a wait on the lock");

    // Tenant b's read has no slot: it opens no connection until one is free.
    let mut other = {
        let (s, id) = (store_b.clone(), id.clone());
        tokio::spawn(async move { s.get_user(&id).await })
    };
    // Given time to run (half a second, far more than a read on an idle
    // database takes), it has not: it waits for a slot.
    let early = tokio::time::timeout(std::time::Duration::from_millis(500), &mut other).await;
    assert!(early.is_err(), "tenant b's read ran beyond the budget");
    let on_b: i64 = sqlx::query_scalar(&sessions(db_b.clone()))
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(on_b, 0, "tenant b connected beyond the budget");

    sqlx::query("ROLLBACK").execute(&mut locker).await.unwrap();
    for w in waiting {
        assert!(w.await.unwrap().unwrap().is_none());
    }
    assert!(
        other.await.unwrap().unwrap().is_none(),
        "tenant b's read runs once a slot is free"
    );
    drop(locker);
    for db in [db_a, db_b] {
        sqlx::query(&format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)"))
            .execute(&mut admin)
            .await
            .unwrap();
    }
}

/// An erasure vacuums, outside its transaction, the tables it changed: the
/// dead tuples that held the person are reclaimed at once rather than when
/// autovacuum comes by. (What Postgres keeps beyond that, WAL segments and
/// backups, is docs/erasure.md's.) An erasure that changed nothing vacuums
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Postgres: scripts/test.sh runs it"]
async fn an_erasure_vacuums_the_tables_it_changed() {
    use toki_ports::Erasure;
    let url = common::services::postgres_database().await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let s = toki_sql::PostgresTenantStore::new(pool.clone());
    let vacuums = |table: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = $1",
            )
            .bind(table)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let now = chrono::Utc::now();
    let who = common::erasure::person();
    s.put_user(&who, now).await.unwrap();
    let nobody = s
        .erase_user(
            &"nobody".parse().unwrap(),
            &toki_model::erasure::pseudonym(),
            now,
        )
        .await
        .unwrap();
    assert_eq!(nobody.total(), 0);
    assert_eq!(
        vacuums("users").await,
        0,
        "nothing changed, nothing vacuumed"
    );
    s.erase_user(&who.id, &toki_model::erasure::pseudonym(), now)
        .await
        .unwrap();
    assert_eq!(vacuums("users").await, 1, "the user row's table");
    assert_eq!(vacuums("deliveries").await, 0, "a table it did not change");
}

/// Delete-and-recreate on Postgres (the AWS backend), with a process that
/// keeps its pool throughout: `DROP DATABASE … WITH (FORCE)` ends its
/// connections, so a write through the old pool cannot reach the dropped
/// database (it fails while none exists); once the database is created
/// again, the same process's next write lands in it, fresh: nothing of the
/// old tenant is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Postgres: scripts/test.sh runs it"]
async fn a_dropped_database_takes_no_write_and_its_successor_starts_empty() {
    use toki_ports::TenantStores;
    use toki_sql::{Locator, SqlTenantStores};

    let name = common::conformance::unique("toki_test_recreate_");
    let template = common::services::postgres_url_for(&format!("{name}_{{tenant}}"));
    let tenant: toki_model::TenantId = "gone".parse().unwrap();
    let url = toki_sql::database_for(&template, &tenant);
    toki_sql::create_tenant_database(&url).await.unwrap();
    let serving = SqlTenantStores::with_locator(Locator::Template(template));
    let store = serving.open(&tenant).await.unwrap();
    let now = chrono::Utc::now();
    let user = |id: &str| common::conformance::store::user(id);
    store.put_user(&user("before"), now).await.unwrap();

    toki_sql::drop_tenant_database(&url).await.unwrap();
    assert!(
        store.put_user(&user("between"), now).await.is_err(),
        "no database: the write fails"
    );
    toki_sql::create_tenant_database(&url).await.unwrap();
    store.put_user(&user("after"), now).await.unwrap();

    let fresh = SqlTenantStores::with_locator(Locator::Template(
        common::services::postgres_url_for(&format!("{name}_{{tenant}}")),
    ))
    .open(&tenant)
    .await
    .unwrap();
    let got = |id: &str| {
        let (s, id) = (fresh.clone(), id.parse::<toki_model::UserId>().unwrap());
        async move { s.get_user(&id).await.unwrap().is_some() }
    };
    assert!(got("after").await, "the new database has the new write");
    assert!(!got("before").await, "and nothing of the old one");
    assert!(!got("between").await);
    toki_sql::drop_tenant_database(&url).await.unwrap();
}
