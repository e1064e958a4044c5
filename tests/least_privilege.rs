//! Least privilege, enforced: every component runs as it runs in production,
//! configured with the deployed resources' names, through the IAM gate
//! (`infra/iam_gate.py`) in front of moto, which allows each call only if the
//! component's role in `infra/template.yaml` allows that action on that
//! resource, and answers AccessDenied otherwise. The migrate task creates the
//! tenant (its key handed over in a secret) and migrates; the registrar Lambda
//! registers; the scanner Lambda scans and enqueues; the repair Lambda
//! mirrors a registration the index missed; the daemon delivers all of it and
//! answers `/readyz` and `/metrics` (the queue's depth); the migrate task
//! looks at the dead letters. Then: no call was denied.
//!
//! The Lambdas' handlers run in this process (as `tests/lambdas.rs` runs
//! them), each with its own gate listener, which plays its role; the migrate
//! task and the daemon are `toki` processes whose access key id names theirs.
//! `TOKI_IAM_GATE_TEMPLATE` evaluates another template (a role with one
//! permission removed, to see the test fail: infra/README.md).

use crate::aws_support::{self, REGION};
use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use chrono::{Duration as ChronoDuration, SubsecRound, Utc};
use lambda_http::request::LambdaRequest;
use lambda_http::tower::ServiceExt;
use lambda_http::{Context, LambdaEvent};
use serde_json::{json, Value};
use toki_aws::aws_config::SdkConfig;
use toki_model::TenantId;

const TENANT: &str = "acme";
/// Access key ids of the processes: the gate maps each to its role.
const MIGRATE_KEY: &str = "toki-migrate-task";
const DAEMON_KEY: &str = "toki-daemon-task";

/// The gate: a Python process in front of moto, with a listener per
/// in-process component and one where the access key id names the role.
struct Gate {
    child: Child,
    /// Where the access key id names the role.
    url: String,
    /// Role (logical id) -> its own listener.
    listeners: HashMap<String, String>,
}

