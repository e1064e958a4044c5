//! Recording outcomes: the batches of a tenant that finish together are
//! written in one statement, marking the tenant's waiting work
//! ([`crate::work`]): its retention before the rows, its events after them.
//! A bounded number of writer tasks ([`MAX_WRITERS`]) take the tenants with
//! outcomes waiting, one tenant at a time each, in the order their first
//! outcome arrived. What waits is a few hundred bytes a tenant: a burst over
//! 10,000 tenants records them all at once, and a task and a channel for
//! each of them was a fifth of the daemon's heap.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thiserror::Error;
use tokio::sync::oneshot;

use toki_model::domain::{DeliveryOutcome, TenantId};
use toki_ports::error::StoreError;
use toki_ports::TenantStore;

use crate::work::Marker;

/// How long a tenant's first outcomes wait for more before one write: batches
/// fired at the same due instant finish together, and one statement for all
/// of them costs the burst far less than one per batch.
const COALESCE: Duration = Duration::from_millis(5);

/// Writer tasks at most. More than the tenant databases a process uses at
/// once (`toki_sql`'s 64 SQLite connections in use, 16 Postgres ones by
/// default), so that those budgets, not the writers, decide how many
/// tenants are written at once: a tenant whose database stalls holds up
/// one writer and one connection, not the others' outcomes.
pub const MAX_WRITERS: usize = 256;

#[derive(Debug, Clone, Error)]
pub enum RecordError {
    #[error("storing outcomes failed")]
    Store(#[source] Arc<StoreError>),
    #[error("the outcome writer stopped")]
    WriterStopped,
}

/// Outcomes waiting to be written, the store they go to (the batch's: the
/// recorder holds no store between writes, so a quiet tenant's database can
/// close), and who waits for the write.
struct Write {
    outcomes: Vec<DeliveryOutcome>,
    store: Arc<dyn TenantStore>,
    done: oneshot::Sender<Result<(), RecordError>>,
}

/// A tenant's outcomes waiting, since when, and whether a writer has them.
struct Waiting {
    since: tokio::time::Instant,
    writes: Vec<Write>,
    writing: bool,
}

/// The tenants with outcomes waiting, in turn, and the writers running.
#[derive(Default)]
struct Queue {
    tenants: HashMap<TenantId, Waiting>,
    /// Tenants with writes no writer has taken yet, first come first.
    turn: VecDeque<TenantId>,
    writers: usize,
    /// Writers holding a tenant (the others are about to take one or end).
    busy: usize,
}

impl Queue {
    /// Starts writers while tenants in turn outnumber the writers free to
    /// take them (a writer busy with a stalled tenant is not free).
    fn start_writers(&mut self, shared: &Shared, marker: &Marker) {
        // No runtime (a writer dropped as its runtime goes): nothing to run on.
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        while self.writers < MAX_WRITERS && self.writers - self.busy < self.turn.len() {
            self.writers += 1;
            let writer = Writer {
                queue: shared.clone(),
                marker: marker.clone(),
            };
            tokio::spawn(writer.run());
        }
    }

    /// `tenant` written (or its writer gone): forgotten, or in turn again
    /// if more came meanwhile.
    fn done_with(&mut self, tenant: &TenantId) {
        self.busy -= 1;
        let Some(waiting) = self.tenants.get_mut(tenant) else {
            return;
        };
        waiting.writing = false;
        if waiting.writes.is_empty() {
            self.tenants.remove(tenant);
        } else {
            waiting.since = tokio::time::Instant::now();
            self.turn.push_back(tenant.clone());
        }
    }
}

type Shared = Arc<Mutex<Queue>>;

pub struct Recorder {
    queue: Shared,
    marker: Marker,
}

impl Recorder {
    pub fn new(marker: Marker) -> Self {
        Recorder {
            queue: Shared::default(),
            marker,
        }
    }

    /// Tenants with outcomes waiting or being written (for tests of what
    /// the daemon holds).
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        lock(&self.queue).tenants.len()
    }

    /// Writer tasks running now (for tests of the bound).
    #[cfg(test)]
    pub fn writers_running(&self) -> usize {
        lock(&self.queue).writers
    }

