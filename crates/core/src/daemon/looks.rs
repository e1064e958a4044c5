//! The schedules' versions that held groups look at before firing, read
//! for all of a tenant's groups at once. At a burst every group of an
//! instant looks at the same moment (thousands at 100,000 deliveries): one
//! query per tenant is running at a time, and what asks meanwhile goes
//! together in the next.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use toki_model::domain::{ScheduleId, TenantId};
use toki_ports::error::StoreError;
use toki_ports::TenantStore;

/// Versions by schedule (a schedule that is gone is not in them).
pub(super) type Versions = Arc<HashMap<ScheduleId, i64>>;

/// Why a look has no answer.
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum LookError {
    #[error(transparent)]
    Store(Arc<StoreError>),
    /// The query's task ended without answering (the runtime stopping).
    #[error("the look ended without an answer")]
    Abandoned,
}

struct Asked {
    schedules: Vec<ScheduleId>,
    answer: oneshot::Sender<Result<Versions, LookError>>,
}

/// What waits for a tenant's next query; listed while one is running.
#[derive(Default)]
struct Waiting(Vec<Asked>);

#[derive(Default)]
pub(super) struct Looks {
    running: Arc<Mutex<HashMap<TenantId, Waiting>>>,
}

impl Looks {
    /// The versions of `schedules` now. The query runs in a task of its own,
    /// so a caller that stops waiting (its deadline) leaves the others'
    /// answer whole.
    pub(super) async fn versions(
        &self,
        tenant: &TenantId,
        store: &Arc<dyn TenantStore>,
        schedules: Vec<ScheduleId>,
    ) -> Result<Versions, LookError> {
        let (answer, answered) = oneshot::channel();
        let asked = Asked { schedules, answer };
        let first = {
            let mut running = self.running.lock().expect("looks lock");
            match running.get_mut(tenant) {
                Some(waiting) => {
                    waiting.0.push(asked);
                    None
                }
                None => {
                    running.insert(tenant.clone(), Waiting::default());
                    Some(asked)
                }
            }
        };
        if let Some(asked) = first {
            tokio::spawn(answer_all(
                self.running.clone(),
                tenant.clone(),
                store.clone(),
                vec![asked],
            ));
        }
        answered.await.unwrap_or(Err(LookError::Abandoned))
    }
}

/// Takes the tenant off the running list if its task ends without doing
/// so (a store call that panicked): what waits is then answered
/// `Abandoned` at once, and the next look starts a task afresh.
struct Listed {
    running: Arc<Mutex<HashMap<TenantId, Waiting>>>,
    tenant: TenantId,
    /// Taken off already, by the task itself.
    off: bool,
}

impl Drop for Listed {
    fn drop(&mut self) {
        if !self.off {
            if let Ok(mut running) = self.running.lock() {
                running.remove(&self.tenant);
            }
        }
    }
}

/// Answers `asked` with one query, then what asked meanwhile, until
/// nothing waits; then the tenant is no longer running.
async fn answer_all(
    running: Arc<Mutex<HashMap<TenantId, Waiting>>>,
    tenant: TenantId,
    store: Arc<dyn TenantStore>,
    mut asked: Vec<Asked>,
) {
    let mut listed = Listed {
        running,
        tenant,
        off: false,
    };
    while !asked.is_empty() {
        let schedules: Vec<ScheduleId> = asked
            .iter()
            .flat_map(|a| a.schedules.iter().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let versions = store
            .schedule_versions(&schedules)
            .await
            .map(Arc::new)
            .map_err(|e| LookError::Store(Arc::new(e)));
        for a in asked {
            // A caller past its deadline no longer listens.
            let _ = a.answer.send(versions.clone());
        }
        let mut running = listed.running.lock().expect("looks lock");
        asked = match running.get_mut(&listed.tenant) {
            Some(waiting) if !waiting.0.is_empty() => std::mem::take(&mut waiting.0),
            _ => {
                running.remove(&listed.tenant);
                drop(running);
                listed.off = true;
                Vec::new()
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toki_ports::testing::MemoryTenantStore;

    /// Looks asked while one query runs are answered by one more query,
    /// each with its own schedules' versions.
    #[tokio::test(start_paused = true)]
    async fn looks_asked_together_take_one_query_after_the_running_one() {
        let store = Arc::new(MemoryTenantStore::default());
        store.set_stall(Some(std::time::Duration::from_millis(50)));
        let dyn_store: Arc<dyn TenantStore> = store.clone();
        let looks = Looks::default();
        let tenant: TenantId = "acme".parse().unwrap();
        let asks = (0..50).map(|i| {
            let (looks, tenant, store) = (&looks, &tenant, &dyn_store);
            async move {
                looks
                    .versions(tenant, store, vec![format!("s{i}").parse().unwrap()])
                    .await
            }
        });
        let answers = futures::future::join_all(asks).await;
        assert!(answers
            .iter()
            .all(|a| a.as_ref().is_ok_and(|v| v.is_empty())));
        assert_eq!(store.calls(), 2, "the first, then the other 49 at once");
        assert!(
            looks.running.lock().unwrap().is_empty(),
            "nothing left running"
        );
    }
}
