//! End to end on the AWS backend (DynamoDB + SQS on moto, one Postgres
//! database per tenant): a delivery for one tenant never opens another's database.

mod aws_support;
mod common;

use std::time::Duration;

use common::pipeline::{due_in, meeting, user};
use toki::{Config, Toki};
use toki_core::TenantId;

fn config(dir: &std::path::Path) -> Config {
    let mut config = aws_support::backend_config("pa", dir);
    config.pipeline.lead_ms = 1000;
    config.daemon.workers = 2;
    config.validate().unwrap();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_for_one_tenant_never_opens_another_tenants_database() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    // The registrar side: two tenants, each with its own Postgres database.
    let registrar_side = Toki::open(config.clone()).await.unwrap();
    let (alpha, beta): (TenantId, TenantId) = ("alpha".parse().unwrap(), "beta".parse().unwrap());
    for t in [&alpha, &beta] {
        registrar_side.create_tenant(t, true).await.unwrap();
        for j in 0..2 {
            registrar_side
                .registrar()
                .put_user(t, &format!("u{j}"), &user(j))
                .await
                .unwrap();
        }
    }
    registrar_side
        .registrar()
        .put_schedule(&alpha, "review", &meeting(due_in(4)))
        .await
        .unwrap();

    // The daemon side, with its own lazily opened pools.
    let daemon_side = Toki::open(config).await.unwrap();
    let daemon = daemon_side.daemon().await.unwrap();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(daemon.clone().run(shutdown));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while daemon.stats.snapshot().delivered < 4 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.send(true).unwrap();
    task.await.unwrap();
    assert_eq!(
        daemon.stats.snapshot().delivered,
        4,
        "2 recipients × mail and Slack"
    );
    assert_eq!(
        daemon_side.stores.opened().await,
        vec![alpha],
        "the daemon opened a database it had no delivery for"
    );
}
