//! A delay queue in memory with SQS's semantics: per-message delay, visibility
//! timeout, receive count, dead-letter after N receives, batches of 10, and a
//! long poll that wakes as soon as a message becomes visible.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::error::{StoreError, StoreResult};
use crate::message::Attributes;
use crate::{
    check_batch, with_dead_letter_reason, with_renewal_reason, BatchSent, Clock, DelayQueue,
    OutgoingMessage, QueueDepth, ReceivedMessage, RefusedMessage, DEAD_LETTER_REASON,
};
use toki_model::domain::Instant;
use toki_model::error::ValidationError;
use toki_model::time::to_chrono;

#[derive(Debug, Clone)]
struct Stored {
    body: String,
    attributes: Attributes,
    visible_at: Instant,
    receive_count: u32,
    dead: bool,
}

/// Decides whether the queue refuses a message of a batch, and why.
type Refusal = Box<dyn Fn(&OutgoingMessage) -> Option<String> + Send + Sync>;

pub struct MemoryQueue {
    clock: Arc<dyn Clock>,
    max_receives: u32,
    messages: Mutex<(u64, BTreeMap<u64, Stored>)>,
    sent: Notify,
    down: AtomicBool,
    refuse: Mutex<Option<Refusal>>,
    /// The next this many messages sent are stored twice.
    copies: std::sync::atomic::AtomicUsize,
}

impl MemoryQueue {
    pub fn new(clock: Arc<dyn Clock>, max_receives: u32) -> Self {
        MemoryQueue {
            clock,
            max_receives: max_receives.max(1),
            messages: Mutex::default(),
            sent: Notify::new(),
            down: AtomicBool::new(false),
            refuse: Mutex::new(None),
            copies: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// From now on the queue refuses the messages of a batch for which `f`
    /// gives a reason, and takes the others (SQS's partial batch failure).
    pub fn refuse_when(
        &self,
        f: impl Fn(&OutgoingMessage) -> Option<String> + Send + Sync + 'static,
    ) {
        *self.refuse.lock().expect("refuse lock") = Some(Box::new(f));
    }

    /// The next `n` messages sent are stored twice, as a standard SQS queue
    /// may deliver a message more than once.
    pub fn copy_next(&self, n: usize) {
        self.copies.store(n, Ordering::SeqCst);
    }

    /// Whether the message being stored gets a copy (one of the `n` left).
    fn take_copy(&self) -> bool {
        self.copies
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// While down, every call fails as an unreachable service would.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn check_up(&self) -> StoreResult<()> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable(
                "memory queue",
                std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "queue is down"),
            ));
        }
        Ok(())
    }

    /// Dead-lettered messages, oldest first.
    pub fn dead_lettered(&self) -> Vec<ReceivedMessage> {
        let m = self.messages.lock().expect("queue lock");
        m.1.iter()
            .filter(|(_, s)| s.dead)
            .map(|(id, s)| received(*id, s))
            .collect()
    }

    fn try_receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> (Vec<ReceivedMessage>, Option<Instant>) {
        let now = self.clock.now();
        let mut m = self.messages.lock().expect("queue lock");
        let mut got = Vec::new();
        let mut next: Option<Instant> = None;
        for (id, s) in m.1.iter_mut().filter(|(_, s)| !s.dead) {
            if s.visible_at > now {
                next = Some(next.map_or(s.visible_at, |n| n.min(s.visible_at)));
                continue;
            }
            // Received too often: to the dead-letter queue instead of handed out again.
            if s.receive_count >= self.max_receives {
                s.dead = true;
                continue;
            }
            if got.len() < max {
                s.receive_count += 1;
                s.visible_at = now + to_chrono(visibility);
                got.push(received(*id, s));
            }
        }
        (got, next)
    }

    fn with_receipt<T>(
        &self,
        receipt: &str,
        f: impl FnOnce(&mut BTreeMap<u64, Stored>, u64) -> T,
    ) -> StoreResult<Option<T>> {
        let (id, count) = parse_receipt(receipt)?;
        let mut m = self.messages.lock().expect("queue lock");
        match m.1.get(&id) {
            // Only the latest receiver may delete or extend.
            Some(s) if s.receive_count == count && !s.dead => Ok(Some(f(&mut m.1, id))),
            _ => Ok(None),
        }
    }
}

fn received(id: u64, s: &Stored) -> ReceivedMessage {
    ReceivedMessage {
        receipt: crate::receipt(id, s.receive_count),
        body: s.body.clone(),
        attributes: s.attributes.clone(),
        receive_count: s.receive_count,
    }
}

fn parse_receipt(r: &str) -> StoreResult<(u64, u32)> {
    Ok(crate::parse_receipt(r)?)
}