    /// Resolves once `outcomes` are stored in the tenant's database.
    pub async fn record(
        &self,
        tenant: &TenantId,
        store: &Arc<dyn TenantStore>,
        outcomes: Vec<DeliveryOutcome>,
    ) -> Result<(), RecordError> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let (done, wait) = oneshot::channel();
        let write = Write {
            outcomes,
            store: store.clone(),
            done,
        };
        self.enqueue(tenant, write);
        // A writer answers every write; a runtime that stops may not.
        wait.await.map_err(|_| RecordError::WriterStopped)?
    }

    /// Adds `write` to its tenant's, and starts a writer if one is free.
    fn enqueue(&self, tenant: &TenantId, write: Write) {
        let mut queue = lock(&self.queue);
        let queue = &mut *queue;
        let waiting = queue
            .tenants
            .entry(tenant.clone())
            .or_insert_with(|| Waiting {
                since: tokio::time::Instant::now(),
                writes: Vec::new(),
                writing: false,
            });
        if waiting.writes.is_empty() && !waiting.writing {
            waiting.since = tokio::time::Instant::now();
            queue.turn.push_back(tenant.clone());
        }
        waiting.writes.push(write);
        queue.start_writers(&self.queue, &self.marker);
    }
}

fn lock(queue: &Shared) -> std::sync::MutexGuard<'_, Queue> {
    // A panic elsewhere cannot leave the queue half-written: use it as is.
    queue.lock().unwrap_or_else(|e| e.into_inner())
}

/// A writer task: takes tenants in turn until none is waiting.
struct Writer {
    queue: Shared,
    marker: Marker,
}

impl Writer {
    async fn run(self) {
        while let Some((tenant, since)) = self.next() {
            let mut held = Held {
                writer: &self,
                tenant: Some(tenant.clone()),
            };
            tokio::time::sleep_until(since + COALESCE).await;
            let writes = {
                let mut queue = lock(&self.queue);
                let waiting = queue
                    .tenants
                    .get_mut(&tenant)
                    .expect("a tenant in turn waits");
                waiting.writing = true;
                std::mem::take(&mut waiting.writes)
            };
            let answers = self.write(&tenant, writes).await;
            held.tenant = None;
            lock(&self.queue).done_with(&tenant);
            for (done, result) in answers {
                let _ = done.send(result);
            }
        }
    }

    /// The next tenant in turn, or none (the writer ends, under the lock
    /// that starts writers).
    fn next(&self) -> Option<(TenantId, tokio::time::Instant)> {
        let mut queue = lock(&self.queue);
        match queue.turn.pop_front() {
            Some(tenant) => {
                queue.busy += 1;
                let since = queue.tenants[&tenant].since;
                Some((tenant, since))
            }
            None => {
                queue.writers -= 1;
                None
            }
        }
    }
}

/// The tenant a writer holds. Dropped while held (the writer panicked, or
/// its runtime stopped), the writer is gone: its writes were dropped, so
/// their callers hear the writer stopped; the tenant's later writes are put
/// in turn again, and another writer is started for them if need be.
struct Held<'a> {
    writer: &'a Writer,
    tenant: Option<TenantId>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let Some(tenant) = self.tenant.take() else {
            return;
        };
        let mut queue = lock(&self.writer.queue);
        queue.done_with(&tenant);
        queue.writers -= 1;
        queue.start_writers(&self.writer.queue, &self.writer.marker);
    }
}

impl Writer {
    /// Writes `writes`, one statement per store (a tenant deleted and
    /// created again has batches for its old store and its new one), and
    /// what to answer each.
    async fn write(&self, tenant: &TenantId, writes: Vec<Write>) -> Vec<Answer> {
        let mut by_store: Vec<(Arc<dyn TenantStore>, Vec<Write>)> = Vec::new();
        for w in writes {
            match by_store
                .iter_mut()
                .find(|(s, _)| std::ptr::addr_eq(Arc::as_ptr(s), Arc::as_ptr(&w.store)))
            {
                Some((_, group)) => group.push(w),
                None => by_store.push((w.store.clone(), vec![w])),
            }
        }
        let mut answers = Vec::new();
        for (store, group) in by_store {
            let result = self.write_one(tenant, store, &group).await;
            answers.extend(group.into_iter().map(|w| (w.done, result.clone())));
        }
        answers
    }

