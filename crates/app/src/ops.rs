//! What an operator and an orchestrator look at: `GET /metrics` (OpenMetrics
//! text), `GET /healthz` (the process is up) and `GET /readyz` (the control
//! store, the directory and the queue answer). Served on an operator's
//! listener, never on the tenant API: `toki serve --operator-listen` (with
//! `/report`) and the daemon's `--metrics-listen`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::metrics::{Metrics, CONTENT_TYPE};
use anyhow::Context;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use tokio::sync::watch;

use crate::toki::Toki;

/// How long one readiness check or the queue's depth may take before it
/// counts as unreachable (an orchestrator's probe times out at a few seconds).
const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// `/metrics` and `/readyz` (the operator listener adds `/healthz`).
pub fn routes(toki: Toki) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/readyz", get(readyz))
        .with_state(toki)
}

async fn metrics(State(toki): State<Toki>) -> Response {
    // The queue's depth as of the scrape; unreachable: the last figures stay
    // (and /readyz says why).
    match tokio::time::timeout(CHECK_TIMEOUT, toki.queue.depth()).await {
        Ok(Ok(depth)) => toki.metrics.observe_queue(&depth),
        Ok(Err(e)) => {
            tracing::warn!(error = %toki_model::error::chain(&e), "metrics: reading the queue's depth failed")
        }
        Err(_) => tracing::warn!("metrics: reading the queue's depth timed out"),
    }
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        toki.metrics.encode(),
    )
        .into_response()
}

/// One dependency's answer.
#[derive(Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub ms: u64,
}

#[derive(Debug, Serialize)]
pub struct Readiness {
    pub ready: bool,
    pub checks: Vec<Check>,
}

async fn check<T, E: std::error::Error + 'static>(
    name: &'static str,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Check {
    let started = Instant::now();
    let error = match tokio::time::timeout(CHECK_TIMEOUT, fut).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(toki_model::error::chain(&e)),
        Err(_) => Some(format!("no answer within {} s", CHECK_TIMEOUT.as_secs())),
    };
    Check {
        name,
        ok: error.is_none(),
        error,
        ms: started.elapsed().as_millis() as u64,
    }
}

/// Whether the control store (lease rows: SQLite embedded, the DynamoDB
/// index table on AWS), the tenant directory and the delay queue answer now.
pub async fn readiness(toki: &Toki) -> Readiness {
    let probe: toki_model::TenantId = "readyz-probe".parse().expect("a valid tenant id");
    let (control, directory, queue) = tokio::join!(
        check("control_store", toki.leases.leases("readyz")),
        check("directory", toki.directory.get(&probe)),
        check("queue", toki.queue.depth()),
    );
    let checks = vec![control, directory, queue];
    Readiness {
        ready: checks.iter().all(|c| c.ok),
        checks,
    }
}

async fn readyz(State(toki): State<Toki>) -> Response {
    let r = readiness(&toki).await;
    if !r.ready {
        tracing::warn!(checks = ?r.checks, "not ready");
    }
    let status = if r.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(r)).into_response()
}

/// Counts each request of `router` by method, route pattern and status, with
/// its latency.
pub fn track_requests(router: Router, metrics: Arc<Metrics>) -> Router {
    router.layer(axum::middleware::from_fn_with_state(metrics, track))
}

async fn track(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    // Unmatched paths share one series: a scan of random URLs must not make a
    // series per URL.
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let response = next.run(request).await;
    metrics.observe_request(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

/// Serves `router` and `/healthz` (200 while `alive` says so, else 503
/// with why) on `listen` until `shutdown`: an operator's listener (the
/// daemon's `--metrics-listen` with [`routes`], `toki serve
/// --operator-listen` with the report too). Returns the bound address and
/// the server's task.
pub async fn serve(
    router: Router,
    listen: SocketAddr,
    limits: crate::http::ConnectionLimits,
    mut shutdown: watch::Receiver<bool>,
    alive: fn() -> Result<(), String>,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("the operator listener: binding {listen}"))?;
    let addr = listener.local_addr()?;
    let healthz = move || async move {
        match alive() {
            Ok(()) => (StatusCode::OK, "ok".to_owned()),
            Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
        }
    };
    let router = router.route("/healthz", get(healthz));
    let stopped = async move {
        let _ = shutdown.changed().await;
    };
    let server = crate::http::serve(listener, router, limits, stopped);
    Ok((addr, tokio::spawn(server)))
}