impl Gate {
    fn start(moto: &str, params: &[(&str, String)]) -> Gate {
        let root = aws_support::repo_root();
        let template = std::env::var("TOKI_IAM_GATE_TEMPLATE")
            .ok()
            .filter(|t| !t.is_empty())
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| root.join("infra/template.yaml"));
        let mut cmd = Command::new(aws_support::moto_python());
        cmd.arg(root.join("infra/iam_gate.py"))
            .arg("--template")
            .arg(&template)
            .args([
                "--upstream",
                moto,
                "--region",
                REGION,
                "--until-stdin-closes",
            ])
            .args(["--principal", &format!("{MIGRATE_KEY}=MigrateTaskRole")])
            .args(["--principal", &format!("{DAEMON_KEY}=DaemonTaskRole")]);
        for role in ["ScannerRole", "RegistrarRole", "RepairRole"] {
            cmd.args(["--role-listener", role]);
        }
        for (name, value) in params {
            cmd.args(["--param", &format!("{name}={value}")]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start infra/iam_gate.py");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut url, mut listeners) = (String::new(), HashMap::new());
        for line in lines.by_ref() {
            let line = line.expect("the gate's output");
            if line == "iam_gate: ready" {
                break;
            }
            if let Some((label, at)) = line
                .strip_prefix("iam_gate: ")
                .and_then(|l| l.split_once(" on "))
            {
                if label == "*" {
                    url = at.to_owned();
                } else {
                    listeners.insert(label.to_owned(), at.to_owned());
                }
            }
        }
        assert!(
            !url.is_empty(),
            "the gate did not start (its stderr is above)"
        );
        // Its denials go on to this test's output as they happen.
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                eprintln!("{line}");
            }
        });
        eprintln!("iam gate on {url}, evaluating {}", template.display());
        Gate {
            child,
            url,
            listeners,
        }
    }

    fn listener(&self, role: &str) -> String {
        self.listeners[role].clone()
    }

    /// Every call the gate denied so far: role, action, resource, why.
    async fn denials(&self) -> Vec<Value> {
        reqwest::get(format!("{}/__gate/denials", self.url))
            .await
            .expect("the gate answers")
            .json()
            .await
            .expect("its denials as JSON")
    }

    /// Panics with `what` and the gate's denials unless `ok`.
    async fn check(&self, ok: bool, what: impl std::fmt::Display) {
        if !ok {
            panic!(
                "{what}\ndenied by the gate: {:#}",
                json!(self.denials().await)
            );
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one test deploys: resource names as the template makes them from
/// `EnvironmentName`, the database secrets, the tenant databases' names.
struct Deployment {
    env: String,
    index_table: String,
    directory_table: String,
    queue: String,
    dlq: String,
    runtime_secret: String,
    admin_secret: String,
    runtime_role: String,
    host: String,
    port: u16,
    name_template: String,
    data_dir: tempfile::TempDir,
}

impl Deployment {
    /// The template's parameters for this deployment (existing-database mode:
    /// the secrets are this test's).
    fn params(&self) -> Vec<(&'static str, String)> {
        vec![
            ("EnvironmentName", self.env.clone()),
            ("DatabaseMode", "existing".into()),
            ("ExistingDatabaseHost", self.host.clone()),
            ("ExistingDatabasePort", self.port.to_string()),
            ("DatabaseRuntimeSecretArn", self.runtime_secret.clone()),
            ("DatabaseAdminSecretArn", self.admin_secret.clone()),
        ]
    }

    /// The environment the template gives the ECS tasks (the daemon; the
    /// migrate task adds the admin secret), with `key` as the access key id
    /// and the gate as the endpoint.
    fn task_env(&self, cmd: &mut Command, gate: &Gate, key: &str) {
        for var in [
            "AWS_ENDPOINT_URL_SQS",
            "AWS_ENDPOINT_URL_DYNAMODB",
            "AWS_ENDPOINT_URL_SECRETS_MANAGER",
            "AWS_SESSION_TOKEN",
            "TOKI_DATABASE_URL_TEMPLATE",
        ] {
            cmd.env_remove(var);
        }
        cmd.env("AWS_ENDPOINT_URL", &gate.url)
            .env("AWS_ACCESS_KEY_ID", key)
            .env("AWS_SECRET_ACCESS_KEY", "not-checked")
            .env("AWS_REGION", REGION)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("TOKI_BACKEND", "aws")
            .env("TOKI_ENVIRONMENT", &self.env)
            .env("TOKI_INDEX_TABLE", &self.index_table)
            .env("TOKI_DIRECTORY_TABLE", &self.directory_table)
            .env("TOKI_QUEUE_NAME", &self.queue)
            .env("TOKI_DLQ_NAME", &self.dlq)
            .env("TOKI_DATABASE_HOST", &self.host)
            .env("TOKI_DATABASE_PORT", self.port.to_string())
            .env("TOKI_DATABASE_SECRET_ARN", &self.runtime_secret)
            .env("TOKI_DATABASE_NAME_TEMPLATE", &self.name_template)
            // The test server's certificate is self-signed (production: verify-full).
            .env("TOKI_DATABASE_SSLMODE", "prefer")
            .env("TOKI_DATA_DIR", self.data_dir.path())
            .env(
                "TOKI_HEARTBEAT_FILE",
                self.data_dir.path().join("heartbeat"),
            )
            .env("RUST_LOG", "info");
    }

    /// `toki ARGS` as the migrate task runs it: its output, once it succeeded.
    async fn migrate_task(&self, gate: &Gate, args: &[&str]) -> String {
        let mut cmd = Command::new(common::process::TOKI);
        cmd.args(args);
        self.task_env(&mut cmd, gate, MIGRATE_KEY);
        cmd.env("TOKI_DATABASE_ADMIN_SECRET_ARN", &self.admin_secret);
        let out = cmd.output().expect("run toki");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        gate.check(
            out.status.success(),
            format_args!("migrate task `toki {}` failed:\n{stderr}", args.join(" ")),
        )
        .await;
        stdout
    }

    /// A Lambda's configuration, as the template's environment makes it,
    /// with the gate's listener for `role` as the endpoint.
    fn lambda_config(&self, gate: &Gate, role: &str) -> toki_app::Config {
        let mut c = toki_app::Config {
            backend: toki_app::BackendKind::Aws,
            environment: self.env.clone(),
            data_dir: self.data_dir.path().join(role),
            ..toki_app::Config::default()
        };
        c.aws.endpoint_url = Some(gate.listener(role));
        c.aws.region = Some(REGION.into());
        c.aws.index_table = self.index_table.clone();
        c.aws.directory_table = self.directory_table.clone();
        c.aws.queue_name = self.queue.clone();
        c.aws.dlq_name = self.dlq.clone();
        c.aws.create_resources = false;
        if role != "ScannerRole" {
            c.database.host = Some(self.host.clone());
            c.database.port = self.port;
            c.database.secret_arn = Some(self.runtime_secret.clone());
            c.database.name_template = self.name_template.clone();
            c.database.sslmode = "prefer".into();
        }
        c.validate().expect("a valid configuration");
        c
    }

    /// A Lambda's ports, opened as its cold start opens them.
    async fn lambda(&self, gate: &Gate, role: &str) -> toki_app::Toki {
        match toki_app::Toki::open(self.lambda_config(gate, role)).await {
            Ok(toki) => toki,
            Err(e) => {
                gate.check(false, format_args!("{role}'s cold start failed: {e:#}"))
                    .await;
                unreachable!()
            }
        }
    }
}

/// The test's own view of the emulator (moto, with no gate): setting up and
/// reading back what the components did.
async fn admin_sdk() -> SdkConfig {
    toki_aws::sdk_config(Some(aws_support::endpoint()), Some(REGION)).await
}

/// Creates the tables, the queues and the database secrets, named as the
/// template names them for a fresh environment.
async fn deploy() -> Deployment {
    let suffix = common::conformance::unique("").replace(['-', '_'], "");
    let env = format!("iam{}", &suffix[suffix.len().saturating_sub(12)..]);
    let sdk = admin_sdk().await;
    let names = toki_aws::AwsNames {
        index_table: format!("toki-{env}-reminders"),
        directory_table: format!("toki-{env}-tenants"),
        queue_name: format!("toki-{env}-reminders"),
        dlq_name: format!("toki-{env}-reminders-dlq"),
        max_receives: 100,
        visibility_timeout_s: 60,
    };
    toki_aws::ensure_resources(&sdk, &names)
        .await
        .expect("create the tables and queues");
    let (host, port, admin_user, admin_password) = postgres_server();
    let runtime_role = format!("toki_iam_rt_{suffix}");
    let secrets = toki_aws::aws_sdk_secretsmanager::Client::new(&sdk);
    let secret = |name: String, user: String, password: String| {
        let secrets = secrets.clone();
        async move {
            secrets
                .create_secret()
                .name(name)
                .secret_string(json!({"username": user, "password": password}).to_string())
                .send()
                .await
                .expect("create the secret")
                .arn
                .expect("an ARN")
        }
    };
    let runtime_secret = secret(
        format!("toki/{env}/database-runtime"),
        runtime_role.clone(),
        format!("pw{suffix}"),
    )
    .await;
    let admin_secret = secret(
        format!("toki/{env}/database-admin"),
        admin_user,
        admin_password,
    )
    .await;
    Deployment {
        name_template: format!("toki_test_iam_{suffix}_{{tenant}}"),
        index_table: names.index_table,
        directory_table: names.directory_table,
        queue: names.queue_name,
        dlq: names.dlq_name,
        env,
        runtime_secret,
        admin_secret,
        runtime_role,
        host,
        port,
        data_dir: tempfile::tempdir().unwrap(),
    }
}

/// The test Postgres as (host, port, user, password).
fn postgres_server() -> (String, u16, String, String) {
    let url = common::services::postgres_base_url();
    let rest = url.split_once("://").unwrap().1;
    let (auth, hostpart) = rest.split_once('@').unwrap_or(("postgres", rest));
    let (user, password) = auth.split_once(':').unwrap_or((auth, ""));
    let hostport = hostpart.split(['/', '?']).next().unwrap();
    let (host, port) = hostport.split_once(':').unwrap_or((hostport, "5432"));
    (
        host.into(),
        port.parse().unwrap(),
        user.into(),
        password.into(),
    )
}

/// An API Gateway payload from `tests/lambda_events/`, filled in; the
/// schedule fixture's id replaced by `schedule`.
fn api_event(name: &str, key: &str, schedule: &str, starts_at: &str) -> Value {
    let path = aws_support::repo_root()
        .join("tests/lambda_events")
        .join(name);
    let text = std::fs::read_to_string(path)
        .unwrap()
        .replace("{{TENANT}}", TENANT)
        .replace("{{API_KEY}}", key)
        .replace("{{STARTS_AT}}", starts_at)
        .replace("design-review", schedule);
    let mut event: Value = serde_json::from_str(&text).unwrap();
    if let Some(len) = event["body"].as_str().map(str::len) {
        event["headers"]["content-length"] = json!(len.to_string());
    }
    event
}

/// The registrar Lambda's router given one API Gateway payload: status, body.
async fn invoke(app: &axum::Router, event: Value) -> (u16, Value) {
    let request: LambdaRequest = serde_json::from_value(event).unwrap();
    let response = app
        .clone()
        .oneshot(lambda_http::Request::from(request))
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn scheduled_event<T: serde::de::DeserializeOwned>() -> LambdaEvent<T> {
    let path = aws_support::repo_root().join("tests/lambda_events/scheduled-event.json");
    let event = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    LambdaEvent::new(event, Context::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto) and Postgres: scripts/test.sh runs it"]
async fn every_component_does_its_work_within_its_role() {
    if aws_support::sqs_endpoint().is_some() {
        // The gate fronts moto alone; the moto pass runs this test.
        eprintln!("skipped on LocalStack's SQS: the IAM gate fronts moto");
        return;
    }
    let d = deploy().await;
    let gate = Gate::start(aws_support::endpoint(), &d.params());
    let admin = admin_sdk().await;

    // The migrate task: a tenant (database, runtime role, directory entry),
    // its API key handed over in a secret, then `toki migrate`.
    let key_secret = format!("toki/{}/tenant-keys/{TENANT}", d.env);
    d.migrate_task(
        &gate,
        &["tenant", "create", TENANT, "--key-secret", &key_secret],
    )
    .await;
    let key = toki_aws::aws_sdk_secretsmanager::Client::new(&admin)
        .get_secret_value()
        .secret_id(&key_secret)
        .send()
        .await
        .expect("the key's secret")
        .secret_string
        .expect("a string");
    let migrated = d.migrate_task(&gate, &["migrate", "--json"]).await;
    assert!(migrated.contains(TENANT), "{migrated}");

    // The registrar Lambda: a user and three schedules, each reminding ana
    // by mail and chat 5 minutes before it starts, all due in 15 seconds:
    // one enqueued by the registrar itself (due inside the scanned window),
    // one left to the scanner, one the index missed (left to repair).
    let registrar = d.lambda(&gate, "RegistrarRole").await;
    let app = toki_registrar_lambda::app(&registrar);
    let due = Utc::now().trunc_subsecs(0) + ChronoDuration::seconds(15);
    let starts_at = (due + ChronoDuration::minutes(5)).to_rfc3339();
    let (status, body) = invoke(
        &app,
        api_event("apigw-v2-put-user.json", &key, "", &starts_at),
    )
    .await;
    gate.check(status == 200, format_args!("PUT user: {status} {body}"))
        .await;
    let (status, body) = invoke(
        &app,
        api_event("apigw-v2-put-schedule.json", &key, "direct", &starts_at),
    )
    .await;
    gate.check(
        status == 200 && body["enqueued_directly"] == 1,
        format_args!("PUT schedule direct: {status} {body}"),
    )
    .await;
    let mut narrow = registrar.clone();
    narrow.config.pipeline.window_s = 1;
    let (status, body) = invoke(
        &toki_registrar_lambda::app(&narrow),
        api_event("apigw-v2-put-schedule.json", &key, "scanned", &starts_at),
    )
    .await;
    gate.check(
        status == 200 && body["mirrored"] == true && body["enqueued_directly"] == 0,
        format_args!("PUT schedule scanned: {status} {body}"),
    )
    .await;
    // The index fails for this one (a table that is not there, reached
    // around the gate: the failure is the test's, not a denial).
    let mut broken = registrar.clone();
    broken.index = Arc::new(toki_aws::DynamoReminderIndex::new(
        toki_aws::aws_sdk_dynamodb::Client::new(&admin),
        aws_support::unique("missing"),
        registrar.config.pipeline.shards,
        Duration::from_secs(3600),
        registrar.clock.clone(),
    ));
    let (status, body) = invoke(
        &toki_registrar_lambda::app(&broken),
        api_event("apigw-v2-put-schedule.json", &key, "repaired", &starts_at),
    )
    .await;
    gate.check(
        status == 202 && body["mirrored"] == false,
        format_args!("PUT schedule repaired: {status} {body}"),
    )
    .await;

    // The scanner Lambda's run: it enqueues the one left to it.
    let scanner = d.lambda(&gate, "ScannerRole").await;
    let scanned = toki_scanner_lambda::handle(&scanner, scheduled_event()).await;
    gate.check(
        scanned.as_ref().is_ok_and(|s| s.enqueued == 1),
        format_args!("the scanner's run: {scanned:?}"),
    )
    .await;

    // The repair Lambda's run: it mirrors the missed one and enqueues it.
    let repair = d.lambda(&gate, "RepairRole").await;
    let repaired = toki_repair_lambda::handle(&repair, scheduled_event()).await;
    gate.check(
        repaired
            .as_ref()
            .is_ok_and(|s| s.repaired == 1 && s.failed_tenants == 0),
        format_args!("the repair run: {repaired:?}"),
    )
    .await;
    // Its retention purge (every 5 minutes in the Lambda; here at once). The
    // registration marked the tenant 5 minutes ahead; here it is due at
    // once. Then the marks due (Query), deletes in the tenant database and
    // its mark settled, nothing more.
    let purger = repair.purger();
    let tenant: TenantId = TENANT.parse().unwrap();
    repair
        .marks
        .mark(toki_ports::WorkKind::Retention, &tenant, repair.clock.now())
        .await
        .unwrap();
    let purged = purger.pass(None).await;
    gate.check(
        purged.tenants == 1 && purged.failed_tenants == 0,
        format_args!("the repair Lambda's purge pass: {purged:?}"),
    )
    .await;

    // The daemon task delivers the six (three schedules, mail and chat).
    let mut cmd = Command::new(common::process::TOKI);
    cmd.args([
        "daemon",
        "--workers",
        "2",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    d.task_env(&mut cmd, &gate, DAEMON_KEY);
    let (mut daemon, line) = common::process::Process::spawn(
        cmd,
        "metrics, healthz and readyz listening",
        Duration::from_secs(60),
    );
    let metrics = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("addr="))
        .expect("the address in the line")
        .to_owned();
    let stores = toki_sql::SqlTenantStores::with_locator(toki_sql::Locator::Template(
        common::services::postgres_url_for(&d.name_template),
    ));
    let tenant: TenantId = TENANT.parse().unwrap();
    let store = toki_ports::TenantStores::open(&stores, &tenant)
        .await
        .unwrap();
    // The deliveries table is the signal (the daemon is another process).
    let mut delivered = Vec::new();
    for _ in 0..600 {
        delivered = store.deliveries().await.unwrap();
        delivered.retain(|r| r.status == toki_model::DeliveryStatus::Delivered);
        if delivered.len() >= 6 || !gate.denials().await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    gate.check(
        delivered.len() == 6,
        format_args!(
            "deliveries: {:?}\ndaemon log:\n{}",
            delivered
                .iter()
                .map(|r| r.key.to_string())
                .collect::<Vec<_>>(),
            daemon.log()
        ),
    )
    .await;
    for row in &delivered {
        assert_eq!(row.due_at.0, due, "{}", row.key);
        assert!(
            row.at >= row.due_at.0,
            "{} delivered at {}, before {}",
            row.key,
            row.at,
            row.due_at.0
        );
    }

    // Its readiness (the directory, the lease rows, the queue's depth) and
    // the queue gauges in /metrics, read with the daemon's role.
    let readyz = reqwest::get(format!("http://{metrics}/readyz"))
        .await
        .unwrap();
    let status = readyz.status().as_u16();
    let body = readyz.text().await.unwrap();
    gate.check(status == 200, format_args!("/readyz: {status} {body}"))
        .await;
    let scrape = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let gauge = |name: &str| {
        scrape
            .lines()
            .find(|l| l.starts_with(name))
            .map(str::to_owned)
    };
    gate.check(
        gauge("toki_dead_letter_messages").is_some_and(|l| l.ends_with(" 0"))
            && gauge("toki_queue_messages").is_some(),
        format_args!("the queue gauges in /metrics:\n{scrape}"),
    )
    .await;
    daemon.signal("TERM");
    let exit = daemon.wait_exit(Duration::from_secs(60)).await;
    assert!(exit.is_some_and(|s| s.success()), "{}", daemon.log());

    // The migrate task looks at the dead letters (toki redrive --dry-run).
    d.migrate_task(&gate, &["redrive", "--dry-run"]).await;

    let denials = gate.denials().await;
    assert!(denials.is_empty(), "denied: {:#}", json!(denials));

    // Clean up: the tenant database, then the runtime role.
    drop((registrar, narrow, broken, scanner, repair, store, stores));
    let _ = toki_sql::drop_tenant_database(&toki_sql::database_for(
        &common::services::postgres_url_for(&d.name_template),
        &tenant,
    ))
    .await;
    if let Ok(mut conn) = <sqlx::PgConnection as sqlx::Connection>::connect(
        &common::services::postgres_url_for("postgres"),
    )
    .await
    {
        let _ = sqlx::query(&format!("DROP ROLE IF EXISTS \"{}\"", d.runtime_role))
            .execute(&mut conn)
            .await;
    }
}