    async fn write_one(
        &self,
        tenant: &TenantId,
        store: Arc<dyn TenantStore>,
        group: &[Write],
    ) -> Result<(), RecordError> {
        let all: Vec<DeliveryOutcome> = group
            .iter()
            .flat_map(|w| w.outcomes.iter().cloned())
            .collect();
        // Before the rows: a crash after them leaves the purge its mark.
        self.marker.activity(tenant).await;
        let result = store.record_outcomes(&all).await;
        drop(store);
        let logged = *result.as_ref().unwrap_or(&0);
        if result.is_ok() && logged > 0 {
            self.marker.events(tenant).await;
        }
        result
            .map(|_| ())
            .map_err(|e| RecordError::Store(Arc::new(e)))
    }
}

/// Who waits for a write, and what to tell them.
type Answer = (
    oneshot::Sender<Result<(), RecordError>>,
    Result<(), RecordError>,
);

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use toki_model::domain::{
        Channel, DeliveryKey, DeliveryOutcome, DeliveryPurpose, DeliveryStatus, DueAt, Occurrence,
    };
    use toki_ports::testing::{MemoryTenantStore, MemoryWorkMarks};
    use toki_ports::{TenantStore, WorkKind, WorkMarks};

    use super::Recorder;
    use crate::work::Marker;

    fn delivered(at: toki_model::domain::Instant) -> DeliveryOutcome {
        DeliveryOutcome {
            key: DeliveryKey {
                schedule: "s".parse().unwrap(),
                occurrence: Occurrence(at),
                purpose: DeliveryPurpose::Reminder { minutes_before: 5 },
                recipient: "u".parse().unwrap(),
                channel: Channel::Mail,
            },
            version: 1,
            due_at: DueAt(at),
            status: DeliveryStatus::Delivered,
            at,
            detail: None,
        }
    }

    fn recorder_at(at: toki_model::domain::Instant) -> (Recorder, Arc<MemoryWorkMarks>) {
        let marks = Arc::new(MemoryWorkMarks::default());
        let clock = Arc::new(toki_ports::testing::TokioClock::starting_at(at));
        (Recorder::new(Marker::new(marks.clone(), clock)), marks)
    }

    /// Once a tenant's outcomes are written, the recorder holds nothing of
    /// it, and what it wrote left a retention mark (rows to purge later) and
    /// no events mark (no endpoint: nothing logged).
    #[tokio::test(start_paused = true)]
    async fn a_quiet_tenants_writer_ends_and_its_work_is_marked() {
        let at: toki_model::domain::Instant = "2026-11-23T08:00:00Z".parse().unwrap();
        let (recorder, marks) = recorder_at(at);
        let tenant: toki_model::domain::TenantId = "quiet".parse().unwrap();
        let store: Arc<dyn TenantStore> = Arc::new(MemoryTenantStore::default());
        recorder
            .record(&tenant, &store, vec![delivered(at)])
            .await
            .unwrap();
        assert_eq!(recorder.waiting(), 0, "the tenant is forgotten");
        assert_eq!(
            marks.marked(WorkKind::Retention).await.unwrap(),
            vec![tenant.clone()]
        );
        assert!(marks.marked(WorkKind::Events).await.unwrap().is_empty());
        // A new write is written as well.
        recorder
            .record(
                &tenant,
                &store,
                vec![delivered(at + chrono::Duration::minutes(1))],
            )
            .await
            .unwrap();
        assert_eq!(recorder.waiting(), 0);
    }

    /// A tenant deleted and created again while the daemon runs: its
    /// outcomes go to the store they were read and claimed in, the new one,
    /// not to the one the tenant's writer began with.
    #[tokio::test(start_paused = true)]
    async fn outcomes_follow_the_tenant_to_its_new_store() {
        let at: toki_model::domain::Instant = "2026-11-23T08:00:00Z".parse().unwrap();
        let user = toki_model::input::UserInput {
            name: "U".into(),
            email: Some("u@example.com".into()),
            slack_user_id: None,
            webhook_url: None,
            time_zone: "Europe/Paris".into(),
            locale: "en".into(),
            channels: Default::default(),
        }
        .validate(&"u".parse().unwrap())
        .unwrap();
        let recorder = recorder_at(at).0;
        let tenant = "gone".parse().unwrap();
        let (old, new) = (
            Arc::new(MemoryTenantStore::default()),
            Arc::new(MemoryTenantStore::default()),
        );
        for s in [&old, &new] {
            s.put_user(&user, at).await.unwrap();
        }
        let (old_dyn, new_dyn): (Arc<dyn TenantStore>, Arc<dyn TenantStore>) =
            (old.clone(), new.clone());
        recorder
            .record(&tenant, &old_dyn, vec![delivered(at)])
            .await
            .unwrap();
        let later = at + chrono::Duration::minutes(1);
        recorder
            .record(&tenant, &new_dyn, vec![delivered(later)])
            .await
            .unwrap();
        assert_eq!(old.deliveries().await.unwrap().len(), 1);
        let in_new = new.deliveries().await.unwrap();
        assert_eq!(in_new.len(), 1, "the new store has its outcome");
        assert_eq!(in_new[0].key.occurrence, Occurrence(later));
    }

    /// How long a tenant whose database answers at once waits for its
    /// outcomes to be written.
    async fn record_quick(
        recorder: &Recorder,
        at: toki_model::domain::Instant,
    ) -> std::time::Duration {
        let quick: Arc<dyn TenantStore> = Arc::new(MemoryTenantStore::default());
        let started = tokio::time::Instant::now();
        recorder
            .record(&"quick".parse().unwrap(), &quick, vec![delivered(at)])
            .await
            .unwrap();
        started.elapsed()
    }

    /// More tenants stalled than there are writers: the writers are all
    /// taken, and a quick tenant's outcomes wait their turn, no more; once
    /// the stalls end, everything is written and nothing is held.
    #[tokio::test(start_paused = true)]
    async fn stalled_tenants_hold_up_their_writers_only() {
        let at: toki_model::domain::Instant = "2026-11-23T08:00:00Z".parse().unwrap();
        let recorder = Arc::new(recorder_at(at).0);
        let stall = std::time::Duration::from_secs(60);
        let mut stalled = Vec::new();
        for i in 0..super::MAX_WRITERS + 3 {
            let store = Arc::new(MemoryTenantStore::default());
            store.set_stall(Some(stall));
            let store: Arc<dyn TenantStore> = store;
            let tenant: toki_model::domain::TenantId = format!("slow{i}").parse().unwrap();
            let recorder = recorder.clone();
            stalled.push(tokio::spawn(async move {
                recorder.record(&tenant, &store, vec![delivered(at)]).await
            }));
        }
        // Until every stalled tenant waits: the writers all taken, the rest in turn.
        while recorder.waiting() < super::MAX_WRITERS + 3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(recorder.writers_running(), super::MAX_WRITERS);
        // Its turn came once the first stalled writers were done, not later.
        assert_eq!(record_quick(&recorder, at).await, stall + super::COALESCE);
        for s in stalled {
            s.await.unwrap().unwrap();
        }
        assert_eq!(recorder.waiting(), 0);
        assert_eq!(recorder.writers_running(), 0);
    }

    /// A tenant whose database stalls holds up its own writer only: a
    /// tenant whose outcomes come while it is being written gets another
    /// writer and is written at once.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_tenant_does_not_hold_up_the_next_one() {
        let at: toki_model::domain::Instant = "2026-11-23T08:00:00Z".parse().unwrap();
        let recorder = Arc::new(recorder_at(at).0);
        let slow = Arc::new(MemoryTenantStore::default());
        slow.set_stall(Some(std::time::Duration::from_secs(60)));
        let slow: Arc<dyn TenantStore> = slow;
        let stalled = {
            let recorder = recorder.clone();
            tokio::spawn(async move {
                let tenant = "slow".parse().unwrap();
                recorder.record(&tenant, &slow, vec![delivered(at)]).await
            })
        };
        // Until the slow tenant is being written (past its coalescing wait).
        tokio::time::sleep(super::COALESCE * 2).await;
        assert_eq!(recorder.writers_running(), 1);
        assert_eq!(record_quick(&recorder, at).await, super::COALESCE);
        stalled.await.unwrap().unwrap();
        assert_eq!((recorder.waiting(), recorder.writers_running()), (0, 0));
    }
}
