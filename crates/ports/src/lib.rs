//! Ports: what the pipeline needs from storage, queues, channels and time.
//! Each has one implementation per backend (embedded SQLite, AWS, Postgres, SMTP, Slack),
//! and one in memory for tests (`testing`).

pub mod audit;
pub mod channel;
mod conditional;
mod debounce;
pub mod erasure;
pub mod error;
pub mod events;
mod idempotency;
mod lease;
pub mod marks;
pub mod message;
pub mod offboard;
pub mod report;
pub mod retention;
pub mod suppression;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use audit::AuditLog;
pub use channel::{ChannelSender, Notification, SendError, SendResult};
pub use conditional::Conditional;
pub use debounce::DebounceStore;
pub use erasure::Erasure;
pub use error::{StoreError, StoreResult};
pub use events::{EventLog, EventPoster, PostError, ProgressWrite, SignedPost};
pub use idempotency::{IdempotentStart, KeyedRequest};
pub use lease::{LeaseStore, PartitionLease};
pub use marks::{WorkKind, WorkMark, WorkMarks};
pub use offboard::{Fenced, Holding, TenantFootprint, TenantOffboard};
pub use report::DeliveryReport;
pub use retention::{ControlPurge, RetentionStore};
pub use suppression::{RefusedRecipient, SuppressionList};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;

use crate::message::Attributes;
use toki_model::domain::{
    Channel, DeliveryClaim, DeliveryCount, DeliveryKey, DeliveryOutcome, IndexedReminder, Instant,
    Reminder, ReminderKey, Schedule, ScheduleId, TenantId, User, UserId,
};
use toki_model::error::ValidationError;
use toki_model::idempotency::{IdempotencyKey, KeptAnswer};
use toki_model::index::Partition;
use toki_model::quota::Counted;
use toki_model::template::ReminderTemplate;
use toki_model::ScheduleSnapshot;
use toki_model::TenantRecord;

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
    /// Replaces every row of one schedule with `rows` (an empty slice deletes
    /// them), written by the schedule's `version`, unless a newer version's
    /// rows are there already: then nothing changes and it returns false. Two
    /// writes of one schedule racing each other leave the newer one's rows.
    async fn replace_schedule(
        &self,
        tenant: &TenantId,
        schedule: &ScheduleId,
        version: i64,
        rows: &[Reminder],
    ) -> StoreResult<bool>;

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

    /// [`ReminderIndex::replace_schedule`] for several schedules of one
    /// tenant, a result each, in order. Backends that can write them in one
    /// transaction do; the default writes 16 schedules at a time.
    async fn replace_schedules(
        &self,
        tenant: &TenantId,
        writes: &[IndexWrite<'_>],
    ) -> StoreResult<Vec<bool>> {
        let mut out = Vec::with_capacity(writes.len());
        for chunk in writes.chunks(16) {
            let replaces: Vec<_> = chunk
                .iter()
                .map(|w| self.replace_schedule(tenant, w.schedule, w.version, w.rows))
                .collect();
            for r in futures::future::join_all(replaces).await {
                out.push(r?);
            }
        }
        Ok(out)
    }

    /// [`ReminderIndex::claim`] for many rows, a result each, in order. The
    /// default claims 32 at a time.
    async fn claim_all(
        &self,
        reminders: &[Reminder],
        now: Instant,
        lease_until: Instant,
    ) -> Vec<StoreResult<bool>> {
        let mut out = Vec::with_capacity(reminders.len());
        for chunk in reminders.chunks(32) {
            let claims: Vec<_> = chunk
                .iter()
                .map(|r| self.claim(r, now, lease_until))
                .collect();
            out.extend(futures::future::join_all(claims).await);
        }
        out
    }

    /// [`ReminderIndex::mark_enqueued`] for many rows; the first failure, if
    /// any, after trying every row.
    async fn mark_all_enqueued(&self, reminders: &[&Reminder]) -> StoreResult<()> {
        let results =
            futures::future::join_all(reminders.iter().map(|r| self.mark_enqueued(r))).await;
        results
            .into_iter()
            .collect::<StoreResult<Vec<()>>>()
            .map(drop)
    }

    /// Returns a claimed row to pending (its send failed).
    async fn release(&self, reminder: &Reminder) -> StoreResult<()>;

    /// The tenant the next repair pass starts at, as the last pass left it
    /// (None: none recorded, start at the first). The index keeps it because
    /// repair is what fills the index, and it must outlive the process (a
    /// Lambda invocation) that ran the pass.
    async fn repair_cursor(&self) -> StoreResult<Option<TenantId>>;

    /// Records where the next repair pass starts.
    async fn set_repair_cursor(&self, next: &TenantId) -> StoreResult<()>;

    /// The version each of `schedules` was last mirrored at (a deletion
    /// too): the version whose rows the index holds. A schedule the index
    /// knows no version of (never mirrored, or its marker expired) is not
    /// in the answer. A strongly consistent read: a mirror that finished
    /// before it began is in it. Held deliveries look here before firing,
    /// so that a tenant whose schedules did not change is not opened.
    async fn mirrored_versions(
        &self,
        schedules: &[TenantSchedule],
    ) -> StoreResult<HashMap<TenantSchedule, i64>>;
}

