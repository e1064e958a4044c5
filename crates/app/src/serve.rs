//! `toki serve`: registrar API + scanner + repair + daemon in one process;
//! stops on SIGTERM/Ctrl-C and drains in-flight deliveries first.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tracing::info;

use crate::toki::Toki;

pub async fn run(toki: Toki, listen: SocketAddr) -> anyhow::Result<()> {
    let (stop, shutdown) = watch::channel(false);
    let daemon = toki.daemon().await?;
    let registrar = Arc::new(toki.registrar());
    // Mirrors left unfinished by a previous run are repaired first.
    let repaired = registrar
        .repair_all()
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
    let tasks = [
        tokio::spawn(daemon.run(shutdown.clone())),
        tokio::spawn(toki.clone().run_scanner(shutdown.clone())),
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
    server_task.await??;
    for t in tasks {
        t.await?;
    }
    eprintln!("toki serve: stopped");
    Ok(())
}
