//! The heartbeat: keeps what in-flight batches hold alive. Every third of the
//! visibility timeout it extends the messages that would become visible within
//! half of it, and renews every claim not renewed for a third of it, so a
//! live holder is never overtaken, and a dead one is within a lease.

use std::time::Duration;

use futures::future::join_all;
use tokio::sync::watch;
use tracing::{debug, warn};

use toki_model::error::chain;

use super::Daemon;

/// How often the heartbeat beats, for a lease of `visibility`.
pub(super) fn beat_every(visibility: Duration) -> Duration {
    (visibility / 3).max(Duration::from_millis(100))
}

impl Daemon {
    pub(super) async fn heartbeat(self: std::sync::Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let visibility = self.settings.visibility;
        let every = beat_every(visibility);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                // Holders still drain after shutdown: beat until the run ends it.
                _ = shutdown.changed() => {}
            }
            // Not during an instant's sends: with a lead longer than a beat,
            // a burst's claims, made a lead ahead, came due for renewal at
            // about their instant, and thousands of rows were written beside
            // the sends. Put off by a quarter of a beat at most, which the
            // margins absorb: a claim is renewed after a third of its lease,
            // a message extended half a visibility before it would reappear.
            self.burst.quiet(every / 4).await;
            self.beat(visibility, every).await;
        }
    }

    /// One beat: extend what is about to reappear, renew what is about to lapse.
    async fn beat(&self, visibility: Duration, every: Duration) {
        let now = tokio::time::Instant::now();
        let due = self
            .holdings
            .due(now + visibility / 2, now + visibility, now - every, now);
        let (receipts, claims) = (due.receipts, due.claims);
        if due.lapsed > 0 {
            self.stats.add(&self.stats.lapsed, due.lapsed);
            warn!(
                messages = due.lapsed,
                "held messages became visible before the heartbeat extended them; the queue may give them to another worker, which waits for this holder's claims (the heartbeat was late: an overloaded process or a slow queue)"
            );
        }
        if !receipts.is_empty() {
            debug!(messages = receipts.len(), "extending held messages");
        }
        if let Err(e) = self.queue.extend_visibility(&receipts, visibility).await {
            warn!(error = %chain(&e), "extending held messages failed; they may be received again (their claims keep them from sending twice)");
        }
        let clock_now = self.clock.now();
        join_all(claims.into_iter().map(|(tenant, tokens)| async move {
            let renewed = match self.stores.open(&tenant).await {
                Ok(store) => store.renew_claims(&tokens, clock_now).await,
                Err(e) => Err(e),
            };
            if let Err(e) = renewed {
                warn!(%tenant, error = %chain(&e), "renewing claims failed; another daemon may take them over");
            }
        }))
        .await;
    }
}
