//! The instant's sends first. While batches are sending at a due instant,
//! a batch that has sent waits (a little) before it records its rows and
//! acknowledges its messages, so that the first batches' database writes and
//! queue deletes do not take the CPU from the last batches' sends. Measured
//! on the aws stack on two cores, where the emulated queue's deletes cost
//! Python CPU at the instant (BENCHMARKS.md). A crash in the wait is a crash
//! between send and record, which the claims already cover.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// The longest a batch defers its records and acknowledgements.
pub(super) const MAX_DEFER: Duration = Duration::from_millis(500);

#[derive(Default)]
pub(super) struct Burst {
    sending: AtomicUsize,
    quiet: Notify,
}

/// A batch sending now (from its last look to its last answer).
pub(super) struct Sending<'a>(&'a Burst);

impl Burst {
    pub(super) fn sending(&self) -> Sending<'_> {
        self.sending.fetch_add(1, Ordering::AcqRel);
        Sending(self)
    }

    /// Returns once no batch is sending, or after `at_most`.
    pub(super) async fn quiet(&self, at_most: Duration) {
        let deadline = tokio::time::Instant::now() + at_most;
        loop {
            let notified = self.quiet.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.sending.load(Ordering::Acquire) == 0 {
                return;
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(deadline) => return,
            }
        }
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        if self.0.sending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.quiet.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn quiet_waits_for_the_last_sender_and_no_longer_than_asked() {
        let burst = std::sync::Arc::new(Burst::default());
        let start = tokio::time::Instant::now();
        burst.quiet(MAX_DEFER).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "nothing sending: at once");

        let b = burst.clone();
        let sender = tokio::spawn(async move {
            let _sending = b.sending();
            tokio::time::sleep(Duration::from_millis(100)).await;
        });
        tokio::task::yield_now().await;
        burst.quiet(MAX_DEFER).await;
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(100),
            "until the sender is done"
        );
        sender.await.unwrap();

        let _stuck = burst.sending();
        let start = tokio::time::Instant::now();
        burst.quiet(MAX_DEFER).await;
        assert_eq!(start.elapsed(), MAX_DEFER, "no longer than asked");
    }
}
