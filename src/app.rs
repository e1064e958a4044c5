//! Wiring: builds the ports for the configured backend and the services on them.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rand::RngCore;
use sha2::{Digest, Sha256};
use toki_channels::{ChatChannel, MailChannel, SlackChannel};
use toki_core::channel::ChannelSender;
use toki_core::daemon::Daemon;
use toki_core::ports::{Clock, DelayQueue, ReminderIndex, SystemClock, TenantDirectory};
use toki_core::registrar::Registrar;
use toki_core::scanner::Scanner;
use toki_core::{TenantId, TenantRecord};
use toki_sql::{
    create_tenant_database, ControlDb, SqlTenantStores, SqliteDelayQueue, SqliteReminderIndex,
    SqliteTenantDirectory,
};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::{BackendKind, Config};

/// One process's view of a Toki deployment: the ports and how to build services.
#[derive(Clone)]
pub struct Toki {
    pub config: Config,
    pub directory: Arc<dyn TenantDirectory>,
    pub stores: Arc<SqlTenantStores>,
    pub index: Arc<dyn ReminderIndex>,
    pub queue: Arc<dyn DelayQueue>,
    pub clock: Arc<dyn Clock>,
}

/// The SHA-256 of an API key, as the directory stores it.
pub fn api_key_hash(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

impl Toki {
    pub async fn open(config: Config) -> anyhow::Result<Self> {
        match config.backend {
            BackendKind::Embedded => Self::open_embedded(config).await,
            BackendKind::Aws => crate::aws::open(config).await,
        }
    }

    async fn open_embedded(config: Config) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&config.data_dir)
            .with_context(|| format!("creating data folder {}", config.data_dir.display()))?;
        let control = ControlDb::open(&config.data_dir.join("control.sqlite"))
            .await
            .context("opening the control database")?;
        let settings = config.pipeline_settings();
        let directory: Arc<dyn TenantDirectory> =
            Arc::new(SqliteTenantDirectory::new(control.pool.clone()));
        Ok(Toki {
            stores: Arc::new(SqlTenantStores::new(directory.clone())),
            directory,
            index: Arc::new(SqliteReminderIndex::new(
                control.pool.clone(),
                settings.shards,
                settings.retention,
            )),
            queue: Arc::new(SqliteDelayQueue::new(
                control.pool,
                "reminders",
                config.daemon.max_receives,
            )),
            clock: Arc::new(SystemClock),
            config,
        })
    }

    pub fn registrar(&self) -> Registrar {
        Registrar {
            directory: self.directory.clone(),
            stores: self.stores.clone(),
            index: self.index.clone(),
            queue: self.queue.clone(),
            clock: self.clock.clone(),
            settings: self.config.pipeline_settings(),
        }
    }

    pub fn scanner(&self) -> Scanner {
        Scanner {
            index: self.index.clone(),
            queue: self.queue.clone(),
            directory: self.directory.clone(),
            clock: self.clock.clone(),
            settings: self.config.pipeline_settings(),
        }
    }

    /// The three channels as configured: real transports when configured, outboxes otherwise.
    pub async fn channels(&self) -> anyhow::Result<Vec<Arc<dyn ChannelSender>>> {
        let outbox = self.config.data_dir.join("outbox");
        let mail = match &self.config.mail.smtp_url {
            Some(url) => {
                MailChannel::smtp(url, &self.config.mail.from, self.config.mail.connections)?
            }
            None => MailChannel::outbox(outbox.join("mail"), &self.config.mail.from)?,
        };
        let slack = match &self.config.slack.token {
            Some(token) => {
                let s = &self.config.slack;
                SlackChannel::api(&s.api_url, token, s.concurrency)?
            }
            None => SlackChannel::outbox(outbox.join("slack.jsonl"))
                .await
                .context("opening the Slack outbox")?,
        };
        Ok(vec![Arc::new(mail), Arc::new(ChatChannel), Arc::new(slack)])
    }

    pub async fn daemon(&self) -> anyhow::Result<Arc<Daemon>> {
        Ok(Arc::new(Daemon::new(
            self.queue.clone(),
            self.stores.clone(),
            self.channels().await?,
            self.clock.clone(),
            self.config.daemon_settings(),
        )))
    }

    /// Creates a tenant: its database (created and migrated) and its directory
    /// entry. Returns the record and the API key (shown once; only its hash is kept).
    pub async fn create_tenant(
        &self,
        id: &TenantId,
        reminders_enabled: bool,
    ) -> anyhow::Result<(TenantRecord, String)> {
        let database = self.config.tenant_database(id);
        create_tenant_database(&database)
            .await
            .with_context(|| format!("creating the database of tenant {id}"))?;
        let mut raw = [0u8; 24];
        rand::thread_rng().fill_bytes(&mut raw);
        let key = format!(
            "toki_{}",
            raw.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        let record = TenantRecord {
            id: id.clone(),
            reminders_enabled,
            active: true,
            database,
            api_key_sha256: api_key_hash(&key),
        };
        self.directory.put(&record).await?;
        Ok((record, key))
    }

    /// Runs the scanner every `scan_interval_s` until shutdown.
    pub async fn run_scanner(self, mut shutdown: watch::Receiver<bool>) {
        let scanner = self.scanner();
        let mut tick =
            tokio::time::interval(Duration::from_secs(self.config.pipeline.scan_interval_s));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => break,
            }
            if let Err(e) = scanner.scan_once().await {
                warn!(error = %e, "scan failed; next run retries");
            }
        }
    }

    /// Finishes failed mirrors for every tenant, every minute, until shutdown.
    pub async fn run_repair(self, mut shutdown: watch::Receiver<bool>) {
        let registrar = self.registrar();
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => break,
            }
            let tenants = match self.directory.list().await {
                Ok(t) => t,
                Err(e) => {
                    warn!(error = %e, "repair: listing tenants failed");
                    continue;
                }
            };
            for t in tenants {
                match registrar.repair(&t.id).await {
                    Ok(0) => {}
                    Ok(n) => info!(tenant = %t.id, repaired = n, "repaired index mirrors"),
                    Err(e) => warn!(tenant = %t.id, error = %e, "repair failed"),
                }
            }
        }
    }
}
