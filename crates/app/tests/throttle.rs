//! Failed authentications throttled per source, in process with a counting
//! tenant directory: past a burst of 401s a source gets 429 with
//! `Retry-After` before the directory is read, while another source with
//! the right key goes on.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{header, StatusCode};
use axum::Router;
use toki_app::api;
use toki_core::registrar::Registrar;
use toki_model::{TenantId, TenantRecord};
use toki_ports::{StoreResult, TenantDirectory};
use tower::ServiceExt;

use crate::common::{kit_with_tenant, request, KEY};

/// The kit's directory, counting its reads.
struct Counting {
    inner: Arc<dyn TenantDirectory>,
    reads: AtomicUsize,
}

#[async_trait::async_trait]
impl TenantDirectory for Counting {
    async fn get(&self, tenant: &TenantId) -> StoreResult<Option<TenantRecord>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.get(tenant).await
    }
    async fn put(&self, record: &TenantRecord) -> StoreResult<()> {
        self.inner.put(record).await
    }
    async fn list(&self) -> StoreResult<Vec<TenantRecord>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.list().await
    }
    async fn delete(&self, tenant: &TenantId) -> StoreResult<bool> {
        self.inner.delete(tenant).await
    }
}

/// GET a user from `peer` with `key`: the status and `Retry-After`.
async fn get(router: &Router, peer: &str, key: &str) -> (StatusCode, Option<String>) {
    let mut req = request("GET", "/v1/tenants/acme/users/u0", Some(key), None);
    let peer: SocketAddr = peer.parse().unwrap();
    req.extensions_mut().insert(ConnectInfo(peer));
    let resp = router.clone().oneshot(req).await.unwrap();
    let retry = resp
        .headers()
        .get(header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_owned());
    (resp.status(), retry)
}

#[tokio::test(start_paused = true)]
async fn past_a_burst_of_failures_a_source_gets_429_before_any_directory_read() {
    let kit = kit_with_tenant().await;
    let directory = Arc::new(Counting {
        inner: kit.directory.clone(),
        reads: AtomicUsize::new(0),
    });
    let registrar = Registrar {
        directory: directory.clone(),
        ..kit.registrar()
    };
    let router = api::router(Arc::new(registrar));
    let stranger = "203.0.113.7:50000";
    for i in 0..api::FAILURE_BURST {
        let (status, _) = get(&router, stranger, "wrong").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "failure {i}");
    }
    let reads = directory.reads.load(Ordering::SeqCst);
    assert_eq!(reads, api::FAILURE_BURST as usize, "each failure read it");

    // Past the burst: 429 with Retry-After, and nothing read, whatever the key.
    for key in ["wrong", KEY] {
        let (status, retry) = get(&router, stranger, key).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{key}");
        assert_eq!(retry.as_deref(), Some("1"), "{key}");
    }
    // Another port of the same address is the same source.
    let (status, _) = get(&router, "203.0.113.7:50001", "wrong").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(directory.reads.load(Ordering::SeqCst), reads, "no read");

    // An honest client elsewhere is not held back by the stranger's failures.
    let (status, _) = get(&router, "198.51.100.2:40000", KEY).await;
    assert_eq!(status, StatusCode::OK);

    // Once the wait is over, the source may try again (and it succeeds
    // with the right key).
    tokio::time::advance(Duration::from_secs(1)).await;
    let (status, _) = get(&router, stranger, KEY).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn successes_cost_a_source_nothing() {
    let kit = kit_with_tenant().await;
    let router = api::router(Arc::new(kit.registrar()));
    for _ in 0..3 * api::FAILURE_BURST {
        let (status, _) = get(&router, "198.51.100.2:40000", KEY).await;
        assert_eq!(status, StatusCode::OK);
    }
}

/// `[http]`'s defaults are the throttle's own, and a process configured
/// otherwise throttles by its configuration.
#[tokio::test(start_paused = true)]
async fn the_configured_throttle_is_the_one_served() {
    let config = toki_app::config::Config::default();
    assert_eq!(config.http.auth_failure_burst, api::FAILURE_BURST);
    assert_eq!(config.http.auth_failure_rate, api::FAILURE_RATE.0);
    let throttle = Arc::new(api::AuthThrottle::new(
        2,
        toki_model::quota::PerSecond(1.0),
        api::MAX_SOURCES,
    ));
    let kit = kit_with_tenant().await;
    let router = api::router_with(
        Arc::new(kit.registrar()),
        Arc::new(api::ApiQuotas::default()),
        throttle,
    );
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(get(&router, "192.0.2.9:1000", "wrong").await.0);
    }
    assert_eq!(
        seen,
        [
            StatusCode::UNAUTHORIZED,
            StatusCode::UNAUTHORIZED,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}
