//! The debouncer's timers on tokio's (pausable) time, and an action that
//! records what it was asked to do.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::task::JoinSet;

use toki_model::debounce::{DebounceSettings, Edge};
use toki_model::Instant;
use toki_ports::{Clock, StoreResult};

use crate::debounce::{ActionError, DebounceAction, DebounceTimer, Debouncer};

/// One armed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Armed {
    pub key: String,
    pub token: String,
    pub at: Instant,
}

/// Timers that run the debouncer's checks on tokio's time, each in a task.
pub struct TokioTimers {
    clock: Arc<dyn Clock>,
    armed: Mutex<Vec<Armed>>,
    /// Set once the debouncer exists (it holds these timers).
    runner: Mutex<Option<Runner>>,
    tasks: Mutex<JoinSet<()>>,
}

struct Runner {
    debouncer: Debouncer,
    action: Arc<dyn DebounceAction>,
}

impl TokioTimers {
    pub fn new(clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(TokioTimers {
            clock,
            armed: Mutex::default(),
            runner: Mutex::default(),
            tasks: Mutex::default(),
        })
    }

    /// From now on every armed check runs `debouncer.check` with `action`
    /// (and the settings it was armed with).
    pub fn run_with(&self, debouncer: Debouncer, action: Arc<dyn DebounceAction>) {
        *self.runner.lock().expect("runner lock") = Some(Runner { debouncer, action });
    }

    /// Every check armed so far.
    pub fn armed(&self) -> Vec<Armed> {
        self.armed.lock().expect("armed lock").clone()
    }

    /// Forgets the checks not yet run, as a process that dies does with its
    /// in-memory timers (durable timers do not).
    pub fn drop_pending(&self) {
        self.tasks.lock().expect("tasks lock").abort_all();
    }
}

#[async_trait]
impl DebounceTimer for TokioTimers {
    async fn arm(
        &self,
        key: &str,
        token: &str,
        at: Instant,
        settings: &DebounceSettings,
    ) -> StoreResult<()> {
        self.armed.lock().expect("armed lock").push(Armed {
            key: key.to_owned(),
            token: token.to_owned(),
            at,
        });
        let runner = self.runner.lock().expect("runner lock");
        if let Some(r) = runner.as_ref() {
            let wait = toki_model::time::wait_between(self.clock.now(), at);
            let (debouncer, settings, action) =
                (r.debouncer.clone(), settings.clone(), r.action.clone());
            let (key, token) = (key.to_owned(), token.to_owned());
            self.tasks.lock().expect("tasks lock").spawn(async move {
                tokio::time::sleep(wait).await;
                let _ = debouncer
                    .check(&key, &token, &settings, action.as_ref())
                    .await;
            });
        }
        Ok(())
    }
}

/// One action taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acted {
    pub key: String,
    pub token: String,
    pub edge: Edge,
    pub at: Instant,
}

/// An action that records what it was asked to do, by the clock.
pub struct RecordingAction {
    clock: Arc<dyn Clock>,
    acted: Mutex<Vec<Acted>>,
    /// Woken at every action.
    pub notify: tokio::sync::Notify,
}

impl RecordingAction {
    pub fn new(clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(RecordingAction {
            clock,
            acted: Mutex::default(),
            notify: tokio::sync::Notify::new(),
        })
    }

    pub fn acted(&self) -> Vec<Acted> {
        self.acted.lock().expect("acted lock").clone()
    }

    /// The actions with distinct (key, token, edge): what an idempotent
    /// action would have done.
    pub fn distinct(&self) -> Vec<Acted> {
        let mut seen = std::collections::HashSet::new();
        self.acted()
            .into_iter()
            .filter(|a| seen.insert((a.key.clone(), a.token.clone(), a.edge)))
            .collect()
    }
}

#[async_trait]
impl DebounceAction for RecordingAction {
    async fn act(&self, key: &str, token: &str, edge: Edge) -> Result<(), ActionError> {
        self.acted.lock().expect("acted lock").push(Acted {
            key: key.to_owned(),
            token: token.to_owned(),
            edge,
            at: self.clock.now(),
        });
        self.notify.notify_waiters();
        Ok(())
    }
}
