//! Ports: what the pipeline needs from storage, queues, channels and time.
//! Each has one implementation per backend (embedded SQLite, AWS, Postgres, SMTP, Slack).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;

use crate::domain::{
    DeliveryCount, DeliveryKey, DeliveryOutcome, IndexedReminder, Instant, Reminder, ReminderKey,
    Schedule, ScheduleId, TenantId, TenantRecord, User, UserId,
};
use crate::error::StoreResult;
use crate::message::Attributes;
use crate::plan::Partition;

/// The clock: the only source of "now" for the scheduling logic.
pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

/// Wall-clock time.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Utc::now()
    }
}

/// The reminder index: minimal rows for every tenant in one place, partitioned
/// by (due minute, shard).
#[async_trait]
pub trait ReminderIndex: Send + Sync {
    /// Replaces every row of one schedule with `rows` (an empty slice deletes them).
    async fn replace_schedule(
        &self,
        tenant: &TenantId,
        schedule: &ScheduleId,
        rows: &[Reminder],
    ) -> StoreResult<()>;

    /// Rows of one partition due in `[from, to]`, in due order, whatever their status.
    async fn query_partition(
        &self,
        partition: &Partition,
        from: Instant,
        to: Instant,
    ) -> StoreResult<Vec<IndexedReminder>>;

    /// Conditionally claims a row for enqueueing: succeeds only if it is pending,
    /// or claimed with a lease that ended before `now`. Returns whether it was claimed.
    async fn claim(
        &self,
        reminder: &Reminder,
        now: Instant,
        lease_until: Instant,
    ) -> StoreResult<bool>;

    /// Marks a claimed row enqueued.
    async fn mark_enqueued(&self, reminder: &Reminder) -> StoreResult<()>;

    /// Returns a claimed row to pending (its send failed).
    async fn release(&self, reminder: &Reminder) -> StoreResult<()>;
}

/// A message to send to the delay queue.
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingMessage {
    /// Unique within a batch.
    pub id: String,
    pub body: String,
    pub attributes: Attributes,
    pub delay: Duration,
    /// The fair-queue group (the tenant), where the queue supports it.
    pub group: Option<String>,
}

/// The limits every delay queue enforces (SQS's): at most 10 messages a batch,
/// delays up to 900 s, at most 10 attributes. The error names the message at fault.
pub fn check_batch(messages: &[OutgoingMessage]) -> Result<(), crate::error::ValidationError> {
    use crate::error::ValidationError;
    if messages.len() > 10 {
        return Err(ValidationError::new(
            "messages",
            format!("a batch holds at most 10, got {}", messages.len()),
        ));
    }
    for (i, m) in messages.iter().enumerate() {
        if m.delay > crate::plan::MAX_DELAY {
            return Err(ValidationError::new(
                format!("messages[{i}].delay"),
                format!("{} s exceeds the 900 s limit", m.delay.as_secs()),
            ));
        }
        if m.attributes.len() > crate::message::MAX_ATTRIBUTES {
            return Err(ValidationError::new(
                format!("messages[{i}].attributes"),
                format!("{} attributes exceed the limit of 10", m.attributes.len()),
            ));
        }
    }
    Ok(())
}

/// A message received from the delay queue.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedMessage {
    pub receipt: String,
    pub body: String,
    pub attributes: Attributes,
    /// How many times it has been received, this time included.
    pub receive_count: u32,
}

/// A queue whose messages become visible after a per-message delay, with
/// visibility timeouts, receive counts and a dead-letter queue.
#[async_trait]
pub trait DelayQueue: Send + Sync {
    /// Sends up to 10 messages. All-or-error: on error none may be assumed sent.
    async fn send_batch(&self, messages: &[OutgoingMessage]) -> StoreResult<()>;

    /// Receives up to `max` (≤ 10) visible messages, waiting up to `wait` for one
    /// to become visible. Received messages are hidden for `visibility`.
    async fn receive(
        &self,
        max: usize,
        wait: Duration,
        visibility: Duration,
    ) -> StoreResult<Vec<ReceivedMessage>>;

    /// Deletes acknowledged messages by receipt.
    async fn delete_batch(&self, receipts: &[String]) -> StoreResult<()>;

    /// Hides a received message for `timeout` from now (0 makes it visible again).
    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> StoreResult<()>;

    /// Messages in the queue (visible or not) and in its dead-letter queue.
    async fn depth(&self) -> StoreResult<QueueDepth>;
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    pub messages: u64,
    pub dead_letters: u64,
}

/// Tenants: contract and database location.
#[async_trait]
pub trait TenantDirectory: Send + Sync {
    async fn get(&self, tenant: &TenantId) -> StoreResult<Option<TenantRecord>>;
    async fn put(&self, record: &TenantRecord) -> StoreResult<()>;
    async fn list(&self) -> StoreResult<Vec<TenantRecord>>;
}