/// A schedule of a tenant: what the index keeps a version of.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantSchedule {
    pub tenant: TenantId,
    pub schedule: ScheduleId,
}

/// What a store may write of a batch of schedules: each one whose id is new
/// to the batch and whose participants are all users (`is_user`), or the
/// error that names the field.
pub fn writable_schedules(
    schedules: &[Schedule],
    is_user: impl Fn(&UserId) -> bool,
) -> Vec<Result<&Schedule, ValidationError>> {
    let mut seen = std::collections::HashSet::new();
    schedules
        .iter()
        .map(|s| {
            if !seen.insert(&s.id) {
                return Err(ValidationError::new(
                    "id",
                    format!("schedule {} appears more than once in the batch", s.id),
                ));
            }
            match s.participants.iter().enumerate().find(|(_, p)| !is_user(p)) {
                Some((i, p)) => Err(ValidationError::new(
                    format!("participants[{i}]"),
                    format!("no user {:?} in this tenant", p.as_str()),
                )),
                None => Ok(s),
            }
        })
        .collect()
}

/// One schedule's rows for [`ReminderIndex::replace_schedules`].
#[derive(Debug, Clone, Copy)]
pub struct IndexWrite<'a> {
    pub schedule: &'a ScheduleId,
    pub version: i64,
    pub rows: &'a [Reminder],
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

/// SQS's limits on what one message and one batch may weigh (the sum of the
/// body and every attribute's name, type and value).
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;
/// SQS's limit on messages per batch.
pub const MAX_BATCH_MESSAGES: usize = 10;

/// What a message weighs as SQS counts it.
pub fn message_bytes(m: &OutgoingMessage) -> usize {
    m.body.len()
        + m.attributes
            .iter()
            .map(|(name, value)| name.len() + "String".len() + value.len())
            .sum::<usize>()
}

/// Splits messages into batches that respect SQS: at most 10 messages and
/// 1 MiB each, in order. (A message over 256 KiB goes alone and is refused by
/// [`check_batch`].)
pub fn batches(messages: Vec<OutgoingMessage>) -> Vec<Vec<OutgoingMessage>> {
    let mut out: Vec<Vec<OutgoingMessage>> = Vec::new();
    let mut bytes = 0;
    for m in messages {
        let size = message_bytes(&m);
        match out.last_mut() {
            Some(b) if b.len() < MAX_BATCH_MESSAGES && bytes + size <= MAX_BATCH_BYTES => {
                bytes += size;
                b.push(m);
            }
            _ => {
                bytes = size;
                out.push(vec![m]);
            }
        }
    }
    out
}

/// A receipt of the queues that keep messages themselves (embedded, in-memory):
/// `id:receive_count`, so that only the latest receiver may delete or extend.
pub fn receipt(id: impl std::fmt::Display, receive_count: impl std::fmt::Display) -> String {
    format!("{id}:{receive_count}")
}

