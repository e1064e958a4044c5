//! The conformance suite on AWS (DynamoDB, SQS) against an emulator, plus the
//! AWS-specific behaviour: resource creation, `localstack/init-aws.sh`, error
//! mapping, expiry and batch limits.
//!
//! Emulator: `TOKI_TEST_AWS_ENDPOINT` if set, else a moto server started for
//! this test binary (see `aws_support`).

use crate::aws_support;
use crate::common;

use std::collections::BTreeMap;
use std::error::Error as _;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use chrono::{Duration as ChronoDuration, Utc};
use toki_aws::aws_sdk_dynamodb::types::{IndexStatus as GsiStatus, TableStatus};
use toki_aws::aws_sdk_sqs::types::QueueAttributeName;
use toki_aws::{AwsNames, DynamoReminderIndex, SqsDelayQueue};
use toki_model::index::Partition;
use toki_model::IndexStatus;
use toki_ports::message;
use toki_ports::StoreError;
use toki_ports::{DelayQueue, OutgoingMessage, ReminderIndex, TenantDirectory};

use common::conformance::reminder;

async fn queue(max_receives: u32) -> Arc<dyn DelayQueue> {
    aws_support::queue(max_receives).await
}

async fn index(shards: u16) -> Arc<dyn ReminderIndex> {
    aws_support::index(shards).await
}

async fn directory() -> Arc<dyn TenantDirectory> {
    aws_support::directory().await
}

queue_conformance!(
    #[ignore = "needs the AWS emulator (moto): scripts/test.sh runs it"]
    queue
);
index_conformance!(
    #[ignore = "needs the AWS emulator (moto): scripts/test.sh runs it"]
    index
);
directory_conformance!(
    #[ignore = "needs the AWS emulator (moto): scripts/test.sh runs it"]
    directory
);
debounce_conformance!(
    #[ignore = "needs the AWS emulator (moto): scripts/test.sh runs it"]
    aws_support::debounce_store
);
lease_conformance!(
    #[ignore = "needs the AWS emulator (moto): scripts/test.sh runs it"]
    aws_support::lease_store
);
marks_conformance!(
    #[ignore = "needs the AWS emulator (moto): scripts/test.sh runs it"]
    aws_support::work_marks
);

// ---------------------------------------------------------------- resources

fn names() -> AwsNames {
    let base = aws_support::unique("toki");
    AwsNames {
        index_table: format!("{base}-reminders"),
        directory_table: format!("{base}-tenants"),
        queue_name: format!("{base}-q"),
        dlq_name: format!("{base}-dlq"),
        max_receives: 3,
        visibility_timeout_s: 45,
    }
}

