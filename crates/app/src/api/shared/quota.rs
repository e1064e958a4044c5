//! Each tenant's share of the API: a token bucket (rate and burst) and a cap
//! on requests at once, taken by a middleware on the tenant routes after
//! the request is authenticated, so that a wrong key spends nobody's quota
//! and only tenants that exist get state here (the map is bounded by the
//! directory). Over either: 429 with `Retry-After`, naming the limit.
//!
//! Per process: `toki serve` instances and Lambda instances each keep
//! their own, so a fleet of N lets a tenant through about N times as much.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use toki_core::registrar::Registrar;
use toki_model::error::chain;
use toki_model::quota::{ApiQuota, PerSecond};
use toki_model::TenantId;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::error::{ApiError, ErrorCode};

/// A token bucket: `burst` requests at once after a quiet spell, then
/// `rate` a second. On tokio's clock, so tests can pause it.
#[derive(Debug)]
pub(crate) struct Bucket {
    rate: PerSecond,
    burst: u32,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket.
    pub(crate) fn new(rate: PerSecond, burst: u32, now: Instant) -> Self {
        Bucket {
            rate,
            burst,
            tokens: f64::from(burst),
            at: now,
        }
    }

    /// Takes a token, or says how long until there is one.
    pub(crate) fn take(&mut self, now: Instant) -> Result<(), Duration> {
        self.peek(now)?;
        self.tokens -= 1.0;
        Ok(())
    }

    /// Whether there is a token (none is taken), or how long until there is one.
    pub(crate) fn peek(&mut self, now: Instant) -> Result<(), Duration> {
        if self.tokens(now) >= 1.0 {
            return Ok(());
        }
        // Saturates rather than panics on a rate no check let through.
        let wait = (1.0 - self.tokens) / self.rate.0;
        Err(Duration::try_from_secs_f64(wait).unwrap_or(Duration::MAX))
    }

    /// The tokens there are now (refilled since the last look).
    pub(crate) fn tokens(&mut self, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate.0).min(f64::from(self.burst));
        self.at = now;
        self.tokens
    }

    /// Whether the bucket has refilled to its burst.
    pub(crate) fn is_full(&mut self, now: Instant) -> bool {
        self.tokens(now) >= f64::from(self.burst)
    }
}

/// `Retry-After` in whole seconds, rounded up: a client that waits that long
/// finds a token (at least 1, as 0 would mean "now").
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

/// One tenant's bucket and request slots, as its quota was when read.
struct Gate {
    quota: ApiQuota,
    bucket: Mutex<Bucket>,
    slots: Arc<Semaphore>,
    /// When the contract was last read.
    read_at: Mutex<Instant>,
}

impl Gate {
    fn new(quota: ApiQuota, now: Instant) -> Self {
        Gate {
            quota,
            bucket: Mutex::new(Bucket::new(quota.rate, quota.burst, now)),
            slots: Arc::new(Semaphore::new(quota.concurrency as usize)),
            read_at: Mutex::new(now),
        }
    }

    fn fresh(&self, now: Instant, refresh: Duration) -> bool {
        let read_at = *self.read_at.lock().expect("gate lock");
        now.saturating_duration_since(read_at) < refresh
    }
}

/// Why a request was not let through, for its 429.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum OverQuota {
    Rate { quota: ApiQuota, wait: Duration },
    Concurrency { quota: ApiQuota },
}

impl From<OverQuota> for ApiError {
    fn from(o: OverQuota) -> Self {
        let (field, message) = match o {
            OverQuota::Rate { quota, wait } => (
                "api_rate",
                format!(
                    "over the tenant's API rate (api_rate {} requests a second, api_burst {}): retry in {} s",
                    quota.rate.0,
                    quota.burst,
                    retry_after_secs(wait)
                ),
            ),
            OverQuota::Concurrency { quota } => (
                "api_concurrency",
                format!(
                    "over the tenant's requests at once (api_concurrency {}): retry when one has finished",
                    quota.concurrency
                ),
            ),
        };
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::TooManyRequests,
            message,
        )
        .with_field(Some(field.to_owned()))
    }
}

impl IntoResponse for OverQuota {
    fn into_response(self) -> Response {
        let secs = match self {
            OverQuota::Rate { wait, .. } => retry_after_secs(wait),
            // When a request in flight finishes is unknown: the least wait.
            OverQuota::Concurrency { .. } => 1,
        };
        let mut response = ApiError::from(self).into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        response
    }
}

/// Every tenant's gate; a tenant's contract is read again every `refresh`.
pub struct ApiQuotas {
    defaults: ApiQuota,
    refresh: Duration,
    gates: Mutex<HashMap<TenantId, Arc<Gate>>>,
}

/// How often a tenant's contract is read again for its quota (the same as
/// the flow's `contract_refresh_ms` default).
const CONTRACT_REFRESH: Duration = Duration::from_secs(30);

impl Default for ApiQuotas {
    fn default() -> Self {
        ApiQuotas::new(ApiQuota::default(), CONTRACT_REFRESH)
    }
}

impl ApiQuotas {
    /// `defaults` for tenants whose contract sets none.
    pub fn new(defaults: ApiQuota, refresh: Duration) -> Self {
        ApiQuotas {
            defaults,
            refresh,
            gates: Mutex::default(),
        }
    }

    /// Tenants with state here (only those that authenticated).
    pub fn tenants(&self) -> usize {
        self.gates.lock().expect("quota lock").len()
    }

