//! One poller while the queue is empty. Every worker long-polling an empty
//! queue costs the idle daemon W polls where one would do (on SQLite a
//! write transaction every 200 ms each: most of the daemon's CPU outside a
//! burst, BENCHMARKS.md). So once a receive comes back empty, the workers
//! take turns: one polls, the others wait for it; as soon as a receive
//! brings messages they all poll side by side again (a burst needs every
//! worker receiving). The queue port is the same for SQS and SQLite.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Mutex, MutexGuard};

pub(super) struct PollTurn {
    /// The last receive came back empty.
    idle: AtomicBool,
    turn: Mutex<()>,
}

impl Default for PollTurn {
    /// Idle at start: one worker polls until there is work.
    fn default() -> Self {
        PollTurn {
            idle: AtomicBool::new(true),
            turn: Mutex::new(()),
        }
    }
}

/// What a receive found, as far as the turn cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    Nothing,
    Messages,
}

impl PollTurn {
    /// Waits for the turn while the queue is idle (the guard is held for the
    /// poll); None at once, or as soon as another poll finds messages.
    pub(super) async fn take(&self) -> Option<MutexGuard<'_, ()>> {
        if !self.idle.load(Ordering::Acquire) {
            return None;
        }
        let turn = self.turn.lock().await;
        // Work came while this worker waited: poll beside the others.
        self.idle.load(Ordering::Acquire).then_some(turn)
    }

    pub(super) fn found(&self, found: Found) {
        self.idle.store(found == Found::Nothing, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn one_polls_while_idle_and_all_once_there_is_work() {
        let turn = Arc::new(PollTurn::default());
        let first = turn.take().await;
        assert!(first.is_some(), "idle: the first worker holds the turn");
        let t = turn.clone();
        let mut second = tokio::spawn(async move { t.take().await.is_some() });
        tokio::task::yield_now().await;
        assert!(
            futures::poll!(&mut second).is_pending(),
            "a second waits while the first polls an idle queue"
        );
        turn.found(Found::Messages);
        drop(first);
        assert!(
            !second.await.unwrap(),
            "work found: the waiter polls without the turn"
        );
        assert!(turn.take().await.is_none(), "busy: nobody waits");
        turn.found(Found::Nothing);
        assert!(turn.take().await.is_some(), "idle again: turns again");
    }
}
