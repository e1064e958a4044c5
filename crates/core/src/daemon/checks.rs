//! Debounce checks arriving on the delay queue: run, then acknowledged; a
//! check that fails comes back with backoff and, failing for longer than the
//! retry policy allows past its instant, is dead-lettered.

use std::sync::Arc;

use tracing::warn;

use crate::debounce::{DebounceAction, Debouncer};
use toki_model::debounce::DebounceSettings;
use toki_model::error::chain;
use toki_ports::message::DebounceCheck;
use toki_ports::ReceivedMessage;

use super::work::MessageFate;
use super::{overdue, Daemon};

/// What a daemon needs to run debounce checks.
#[derive(Clone)]
pub struct DebounceChecks {
    pub debouncer: Debouncer,
    /// For checks that carry no settings of their own.
    pub settings: DebounceSettings,
    pub action: Arc<dyn DebounceAction>,
}

impl Daemon {
    pub(super) async fn run_checks(
        &self,
        checks: Vec<(ReceivedMessage, DebounceCheck)>,
    ) -> Vec<(ReceivedMessage, MessageFate)> {
        let mut fates = Vec::with_capacity(checks.len());
        for (msg, check) in checks {
            let result = match &self.debounce {
                None => Err("this daemon runs no debounce checks".to_owned()),
                Some(d) => d
                    .debouncer
                    .check(
                        &check.key,
                        &check.token,
                        check.settings.as_ref().unwrap_or(&d.settings),
                        d.action.as_ref(),
                    )
                    .await
                    .map_err(|e| chain(&e)),
            };
            let fate = match result {
                Ok(_) => MessageFate::Done,
                Err(reason) => {
                    warn!(key = %check.key, %reason, "debounce check failed; it comes back");
                    MessageFate::Unprocessed {
                        reason,
                        overdue: overdue(toki_model::domain::DueAt(check.due), self.clock.now()),
                    }
                }
            };
            fates.push((msg, fate));
        }
        fates
    }
}