#[async_trait]
impl DelayQueue for MemoryQueue {
    async fn send_batch(&self, messages: &[OutgoingMessage]) -> StoreResult<BatchSent> {
        self.check_up()?;
        check_batch(messages)?;
        let now = self.clock.now();
        let mut sent = BatchSent::default();
        {
            let refuse = self.refuse.lock().expect("refuse lock");
            let mut m = self.messages.lock().expect("queue lock");
            for (index, msg) in messages.iter().enumerate() {
                if let Some(reason) = refuse.as_ref().and_then(|f| f(msg)) {
                    sent.refused.push(RefusedMessage { index, reason });
                    continue;
                }
                for _ in 0..if self.take_copy() { 2 } else { 1 } {
                    m.0 += 1;
                    let id = m.0;
                    m.1.insert(
                        id,
                        Stored {
                            body: msg.body.clone(),
                            attributes: msg.attributes.clone(),
                            visible_at: now + to_chrono(msg.delay),
                            receive_count: 0,
                            dead: false,
                        },
                    );
                }
            }
        }
        self.sent.notify_waiters();
        Ok(sent)
    }

    async fn receive(
        &self,
        max: usize,
        wait: Duration,
        visibility: Duration,
    ) -> StoreResult<Vec<ReceivedMessage>> {
        self.check_up()?;
        if !(1..=10).contains(&max) {
            return Err(ValidationError::new("max", format!("must be 1..=10, got {max}")).into());
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.sent.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (got, next) = self.try_receive(max, visibility);
            if !got.is_empty() {
                return Ok(got);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let mut wake = deadline;
            if let Some(at) = next {
                let in_ = toki_model::time::wait_between(self.clock.now(), at);
                wake = wake.min(now + in_);
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    async fn delete_batch(&self, receipts: &[String]) -> StoreResult<()> {
        self.check_up()?;
        for r in receipts {
            self.with_receipt(r, |m, id| m.remove(&id))?;
        }
        Ok(())
    }

    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> StoreResult<()> {
        self.check_up()?;
        let visible_at = self.clock.now() + to_chrono(timeout);
        self.with_receipt(receipt, |m, id| {
            if let Some(s) = m.get_mut(&id) {
                s.visible_at = visible_at;
            }
        })?;
        // Waiting receivers recompute when the next message becomes visible.
        self.sent.notify_waiters();
        Ok(())
    }

    async fn dead_letter(&self, message: &ReceivedMessage, reason: &str) -> StoreResult<()> {
        self.check_up()?;
        self.with_receipt(&message.receipt, |m, id| {
            if let Some(s) = m.get_mut(&id) {
                s.dead = true;
                s.attributes = with_dead_letter_reason(&s.attributes, reason);
            }
        })?;
        Ok(())
    }

    async fn receive_limit(&self) -> StoreResult<Option<u32>> {
        Ok(Some(self.max_receives))
    }

    async fn renew(
        &self,
        message: &ReceivedMessage,
        delay: Duration,
        why: &str,
    ) -> StoreResult<()> {
        self.check_up()?;
        let visible_at = self.clock.now() + to_chrono(delay);
        let (id, count) = parse_receipt(&message.receipt)?;
        let mut m = self.messages.lock().expect("queue lock");
        // Only the latest receiver renews; a new id, as SQS gives the copy,
        // so that no old receipt ever matches it.
        match m.1.get(&id) {
            Some(s) if s.receive_count == count && !s.dead => {}
            _ => return Ok(()),
        }
        let old = m.1.remove(&id).expect("just seen");
        m.0 += 1;
        let new_id = m.0;
        m.1.insert(
            new_id,
            Stored {
                attributes: with_renewal_reason(&old.attributes, why),
                visible_at,
                receive_count: 0,
                ..old
            },
        );
        drop(m);
        self.sent.notify_waiters();
        Ok(())
    }

    async fn depth(&self) -> StoreResult<QueueDepth> {
        self.check_up()?;
        let m = self.messages.lock().expect("queue lock");
        let now = self.clock.now();
        let mut d = QueueDepth::default();
        for s in m.1.values() {
            if s.dead {
                d.dead_letters += 1;
                continue;
            }
            d.messages += 1;
            match (s.visible_at > now, s.receive_count) {
                (false, _) => d.visible += 1,
                (true, 0) => d.delayed += 1,
                (true, _) => d.in_flight += 1,
            }
        }
        Ok(d)
    }

    async fn dead_letters(&self, max: usize, _hold: Duration) -> StoreResult<Vec<ReceivedMessage>> {
        self.check_up()?;
        Ok(self.dead_lettered().into_iter().take(max).collect())
    }

    async fn redrive(&self, letters: &[ReceivedMessage]) -> StoreResult<usize> {
        self.check_up()?;
        let now = self.clock.now();
        let mut moved = 0;
        let mut m = self.messages.lock().expect("queue lock");
        for l in letters {
            let (id, _) = parse_receipt(&l.receipt)?;
            if let Some(s) = m.1.get_mut(&id).filter(|s| s.dead) {
                s.dead = false;
                s.attributes.remove(DEAD_LETTER_REASON);
                s.receive_count = 0;
                s.visible_at = now;
                moved += 1;
            }
        }
        drop(m);
        self.sent.notify_waiters();
        Ok(moved)
    }

    async fn release_dead_letters(&self, _letters: &[ReceivedMessage]) -> StoreResult<()> {
        Ok(())
    }
}