    /// A token and a slot of `tenant` (an authenticated one), or why not.
    /// The slot is held until the permit drops.
    pub(crate) async fn admit(
        &self,
        registrar: &Registrar,
        tenant: &TenantId,
    ) -> Result<OwnedSemaphorePermit, OverQuota> {
        let gate = self.gate(registrar, tenant).await;
        let slot = gate
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| OverQuota::Concurrency { quota: gate.quota })?;
        // A request refused for its rate gives its slot back (on drop).
        let taken = gate
            .bucket
            .lock()
            .expect("bucket lock")
            .take(Instant::now());
        taken.map_err(|wait| OverQuota::Rate {
            quota: gate.quota,
            wait,
        })?;
        Ok(slot)
    }

    /// `tenant`'s gate, its contract read again when it is not fresh. A
    /// changed quota starts a new gate (a full bucket, new slots).
    async fn gate(&self, registrar: &Registrar, tenant: &TenantId) -> Arc<Gate> {
        let now = Instant::now();
        let current = self.gates.lock().expect("quota lock").get(tenant).cloned();
        if let Some(g) = current.as_ref().filter(|g| g.fresh(now, self.refresh)) {
            return g.clone();
        }
        let quota = match registrar.tenant(tenant).await {
            Ok(record) => self.defaults.with(&record.limits.quota),
            Err(e) => {
                // Authorized a moment ago: keep what there is, else defaults.
                tracing::warn!(%tenant, error = %chain(&e), "reading the tenant's API quota failed");
                current.as_ref().map_or(self.defaults, |g| g.quota)
            }
        };
        let mut gates = self.gates.lock().expect("quota lock");
        match gates.get(tenant) {
            Some(g) if g.quota == quota => {
                *g.read_at.lock().expect("gate lock") = now;
                g.clone()
            }
            _ => {
                let gate = Arc::new(Gate::new(quota, now));
                gates.insert(tenant.clone(), gate.clone());
                gate
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_lets_a_burst_through_then_refills_at_its_rate() {
        let mut b = Bucket::new(PerSecond(2.0), 3, Instant::now());
        for _ in 0..3 {
            assert_eq!(b.take(Instant::now()), Ok(()));
        }
        assert_eq!(
            b.take(Instant::now()),
            Err(secs(0.5)),
            "empty: half a second to the next"
        );
        tokio::time::advance(secs(0.5)).await;
        assert_eq!(b.take(Instant::now()), Ok(()));
        assert!(b.take(Instant::now()).is_err());
        // A long quiet spell fills it to the burst, no more.
        tokio::time::advance(secs(60.0)).await;
        for _ in 0..3 {
            assert_eq!(b.take(Instant::now()), Ok(()));
        }
        assert!(b.take(Instant::now()).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_whole_seconds_rounded_up() {
        let mut b = Bucket::new(PerSecond(0.4), 1, Instant::now());
        b.take(Instant::now()).unwrap();
        let wait = b.take(Instant::now()).unwrap_err();
        assert_eq!(wait, secs(2.5));
        assert_eq!(retry_after_secs(wait), 3);
        assert_eq!(retry_after_secs(secs(2.0)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        // Waiting the rounded-up seconds finds a token.
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(b.take(Instant::now()), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn requests_at_once_are_capped_per_tenant_and_slots_come_back() {
        let kit = toki_core::testing::TestKit::new();
        let (acme, beta) = (kit.tenant("acme").await, kit.tenant("beta").await);
        let registrar = kit.registrar();
        let quota = ApiQuota {
            concurrency: 2,
            ..ApiQuota::default()
        };
        let quotas = ApiQuotas::new(quota, Duration::from_secs(30));
        let first = quotas.admit(&registrar, &acme).await.unwrap();
        let _second = quotas.admit(&registrar, &acme).await.unwrap();
        let third = quotas.admit(&registrar, &acme).await;
        assert!(
            matches!(third, Err(OverQuota::Concurrency { .. })),
            "{third:?}"
        );
        let beta_slot = quotas.admit(&registrar, &beta).await;
        drop(beta_slot.expect("beta has its own slots"));
        drop(first);
        let again = quotas.admit(&registrar, &acme).await;
        drop(again.expect("a finished request's slot is free again"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_changed_contract_applies_after_the_refresh() {
        use toki_ports::TenantDirectory;
        let kit = toki_core::testing::TestKit::new();
        let acme = kit.tenant("acme").await;
        let registrar = kit.registrar();
        let quotas = ApiQuotas::new(ApiQuota::default(), Duration::from_secs(30));
        drop(quotas.admit(&registrar, &acme).await.unwrap());
        let mut record = kit.directory.get(&acme).await.unwrap().unwrap();
        record.limits.quota.api_concurrency = Some(1);
        kit.directory.put(&record).await.unwrap();
        let _held = quotas.admit(&registrar, &acme).await.unwrap();
        let old = quotas.admit(&registrar, &acme).await;
        drop(old.expect("not read again yet: two at once still"));
        tokio::time::advance(Duration::from_secs(30)).await;
        let _one = quotas.admit(&registrar, &acme).await.unwrap();
        let two = quotas.admit(&registrar, &acme).await;
        assert!(matches!(two, Err(OverQuota::Concurrency { .. })), "{two:?}");
    }

    #[test]
    fn a_429_names_the_limit_and_says_when_to_retry() {
        let quota = ApiQuota::default();
        let r = OverQuota::Rate {
            quota,
            wait: secs(1.2),
        }
        .into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
        let r = OverQuota::Concurrency { quota }.into_response();
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
    }
}
