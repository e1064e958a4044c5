//! The AWS emulator for the AWS tests: `TOKI_TEST_AWS_ENDPOINT` when the
//! harness started one, else a moto server this test binary starts once (on a
//! free 127.0.0.1 port) and that dies with it. Every helper creates resources
//! with unique names, so tests run in parallel against one emulator.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use toki_aws::aws_config::SdkConfig;
use toki_aws::{aws_sdk_dynamodb, aws_sdk_sqs};
use toki_aws::{DynamoReminderIndex, DynamoTenantDirectory, SqsDelayQueue};
use toki_ports::{DelayQueue, ReminderIndex, TenantDirectory};

pub const REGION: &str = "us-east-1";

/// The repository root (the root package's manifest directory).
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// LocalStack's SQS, when the harness gives one (`TOKI_TEST_SQS_ENDPOINT`):
/// then SQS goes there and DynamoDB and Secrets Manager to moto, each chosen by
/// the SDK's per-service endpoint variables, as in `toki bench --backend aws`.
pub fn sqs_endpoint() -> Option<String> {
    std::env::var("TOKI_TEST_SQS_ENDPOINT")
        .ok()
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('/').to_owned())
}

/// The environment a child process needs to reach the emulator(s).
pub fn endpoint_env() -> Vec<(String, String)> {
    let moto = endpoint().to_owned();
    let mut env = vec![
        ("AWS_REGION".into(), REGION.into()),
        ("AWS_ACCESS_KEY_ID".into(), "test".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "test".into()),
    ];
    match sqs_endpoint() {
        Some(sqs) => env.extend([
            ("AWS_ENDPOINT_URL_SQS".into(), sqs),
            ("AWS_ENDPOINT_URL_DYNAMODB".into(), moto.clone()),
            ("AWS_ENDPOINT_URL_SECRETS_MANAGER".into(), moto),
        ]),
        None => env.push(("AWS_ENDPOINT_URL".into(), moto)),
    }
    env
}

/// The emulator's endpoint URL; starts moto on first use if none was given.
pub fn endpoint() -> &'static str {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT.get_or_init(|| {
        test_credentials();
        let moto = match std::env::var("TOKI_TEST_AWS_ENDPOINT") {
            Ok(url) if !url.is_empty() => url.trim_end_matches('/').to_owned(),
            _ => start_moto(),
        };
        if let Some(sqs) = sqs_endpoint() {
            std::env::set_var("AWS_ENDPOINT_URL_SQS", sqs);
            std::env::set_var("AWS_ENDPOINT_URL_DYNAMODB", &moto);
            std::env::set_var("AWS_ENDPOINT_URL_SECRETS_MANAGER", &moto);
            eprintln!("aws_support: SQS on LocalStack, DynamoDB and Secrets Manager on moto");
        }
        moto
    })
}

/// Test credentials and region for the SDK, set before any client exists.
fn test_credentials() {
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    std::env::remove_var("AWS_SESSION_TOKEN");
    std::env::set_var("AWS_REGION", REGION);
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
}

/// A moto server for the SES tests alone (`TOKI_TEST_SES_ENDPOINT` when the
/// harness started one, else one this test binary starts): they read moto's
/// model dump (`/moto-api/data.json`), which a shared server full of other
/// tests' resources may fail to serialise.
pub fn own_moto() -> &'static str {
    static OWN: OnceLock<String> = OnceLock::new();
    OWN.get_or_init(|| {
        test_credentials();
        match std::env::var("TOKI_TEST_SES_ENDPOINT") {
            Ok(url) if !url.is_empty() => url.trim_end_matches('/').to_owned(),
            _ => start_moto(),
        }
    })
}

fn find_tool(name: &str) -> Option<PathBuf> {
    for venv in [".venv-tools", ".venv-aws", ".venv"] {
        let p = repo_root().join(venv).join("bin").join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// The Python that runs moto (a repo venv's, else the one on PATH): it has
/// boto3 and PyYAML, which `infra/iam_gate.py` needs.
pub fn moto_python() -> PathBuf {
    find_tool("moto_server")
        .map(|bin| bin.with_file_name("python"))
        .expect("moto_server (in .venv-tools or on PATH) and its Python")
}

/// The aws CLI: a repo venv's, else the one on PATH.
pub fn aws_cli() -> Option<PathBuf> {
    find_tool("aws")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

/// Whether `GET /moto-api/` answers 200.
fn moto_ready(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET /moto-api/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}

fn start_moto() -> String {
    let bin = find_tool("moto_server").unwrap_or_else(|| {
        panic!(
            "no AWS emulator: set TOKI_TEST_AWS_ENDPOINT, or install moto \
             (python3 -m venv .venv-tools && .venv-tools/bin/pip install 'moto[server]==5.2.5')"
        )
    });
    // moto's own server, with DynamoDB made atomic (scripts/moto_server.py),
    // run by the Python of the venv that has moto.
    let python = bin.with_file_name("python");
    let wrapper = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/moto_server.py");
    let port = free_port();
    let log = std::env::temp_dir().join(format!("toki-moto-{port}.log"));
    // A watchdog shell: moto runs in the background and is killed as soon as
    // this test binary is gone (however it ends).
    let script = format!(
        "'{python}' '{wrapper}' -H 127.0.0.1 -p {port} >'{log}' 2>&1 & p=$!; \
         while kill -0 {me} 2>/dev/null && kill -0 $p 2>/dev/null; do sleep 1; done; \
         kill $p 2>/dev/null; wait $p",
        python = python.display(),
        wrapper = wrapper.display(),
        log = log.display(),
        me = std::process::id(),
    );
    let mut watchdog = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn moto_server");
    // Reaps the watchdog if moto dies early; otherwise waits until the binary exits.
    std::thread::spawn(move || watchdog.wait());
    let deadline = Instant::now() + Duration::from_secs(60);
    while !moto_ready(port) {
        if Instant::now() > deadline {
            panic!(
                "moto_server did not answer on port {port} within 60 s; see {}",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "aws_support: moto_server on 127.0.0.1:{port} (log {})",
        log.display()
    );
    format!("http://127.0.0.1:{port}")
}

/// A name no other test uses: letters, digits and `-` (valid for tables and queues).
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}-{}-{}-{:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        nanos
    )
}

/// An SDK configuration for the emulator(s) (one per test: clients belong to a runtime).
pub async fn sdk() -> SdkConfig {
    let url = endpoint();
    toki_aws::sdk_config(global_endpoint(url), Some(REGION)).await
}

/// The one endpoint for every service, unless SQS has its own.
fn global_endpoint(moto: &str) -> Option<&str> {
    sqs_endpoint().is_none().then_some(moto)
}

pub async fn dynamo() -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(&sdk().await)
}

pub async fn sqs() -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&sdk().await)
}

