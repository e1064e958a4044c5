//! Replayed events paced per tenant: a token bucket each (in this process),
//! taken before each replayed event is posted, so that however large a
//! replay and however often it is asked for, a tenant's endpoints get its
//! replayed events at no more than the rate (a tenant cannot make Toki a
//! reflector). Events sent for the first time are not paced: the tenant's
//! own deliveries bound them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use toki_model::domain::TenantId;
use tokio::time::Instant;

/// Buckets kept before the full ones are forgotten.
const FORGET_FULL_PAST: usize = 1024;

/// A tenant's replay tokens.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Every tenant's replay bucket: `burst` at once, then `rate` a second.
#[derive(Debug)]
pub struct ReplayPace {
    rate: f64,
    burst: u32,
    buckets: Mutex<HashMap<TenantId, Bucket>>,
}

impl ReplayPace {
    pub fn new(rate: f64, burst: u32) -> Self {
        ReplayPace {
            rate: rate.max(f64::MIN_POSITIVE),
            burst: burst.max(1),
            buckets: Mutex::default(),
        }
    }

    /// Waits for one of `tenant`'s replay tokens (on tokio's clock).
    pub async fn take(&self, tenant: &TenantId) {
        loop {
            let wait = match self.try_take(tenant, Instant::now()) {
                None => return,
                Some(wait) => wait,
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// A token now (None), or how long until there is one.
    fn try_take(&self, tenant: &TenantId, now: Instant) -> Option<Duration> {
        let mut buckets = self.buckets.lock().expect("pace lock");
        let burst = f64::from(self.burst);
        if buckets.len() >= FORGET_FULL_PAST && !buckets.contains_key(tenant) {
            // A full bucket says nothing a new one would not: forget those,
            // so the map holds only tenants replaying lately.
            let rate = self.rate;
            buckets.retain(|_, b| {
                b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * rate < burst
            });
        }
        let bucket = buckets.entry(tenant.clone()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let refilled = now.saturating_duration_since(bucket.at).as_secs_f64() * self.rate;
        bucket.tokens = (bucket.tokens + refilled).min(burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return None;
        }
        let wait = (1.0 - bucket.tokens) / self.rate;
        Some(Duration::try_from_secs_f64(wait).unwrap_or(Duration::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_then_the_rate_and_each_tenant_its_own() {
        let pace = ReplayPace::new(10.0, 5);
        let (a, b): (TenantId, TenantId) = ("a".parse().unwrap(), "b".parse().unwrap());
        let started = Instant::now();
        for _ in 0..25 {
            pace.take(&a).await;
        }
        // 5 at once, then 20 at 10 a second.
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        let before_b = Instant::now();
        pace.take(&b).await;
        assert_eq!(before_b.elapsed(), Duration::ZERO, "b has its own");
    }

    #[tokio::test(start_paused = true)]
    async fn buckets_refilled_are_forgotten() {
        let pace = ReplayPace::new(10.0, 5);
        for i in 0..FORGET_FULL_PAST {
            pace.take(&format!("t{i}").parse().unwrap()).await;
        }
        let busy: TenantId = "busy".parse().unwrap();
        assert_eq!(pace.buckets.lock().unwrap().len(), FORGET_FULL_PAST);
        tokio::time::advance(Duration::from_secs(1)).await;
        pace.take(&busy).await;
        assert_eq!(pace.buckets.lock().unwrap().len(), 1, "only the new one");
    }
}
