//! Holdings: the messages and claims an in-flight batch holds, kept alive by a
//! heartbeat. A live holder renews its messages' visibility and its claims'
//! lease, so a short lease (seconds) is safe: a holder that died stops
//! renewing, and another process takes its deliveries over within a lease
//! rather than a visibility timeout of a minute, while a slow live holder is
//! never overtaken.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use toki_model::domain::TenantId;

/// What one batch holds.
#[derive(Debug, Default, Clone)]
pub struct Held {
    /// Messages and when each stops being hidden (tokio time).
    pub receipts: Vec<(String, tokio::time::Instant)>,
    /// Claims by tenant, and when they were last renewed.
    pub claims: Vec<(TenantId, String)>,
    pub renewed: Option<tokio::time::Instant>,
}

#[derive(Default)]
pub struct Holdings {
    next: AtomicU64,
    held: Mutex<HashMap<u64, Held>>,
    /// Messages held now (the in-flight gauge of `/metrics`).
    pub messages: std::sync::Arc<AtomicU64>,
}

impl Holdings {
    pub fn hold(&self, held: Held) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.messages
            .fetch_add(held.receipts.len() as u64, Ordering::Relaxed);
        self.held.lock().expect("holdings lock").insert(id, held);
        id
    }

    pub fn release(&self, id: u64) {
        if let Some(h) = self.held.lock().expect("holdings lock").remove(&id) {
            self.messages
                .fetch_sub(h.receipts.len() as u64, Ordering::Relaxed);
        }
    }

    /// Receipts hidden until before `soon`, marked renewed until `until`; and
    /// every claim token by tenant, if claims are due (not renewed since
    /// `claims_before`).
    pub fn due(
        &self,
        soon: tokio::time::Instant,
        until: tokio::time::Instant,
        claims_before: tokio::time::Instant,
        now: tokio::time::Instant,
    ) -> Due {
        let mut held = self.held.lock().expect("holdings lock");
        let mut due = Due::default();
        for h in held.values_mut() {
            for (receipt, hidden_until) in &mut h.receipts {
                if *hidden_until <= now {
                    due.lapsed += 1;
                }
                if *hidden_until < soon {
                    due.receipts.push(receipt.clone());
                    *hidden_until = until;
                }
            }
            if h.renewed.is_none_or(|r| r < claims_before) {
                h.renewed = Some(now);
                for (tenant, token) in &h.claims {
                    due.claims
                        .entry(tenant.clone())
                        .or_default()
                        .push(token.clone());
                }
            }
        }
        due
    }
}

/// What a heartbeat renews.
#[derive(Debug, Default)]
pub struct Due {
    /// Messages to hide again.
    pub receipts: Vec<String>,
    /// Claim tokens by tenant.
    pub claims: HashMap<TenantId, Vec<String>>,
    /// Held messages whose visibility ran out before this beat: the queue
    /// may have given them to another worker while their holder is alive.
    pub lapsed: usize,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_held_message_past_its_visibility_is_counted_as_lapsed() {
        let holdings = Holdings::default();
        let now = tokio::time::Instant::now();
        let s = Duration::from_secs(1);
        holdings.hold(Held {
            receipts: vec![("late".into(), now - s), ("fine".into(), now + 4 * s)],
            claims: Vec::new(),
            renewed: Some(now),
        });
        let due = holdings.due(now + 5 * s, now + 10 * s, now - 3 * s, now);
        assert_eq!(due.lapsed, 1);
        assert_eq!(due.receipts, ["late", "fine"]);
        // Extended now: the next beat finds nothing lapsed.
        assert_eq!(
            holdings
                .due(now + 5 * s, now + 10 * s, now - 3 * s, now)
                .lapsed,
            0
        );
    }
}