/// A fresh queue with a dead-letter queue after `max_receives` receives and a
/// 30 s default visibility timeout.
pub async fn sqs_queue(max_receives: u32) -> SqsDelayQueue {
    let client = sqs().await;
    let name = unique("q");
    let url = toki_aws::ensure_queue(&client, &name, &format!("{name}-dlq"), max_receives, 30)
        .await
        .expect("create the queue");
    SqsDelayQueue::new(client, url)
}

pub async fn dynamo_index(shards: u16, retention: Duration) -> DynamoReminderIndex {
    let client = dynamo().await;
    let table = unique("ix");
    toki_aws::ensure_index_table(&client, &table)
        .await
        .expect("create the index table");
    DynamoReminderIndex::new(
        client,
        table,
        shards,
        retention,
        std::sync::Arc::new(toki_ports::SystemClock),
    )
}

pub async fn dynamo_directory() -> DynamoTenantDirectory {
    let client = dynamo().await;
    let table = unique("dir");
    toki_aws::ensure_directory_table(&client, &table)
        .await
        .expect("create the directory table");
    DynamoTenantDirectory::new(client, table)
}

// Factories for the conformance macros.

pub async fn queue(max_receives: u32) -> Arc<dyn DelayQueue> {
    Arc::new(sqs_queue(max_receives).await)
}

pub async fn index(shards: u16) -> Arc<dyn ReminderIndex> {
    Arc::new(dynamo_index(shards, Duration::from_secs(86_400)).await)
}

pub async fn directory() -> Arc<dyn TenantDirectory> {
    Arc::new(dynamo_directory().await)
}

/// Debounce rows in a fresh index table (where they live in production).
pub async fn debounce_store() -> Arc<dyn toki_ports::DebounceStore> {
    let client = dynamo().await;
    let table = unique("ix");
    toki_aws::ensure_index_table(&client, &table)
        .await
        .expect("create the index table");
    Arc::new(toki_aws::DynamoDebounceStore::new(client, table))
}

/// Lease rows in a fresh index table (where they live in production).
pub async fn work_marks() -> Arc<dyn toki_ports::WorkMarks> {
    let client = dynamo().await;
    let table = unique("ix");
    toki_aws::ensure_index_table(&client, &table)
        .await
        .expect("create the index table");
    Arc::new(toki_aws::DynamoWorkMarks::new(client, table))
}

pub async fn lease_store() -> Arc<dyn toki_ports::LeaseStore> {
    let client = dynamo().await;
    let table = unique("ix");
    toki_aws::ensure_index_table(&client, &table)
        .await
        .expect("create the index table");
    Arc::new(toki_aws::DynamoLeaseStore::new(client, table))
}

/// A configuration of the whole aws backend on the emulator: unique table and
/// queue names, tenant databases on the test Postgres (`toki_test_<prefix>_…`),
/// resources created on open. `data_dir` holds the outboxes.
pub fn backend_config(prefix: &str, data_dir: &Path) -> toki_app::Config {
    let base = unique(prefix);
    let mut config = toki_app::Config {
        backend: toki_app::BackendKind::Aws,
        data_dir: data_dir.to_path_buf(),
        tenant_database_template: Some(
            crate::common::services::postgres_url_for(&format!(
                "toki_test_{prefix}_{}_{{tenant}}",
                crate::common::conformance::unique("")
            ))
            .into(),
        ),
        ..toki_app::Config::default()
    };
    config.aws.endpoint_url = global_endpoint(endpoint()).map(str::to_owned);
    config.aws.region = Some(REGION.to_owned());
    config.aws.index_table = format!("{base}-reminders");
    config.aws.directory_table = format!("{base}-tenants");
    config.aws.queue_name = format!("{base}-q");
    config.aws.dlq_name = format!("{base}-dlq");
    config.aws.create_resources = true;
    config
}
