//! Recording outcomes: one writer per tenant gathers the rows of batches that
//! finish together and writes them in one statement.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{mpsc, oneshot};

use toki_model::domain::{DeliveryOutcome, TenantId};
use toki_ports::error::StoreError;
use toki_ports::TenantStore;

/// How long a tenant's writer gathers batches before one write: batches fired
/// at the same due instant finish together, and one statement for all of them
/// costs the burst far less than one per batch.
const COALESCE: Duration = Duration::from_millis(5);

#[derive(Debug, Clone, Error)]
pub enum RecordError {
    #[error("storing outcomes failed")]
    Store(#[source] Arc<StoreError>),
    #[error("the outcome writer stopped")]
    WriterStopped,
}

/// Outcomes waiting to be written, and who waits for the write.
type Write = (
    Vec<DeliveryOutcome>,
    oneshot::Sender<Result<(), RecordError>>,
);

/// A tenant's writer, and the store it writes to.
struct Writer {
    store: Arc<dyn TenantStore>,
    tx: mpsc::UnboundedSender<Write>,
}

#[derive(Default)]
pub struct Recorder {
    writers: Mutex<HashMap<TenantId, Writer>>,
}

impl Recorder {
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
        let writer = {
            let mut writers = self.writers.lock().expect("writers lock");
            // Another store than the writer's: the tenant's database was
            // replaced (deleted and created again). A new writer for it;
            // the old one ends with what it was given.
            match writers.get(tenant) {
                Some(w) if Arc::ptr_eq(&w.store, store) => w.tx.clone(),
                _ => {
                    let tx = spawn_writer(store.clone());
                    let store = store.clone();
                    writers.insert(
                        tenant.clone(),
                        Writer {
                            store,
                            tx: tx.clone(),
                        },
                    );
                    tx
                }
            }
        };
        writer
            .send((outcomes, done))
            .map_err(|_| RecordError::WriterStopped)?;
        wait.await.map_err(|_| RecordError::WriterStopped)?
    }
}

fn spawn_writer(store: Arc<dyn TenantStore>) -> mpsc::UnboundedSender<Write> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Write>();
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            tokio::time::sleep(COALESCE).await;
            let mut waiting = vec![first];
            while let Ok(more) = rx.try_recv() {
                waiting.push(more);
            }
            let all: Vec<DeliveryOutcome> = waiting
                .iter_mut()
                .flat_map(|(o, _)| std::mem::take(o))
                .collect();
            let result = store
                .record_outcomes(&all)
                .await
                .map_err(|e| RecordError::Store(Arc::new(e)));
            for (_, done) in waiting {
                let _ = done.send(result.clone());
            }
        }
    });
    tx
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use toki_model::domain::{
        Channel, DeliveryKey, DeliveryOutcome, DeliveryPurpose, DeliveryStatus, DueAt, Occurrence,
    };
    use toki_ports::testing::MemoryTenantStore;
    use toki_ports::TenantStore;

    use super::Recorder;

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
        let recorder = Recorder::default();
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
