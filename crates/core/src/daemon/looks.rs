//! The schedules' versions that held groups look at before firing. The
//! index is asked first, for every tenant's groups at once: a schedule it
//! holds at the version the group was claimed at has not changed (every
//! write is mirrored there before its request is answered), so a tenant
//! none of whose schedules changed is not opened, and a burst over
//! thousands of tenants looks with a few queries to one store. What the
//! index cannot vouch for (a newer version, none, or no answer) is read
//! from the tenant's database, which says exactly what changed. There,
//! one query per tenant is running at a time, and what asks meanwhile goes
//! together in the next; likewise for the index across tenants.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tracing::warn;

use toki_model::domain::{ScheduleId, TenantId};
use toki_model::error::chain;
use toki_ports::error::StoreError;
use toki_ports::{ReminderIndex, TenantSchedule, TenantStore};

/// Versions by schedule (a schedule that is gone is not in them).
pub(super) type Versions = Arc<HashMap<ScheduleId, i64>>;

/// A schedule a held group looks at, and the version it was claimed at.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Claimed {
    pub(super) schedule: ScheduleId,
    pub(super) version: i64,
}

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
    /// The index's versions (none: every look reads its tenant's database).
    mirrored: Option<Mirrored>,
}

impl Looks {
    /// Looks that ask `index` first.
    pub(super) fn with_index(index: Arc<dyn ReminderIndex>) -> Self {
        Looks {
            running: Arc::default(),
            mirrored: Some(Mirrored {
                index,
                waiting: Arc::default(),
            }),
        }
    }

    /// The versions of `claimed`'s schedules now. Each query runs in a task
    /// of its own, so a caller that stops waiting (its deadline) leaves the
    /// others' answer whole.
    pub(super) async fn versions(
        &self,
        tenant: &TenantId,
        store: &Arc<dyn TenantStore>,
        claimed: Vec<Claimed>,
    ) -> Result<Versions, LookError> {
        let (unchanged, unknown) = match &self.mirrored {
            Some(mirrored) => mirrored.vouch(tenant, claimed).await,
            None => (HashMap::new(), schedules_in(&claimed)),
        };
        if unknown.is_empty() {
            return Ok(Arc::new(unchanged));
        }
        let read = self.read_tenant(tenant, store, unknown).await?;
        if unchanged.is_empty() {
            return Ok(read);
        }
        let mut all = unchanged;
        all.extend(read.iter().map(|(s, v)| (s.clone(), *v)));
        Ok(Arc::new(all))
    }