/// The id and receive count of a [`receipt`].
pub fn parse_receipt<I: std::str::FromStr, C: std::str::FromStr>(
    receipt: &str,
) -> Result<(I, C), toki_model::error::ValidationError> {
    receipt
        .split_once(':')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .ok_or_else(|| {
            toki_model::error::ValidationError::new(
                "receipt",
                format!("{receipt:?} is not a receipt"),
            )
        })
}

/// The limits every delay queue enforces (SQS's): at most 10 messages and
/// 1 MiB a batch, 256 KiB a message, delays up to 900 s, at most 10
/// attributes. The error names the message at fault.
pub fn check_batch(messages: &[OutgoingMessage]) -> Result<(), toki_model::error::ValidationError> {
    use toki_model::error::ValidationError;
    if messages.len() > MAX_BATCH_MESSAGES {
        return Err(ValidationError::new(
            "messages",
            format!("a batch holds at most 10, got {}", messages.len()),
        ));
    }
    let mut total = 0;
    for (i, m) in messages.iter().enumerate() {
        let size = message_bytes(m);
        if size > MAX_MESSAGE_BYTES {
            return Err(ValidationError::new(
                format!("messages[{i}]"),
                format!("{size} bytes exceed the {MAX_MESSAGE_BYTES}-byte message limit"),
            ));
        }
        total += size;
        if m.delay > toki_model::time::MAX_DELAY {
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
    if total > MAX_BATCH_BYTES {
        return Err(ValidationError::new(
            "messages",
            format!("{total} bytes exceed the {MAX_BATCH_BYTES}-byte batch limit"),
        ));
    }
    Ok(())
}

/// What a batch send left unsent: the queue took every other message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchSent {
    pub refused: Vec<RefusedMessage>,
}

/// A message of a batch the queue refused, by position, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedMessage {
    pub index: usize,
    pub reason: String,
}

/// The attribute a dead letter carries its reason in (removed on redrive).
pub const DEAD_LETTER_REASON: &str = "dead_letter_reason";

/// The attribute a renewed message carries why it was renewed in: what it
/// was waiting for when its receives neared the queue's own limit.
pub const RENEWED_BECAUSE: &str = "renewed_because";

/// A renewed message's attributes: the message's own, and why it was renewed
/// if there is room for one more attribute (cut to 256 bytes).
pub fn with_renewal_reason(
    attributes: &crate::message::Attributes,
    why: &str,
) -> crate::message::Attributes {
    with_reason(attributes, RENEWED_BECAUSE, why, 256)
}

fn with_reason(
    attributes: &crate::message::Attributes,
    name: &str,
    reason: &str,
    max_len: usize,
) -> crate::message::Attributes {
    let mut a = attributes.clone();
    a.remove(name);
    if a.len() < crate::message::MAX_ATTRIBUTES {
        let mut cut = reason.len().min(max_len);
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        a.insert(name.to_owned(), reason[..cut].to_owned());
    }
    a
}

