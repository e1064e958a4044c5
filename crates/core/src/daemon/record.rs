//! Recording outcomes: one writer per tenant gathers the rows of batches that
//! finish together and writes them in one statement, marking the tenant's
//! waiting work ([`crate::work`]): its retention before the rows, its
//! events after them. A
//! writer ends once its tenant has been quiet for [`WRITER_IDLE`], so the
//! writers (and the stores they hold) are those of tenants active now.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{mpsc, oneshot};

use toki_model::domain::{DeliveryOutcome, TenantId};
use toki_ports::error::StoreError;
use toki_ports::TenantStore;

use crate::work::Marker;

/// How long a tenant's writer gathers batches before one write: batches fired
/// at the same due instant finish together, and one statement for all of them
/// costs the burst far less than one per batch.
const COALESCE: Duration = Duration::from_millis(5);

/// How long a writer waits for more before it ends.
pub const WRITER_IDLE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Error)]
pub enum RecordError {
    #[error("storing outcomes failed")]
    Store(#[source] Arc<StoreError>),
    #[error("the outcome writer stopped")]
    WriterStopped,
}

/// Outcomes waiting to be written, the store they go to (the batch's: a
/// writer holds no store between writes, so a quiet tenant's database can
/// close), and who waits for the write.
struct Write {
    outcomes: Vec<DeliveryOutcome>,
    store: Arc<dyn TenantStore>,
    done: oneshot::Sender<Result<(), RecordError>>,
}

/// A tenant's writer, and the store it writes to (not kept alive by it).
struct Writer {
    store: std::sync::Weak<dyn TenantStore>,
    tx: mpsc::UnboundedSender<Write>,
}

type Writers = Arc<Mutex<HashMap<TenantId, Writer>>>;

pub struct Recorder {
    writers: Writers,
    marker: Marker,
}

impl Recorder {
    pub fn new(marker: Marker) -> Self {
        Recorder {
            writers: Writers::default(),
            marker,
        }
    }

    /// Tenants with a writer now (for tests of what the daemon holds).
    #[cfg(test)]
    pub fn writers(&self) -> usize {
        self.writers.lock().expect("writers lock").len()
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
        {
            // Sent under the lock: a writer ending checks for more under it.
            let mut writers = self.writers.lock().expect("writers lock");
            // The store the outcomes were claimed in: if the writer has
            // another, the tenant's database was replaced (deleted and
            // created again). A new writer for it; the old one ends with
            // what it was given.
            let current = writers
                .get(tenant)
                .filter(|w| std::ptr::addr_eq(w.store.as_ptr(), Arc::as_ptr(store)))
                .map(|w| w.tx.clone());
            let tx = match current {
                Some(tx) => tx,
                None => {
                    let tx = self.spawn_writer(tenant);
                    let writer = Writer {
                        store: Arc::downgrade(store),
                        tx: tx.clone(),
                    };
                    writers.insert(tenant.clone(), writer);
                    tx
                }
            };
            let write = Write {
                outcomes,
                store: store.clone(),
                done,
            };
            tx.send(write).map_err(|_| RecordError::WriterStopped)?;
        }
        wait.await.map_err(|_| RecordError::WriterStopped)?
    }

    fn spawn_writer(&self, tenant: &TenantId) -> mpsc::UnboundedSender<Write> {
        let (tx, rx) = mpsc::unbounded_channel::<Write>();
        let writer = TenantWriter {
            tenant: tenant.clone(),
            marker: self.marker.clone(),
            writers: self.writers.clone(),
            own: tx.clone(),
        };
        tokio::spawn(writer.run(rx));
        tx
    }
}

/// One tenant's writer task.
struct TenantWriter {
    tenant: TenantId,
    marker: Marker,
    writers: Writers,
    /// Its own sender: how it knows its entry among the writers.
    own: mpsc::UnboundedSender<Write>,
}

impl TenantWriter {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Write>) {
        loop {
            let first = match tokio::time::timeout(WRITER_IDLE, rx.recv()).await {
                Ok(Some(first)) => first,
                Ok(None) => return,
                Err(_) => match self.end_if_quiet(&mut rx) {
                    Some(first) => first,
                    None => return,
                },
            };
            tokio::time::sleep(COALESCE).await;
            let mut waiting = vec![first];
            while let Ok(more) = rx.try_recv() {
                waiting.push(more);
            }
            self.write(waiting).await;
        }
    }

    /// After a quiet spell: leaves the writers, unless something arrived
    /// meanwhile (returned). Under the writers' lock, which senders hold.
    fn end_if_quiet(&self, rx: &mut mpsc::UnboundedReceiver<Write>) -> Option<Write> {
        let mut writers = self.writers.lock().expect("writers lock");
        if let Ok(more) = rx.try_recv() {
            return Some(more);
        }
        if writers
            .get(&self.tenant)
            .is_some_and(|w| w.tx.same_channel(&self.own))
        {
            writers.remove(&self.tenant);
        }
        rx.close();
        None
    }

    async fn write(&self, mut waiting: Vec<Write>) {
        let all: Vec<DeliveryOutcome> = waiting
            .iter_mut()
            .flat_map(|w| std::mem::take(&mut w.outcomes))
            .collect();
        // One store for all: a batch for another is given another writer.
        let store = waiting[0].store.clone();
        // Before the rows: a crash after them leaves the purge its mark.
        self.marker.activity(&self.tenant).await;
        let result = store.record_outcomes(&all).await;
        let logged = *result.as_ref().unwrap_or(&0);
        let result = result
            .map(|_| ())
            .map_err(|e| RecordError::Store(Arc::new(e)));
        drop(store);
        for w in waiting {
            let _ = w.done.send(result.clone());
        }
        if result.is_ok() && logged > 0 {
            self.marker.events(&self.tenant).await;
        }
    }
}

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

    /// A tenant's writer ends once it has been quiet a while, and what it
    /// wrote left a retention mark (rows to purge later) and no events mark
    /// (no endpoint: nothing logged).
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
        assert_eq!(recorder.writers(), 1);
        tokio::time::sleep(super::WRITER_IDLE + std::time::Duration::from_secs(1)).await;
        assert_eq!(recorder.writers(), 0, "the writer ended");
        assert_eq!(
            marks.marked(WorkKind::Retention).await.unwrap(),
            vec![tenant.clone()]
        );
        assert!(marks.marked(WorkKind::Events).await.unwrap().is_empty());
        // A new write gets a new writer.
        recorder
            .record(
                &tenant,
                &store,
                vec![delivered(at + chrono::Duration::minutes(1))],
            )
            .await
            .unwrap();
        assert_eq!(recorder.writers(), 1);
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
}
