//! End to end on the AWS backend (DynamoDB + SQS on moto, one Postgres
//! database per tenant): a delivery for one tenant never opens another's database.

use crate::aws_support;
use crate::common;

use std::time::Duration;

use common::pipeline::{due_in, meeting, user};
use toki_app::{Config, Toki};
use toki_model::TenantId;

fn config(dir: &std::path::Path) -> Config {
    let mut config = aws_support::backend_config("pa", dir);
    config.pipeline.lead_ms = 1000;
    config.daemon.workers = 2;
    config.validate().unwrap();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto) and Postgres: scripts/test.sh runs it"]
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
                .put_user(t, &format!("u{j}").parse().unwrap(), &user(j))
                .await
                .unwrap();
        }
    }
    registrar_side
        .registrar()
        .put_schedule(
            &alpha,
            &common::pipeline::sid("review"),
            &meeting(due_in(4)),
        )
        .await
        .unwrap();

    // The daemon side, with its own lazily opened pools.
    let daemon_side = Toki::open(config).await.unwrap();
    let daemon = daemon_side.daemon().await.unwrap();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(daemon.clone().run(shutdown));
    daemon
        .stats
        .wait_for(Duration::from_secs(30), |s| s.delivered >= 4)
        .await;
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

/// A Secrets Manager secret (on the emulator) holding `username` and `password`.
async fn secret(name: &str, username: &str, password: &str) -> String {
    let client = toki_aws::aws_sdk_secretsmanager::Client::new(&aws_support::sdk().await);
    client
        .create_secret()
        .name(aws_support::unique(name))
        .secret_string(serde_json::json!({"username": username, "password": password}).to_string())
        .send()
        .await
        .expect("create the secret")
        .arn
        .expect("an ARN")
}

/// The test Postgres as (host, port, user, password).
fn server() -> (String, u16, String, String) {
    let url = common::services::postgres_base_url();
    let rest = url.split_once("://").unwrap().1;
    let (auth, hostpart) = rest.split_once('@').unwrap_or(("postgres", rest));
    let (user, password) = auth.split_once(':').unwrap_or((auth, ""));
    let hostport = hostpart.split('/').next().unwrap();
    let (host, port) = hostport.split_once(':').unwrap_or((hostport, "5432"));
    (
        host.into(),
        port.parse().unwrap(),
        user.into(),
        password.into(),
    )
}

/// Production's way to the tenant databases: a host and the credentials in
/// Secrets Manager, read when the process starts; provisioning with separate
/// admin credentials creates the runtime role and lets it read and write. The
/// tenant directory records a database name, never a URL with a password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto) and Postgres: scripts/test.sh runs it"]
async fn tenant_databases_through_secrets_manager_with_separate_runtime_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let (host, port, admin_user, admin_password) = server();
    let role = format!(
        "toki_rt_{}",
        common::conformance::unique("").replace('-', "_")
    );
    let runtime_password = "r3al,ly:s@cret/pw";
    let mut config = aws_support::backend_config("sm", dir.path());
    config.tenant_database_template = None;
    config.database.host = Some(host);
    config.database.port = port;
    config.database.name_template = format!("toki_test_{role}_{{tenant}}");
    config.database.sslmode = "prefer".into();
    config.database.secret_arn = Some(secret("rt", &role, runtime_password).await);
    config.database.admin_secret_arn = Some(secret("admin", &admin_user, &admin_password).await);
    config.pipeline.lead_ms = 1000;
    config.validate().unwrap();
    let toki = Toki::open(config.clone()).await.unwrap();
    let t: TenantId = "acme".parse().unwrap();
    let (record, _) = toki.create_tenant(&t, true).await.unwrap();
    assert_eq!(record.database, format!("toki_test_{role}_acme"));
    assert!(!record.database.contains("://") && !record.database.contains(runtime_password));
    for j in 0..2 {
        toki.registrar()
            .put_user(&t, &format!("u{j}").parse().unwrap(), &user(j))
            .await
            .expect("the runtime role writes users");
    }
    toki.registrar()
        .put_schedule(&t, &common::pipeline::sid("review"), &meeting(due_in(3)))
        .await
        .expect("the runtime role writes schedules");
    let daemon = toki.daemon().await.unwrap();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(daemon.clone().run(shutdown));
    let s = daemon
        .stats
        .wait_for(Duration::from_secs(30), |s| s.delivered >= 4)
        .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    assert_eq!(s.delivered, 4, "delivered through the runtime role");
    // Clean up: the database, then the role (its grants went with the database).
    let admin = toki.databases.admin_url(&t).unwrap();
    toki_sql::drop_tenant_database(&admin).await.unwrap();
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(
        &common::services::postgres_url_for("postgres"),
    )
    .await
    .unwrap();
    sqlx::query(&format!("DROP ROLE IF EXISTS \"{role}\""))
        .execute(&mut conn)
        .await
        .unwrap();
}

/// Debounce on the AWS parts: rows in DynamoDB, checks on SQS (the emulator).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto) and Postgres: scripts/test.sh runs it"]
async fn a_debounced_key_acts_on_both_edges_across_a_daemon_restart() {
    let queue = aws_support::queue(5).await;
    let store = aws_support::debounce_store().await;
    common::debounce::both_edges_across_a_daemon_restart(queue, store).await;
}

/// Two `toki serve --backend aws` processes (DynamoDB rows, SQS checks and
/// notices on the emulator, Postgres tenant databases) split a burst of
/// edits of one schedule: one leading and one trailing change notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto) and Postgres: scripts/test.sh runs it"]
async fn two_processes_editing_one_schedule_notify_once_per_edge() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    common::debounce::two_processes_one_burst(config, aws_support::endpoint_env()).await;
}
