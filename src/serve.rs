//! `toki serve`: registrar API + scanner + daemon in one process; stops on
//! SIGTERM/Ctrl-C and drains in-flight deliveries first.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::watch;
use tracing::info;

use crate::app::Toki;

pub async fn run(toki: Toki, listen: SocketAddr) -> anyhow::Result<()> {
    let (stop, shutdown) = watch::channel(false);
    let daemon = toki.daemon().await?;
    let registrar = Arc::new(toki.registrar());
    // Mirrors left unfinished by a previous run are repaired first.
    for t in toki.directory.list().await? {
        registrar
            .repair(&t.id)
            .await
            .with_context(|| format!("repairing mirrors of {}", t.id))?;
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    info!(addr = %listener.local_addr()?, workers = toki.config.daemon.workers, "toki serve listening");
    eprintln!(
        "toki serve: registrar API on http://{}  (Ctrl-C to stop)",
        listener.local_addr()?
    );
    let daemon_task = tokio::spawn(daemon.run(shutdown.clone()));
    let scanner_task = tokio::spawn(toki.clone().run_scanner(shutdown.clone()));
    let repair_task = tokio::spawn(toki.clone().run_repair(shutdown.clone()));
    let mut api_shutdown = shutdown.clone();
    let server =
        axum::serve(listener, crate::api::router(registrar)).with_graceful_shutdown(async move {
            let _ = api_shutdown.changed().await;
        });
    let server_task = tokio::spawn(async move { server.await });
    crate::shutdown_signal().await;
    eprintln!("toki serve: stopping; draining in-flight deliveries");
    stop.send(true).ok();
    server_task.await??;
    scanner_task.await?;
    repair_task.await?;
    daemon_task.await?;
    eprintln!("toki serve: stopped");
    Ok(())
}
