//! A channel that records what it sends (at the clock's instant), and can be
//! told to fail or to hold its sends, for tests of the services' logic.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::{watch, Notify};

use crate::channel::{ChannelSender, Notification, SendError, SendResult};
use crate::Clock;
use toki_model::domain::{Channel, DeliveryKey, DueAt, Instant, TenantId};

/// One notification as the channel sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct SentNotification {
    pub tenant: TenantId,
    pub key: DeliveryKey,
    pub version: i64,
    pub due_at: DueAt,
    pub at: Instant,
    pub subject: String,
    pub text: String,
    pub html: Option<String>,
}

impl SentNotification {
    /// at − due_at, in milliseconds.
    pub fn lateness_ms(&self) -> i64 {
        (self.at - self.due_at.0).num_milliseconds()
    }
}

pub struct RecordingChannel {
    channel: Channel,
    clock: Arc<dyn Clock>,
    sent: Mutex<Vec<SentNotification>>,
    /// Failures to answer the next sends with, one per notification, in order.
    failures: Mutex<VecDeque<SendError>>,
    /// While true, sends wait.
    held: watch::Sender<bool>,
    attempts: AtomicUsize,
    attempted: Notify,
    /// While set, every send and probe fails with it (the service is down).
    down: Mutex<Option<SendError>>,
    probes: AtomicUsize,
    /// Whether `already_sent` answers from what was sent (as Slack's history does).
    looks_up: std::sync::atomic::AtomicBool,
}

impl RecordingChannel {
    pub fn new(channel: Channel, clock: Arc<dyn Clock>) -> Self {
        RecordingChannel {
            channel,
            clock,
            sent: Mutex::default(),
            failures: Mutex::default(),
            held: watch::Sender::new(false),
            attempts: AtomicUsize::new(0),
            attempted: Notify::new(),
            down: Mutex::new(None),
            probes: AtomicUsize::new(0),
            looks_up: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// While `Some`, every send and probe fails with the error.
    pub fn set_down(&self, error: Option<SendError>) {
        *self.down.lock().expect("down lock") = error;
    }

    /// Probes so far.
    pub fn probes(&self) -> usize {
        self.probes.load(Ordering::SeqCst)
    }

    /// Makes `already_sent` answer from what this channel sent.
    pub fn look_up_sent(&self, on: bool) {
        self.looks_up.store(on, Ordering::SeqCst);
    }

    /// What went out, in order.
    pub fn sent(&self) -> Vec<SentNotification> {
        self.sent.lock().expect("sent lock").clone()
    }

    /// The next `n` notifications fail with `error`.
    pub fn fail_next(&self, n: usize, error: SendError) {
        let mut f = self.failures.lock().expect("failures lock");
        f.extend(std::iter::repeat_n(error, n));
    }

    /// Sends wait while held.
    pub fn hold(&self, held: bool) {
        self.held.send_replace(held);
    }

    /// Batches the channel was asked to send so far.
    pub fn attempts(&self) -> usize {
        self.attempts.load(Ordering::SeqCst)
    }

    /// Resolves once at least `n` batches were attempted.
    pub async fn attempted(&self, n: usize) {
        loop {
            let next = self.attempted.notified();
            tokio::pin!(next);
            next.as_mut().enable();
            if self.attempts() >= n {
                return;
            }
            next.await;
        }
    }
}

#[async_trait]
impl ChannelSender for RecordingChannel {
    fn channel(&self) -> Channel {
        self.channel
    }

    async fn probe(&self) -> Result<(), SendError> {
        self.probes.fetch_add(1, Ordering::SeqCst);
        match self.down.lock().expect("down lock").clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    async fn already_sent(&self, n: &Notification) -> Option<Instant> {
        if !self.looks_up.load(Ordering::SeqCst) {
            return None;
        }
        let sent = self.sent.lock().expect("sent lock");
        sent.iter()
            .find(|s| s.tenant == n.tenant && s.key == n.key)
            .map(|s| s.at)
    }

    async fn send(&self, batch: &[Notification]) -> Vec<SendResult> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.attempted.notify_waiters();
        let mut held = self.held.subscribe();
        let _ = held.wait_for(|h| !h).await;
        let at = self.clock.now();
        let mut out = Vec::with_capacity(batch.len());
        let down = self.down.lock().expect("down lock").clone();
        for n in batch {
            let failure = match &down {
                Some(e) => Some(e.clone()),
                None => self.failures.lock().expect("failures lock").pop_front(),
            };
            match failure {
                Some(e) => out.push(Err(e)),
                None => {
                    self.sent.lock().expect("sent lock").push(SentNotification {
                        tenant: n.tenant.clone(),
                        key: n.key.clone(),
                        version: n.version,
                        due_at: n.due_at,
                        at,
                        subject: n.subject().to_owned(),
                        text: n.text.clone(),
                        html: n.html().map(str::to_owned),
                    });
                    out.push(Ok(at));
                }
            }
        }
        out
    }
}
