//! A daemon that stops while a long poll is open, on a queue that keeps such
//! a poll open (SQS): what the poll still receives is handed back at once
//! rather than hidden for its visibility timeout with no one to work on it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::daemon::Daemon;
use crate::testing::TestKit;
use toki_ports::testing::MemoryQueue;
use toki_ports::{
    AbandonedPoll, BatchSent, ChannelSender, DelayQueue, OutgoingMessage, QueueDepth,
    ReceivedMessage, StoreResult,
};

/// The memory queue, with long polls that outlive their caller as SQS's do:
/// each receive runs in a task of its own, which finishes (and takes what
/// becomes visible) whether or not anyone still waits for it.
struct PollsStayOpen(Arc<MemoryQueue>);

#[async_trait]
impl DelayQueue for PollsStayOpen {
    fn abandoned_poll(&self) -> AbandonedPoll {
        AbandonedPoll::StaysOpen
    }
    async fn receive(
        &self,
        max: usize,
        wait: Duration,
        visibility: Duration,
    ) -> StoreResult<Vec<ReceivedMessage>> {
        let queue = self.0.clone();
        let poll = tokio::spawn(async move { queue.receive(max, wait, visibility).await });
        poll.await.expect("the poll task")
    }
    async fn send_batch(&self, messages: &[OutgoingMessage]) -> StoreResult<BatchSent> {
        self.0.send_batch(messages).await
    }
    async fn delete_batch(&self, receipts: &[String]) -> StoreResult<()> {
        self.0.delete_batch(receipts).await
    }
    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> StoreResult<()> {
        self.0.change_visibility(receipt, timeout).await
    }
    async fn receive_limit(&self) -> StoreResult<Option<u32>> {
        self.0.receive_limit().await
    }
    async fn renew(&self, m: &ReceivedMessage, delay: Duration, why: &str) -> StoreResult<()> {
        self.0.renew(m, delay, why).await
    }
    async fn dead_letter(&self, m: &ReceivedMessage, reason: &str) -> StoreResult<()> {
        self.0.dead_letter(m, reason).await
    }
    async fn depth(&self) -> StoreResult<QueueDepth> {
        self.0.depth().await
    }
    async fn dead_letters(&self, max: usize, hold: Duration) -> StoreResult<Vec<ReceivedMessage>> {
        self.0.dead_letters(max, hold).await
    }
    async fn redrive(&self, letters: &[ReceivedMessage]) -> StoreResult<usize> {
        self.0.redrive(letters).await
    }
    async fn release_dead_letters(&self, letters: &[ReceivedMessage]) -> StoreResult<()> {
        self.0.release_dead_letters(letters).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_poll_open_at_shutdown_hands_back_what_it_receives() {
    let kit = TestKit::new();
    let mut settings = kit.daemon_settings.clone();
    settings.workers = 1;
    let channels: Vec<Arc<dyn ChannelSender>> = vec![kit.chat.clone()];
    let daemon = Arc::new(Daemon::new(
        Arc::new(PollsStayOpen(kit.queue.clone())),
        kit.stores.clone(),
        channels,
        kit.clock.clone(),
        kit.marks.clone(),
        settings.clone(),
    ));
    let (stop, shutdown) = watch::channel(false);
    let run = tokio::spawn(daemon.run(shutdown));
    // Virtual time: the worker is in its long poll once everything is idle.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.send_replace(true);
    tokio::time::sleep(Duration::from_millis(1)).await;
    // Becomes visible while the abandoned poll is still open at the queue.
    let message = OutgoingMessage {
        id: "0".into(),
        body: "due while the daemon stops".into(),
        attributes: Default::default(),
        delay: Duration::ZERO,
        group: None,
    };
    kit.queue.send_batch(&[message]).await.unwrap();
    run.await.unwrap();
    // Whatever polls are still open get their turn.
    tokio::time::sleep(Duration::from_millis(1)).await;

    let back = kit
        .queue
        .receive(10, Duration::ZERO, settings.visibility)
        .await
        .unwrap();
    assert_eq!(
        back.len(),
        1,
        "visible again at once, not hidden for {:?}",
        settings.visibility
    );
    assert_eq!(back[0].receive_count, 2, "the open poll had received it");
}