/// A dead letter's attributes: the message's own, and why it was dead-lettered
/// if there is room for one more attribute. The reason is cut to 1 KiB, and
/// any mail address or Slack id in it is kept as a pseudonym only
/// ([`toki_model::redact::scrub`]): a dead letter outlives an erasure.
pub fn with_dead_letter_reason(
    attributes: &crate::message::Attributes,
    reason: &str,
) -> crate::message::Attributes {
    let reason = toki_model::redact::scrub(reason);
    with_reason(attributes, DEAD_LETTER_REASON, &reason, 1024)
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
    /// Sends a batch (see [`check_batch`]). `Ok` lists the messages the queue
    /// refused (the others are sent); on `Err` none may be assumed sent.
    async fn send_batch(&self, messages: &[OutgoingMessage]) -> StoreResult<BatchSent>;

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

    /// Keeps held messages hidden for `timeout` from now (the heartbeat).
    /// Queues that can do it in one request override this; a receipt no
    /// longer in flight (or of a message deleted since) is passed over.
    async fn extend_visibility(&self, receipts: &[String], timeout: Duration) -> StoreResult<()> {
        for r in receipts {
            self.change_visibility(r, timeout).await?;
        }
        Ok(())
    }

    /// What becomes of a long poll whose caller stopped waiting for it.
    fn abandoned_poll(&self) -> AbandonedPoll {
        AbandonedPoll::Ends
    }

    /// How many receives the queue allows a message before it moves it to
    /// the dead-letter queue itself (SQS's `maxReceiveCount`), if it does.
    async fn receive_limit(&self) -> StoreResult<Option<u32>>;

    /// Puts a received message back as if new: visible after `delay`, its
    /// receive count starting over, with `why` in its [`RENEWED_BECAUSE`]
    /// attribute. For a message that keeps waiting without failing
    /// (throttled, parked, early, held elsewhere), so that its receives
    /// never reach [`Self::receive_limit`] and it is never dead-lettered
    /// without a reason. Only for a receipt just received: SQS cannot always
    /// tell an old receipt, and may then leave a copy (the claims make a
    /// copy harmless, as for any message SQS delivers twice).
    async fn renew(&self, message: &ReceivedMessage, delay: Duration, why: &str)
        -> StoreResult<()>;

    /// Moves a received message to the dead-letter queue at once, with
    /// `reason` in its [`DEAD_LETTER_REASON`] attribute (where there is room
    /// for one more): the daemon's verdict when a message is out of its
    /// failure budget. Fails, leaving the message where it is, if the queue
    /// has no dead-letter queue.
    async fn dead_letter(&self, message: &ReceivedMessage, reason: &str) -> StoreResult<()>;

    /// Messages in the queue (visible or not) and in its dead-letter queue.
    async fn depth(&self) -> StoreResult<QueueDepth>;

    /// Up to `max` dead-lettered messages, held from other readers of the
    /// dead-letter queue for `hold` while they are looked at or moved.
    async fn dead_letters(&self, max: usize, hold: Duration) -> StoreResult<Vec<ReceivedMessage>>;

    /// Moves dead letters (as `dead_letters` returned them) back to the queue,
    /// visible at once, with their receive count starting over. Returns how many moved.
    async fn redrive(&self, letters: &[ReceivedMessage]) -> StoreResult<usize>;

    /// Leaves dead letters where they are, visible to the next look at once.
    async fn release_dead_letters(&self, letters: &[ReceivedMessage]) -> StoreResult<()>;
}

/// What becomes of a long poll (a receive waiting for messages) whose
/// caller stopped waiting for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbandonedPoll {
    /// It ends with its caller: nothing is received for no one.
    Ends,
    /// It stays open at the queue until its wait runs out, and may still be
    /// given messages, which are then hidden for their visibility timeout
    /// with no one to work on them (SQS: the service does not notice the
    /// closed connection). A caller that stops must let it finish.
    StaysOpen,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    /// Every live message: visible + in flight + delayed.
    pub messages: u64,
    pub dead_letters: u64,
    /// Ready to be received now (due and not held).
    pub visible: u64,
    /// Received and hidden for their visibility timeout (being worked on).
    pub in_flight: u64,
    /// Not due yet (sent with a delay, never received).
    pub delayed: u64,
}

/// Tenants: contract and database location.
#[async_trait]
pub trait TenantDirectory: Send + Sync {
    async fn get(&self, tenant: &TenantId) -> StoreResult<Option<TenantRecord>>;
    /// The entries of `tenants` (those with none are not in the answer), in
    /// as few requests as the store allows: a burst over many tenants reads
    /// their contracts together. The default reads them one by one.
    async fn get_many(&self, tenants: &[TenantId]) -> StoreResult<HashMap<TenantId, TenantRecord>> {
        let mut found = HashMap::with_capacity(tenants.len());
        for tenant in tenants {
            if let Some(record) = self.get(tenant).await? {
                found.insert(tenant.clone(), record);
            }
        }
        Ok(found)
    }
    async fn put(&self, record: &TenantRecord) -> StoreResult<()>;
    async fn list(&self) -> StoreResult<Vec<TenantRecord>>;
    /// Up to `limit` tenants after `after` (from the first if None), by id:
    /// one page of `toki tenant list`. The default reads the whole listing.
    async fn list_page(
        &self,
        after: Option<&TenantId>,
        limit: usize,
    ) -> StoreResult<Vec<TenantRecord>> {
        let mut all = self.list().await?;
        all.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(all
            .into_iter()
            .filter(|t| after.is_none_or(|a| &t.id > a))
            .take(limit)
            .collect())
    }
    /// Removes a tenant's entry (offboarding, its last step); false if there was none.
    async fn delete(&self, tenant: &TenantId) -> StoreResult<bool>;
}

