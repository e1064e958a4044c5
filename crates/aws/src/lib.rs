//! Toki on AWS: the reminder index and the tenant directory on DynamoDB, the
//! delay queue on SQS, and the code that creates those resources.
//!
//! - [`DynamoReminderIndex`]: one table, `pk` = due minute + shard
//!   (`R#2026-11-23T08:55#07`), `sk` = due millis + reminder identity, and a
//!   GSI `by_schedule` (`sched` = `<tenant>#<schedule>`, `sk`) to find a
//!   schedule's rows when it is replaced. Rows expire through DynamoDB's TTL
//!   on `expires_at`; expired rows still present are ignored when read.
//! - [`SqsDelayQueue`]: a standard queue with per-message `DelaySeconds`,
//!   string message attributes and a dead-letter queue found through the
//!   queue's `RedrivePolicy`.
//! - [`DynamoTenantDirectory`]: one item per tenant.
//! - [`DynamoDebounceStore`]: debounce rows, in the index table (`pk` = `D#<key>`).
//! - [`DynamoLeaseStore`]: partition leases, in the index table (`pk` = `L#<key>`).
//! - [`ensure_resources`] / [`sdk_config`]: create what is missing, honouring
//!   the standard AWS environment (`AWS_ENDPOINT_URL`, `AWS_REGION`, credentials).
//!
//! The SDK crates are re-exported so users build clients with the same versions.

pub mod debounce;
pub mod directory;
pub mod error;
pub mod index;
pub mod lease;
pub mod marks;
pub mod offboard;
pub mod queue;
pub mod resources;
#[cfg(feature = "secrets")]
pub mod secrets;
#[cfg(feature = "secrets")]
pub mod tenant_secrets;

pub use debounce::DynamoDebounceStore;
pub use directory::DynamoTenantDirectory;
pub use error::AwsError;
pub use index::DynamoReminderIndex;
pub use lease::DynamoLeaseStore;
pub use marks::DynamoWorkMarks;
pub use offboard::DynamoIndexFootprint;
pub use queue::SqsDelayQueue;
pub use resources::{
    ensure_directory_table, ensure_index_table, ensure_queue, ensure_resources, sdk_config,
    AwsNames,
};

pub use aws_config;
pub use aws_sdk_dynamodb;
#[cfg(feature = "secrets")]
pub use aws_sdk_secretsmanager;
pub use aws_sdk_sqs;
