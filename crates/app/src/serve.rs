//! `toki serve`: registrar API + scanner + repair + daemon + delivery events
//! and the retention purge in one process;
//! stops on SIGTERM/Ctrl-C and drains in-flight deliveries first.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tracing::info;

use crate::toki::Toki;

/// How long requests in flight may take to finish once the server stops.
const API_DRAIN: Duration = Duration::from_secs(10);

pub async fn run(toki: Toki, listen: SocketAddr) -> anyhow::Result<()> {
    let (stop, shutdown) = watch::channel(false);
    let daemon = toki.daemon().await?;
    let registrar = Arc::new(toki.registrar());
    // Mirrors left unfinished by a previous run are repaired first (one
    // pass, within its budget: a stalled tenant does not hold the start).
    let repaired = registrar
        .repair_pass(None)
        .await
        .context("repairing index mirrors")?;
    toki.metrics.observe_repair(&repaired);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    info!(addr = %listener.local_addr()?, workers = toki.config.daemon.workers, "toki serve listening");
    eprintln!(
        "toki serve: registrar API on http://{}  (Ctrl-C to stop)",
        listener.local_addr()?
    );
    let repairer = registrar.clone();
    let purger = toki.purger();
    toki.metrics
        .register_collector(Box::new(crate::metrics::RetentionCollector(
            purger.stats.clone(),
        )));
    let tasks = [
        tokio::spawn(daemon.run(shutdown.clone())),
        tokio::spawn(toki.event_dispatcher()?.run(shutdown.clone())),
        tokio::spawn(toki.clone().run_scanner(shutdown.clone())),
        tokio::spawn(purger.run(shutdown.clone())),
        tokio::spawn({
            let shutdown = shutdown.clone();
            let metrics = toki.metrics.clone();
            async move {
                repairer
                    .run_repair(Duration::from_secs(60), shutdown, |pass| {
                        metrics.observe_repair(pass)
                    })
                    .await
            }
        }),
    ];
    let mut api_shutdown = shutdown.clone();
    let api = crate::api::router_with_quotas(registrar, toki.api_quotas());
    let router = crate::ops::track_requests(api, toki.metrics.clone())
        .merge(crate::ops::routes(toki.clone()))
        .merge(crate::report_page::routes(toki.clone()));
    let server = axum::serve(listener, router).with_graceful_shutdown(async move {
        let _ = api_shutdown.changed().await;
    });
    let server_task = tokio::spawn(async move { server.await });
    crate::shutdown_signal().await;
    eprintln!("toki serve: stopping; draining in-flight deliveries");
    stop.send_replace(true);
    // Requests in flight get a while to finish; a client that never
    // finishes its request (a slow or idle connection) does not hold the
    // process, and the deliveries below still drain.
    let mut server_task = server_task;
    match tokio::time::timeout(API_DRAIN, &mut server_task).await {
        Ok(served) => served??,
        Err(_) => {
            eprintln!("toki serve: connections still open after {API_DRAIN:?}; closing them");
            server_task.abort();
        }
    }
    for t in tasks {
        t.await?;
    }
    eprintln!("toki serve: stopped");
    Ok(())
}