/// What a schedule write left to mirror into the index.
#[derive(Debug, Clone, PartialEq)]
pub enum MirrorWork {
    Upsert(Schedule),
    /// A series already mirrored whose horizon runs short: more of it goes in.
    Extend(Schedule),
    Delete {
        schedule: ScheduleId,
        version: i64,
    },
}

/// What one round trip to a tenant database gives the daemon for a batch:
/// the schedules, and every participant of them as a user.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeliveryContext {
    pub schedules: HashMap<ScheduleId, ScheduleSnapshot>,
    /// Shared: each of the user's notifications in a batch points here.
    pub users: HashMap<UserId, Arc<User>>,
    /// The tenant's webhook channel settings, if it made them.
    pub webhook: Option<Arc<toki_model::webhook::WebhookSettings>>,
    /// The tenant's suppression list, as far as these users' addresses are on it.
    pub suppressed:
        HashMap<toki_model::suppression::ListedAddress, toki_model::suppression::Suppression>,
    /// The tenant's `List-Unsubscribe` for its mail, when it enabled one.
    pub list_unsubscribe: Option<Arc<toki_model::suppression::ListUnsubscribe>>,
}

/// A chat message: a row in the tenant's database.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatMessage {
    pub key: DeliveryKey,
    /// The schedule version it was sent for.
    pub version: i64,
    pub user: UserId,
    pub text: String,
    pub created_at: Instant,
}

