//! Offboarding on the AWS backend (DynamoDB + SQS on moto, a Postgres
//! database per tenant): after `delete_tenant` returns, no item of any table
//! names the tenant, its database is gone, its queued message is disposed of
//! with the reason counted, and the other tenant still gets its reminders.

use crate::aws_support;
use crate::common;

use std::time::Duration;

use common::pipeline::{due_in, meeting, user};
use toki_app::{Config, Toki};
use toki_aws::aws_sdk_dynamodb;
use toki_model::TenantId;

fn config(dir: &std::path::Path) -> Config {
    let mut config = aws_support::backend_config("ob", dir);
    config.pipeline.lead_ms = 1000;
    config.daemon.workers = 2;
    // The delete waits at least one lease, so a short one; but not 2 s:
    // moto takes requests one at a time, and beside the rest of the suite
    // a heartbeat could wait past a 2 s lease, the message come back, and
    // a second holder take the claim over and send again (at least once,
    // as designed), which the exact count below does not allow. Twice in
    // seven full runs on 2026-11-29 it counted 8 deliveries for 4.
    config.daemon.visibility_timeout_s = 10;
    config.validate().unwrap();
    config
}

/// Every string anywhere in every item of `table`.
async fn strings_in(client: &aws_sdk_dynamodb::Client, table: &str) -> Vec<String> {
    use aws_sdk_dynamodb::types::AttributeValue;
    fn walk(v: &AttributeValue, out: &mut Vec<String>) {
        match v {
            AttributeValue::S(s) | AttributeValue::N(s) => out.push(s.clone()),
            AttributeValue::Ss(l) => out.extend(l.iter().cloned()),
            AttributeValue::L(l) => l.iter().for_each(|v| walk(v, out)),
            AttributeValue::M(m) => m.iter().for_each(|(k, v)| {
                out.push(k.clone());
                walk(v, out)
            }),
            _ => {}
        }
    }
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for item in page.items() {
            for (k, v) in item {
                out.push(k.clone());
                walk(v, &mut out);
            }
        }
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => return out,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto) and Postgres: scripts/test.sh runs it"]
async fn a_deleted_tenant_leaves_nothing_and_gets_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let admin = Toki::open(config.clone()).await.unwrap();
    let (gone, kept): (TenantId, TenantId) = ("obgone".parse().unwrap(), "obkept".parse().unwrap());
    for t in [&gone, &kept] {
        admin.create_tenant(t, true).await.unwrap();
        for j in 0..2 {
            let id = format!("u{j}").parse().unwrap();
            admin.registrar().put_user(t, &id, &user(j)).await.unwrap();
        }
        // Due soon: queued at once, before the delete.
        let review = common::pipeline::sid("review");
        admin
            .registrar()
            .put_schedule(t, &review, &meeting(due_in(8)))
            .await
            .unwrap();
    }
    let names = |t: &TenantId| {
        let dynamo_strings = [&config.aws.index_table, &config.aws.directory_table];
        (dynamo_strings.map(|s| s.clone()), t.to_string())
    };

    // The dry run lists the database and the index items.
    let listed = admin.tenant_inventory(&gone).await.unwrap();
    assert_eq!(listed.inventory.record.id, gone);
    let rows = listed.inventory.database.as_ref().unwrap();
    assert!(rows.iter().any(|h| h.count > 0), "{rows:?}");
    let database = listed.inventory.record.database.clone();
    let database_name = database
        .rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_owned();

    // Before: the scan finds it in both tables (so a miss after is the delete's).
    let dynamo = aws_support::dynamo().await;
    let (tables, id) = names(&gone);
    for table in &tables {
        let found = strings_in(&dynamo, table).await;
        assert!(
            found.iter().any(|s| s.contains(&id)),
            "{table} does not name {id} before"
        );
    }

    let deleted = admin
        .delete_tenant(&gone, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(deleted.database_name, database);

    // Nothing of it in any table of the stack.
    for table in tables {
        let hits: Vec<String> = strings_in(&dynamo, &table)
            .await
            .into_iter()
            .filter(|s| s.contains(&id))
            .collect();
        assert!(hits.is_empty(), "{table} still names {id}: {hits:?}");
    }
    // Its database is dropped.
    let pool = sqlx::PgPool::connect(&common::services::postgres_url_for("postgres"))
        .await
        .unwrap();
    let left: Vec<(String,)> = sqlx::query_as("SELECT datname FROM pg_database WHERE datname = $1")
        .bind(&database_name)
        .fetch_all(&pool)
        .await
        .unwrap();
    assert!(left.is_empty(), "{database_name} still exists");

    // The daemon: the kept tenant's 4 deliveries; the gone tenant's queued
    // message disposed of, counted, nothing sent.
    let daemon_side = Toki::open(config).await.unwrap();
    let daemon = daemon_side.daemon().await.unwrap();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(daemon.clone().run(shutdown));
    daemon
        .stats
        .wait_for(Duration::from_secs(60), |s| {
            s.delivered >= 4 && s.tenant_deleted >= 1
        })
        .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    let stats = daemon.stats.snapshot();
    assert_eq!(
        stats.delivered, 4,
        "the kept tenant's 2 recipients × mail and Slack, nothing of the gone one"
    );
    assert_eq!(
        stats.tenant_deleted, 1,
        "the gone tenant's queued message, disposed of"
    );
    let _ = kept;
}
