//! `toki serve`: registrar API + scanner + repair + daemon + delivery events
//! and the retention purge in one process;
//! stops on SIGTERM/Ctrl-C and drains in-flight deliveries first.
//!
//! Two listeners: the tenant API (the API, `/healthz` and `/openapi.json`,
//! nothing else) and, when asked for, the operator's (`/metrics`, `/readyz`,
//! `/report`, `/healthz`), which tenants and strangers must not reach.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tracing::info;

use toki_core::registrar::Registrar;

use crate::toki::Toki;

/// How long requests in flight may take to finish once the server stops.
const API_DRAIN: Duration = Duration::from_secs(10);

/// Where `toki serve` listens.
#[derive(Debug, Clone, Copy)]
pub struct Listeners {
    /// The tenant API.
    pub api: SocketAddr,
    /// The operator's surfaces; None: not served.
    pub operator: Option<SocketAddr>,
}

pub async fn run(toki: Toki, listen: Listeners) -> anyhow::Result<()> {
    // (Port 0 is any free port: two of them are two ports.)
    if listen.operator == Some(listen.api) && listen.api.port() != 0 {
        anyhow::bail!(
            "--operator-listen {}: the operator's surfaces never share the tenant API's address",
            listen.api
        );
    }
    let files = crate::open_files::raise(crate::open_files::wanted(&toki.config));
    info!(?files, "open-file limit");
    let (stop, shutdown) = watch::channel(false);
    let daemon = toki.daemon().await?;
    let registrar = Arc::new(toki.registrar());
    // Mirrors left unfinished by a previous run are repaired first: the
    // tenants whose repair mark is due (every write marks its tenant before
    // it begins), within the pass's budget.
    let repaired = registrar
        .repair_marked(None)
        .await
        .context("repairing index mirrors")?;
    toki.metrics.observe_repair(&repaired);
    let purger = toki.purger();
    toki.metrics
        .register_collector(Box::new(crate::metrics::RetentionCollector(
            purger.stats.clone(),
        )));
    let listener = tokio::net::TcpListener::bind(listen.api)
        .await
        .with_context(|| format!("binding {}", listen.api))?;
    let limits = crate::http::ConnectionLimits::from(&toki.config.http);
    // Before the API's line: whoever waits for that line finds both.
    let operator = match listen.operator {
        Some(addr) => Some(operator_listener(&toki, addr, limits, shutdown.clone()).await?),
        None => None,
    };
    info!(addr = %listener.local_addr()?, workers = toki.config.daemon.workers, "toki serve listening");
    eprintln!(
        "toki serve: registrar API on http://{}  (Ctrl-C to stop)",
        listener.local_addr()?
    );
    let tasks = background(&toki, daemon, &registrar, purger, &shutdown)?;
    let mut api_shutdown = shutdown.clone();
    let router = api_router(&toki, registrar);
    let server = crate::http::serve(listener, router, limits, async move {
        let _ = api_shutdown.changed().await;
    });
    let server_task = tokio::spawn(server);
    crate::shutdown_signal().await;
    eprintln!("toki serve: stopping; draining in-flight deliveries");
    stop.send_replace(true);
    drain(server_task, operator).await;
    for t in tasks {
        t.await?;
    }
    eprintln!("toki serve: stopped");
    Ok(())
}

/// What the tenant API's port serves: the API (with `/healthz` and
/// `/openapi.json`), its requests counted; no operator surface.
pub fn api_router(toki: &Toki, registrar: Arc<Registrar>) -> axum::Router {
    let api = crate::api::router_with(registrar, toki.api_quotas(), toki.auth_throttle());
    crate::ops::track_requests(api, toki.metrics.clone())
}

/// The daemon, the event dispatcher, the scanner, the purge and the repair,
/// each a task until `shutdown`.
fn background(
    toki: &Toki,
    daemon: Arc<toki_core::daemon::Daemon>,
    registrar: &Arc<Registrar>,
    purger: Arc<toki_core::retention::Purger>,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let repairer = registrar.clone();
    let metrics = toki.metrics.clone();
    let repair_shutdown = shutdown.clone();
    Ok(vec![
        tokio::spawn(daemon.run(shutdown.clone())),
        tokio::spawn(toki.event_dispatcher()?.run(shutdown.clone())),
        tokio::spawn(toki.clone().run_scanner(shutdown.clone())),
        tokio::spawn(purger.run(shutdown.clone())),
        tokio::spawn(async move {
            repairer
                .run_repair(Duration::from_secs(60), repair_shutdown, |pass| {
                    metrics.observe_repair(pass)
                })
                .await
        }),
    ])
}

/// Requests in flight get a while to finish; a client that never
/// finishes its request (a slow or idle connection) does not hold the
/// process, and the deliveries still drain.
async fn drain(
    mut server_task: tokio::task::JoinHandle<()>,
    operator: Option<tokio::task::JoinHandle<()>>,
) {
    if tokio::time::timeout(API_DRAIN, &mut server_task)
        .await
        .is_err()
    {
        eprintln!("toki serve: connections still open after {API_DRAIN:?}; closing them");
        server_task.abort();
    }
    if let Some(mut operator) = operator {
        if tokio::time::timeout(API_DRAIN, &mut operator)
            .await
            .is_err()
        {
            eprintln!("toki serve: operator connections still open; closing them");
            operator.abort();
        }
    }
}

/// `/metrics`, `/readyz`, `/report` and `/healthz` on `addr` until `shutdown`.
async fn operator_listener(
    toki: &Toki,
    addr: SocketAddr,
    limits: crate::http::ConnectionLimits,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let routes = crate::ops::routes(toki.clone()).merge(crate::report_page::routes(toki.clone()));
    let (bound, task) = crate::ops::serve(routes, addr, limits, shutdown, || Ok(())).await?;
    info!(addr = %bound, "toki serve: operator listener (metrics, readyz, report)");
    eprintln!("toki serve: operator surfaces on http://{bound}  (/metrics /readyz /report)");
    Ok(task)
}