/// One tenant's database (the source of truth).
#[async_trait]
pub trait TenantStore:
    EventLog
    + AuditLog
    + RetentionStore
    + SuppressionList
    + TenantOffboard
    + Erasure
    + DeliveryReport
    + Send
    + Sync
{
    async fn put_user(&self, user: &User, now: Instant) -> StoreResult<()>;
    async fn get_user(&self, id: &UserId) -> StoreResult<Option<User>>;
    /// The users of `ids` that exist. Backends that can read them in one
    /// round trip do; the default reads them one by one.
    async fn get_users(&self, ids: &[UserId]) -> StoreResult<HashMap<UserId, User>> {
        let mut out = HashMap::with_capacity(ids.len());
        for id in ids {
            if let Some(u) = self.get_user(id).await? {
                out.insert(id.clone(), u);
            }
        }
        Ok(out)
    }

    /// Writes a schedule, its participants and rules in one transaction with
    /// the next version, and records that it must be mirrored. Returns it with its version.
    async fn put_schedule(&self, schedule: &Schedule, now: Instant) -> StoreResult<Schedule> {
        match self
            .put_schedules(std::slice::from_ref(schedule), now)
            .await?
            .pop()
        {
            Some(written) => Ok(written?),
            None => Err(crate::error::StoreError::corrupt(
                "writing a schedule",
                "the store returned no result for it",
            )),
        }
    }
    /// [`TenantStore::put_schedule`] for several schedules in one
    /// transaction: a result each, in order. A schedule that cannot be
    /// written (a participant who is not a user, an id twice in the batch)
    /// gets its error and the others are written; a failure of the database
    /// writes none.
    async fn put_schedules(
        &self,
        schedules: &[Schedule],
        now: Instant,
    ) -> StoreResult<Vec<Result<Schedule, ValidationError>>>;
    async fn get_schedule(&self, id: &ScheduleId) -> StoreResult<Option<Schedule>>;
    /// Deletes a schedule and records that its mirror must be removed. Returns
    /// the version the deletion has, or None if there was no such schedule.
    async fn delete_schedule(&self, id: &ScheduleId, now: Instant) -> StoreResult<Option<i64>>;

    /// Writes not yet mirrored into the index, and series mirrored only up
    /// to before `extend_before` (their horizon runs short).
    async fn unmirrored(&self, extend_before: Instant) -> StoreResult<Vec<MirrorWork>>;

    /// The earliest instant up to which a live series' reminders are in
    /// the index (None: no series): when the repair next extends one.
    async fn earliest_mirrored_until(&self) -> StoreResult<Option<Instant>>;
    /// Records that the mirror of `schedule` at `version` is done; a series'
    /// reminders are in the index up to `until`.
    async fn mark_mirrored(
        &self,
        schedule: &ScheduleId,
        version: i64,
        until: Option<Instant>,
    ) -> StoreResult<()>;
    /// [`TenantStore::mark_mirrored`] for several writes (schedule, version,
    /// until); the default marks them one by one.
    async fn mark_all_mirrored(
        &self,
        writes: &[(ScheduleId, i64, Option<Instant>)],
    ) -> StoreResult<()> {
        for (schedule, version, until) in writes {
            self.mark_mirrored(schedule, *version, *until).await?;
        }
        Ok(())
    }

    /// One round trip: the schedules a batch of deliveries needs, with their
    /// participants, and those participants as users.
    async fn delivery_context(&self, schedules: &[ScheduleId]) -> StoreResult<DeliveryContext>;

    /// Claims deliveries for sending, in one transaction: inserts `sending`
    /// rows, or takes over rows that `failed`, were `throttled`, are `stale`
    /// (an older version's verdict), or whose claim was last renewed before
    /// `takeover_before` (its holder stopped: marked `taken_over`). The
    /// claims' lease runs from `now`, which a claim made ahead of its
    /// instant puts later than the clock.
    async fn claim_deliveries(
        &self,
        claims: &[DeliveryClaim],
        now: Instant,
        takeover_before: Instant,
    ) -> StoreResult<Claims>;

    /// Renews the claims named by `tokens` (a live holder's heartbeat), so
    /// that nobody takes them over while they are being sent.
    async fn renew_claims(&self, tokens: &[String], now: Instant) -> StoreResult<()>;

    /// The current version of each schedule that still exists (one query):
    /// the last look before firing, for changes made after the claim.
    async fn schedule_versions(
        &self,
        schedules: &[ScheduleId],
    ) -> StoreResult<HashMap<ScheduleId, i64>>;

    /// Records outcomes (delivered, stale, failed, undeliverable), one row
    /// each, with the events some endpoint subscribes to; how many events
    /// were logged (the caller marks the tenant: [`crate::WorkKind::Events`]).
    async fn record_outcomes(&self, outcomes: &[DeliveryOutcome]) -> StoreResult<usize>;

    /// The tenant's webhook channel settings, if it made them.
    async fn webhook_settings(&self) -> StoreResult<Option<toki_model::webhook::WebhookSettings>>;

    /// Creates or replaces the tenant's webhook channel settings.
    async fn put_webhook_settings(
        &self,
        settings: &toki_model::webhook::WebhookSettings,
        now: Instant,
    ) -> StoreResult<()>;

    /// Inserts chat messages (idempotent on the delivery key).
    async fn insert_chat_messages(&self, messages: &[ChatMessage]) -> StoreResult<()>;

    /// Delivery rows aggregated by channel and status.
    async fn delivery_counts(&self) -> StoreResult<Vec<DeliveryCount>>;

    /// Delivered rows counted by the process that claimed and sent them (its
    /// process id, as its claim tokens name it): how a fleet shared the work.
    async fn delivered_by_holder(&self) -> StoreResult<Vec<(String, u64)>>;

    /// Every delivery row (for reports and verification).
    async fn deliveries(&self) -> StoreResult<Vec<DeliveryOutcome>>;

    /// The delivery rows of one reminder (e.g. why its message was dead-lettered).
    async fn reminder_deliveries(
        &self,
        reminder: &ReminderKey,
    ) -> StoreResult<Vec<DeliveryOutcome>>;

    /// Chat messages of one user.
    async fn chat_messages(&self, user: &UserId) -> StoreResult<Vec<ChatMessage>>;

    /// Creates or replaces the template of its channel and locale.
    async fn put_template(&self, template: &ReminderTemplate, now: Instant) -> StoreResult<()>;

    /// Deletes the template of `channel` in `locale`; false if there was none.
    async fn delete_template(&self, channel: Channel, locale: &str) -> StoreResult<bool>;

    /// The tenant's templates, by channel then locale.
    async fn templates(&self) -> StoreResult<Vec<ReminderTemplate>>;

    /// How many schedules, users or templates the tenant stores: one COUNT
    /// on the table (its primary key's index), for the caps of
    /// [`toki_model::quota::TenantCaps`].
    async fn count(&self, what: Counted) -> StoreResult<u64>;

    /// Change notices ([`toki_model::change`]), before an edit: keeps the current
    /// state of each of `schedules` that exists as its baseline (what its
    /// participants know), unless it has one already; a baseline left by a
    /// cancellation is replaced. Returns the schedules that exist: writing
    /// them is an edit.
    async fn keep_change_baselines(
        &self,
        schedules: &[ScheduleId],
    ) -> StoreResult<std::collections::HashSet<ScheduleId>>;

    /// Freezes the notice of `token`, in one transaction: baseline → the
    /// schedule now, the baseline advanced to now, its instant after every
    /// earlier notice's. A token frozen already gets its notice back as it
    /// was; a schedule without a baseline (never edited) gets None.
    async fn freeze_change_notice(
        &self,
        schedule: &ScheduleId,
        token: &str,
        edge: toki_model::change::NoticeEdge,
        now: Instant,
    ) -> StoreResult<Option<toki_model::change::ChangeNotice>>;

    /// Forgets every baseline (change notices turned on again: what was
    /// edited while they were off must not be told as news). Returns how many.
    async fn clear_change_baselines(&self) -> StoreResult<u64>;

    /// A schedule's notices, oldest first.
    async fn change_notices(
        &self,
        schedule: &ScheduleId,
    ) -> StoreResult<Vec<toki_model::change::ChangeNotice>>;

    /// Idempotent writes: takes `start.key` for this request, in progress,
    /// unless a live request holds it (one used since `expired_before`, or
    /// in progress since `abandoned_before`): then that one's digest and
    /// answer. Atomic: of requests racing for one key, one starts.
    async fn start_idempotent(&self, start: &IdempotentStart<'_>) -> StoreResult<KeyedRequest>;

    /// Keeps the answer of the request that started `key` at `started`;
    /// nothing if the key is no longer that run's (abandoned, taken over).
    async fn finish_idempotent(
        &self,
        key: &IdempotencyKey,
        started: Instant,
        answer: &KeptAnswer,
    ) -> StoreResult<()>;

    /// Forgets `key` if the request that started it at `started` is still
    /// in progress (it failed in a way worth retrying under the same key).
    async fn release_idempotent(&self, key: &IdempotencyKey, started: Instant) -> StoreResult<()>;

    /// Deletes up to `limit` keys first used before `before`, oldest first;
    /// returns how many.
    async fn purge_idempotency_keys(&self, before: Instant, limit: u32) -> StoreResult<u64>;
}

/// What a claim got: the deliveries this caller now sends, and those another
/// holder is still sending (their message must come back, not be acknowledged).
/// Requested deliveries in neither list are final (delivered, undeliverable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claims {
    /// Names this claim, for renewing it while the deliveries are held.
    pub token: String,
    pub owned: Vec<OwnedDelivery>,
    pub busy: Vec<DeliveryKey>,
}

/// A delivery a claim got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedDelivery {
    pub key: DeliveryKey,
    /// Failed attempts so far that count towards its budget.
    pub failures: u32,
    /// Taken over from a holder that stopped renewing: it may have been sent.
    pub taken_over: bool,
}

impl OwnedDelivery {
    /// A first claim: no failure yet, nobody to take over from.
    pub fn new(key: DeliveryKey) -> Self {
        OwnedDelivery {
            key,
            failures: 0,
            taken_over: false,
        }
    }
}

/// Opens tenant stores by tenant, lazily, one pool per tenant.
#[async_trait]
pub trait TenantStores: Send + Sync {
    async fn open(&self, tenant: &TenantId) -> StoreResult<Arc<dyn TenantStore>>;
}