    /// The versions of `schedules` in the tenant's database.
    async fn read_tenant(
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

/// Each schedule of `claimed` once.
fn schedules_in(claimed: &[Claimed]) -> Vec<ScheduleId> {
    let set: BTreeSet<&ScheduleId> = claimed.iter().map(|c| &c.schedule).collect();
    set.into_iter().cloned().collect()
}

/// Versions the index holds, by schedule, as one query answered them.
type Held = Arc<HashMap<TenantSchedule, i64>>;

struct MirroredAsk {
    keys: Vec<TenantSchedule>,
    answer: oneshot::Sender<Option<Held>>,
}

/// The index's side of the looks: what asks while a query runs goes
/// together in the next, whatever its tenant (`None`: none running).
struct Mirrored {
    index: Arc<dyn ReminderIndex>,
    waiting: Arc<Mutex<Option<Vec<MirroredAsk>>>>,
}

impl Mirrored {
    /// `claimed` split in two: the schedules the index holds at their
    /// claimed version (unchanged: their version), and the others.
    async fn vouch(
        &self,
        tenant: &TenantId,
        claimed: Vec<Claimed>,
    ) -> (HashMap<ScheduleId, i64>, Vec<ScheduleId>) {
        let keys = schedules_in(&claimed)
            .into_iter()
            .map(|schedule| TenantSchedule {
                tenant: tenant.clone(),
                schedule,
            })
            .collect();
        let Some(held) = self.ask(keys).await else {
            return (HashMap::new(), schedules_in(&claimed));
        };
        let mut unchanged: HashMap<ScheduleId, i64> = HashMap::new();
        let mut unknown: BTreeSet<ScheduleId> = BTreeSet::new();
        for c in claimed {
            let key = TenantSchedule {
                tenant: tenant.clone(),
                schedule: c.schedule,
            };
            if held.get(&key) == Some(&c.version) && !unknown.contains(&key.schedule) {
                unchanged.insert(key.schedule, c.version);
            } else {
                unchanged.remove(&key.schedule);
                unknown.insert(key.schedule);
            }
        }
        (unchanged, unknown.into_iter().collect())
    }

    /// The index's versions of `keys` (none: the query failed or ended).
    async fn ask(&self, keys: Vec<TenantSchedule>) -> Option<Held> {
        let (answer, answered) = oneshot::channel();
        let asked = MirroredAsk { keys, answer };
        let first = {
            let mut waiting = self.waiting.lock().expect("mirrored looks lock");
            match waiting.as_mut() {
                Some(queued) => {
                    queued.push(asked);
                    None
                }
                None => {
                    *waiting = Some(Vec::new());
                    Some(asked)
                }
            }
        };
        if let Some(asked) = first {
            let running = MirroredRun {
                waiting: self.waiting.clone(),
                done: false,
            };
            tokio::spawn(running.answer_all(self.index.clone(), vec![asked]));
        }
        answered.await.ok().flatten()
    }
}

/// The index's running query: if its task ends without finishing (a
/// panic), what waits is dropped (those looks read their tenants) and the
/// next ask starts afresh.
struct MirroredRun {
    waiting: Arc<Mutex<Option<Vec<MirroredAsk>>>>,
    done: bool,
}

impl MirroredRun {
    async fn answer_all(mut self, index: Arc<dyn ReminderIndex>, mut asked: Vec<MirroredAsk>) {
        while !asked.is_empty() {
            let keys: Vec<TenantSchedule> = asked
                .iter()
                .flat_map(|a| a.keys.iter().cloned())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let held = match index.mirrored_versions(&keys).await {
                Ok(held) => Some(Arc::new(held)),
                Err(e) => {
                    // Coalesced: one warning a query, not one a group.
                    warn!(schedules = keys.len(), error = %chain(&e), "reading the index's versions failed; these looks read their tenants' databases");
                    None
                }
            };
            for a in asked {
                // A caller past its deadline no longer listens.
                let _ = a.answer.send(held.clone());
            }
            let mut waiting = self.waiting.lock().expect("mirrored looks lock");
            asked = waiting.as_mut().map(std::mem::take).unwrap_or_default();
            if asked.is_empty() {
                *waiting = None;
                self.done = true;
            }
        }
    }
}

impl Drop for MirroredRun {
    fn drop(&mut self) {
        if !self.done {
            if let Ok(mut waiting) = self.waiting.lock() {
                *waiting = None;
            }
        }
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
    use toki_ports::testing::{MemoryIndex, MemoryTenantStore};

    fn claimed(schedule: &str, version: i64) -> Claimed {
        Claimed {
            schedule: schedule.parse().unwrap(),
            version,
        }
    }

    /// A store that counts its calls, and looks asking `index` first.
    async fn fixture(
        mirrored: &[(&str, i64)],
    ) -> (
        Arc<MemoryTenantStore>,
        Arc<dyn TenantStore>,
        Looks,
        TenantId,
    ) {
        let tenant: TenantId = "acme".parse().unwrap();
        let index = Arc::new(MemoryIndex::new(1));
        for (schedule, version) in mirrored {
            let schedule: ScheduleId = schedule.parse().unwrap();
            index
                .replace_schedule(&tenant, &schedule, *version, &[])
                .await
                .unwrap();
        }
        let store = Arc::new(MemoryTenantStore::default());
        let dyn_store: Arc<dyn TenantStore> = store.clone();
        (store, dyn_store, Looks::with_index(index), tenant)
    }

    /// The index holds every schedule at its claimed version: the tenant's
    /// database is not opened, and the answer is those versions.
    #[tokio::test]
    async fn schedules_the_index_holds_at_their_claim_leave_the_tenant_unread() {
        let (store, dyn_store, looks, tenant) = fixture(&[("a", 3), ("b", 1)]).await;
        let v = looks
            .versions(&tenant, &dyn_store, vec![claimed("a", 3), claimed("b", 1)])
            .await
            .unwrap();
        assert_eq!(store.calls(), 0, "the tenant's database was read");
        assert_eq!(v.get(&"a".parse::<ScheduleId>().unwrap()), Some(&3));
        assert_eq!(v.get(&"b".parse::<ScheduleId>().unwrap()), Some(&1));
    }

    /// A newer version in the index, none, or two claims of one schedule at
    /// different versions: the tenant's database answers for those (here
    /// it has none of them: gone), the index for the rest.
    #[tokio::test]
    async fn what_the_index_cannot_vouch_for_is_read_from_the_tenant() {
        let (store, dyn_store, looks, tenant) = fixture(&[("a", 4), ("b", 1), ("c", 2)]).await;
        let asked = vec![
            claimed("a", 3),
            claimed("b", 1),
            claimed("c", 1),
            claimed("c", 2),
            claimed("d", 1),
        ];
        let v = looks.versions(&tenant, &dyn_store, asked).await.unwrap();
        assert_eq!(store.calls(), 1);
        let only: Vec<_> = v.iter().map(|(s, v)| (s.as_str().to_owned(), *v)).collect();
        assert_eq!(
            only,
            vec![("b".to_owned(), 1)],
            "a, c and d are the tenant's word"
        );
    }

    /// The index down: every look reads its tenant, as without an index.
    #[tokio::test]
    async fn an_index_that_fails_sends_the_look_to_the_tenant() {
        let tenant: TenantId = "acme".parse().unwrap();
        let index = Arc::new(MemoryIndex::new(1));
        index
            .replace_schedule(&tenant, &"a".parse().unwrap(), 1, &[])
            .await
            .unwrap();
        index.set_down(true);
        let store = Arc::new(MemoryTenantStore::default());
        let dyn_store: Arc<dyn TenantStore> = store.clone();
        let looks = Looks::with_index(index);
        let v = looks
            .versions(&tenant, &dyn_store, vec![claimed("a", 1)])
            .await
            .unwrap();
        assert_eq!(store.calls(), 1);
        assert!(v.is_empty(), "the tenant's word: gone");
        assert!(looks.mirrored.unwrap().waiting.lock().unwrap().is_none());
    }

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
                    .versions(tenant, store, vec![claimed(&format!("s{i}"), 1)])
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