/// Checks the resources `names` describes exist with the settings Toki relies on.
async fn assert_resources(names: &AwsNames, queue_url: &str, max_receives: u32) {
    let dynamo = aws_support::dynamo().await;
    let index = dynamo
        .describe_table()
        .table_name(&names.index_table)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    assert_eq!(index.table_status(), Some(&TableStatus::Active));
    let keys: Vec<_> = index
        .key_schema()
        .iter()
        .map(|k| {
            (
                k.attribute_name().to_owned(),
                k.key_type().as_str().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [("pk".into(), "HASH".into()), ("sk".into(), "RANGE".into())]
    );
    let gsi = index
        .global_secondary_indexes()
        .iter()
        .find(|g| g.index_name() == Some("by_schedule"))
        .expect("GSI by_schedule");
    let gsi_keys: Vec<_> = gsi
        .key_schema()
        .iter()
        .map(|k| k.attribute_name().to_owned())
        .collect();
    assert_eq!(gsi_keys, ["sched", "sk"]);
    assert!(matches!(gsi.index_status(), None | Some(GsiStatus::Active)));
    let dir = dynamo
        .describe_table()
        .table_name(&names.directory_table)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    assert_eq!(dir.key_schema()[0].attribute_name(), "tenant");

    let sqs = aws_support::sqs().await;
    let url = sqs
        .get_queue_url()
        .queue_name(&names.queue_name)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    assert_eq!(url, queue_url);
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    let policy: serde_json::Value =
        serde_json::from_str(&attrs[&QueueAttributeName::RedrivePolicy]).unwrap();
    assert!(
        policy["deadLetterTargetArn"]
            .as_str()
            .unwrap()
            .ends_with(&format!(":{}", names.dlq_name)),
        "{policy}"
    );
    let max: u32 = match &policy["maxReceiveCount"] {
        serde_json::Value::String(s) => s.parse().unwrap(),
        v => v.as_u64().unwrap() as u32,
    };
    assert_eq!(max, max_receives);

    // And the queue works through the port, dead-letter queue included.
    let q = SqsDelayQueue::new(sqs, url);
    let depth = q.depth().await.unwrap();
    assert_eq!((depth.messages, depth.dead_letters), (0, 0));
    assert!(q.dead_letter_queue_url().await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto): scripts/test.sh runs it"]
async fn ensure_resources_is_idempotent() {
    let names = names();
    let sdk = aws_support::sdk().await;
    let first = toki_aws::ensure_resources(&sdk, &names).await.unwrap();
    let second = toki_aws::ensure_resources(&sdk, &names).await.unwrap();
    assert_eq!(first, second);
    assert_resources(&names, &first, names.max_receives).await;
    // A changed setting is applied to the existing queue.
    let changed = AwsNames {
        max_receives: 7,
        ..names.clone()
    };
    let third = toki_aws::ensure_resources(&sdk, &changed).await.unwrap();
    assert_eq!(first, third);
    assert_resources(&names, &first, 7).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto): scripts/test.sh runs it"]
async fn init_aws_script_creates_the_resources() {
    let script = aws_support::repo_root().join("localstack/init-aws.sh");
    if !script.is_file() {
        eprintln!("SKIPPED: {} does not exist", script.display());
        return;
    }
    let Some(aws) = aws_support::aws_cli() else {
        eprintln!(
            "SKIPPED: no aws CLI (.venv-tools/bin/aws or PATH); \
             install it with .venv-tools/bin/pip install awscli"
        );
        return;
    };
    let names = names();
    let path = format!(
        "{}:{}",
        aws.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let endpoints = aws_support::endpoint_env();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("bash")
            .arg(&script)
            .env("PATH", path)
            .envs(endpoints)
            .env("AWS_DEFAULT_REGION", aws_support::REGION)
            .env("TOKI_INDEX_TABLE", &names.index_table)
            .env("TOKI_DIRECTORY_TABLE", &names.directory_table)
            .env("TOKI_QUEUE_NAME", &names.queue_name)
            .env("TOKI_DLQ_NAME", &names.dlq_name)
            .output()
            .map(|o| (o, names))
    })
    .await
    .unwrap()
    .expect("run localstack/init-aws.sh");
    let (out, names) = out;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "init-aws.sh failed:\n{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let url = stdout.lines().last().unwrap_or_default().trim().to_owned();
    assert!(!url.is_empty(), "no queue URL printed; stderr:\n{stderr}");
    assert_resources(&names, &url, 100).await;
    // The code's own set-up accepts what the script made (same schema).
    let sdk = aws_support::sdk().await;
    let again = toki_aws::ensure_resources(
        &sdk,
        &AwsNames {
            max_receives: 5,
            ..names.clone()
        },
    )
    .await
    .unwrap();
    assert_eq!(again, url);
    // And the index on the script's table works.
    let ix = DynamoReminderIndex::new(
        aws_support::dynamo().await,
        names.index_table.clone(),
        4,
        Duration::from_secs(3600),
        Arc::new(toki_ports::SystemClock),
    );
    let r = reminder("acme", "from-script", ChronoDuration::minutes(3), 1);
    ix.replace_schedule(
        &r.key.tenant,
        &r.key.schedule,
        r.version,
        std::slice::from_ref(&r),
    )
    .await
    .unwrap();
    let p = Partition::of(&r, 4);
    let got = ix
        .query_partition(&p, r.due_at.0, r.due_at.0)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
}

// ---------------------------------------------------------------- index

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto): scripts/test.sh runs it"]
async fn index_skips_expired_rows_and_never_creates_rows_by_update() {
    // Retention 0: a row due a minute ago has expired (moto never deletes it).
    let ix = aws_support::dynamo_index(4, Duration::ZERO).await;
    let tenant = aws_support::unique("t");
    let past = reminder(&tenant, "old", ChronoDuration::minutes(-1), 1);
    let future = reminder(&tenant, "new", ChronoDuration::minutes(2), 1);
    for r in [&past, &future] {
        ix.replace_schedule(
            &r.key.tenant,
            &r.key.schedule,
            r.version,
            std::slice::from_ref(r),
        )
        .await
        .unwrap();
    }
    let p = Partition::of(&past, 4);
    let from = past.due_at.0 - ChronoDuration::seconds(1);
    assert!(ix
        .query_partition(&p, from, past.due_at.0)
        .await
        .unwrap()
        .is_empty());
    let p = Partition::of(&future, 4);
    assert_eq!(
        ix.query_partition(&p, future.due_at.0, future.due_at.0)
            .await
            .unwrap()
            .len(),
        1
    );
    // Reversed bounds: nothing, no error.
    assert!(ix
        .query_partition(
            &p,
            future.due_at.0,
            future.due_at.0 - ChronoDuration::seconds(1)
        )
        .await
        .unwrap()
        .is_empty());

    // A reminder never written: claim fails, mark/release create nothing.
    let ghost = reminder(&tenant, "ghost", ChronoDuration::minutes(4), 1);
    let now = Utc::now();
    assert!(!ix.claim(&ghost, now, now).await.unwrap());
    ix.mark_enqueued(&ghost).await.unwrap();
    ix.release(&ghost).await.unwrap();
    let p = Partition::of(&ghost, 4);
    assert!(ix
        .query_partition(&p, ghost.due_at.0, ghost.due_at.0)
        .await
        .unwrap()
        .is_empty());

    // Claim, expired lease, mark enqueued; a second claim then fails.
    let lease = now + ChronoDuration::seconds(30);
    assert!(ix.claim(&future, now, lease).await.unwrap());
    let p = Partition::of(&future, 4);
    let rows = ix
        .query_partition(&p, future.due_at.0, future.due_at.0)
        .await
        .unwrap();
    assert_eq!(
        rows[0].status,
        IndexStatus::Enqueuing {
            lease_until: toki_model::from_millis("l", lease.timestamp_millis()).unwrap()
        }
    );
    assert!(
        !ix.claim(&future, now, lease).await.unwrap(),
        "lease not respected"
    );
    let after = lease + ChronoDuration::seconds(1);
    assert!(ix
        .claim(&future, after, after + ChronoDuration::seconds(30))
        .await
        .unwrap());
    ix.mark_enqueued(&future).await.unwrap();
    let rows = ix
        .query_partition(&p, future.due_at.0, future.due_at.0)
        .await
        .unwrap();
    assert_eq!(rows[0].status, IndexStatus::Enqueued);
    let late = after + ChronoDuration::hours(1);
    assert!(!ix.claim(&future, late, late).await.unwrap());
}

/// Rows of `rows`' partitions in their due range.
async fn count(ix: &DynamoReminderIndex, rows: &[toki_model::Reminder]) -> usize {
    let parts: std::collections::BTreeSet<_> = rows.iter().map(|r| Partition::of(r, 2)).collect();
    let from = rows.iter().map(|r| r.due_at.0).min().unwrap();
    let to = rows.iter().map(|r| r.due_at.0).max().unwrap();
    let mut n = 0;
    for p in parts {
        n += ix.query_partition(&p, from, to).await.unwrap().len();
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto): scripts/test.sh runs it"]
async fn index_replaces_more_rows_than_one_batch() {
    let ix = aws_support::dynamo_index(2, Duration::from_secs(3600)).await;
    let tenant = aws_support::unique("t");
    let rows: Vec<_> = (0..30u32)
        .map(|i| {
            let mut r = reminder(&tenant, "big", ChronoDuration::minutes(3), 1);
            r.key.minutes_before = i;
            r.due_at = toki_model::Reminder::due_for(r.key.occurrence, i);
            r
        })
        .collect();
    let (t, s) = (rows[0].key.tenant.clone(), rows[0].key.schedule.clone());
    ix.replace_schedule(&t, &s, 1, &rows).await.unwrap();
    assert_eq!(count(&ix, &rows).await, 30);
    // Replace 30 rows by 3 of them (new version): 27 deleted, 3 overwritten.
    let kept: Vec<_> = rows[..3]
        .iter()
        .cloned()
        .map(|mut r| {
            r.version = 2;
            r
        })
        .collect();
    ix.replace_schedule(&t, &s, 2, &kept).await.unwrap();
    assert_eq!(count(&ix, &rows).await, 3);
    let p = Partition::of(&kept[0], 2);
    let got = ix
        .query_partition(&p, kept[0].due_at.0, kept[0].due_at.0)
        .await
        .unwrap();
    assert_eq!(got[0].reminder.version, 2);
    assert_eq!(got[0].status, IndexStatus::Pending);
}

// ---------------------------------------------------------------- queue

fn outgoing(id: &str, attributes: BTreeMap<String, String>, delay: Duration) -> OutgoingMessage {
    OutgoingMessage {
        id: id.into(),
        body: format!("body of {id}"),
        attributes,
        delay,
        group: Some("acme".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto): scripts/test.sh runs it"]
async fn queue_limits_match_the_embedded_queue() {
    let q = aws_support::sqs_queue(5).await;
    let r = reminder("acme", "s1", ChronoDuration::minutes(1), 1);
    let mut attrs = message::encode(&r);
    let mut i = 0;
    while attrs.len() <= message::MAX_ATTRIBUTES {
        attrs.insert(format!("extra{i}"), "x".into());
        i += 1;
    }
    match q.send_batch(&[outgoing("a", attrs, Duration::ZERO)]).await {
        Err(StoreError::Invalid(v)) => assert_eq!(v.field, "messages[0].attributes"),
        other => panic!("11 attributes: {other:?}"),
    }
    let eleven: Vec<_> = (0..11)
        .map(|i| outgoing(&format!("m{i}"), message::encode(&r), Duration::ZERO))
        .collect();
    match q.send_batch(&eleven).await {
        Err(StoreError::Invalid(v)) => assert_eq!(v.field, "messages"),
        other => panic!("11 messages: {other:?}"),
    }
    match q.receive(11, Duration::ZERO, Duration::from_secs(1)).await {
        Err(StoreError::Invalid(v)) => assert_eq!(v.field, "max"),
        other => panic!("max 11: {other:?}"),
    }
    q.send_batch(&[]).await.unwrap();

    // Ids SQS would refuse are fine (entry ids are positions); a sub-second
    // delay rounds up to 1 s, so the message is not visible at once; depth
    // counts delayed messages.
    q.send_batch(&[outgoing(
        "acme#s1#1800000000000#5",
        message::encode(&r),
        Duration::from_millis(300),
    )])
    .await
    .unwrap();
    assert_eq!(q.depth().await.unwrap().messages, 1);
    let got = q
        .receive(10, Duration::from_secs(5), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body, "body of acme#s1#1800000000000#5");
    assert_eq!(message::decode(&got[0].attributes).unwrap(), r);
    q.delete_batch(&[got[0].receipt.clone()]).await.unwrap();
    // A receipt SQS does not know is bad input, as for the embedded queue.
    match q
        .change_visibility("not-a-receipt", Duration::from_secs(1))
        .await
    {
        Err(StoreError::Invalid(v)) => assert_eq!(v.field, "receipt"),
        other => panic!("unknown receipt: {other:?}"),
    }
    assert_eq!(q.depth().await.unwrap().messages, 0);
}

// ---------------------------------------------------------------- errors

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto): scripts/test.sh runs it"]
async fn errors_map_to_store_errors() {
    // A missing table is the backend refusing: not worth retrying.
    let ix = DynamoReminderIndex::new(
        aws_support::dynamo().await,
        aws_support::unique("missing"),
        4,
        Duration::from_secs(60),
        Arc::new(toki_ports::SystemClock),
    );
    let r = reminder("acme", "s1", ChronoDuration::minutes(1), 1);
    match ix
        .query_partition(&Partition::of(&r, 4), r.due_at.0, r.due_at.0)
        .await
    {
        Err(e @ StoreError::Backend { .. }) => {
            let m = toki_model::error::chain(&e);
            assert!(m.contains("ResourceNotFound"), "{m}")
        }
        other => panic!("missing table: {other:?}"),
    }
    // Nothing listening: unavailable (retryable).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _ = aws_support::endpoint(); // test credentials in the environment
    let sdk =
        toki_aws::sdk_config(Some(&format!("http://127.0.0.1:{port}")), Some("us-east-1")).await;
    let dead = SqsDelayQueue::new(
        toki_aws::aws_sdk_sqs::Client::new(&sdk),
        format!("http://127.0.0.1:{port}/123456789012/nothing"),
    );
    match dead.depth().await {
        Err(e @ StoreError::Unavailable { .. }) => {
            assert!(e.source().is_some(), "the SDK error is kept")
        }
        other => panic!("no server: {other:?}"),
    }
}
