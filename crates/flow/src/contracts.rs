//! Tenants' contracts read from the directory together: a burst over
//! thousands of tenants needs each one's contract at its first send, and
//! one request per tenant would queue them at the directory (one request
//! at a time per tenant costs a round trip each; together, a few batches).
//! What asks while a read runs goes in the next read, whatever its tenant.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use toki_model::limits::ContractLimits;
use toki_model::TenantId;
use toki_ports::{StoreError, TenantDirectory};

/// A tenant's contract as read (none: no entry), or why it could not be.
pub(crate) type ContractRead = Result<Option<ContractLimits>, ContractReadError>;

#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ContractReadError {
    #[error(transparent)]
    Store(Arc<StoreError>),
    /// The read's task ended without answering (the runtime stopping).
    #[error("the contract read ended without an answer")]
    Abandoned,
}

struct Asked {
    tenant: TenantId,
    answer: oneshot::Sender<ContractRead>,
}

/// The reads waiting for the running one (`None`: none is running).
type Waiting = Arc<Mutex<Option<Vec<Asked>>>>;

pub(crate) struct ContractReader {
    directory: Arc<dyn TenantDirectory>,
    waiting: Waiting,
}

impl ContractReader {
    pub(crate) fn new(directory: Arc<dyn TenantDirectory>) -> Self {
        ContractReader {
            directory,
            waiting: Arc::default(),
        }
    }

    /// `tenant`'s contract now, read with whatever else is asked meanwhile.
    pub(crate) async fn read(&self, tenant: TenantId) -> ContractRead {
        let (answer, answered) = oneshot::channel();
        let asked = Asked { tenant, answer };
        let first = {
            let mut waiting = self.waiting.lock().expect("contract reads lock");
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
            let run = Run {
                waiting: self.waiting.clone(),
                done: false,
            };
            // A task of its own: a caller that stops waiting leaves the
            // others' answers whole.
            tokio::spawn(run.answer_all(self.directory.clone(), vec![asked]));
        }
        answered.await.unwrap_or(Err(ContractReadError::Abandoned))
    }
}

/// The running read: if its task ends without finishing (a panic), what
/// waits is dropped (those callers get an error) and the next read starts
/// afresh.
struct Run {
    waiting: Waiting,
    done: bool,
}

impl Run {
    async fn answer_all(mut self, directory: Arc<dyn TenantDirectory>, mut asked: Vec<Asked>) {
        while !asked.is_empty() {
            let tenants: Vec<TenantId> = asked
                .iter()
                .map(|a| a.tenant.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let read = directory
                .get_many(&tenants)
                .await
                .map_err(|e| ContractReadError::Store(Arc::new(e)));
            for a in asked {
                let answer = match &read {
                    Ok(found) => Ok(found.get(&a.tenant).map(|r| r.limits.clone())),
                    Err(e) => Err(e.clone()),
                };
                // A caller that stopped waiting no longer listens.
                let _ = a.answer.send(answer);
            }
            let mut waiting = self.waiting.lock().expect("contract reads lock");
            asked = waiting.as_mut().map(std::mem::take).unwrap_or_default();
            if asked.is_empty() {
                *waiting = None;
                self.done = true;
            }
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if !self.done {
            if let Ok(mut waiting) = self.waiting.lock() {
                *waiting = None;
            }
        }
    }
}
