//! A kill between send and record: a daemon's channels wrapped so that,
//! once armed, the daemon dies just after a channel took its messages and
//! before it can record them (the request reached Slack; the process died
//! before it read the answer).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::task::AbortHandle;

use toki_flow::Flow;
use toki_model::domain::{Channel, Instant};
use toki_ports::channel::{ChannelSender, Notification, SendError, SendResult};
use toki_ports::Clock;

/// One daemon slot's trap; it outlives the daemons it kills.
pub struct Trap {
    armed: AtomicBool,
    clock: Arc<dyn Clock>,
    state: Mutex<TrapState>,
}

#[derive(Default)]
struct TrapState {
    /// The daemon running now: its run task and its flow.
    victim: Option<(AbortHandle, Option<Arc<Flow>>)>,
    /// When it sprang, and how many notifications had gone out unrecorded.
    sprung: Option<(Instant, usize)>,
}

impl Trap {
    pub fn new(clock: Arc<dyn Clock>) -> Arc<Trap> {
        Arc::new(Trap {
            armed: AtomicBool::new(false),
            clock,
            state: Mutex::default(),
        })
    }

    /// The daemon the trap kills from now on.
    pub fn bind(&self, run: AbortHandle, flow: Option<Arc<Flow>>) {
        self.state.lock().expect("trap").victim = Some((run, flow));
    }

    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Disarms; if it sprang since it was armed: when, and how many
    /// notifications the daemon sent and never recorded.
    pub fn disarm(&self) -> Option<(Instant, usize)> {
        self.armed.store(false, Ordering::SeqCst);
        self.state.lock().expect("trap").sprung.take()
    }

    /// Kills the bound daemon as `kill -9` would: its run and its flow stop
    /// where they are, leases and claims left to lapse.
    fn spring(&self, sent: usize) {
        let mut state = self.state.lock().expect("trap");
        if let Some((run, flow)) = state.victim.take() {
            run.abort();
            if let Some(flow) = flow {
                flow.crash();
            }
        }
        state.sprung = Some((self.clock.now(), sent));
    }
}

/// A channel of one daemon, with its slot's trap.
pub struct Trapped {
    pub inner: Arc<dyn ChannelSender>,
    pub trap: Arc<Trap>,
}

#[async_trait]
impl ChannelSender for Trapped {
    fn channel(&self) -> Channel {
        self.inner.channel()
    }

    async fn warm_up(&self) {
        self.inner.warm_up().await
    }

    async fn send(&self, batch: &[Notification]) -> Vec<SendResult> {
        let results = self.inner.send(batch).await;
        let sent = results.iter().filter(|r| r.is_ok()).count();
        if sent > 0 && self.trap.armed.swap(false, Ordering::SeqCst) {
            self.trap.spring(sent);
            // The answers never reach the daemon: it is gone.
            std::future::pending::<()>().await;
        }
        results
    }

    async fn probe(&self) -> Result<(), SendError> {
        self.inner.probe().await
    }

    async fn already_sent(&self, n: &Notification) -> Option<Instant> {
        self.inner.already_sent(n).await
    }
}
