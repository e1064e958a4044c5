//! A kill between send and record: a daemon's channels wrapped so that,
//! once armed, the daemon dies just after a channel took its messages and
//! before it can record them (the request reached Slack; the process died
//! before it read the answer). Nothing the daemon had not sent by then goes
//! out afterwards, as with `kill -9`.

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
    /// The bound daemon was killed: its later sends (on any channel, from
    /// tasks the abort has not reached yet) never happen.
    dead: AtomicBool,
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
            dead: AtomicBool::new(false),
            clock,
            state: Mutex::default(),
        })
    }

    /// The daemon the trap kills from now on.
    pub fn bind(&self, run: AbortHandle, flow: Option<Arc<Flow>>) {
        self.state.lock().expect("trap").victim = Some((run, flow));
        self.dead.store(false, Ordering::SeqCst);
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
        self.dead.store(true, Ordering::SeqCst);
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

impl Trapped {
    /// After the inner channel answered: springs the trap if it is armed
    /// and something went out, and then never returns (the daemon is gone).
    async fn after_send(&self, results: Vec<SendResult>) -> Vec<SendResult> {
        let sent = results.iter().filter(|r| r.is_ok()).count();
        if sent > 0 && self.trap.armed.swap(false, Ordering::SeqCst) {
            self.trap.spring(sent);
        }
        self.unless_dead().await;
        results
    }

    /// Pends forever once the daemon was killed.
    async fn unless_dead(&self) {
        if self.trap.dead.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }
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
        self.unless_dead().await;
        let results = self.inner.send(batch).await;
        self.after_send(results).await
    }

    async fn send_at(&self, batch: &[Notification], at: tokio::time::Instant) -> Vec<SendResult> {
        self.unless_dead().await;
        let results = self.inner.send_at(batch, at).await;
        self.after_send(results).await
    }

    async fn probe(&self) -> Result<(), SendError> {
        self.inner.probe().await
    }

    async fn already_sent(&self, n: &Notification) -> Option<Instant> {
        self.inner.already_sent(n).await
    }
}