/// What a schedule write left to mirror into the index.
#[derive(Debug, Clone, PartialEq)]
pub enum MirrorWork {
    Upsert(Schedule),
    Delete { schedule: ScheduleId, version: i64 },
}

/// The current state of a schedule as the daemon needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleSnapshot {
    pub id: ScheduleId,
    pub title: String,
    pub body: String,
    pub starts_at: Instant,
    pub version: i64,
}

/// What one round trip to a tenant database gives the daemon for a batch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeliveryContext {
    pub schedules: HashMap<ScheduleId, ScheduleSnapshot>,
    pub users: HashMap<UserId, User>,
}

/// A chat message: a row in the tenant's database.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatMessage {
    pub key: DeliveryKey,
    pub user: UserId,
    pub text: String,
    pub created_at: Instant,
}

/// One tenant's database (the source of truth).
#[async_trait]
pub trait TenantStore: Send + Sync {
    async fn put_user(&self, user: &User) -> StoreResult<()>;
    async fn get_user(&self, id: &UserId) -> StoreResult<Option<User>>;

    /// Writes a schedule, its participants and rules in one transaction with
    /// the next version, and records that it must be mirrored. Returns it with its version.
    async fn put_schedule(&self, schedule: &Schedule, now: Instant) -> StoreResult<Schedule>;
    async fn get_schedule(&self, id: &ScheduleId) -> StoreResult<Option<Schedule>>;
    /// Deletes a schedule and records that its mirror must be removed. Returns
    /// the version the deletion has, or None if there was no such schedule.
    async fn delete_schedule(&self, id: &ScheduleId, now: Instant) -> StoreResult<Option<i64>>;

    /// Writes not yet mirrored into the index.
    async fn unmirrored(&self) -> StoreResult<Vec<MirrorWork>>;
    /// Records that the mirror of `schedule` at `version` is done.
    async fn mark_mirrored(&self, schedule: &ScheduleId, version: i64) -> StoreResult<()>;

    /// One round trip: the schedules and users a batch of deliveries needs.
    async fn delivery_context(
        &self,
        schedules: &[ScheduleId],
        users: &[UserId],
    ) -> StoreResult<DeliveryContext>;

    /// Claims deliveries for sending, in one transaction: inserts `sending`
    /// rows, or takes over rows that `failed`, are `stale` (an older version's
    /// verdict), or whose claim is older than `stale_claim_before`.
    async fn claim_deliveries(
        &self,
        claims: &[(DeliveryKey, crate::domain::DueAt)],
        now: Instant,
        stale_claim_before: Instant,
    ) -> StoreResult<Claims>;

    /// Records outcomes (delivered, stale, failed, undeliverable), one row each.
    async fn record_outcomes(&self, outcomes: &[DeliveryOutcome]) -> StoreResult<()>;

    /// Inserts chat messages (idempotent on the delivery key).
    async fn insert_chat_messages(&self, messages: &[ChatMessage]) -> StoreResult<()>;

    /// Delivery rows aggregated by channel and status.
    async fn delivery_counts(&self) -> StoreResult<Vec<DeliveryCount>>;

    /// Every delivery row (for reports and verification).
    async fn deliveries(&self) -> StoreResult<Vec<DeliveryOutcome>>;

    /// Chat messages of one user.
    async fn chat_messages(&self, user: &UserId) -> StoreResult<Vec<ChatMessage>>;
}

/// What a claim got: the deliveries this caller now sends, and those another
/// holder is still sending (their message must come back, not be acknowledged).
/// Requested deliveries in neither list are final (delivered, undeliverable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claims {
    pub owned: Vec<DeliveryKey>,
    pub busy: Vec<DeliveryKey>,
}

/// Opens tenant stores by tenant, lazily, one pool per tenant.
#[async_trait]
pub trait TenantStores: Send + Sync {
    async fn open(&self, tenant: &TenantId) -> StoreResult<Arc<dyn TenantStore>>;
}

/// The keys of a reminder message's deliveries.
pub fn delivery_keys(reminder: &Reminder) -> Vec<DeliveryKey> {
    let k: &ReminderKey = &reminder.key;
    let mut out = Vec::with_capacity(reminder.delivery_count());
    for recipient in &reminder.recipients {
        for channel in reminder.channels.iter() {
            out.push(DeliveryKey {
                schedule: k.schedule.clone(),
                occurrence: k.occurrence,
                minutes_before: k.minutes_before,
                version: reminder.version,
                recipient: recipient.clone(),
                channel,
            });
        }
    }
    out
}
