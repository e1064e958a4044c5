//! The assembly: one process's ports for the configured backend, and the
//! services built on them.

use std::sync::Arc;

use anyhow::Context;
use rand::RngCore;
use toki_core::debounce::{Debouncer, QueueTimer};
use toki_core::notice::NoticeAction;
use toki_core::registrar::ChangeNotices;
use toki_core::registrar::Registrar;
use toki_core::retention::Purger;
use toki_core::scanner::Scanner;
use toki_model::api_key::ApiKey;
use toki_model::{Instant, KeyName, TenantId, TenantRecord};
use toki_ports::DebounceStore;
use toki_ports::LeaseStore;
use toki_ports::{Clock, DelayQueue, ReminderIndex, TenantDirectory};
use toki_sql::{create_tenant_database, SqlTenantStores};

use crate::config::{BackendKind, Config};
use crate::databases::TenantDatabases;

/// One process's view of a Toki deployment: the ports and how to build services.
#[derive(Clone)]
pub struct Toki {
    pub config: Config,
    /// Where tenant databases are, and with which credentials.
    pub databases: TenantDatabases,
    pub directory: Arc<dyn TenantDirectory>,
    pub stores: Arc<SqlTenantStores>,
    pub index: Arc<dyn ReminderIndex>,
    pub queue: Arc<dyn DelayQueue>,
    /// Change notices' debounce rows.
    pub debounce: Arc<dyn DebounceStore>,
    /// Leases on the partitions of the fleet's rate limits.
    pub leases: Arc<dyn LeaseStore>,
    /// Which tenants have delivery events, a repair or a purge waiting
    /// (an events mark written here wakes this process's dispatcher).
    pub marks: Arc<dyn toki_ports::WorkMarks>,
    /// Told when this process marks a tenant's events.
    pub events_wake: Arc<toki_core::events::wake::EventsWake>,
    /// The retention purge's part in the control store (embedded only).
    pub control_purge: Option<Arc<dyn toki_ports::ControlPurge>>,
    pub clock: Arc<dyn Clock>,
    /// This process's figures for `/metrics`.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// What the control stores hold of a tenant (offboarding).
    pub footprints: Vec<Arc<dyn toki_ports::TenantFootprint>>,
    /// The tenants this process enqueued for each instant to come, shared
    /// by its registrar and scanner (`toki_core::crowd`).
    pub crowds: Arc<toki_core::crowd::Crowds>,
}

/// Tenant databases [`Toki::create_tenants`] makes at once.
pub const BULK_CREATE_CONCURRENCY: usize = 8;

/// A new API key: `toki_` and 192 random bits in hex. Shown once; the
/// directory keeps only its SHA-256 (`toki_model::api_key`).
pub fn new_api_key() -> String {
    let mut raw = [0u8; 24];
    rand::thread_rng().fill_bytes(&mut raw);
    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    format!("toki_{hex}")
}

impl Toki {
    /// Opens the configured backend with the wall clock.
    pub async fn open(config: Config) -> anyhow::Result<Self> {
        Self::open_with_clock(config, Arc::new(toki_ports::SystemClock)).await
    }

    pub async fn open_with_clock(config: Config, clock: Arc<dyn Clock>) -> anyhow::Result<Self> {
        crate::tls::install_default_crypto();
        let databases = crate::databases::resolve(&config).await?;
        let ports = match config.backend {
            #[cfg(feature = "embedded")]
            BackendKind::Embedded => {
                crate::embedded::open(&config, &databases, clock.clone()).await?
            }
            #[cfg(not(feature = "embedded"))]
            BackendKind::Embedded => {
                anyhow::bail!("backend: this build has no embedded backend; set TOKI_BACKEND=aws")
            }
            BackendKind::Aws => crate::aws::open(&config, &databases, clock.clone()).await?,
        };
        let (marks, events_wake) = toki_core::events::wake::WakingMarks::wrap(ports.marks);
        Ok(Toki {
            config,
            databases,
            directory: ports.directory,
            stores: ports.stores,
            index: ports.index,
            queue: ports.queue,
            debounce: ports.debounce,
            leases: ports.leases,
            marks,
            events_wake,
            control_purge: ports.control_purge,
            footprints: ports.footprints,
            clock,
            metrics: crate::metrics::Metrics::new(),
            crowds: Arc::default(),
        })
    }

    /// Creates (if needed) and migrates a tenant's database, at `location`
    /// (as the directory records it), with the provisioning credentials,
    /// and lets the runtime role use it.
    pub async fn provision(&self, id: &TenantId, location: &str) -> anyhow::Result<()> {
        let admin = self.databases.admin_url_at(id, location)?;
        create_tenant_database(&admin).await?;
        if let TenantDatabases::Postgres {
            runtime_role: Some((role, password)),
            ..
        } = &self.databases
        {
            toki_sql::grant_runtime_role(&admin, role, password).await?;
        }
        Ok(())
    }

    /// Migrates every tenant's database (`toki migrate`, before a rollout),
    /// and marks each for the repair and the retention purge, telling `progress` (done, of, tenant) before each. Returns the tenants migrated.
    pub async fn migrate_all(
        &self,
        mut progress: impl FnMut(usize, usize, &TenantId),
    ) -> anyhow::Result<Vec<TenantId>> {
        let tenants = self.directory.list().await?;
        let mut done = Vec::with_capacity(tenants.len());
        for (i, t) in tenants.iter().enumerate() {
            progress(i, tenants.len(), &t.id);
            self.provision(&t.id, &t.database)
                .await
                .with_context(|| format!("migrating the database of {}", t.id))?;
            // Looked at once by the repair and the purge, which then keep
            // its marks (a database from before the marks has none).
            let now = self.clock.now();
            for kind in [
                toki_ports::WorkKind::Repair,
                toki_ports::WorkKind::Retention,
            ] {
                self.marks.mark(kind, &t.id, now).await.with_context(|| {
                    format!("marking tenant {} for the repair and the purge", t.id)
                })?;
            }
            done.push(t.id.clone());
        }
        Ok(done)
    }

    /// Each tenant's share of the API, as configured; contracts read again
    /// as often as the flow limits' (`flow.contract_refresh_ms`).
    #[cfg(feature = "api")]
    pub fn api_quotas(&self) -> Arc<crate::api::ApiQuotas> {
        Arc::new(crate::api::ApiQuotas::new(
            self.config.api_quota,
            self.config.flow.contract_refresh(),
        ))
    }

    /// Failed authentications per source, as configured (`[http]`).
    #[cfg(feature = "api")]
    pub fn auth_throttle(&self) -> Arc<crate::api::AuthThrottle> {
        let h = &self.config.http;
        Arc::new(crate::api::AuthThrottle::new(
            h.auth_failure_burst,
            toki_model::quota::PerSecond(h.auth_failure_rate),
            crate::api::MAX_SOURCES,
        ))
    }

    /// Writes the marks of the work this process makes for tenants.
    pub fn marker(&self) -> toki_core::work::Marker {
        toki_core::work::Marker::new(self.marks.clone(), self.clock.clone())
    }

    pub fn registrar(&self) -> Registrar {
        Registrar {
            directory: self.directory.clone(),
            stores: self.stores.clone(),
            index: self.index.clone(),
            queue: self.queue.clone(),
            clock: self.clock.clone(),
            settings: self.config.pipeline_settings(),
            notices: Some(self.change_notices()),
            marker: self.marker(),
            crowds: self.crowds.clone(),
        }
    }

    /// Change notices: debounce rows in the control store, checks and
    /// notices on the delay queue.
    pub fn change_notices(&self) -> ChangeNotices {
        ChangeNotices {
            debouncer: Debouncer {
                store: self.debounce.clone(),
                timer: Arc::new(QueueTimer {
                    queue: self.queue.clone(),
                    clock: self.clock.clone(),
                }),
                clock: self.clock.clone(),
            },
            action: Arc::new(NoticeAction {
                queue: self.queue.clone(),
                clock: self.clock.clone(),
            }),
        }
    }

    pub fn scanner(&self) -> Scanner {
        Scanner {
            index: self.index.clone(),
            queue: self.queue.clone(),
            directory: self.directory.clone(),
            clock: self.clock.clone(),
            settings: self.config.pipeline_settings(),
            observer: Some(self.metrics.clone()),
            crowds: self.crowds.clone(),
        }
    }

    /// Runs the scanner every `pipeline.scan_interval_s` until `shutdown`.
    pub async fn run_scanner(self, shutdown: tokio::sync::watch::Receiver<bool>) {
        let every = std::time::Duration::from_secs(self.config.pipeline.scan_interval_s);
        self.scanner().run_every(every, shutdown).await
    }

    /// The retention purge (`toki serve` puts its figures on `/metrics`:
    /// [`crate::metrics::RetentionCollector`]).
    pub fn purger(&self) -> Arc<Purger> {
        Arc::new(Purger {
            directory: self.directory.clone(),
            stores: self.stores.clone(),
            marks: self.marks.clone(),
            control: self.control_purge.clone(),
            clock: self.clock.clone(),
            settings: self.config.purge_settings(),
            stats: Default::default(),
        })
    }

    /// Creates a tenant: its database (created and migrated) and its directory
    /// entry with one key, `default`. Returns the record and that key (shown
    /// once; only its hash is kept). Refuses an id that breaks the rule for
    /// new ids, or whose canonical form is an existing tenant's.
    pub async fn create_tenant(
        &self,
        id: &TenantId,
        reminders_enabled: bool,
    ) -> anyhow::Result<(TenantRecord, String)> {
        id.check_new()?;
        self.check_id_free(id).await?;
        self.create_checked(id, reminders_enabled).await
    }

    /// Creates many tenants as [`Self::create_tenant`] does, reading the
    /// directory once for all their checks (not once each: quadratic at
    /// thousands) and making [`BULK_CREATE_CONCURRENCY`] databases at once.
    /// Nothing is created if any id is refused.
    pub async fn create_tenants(
        &self,
        ids: &[TenantId],
        reminders_enabled: bool,
    ) -> anyhow::Result<Vec<(TenantRecord, String)>> {
        let existing = self.directory.list().await?;
        let mut taken: std::collections::HashMap<_, TenantId> = existing
            .into_iter()
            .map(|t| (t.id.canonical(), t.id))
            .collect();
        for id in ids {
            id.check_new()?;
            if let Some(other) = taken.insert(id.canonical(), id.clone()) {
                anyhow::bail!(
                    "tenant id {id} collides with tenant {other}: both are {} \
                     (the database name's form); choose another id",
                    id.canonical()
                );
            }
        }
        use futures::{StreamExt, TryStreamExt};
        futures::stream::iter(ids)
            .map(|id| self.create_checked(id, reminders_enabled))
            .buffered(BULK_CREATE_CONCURRENCY)
            .try_collect()
            .await
    }

    /// [`Self::create_tenant`] once its id is checked.
    async fn create_checked(
        &self,
        id: &TenantId,
        reminders_enabled: bool,
    ) -> anyhow::Result<(TenantRecord, String)> {
        let location = self.databases.new_location(id);
        self.provision(id, &location)
            .await
            .with_context(|| format!("creating the database of tenant {id}"))?;
        let key = new_api_key();
        let default: KeyName = "default".parse().expect("a valid key name");
        let record = TenantRecord {
            id: id.clone(),
            reminders_enabled,
            active: true,
            database: location.clone(),
            api_keys: vec![ApiKey::new(default, &key, self.clock.now(), None)],
            change_notices: Default::default(),
            limits: Default::default(),
            retention: Default::default(),
        };
        if let Err(e) = self.directory.put(&record).await {
            // No entry names it: a file would be left for nobody.
            if matches!(self.databases, TenantDatabases::Files { .. }) {
                let _ = toki_sql::drop_tenant_database(&location).await;
            }
            return Err(e.into());
        }
        Ok((record, key))
    }

    /// No tenant has `id`, nor its canonical form (the two would share a
    /// database). Checked before creating, not atomically with it: two
    /// creates of colliding ids at once are the operator's to avoid.
    async fn check_id_free(&self, id: &TenantId) -> anyhow::Result<()> {
        let tenants = self.directory.list().await?;
        if tenants.iter().any(|t| &t.id == id) {
            anyhow::bail!("tenant {id} exists already");
        }
        if let Some(existing) = id.collides_with(tenants.iter().map(|t| &t.id)) {
            anyhow::bail!(
                "tenant id {id} collides with the existing tenant {existing}: both are {} \
                 (the database name's form); choose another id",
                id.canonical()
            );
        }
        Ok(())
    }

    /// Adds a key named `name` to a tenant; returns it (shown once).
    pub async fn create_key(
        &self,
        tenant: &TenantId,
        name: KeyName,
        expires_at: Option<Instant>,
    ) -> anyhow::Result<String> {
        let now = self.clock.now();
        if expires_at.is_some_and(|e| e <= now) {
            anyhow::bail!(
                "the expiry {} is not in the future",
                expires_at.unwrap_or(now)
            );
        }
        let mut record = self.tenant_record(tenant).await?;
        let key = new_api_key();
        record.add_key(ApiKey::new(name, &key, now, expires_at))?;
        self.directory.put(&record).await?;
        Ok(key)
    }

    /// Revokes a tenant's key: from now on it gets 401.
    pub async fn revoke_key(&self, tenant: &TenantId, name: &KeyName) -> anyhow::Result<()> {
        let mut record = self.tenant_record(tenant).await?;
        record.revoke_key(name, self.clock.now())?;
        self.directory.put(&record).await?;
        Ok(())
    }

    /// A tenant's directory entry, or an error naming it.
    pub async fn tenant_record(&self, tenant: &TenantId) -> anyhow::Result<TenantRecord> {
        self.directory
            .get(tenant)
            .await?
            .with_context(|| format!("no tenant {tenant}"))
    }
}

#[cfg(feature = "channels")]
mod delivery {
    use std::sync::Arc;

    use anyhow::Context;
    use rand::RngCore;
    use toki_channels::{
        ChatChannel, HttpEventPoster, MailChannel, SlackChannel, WebhookChannel, WebhookOptions,
    };
    use toki_core::daemon::{Daemon, DebounceChecks};
    use toki_core::events::dispatch::Dispatcher;
    use toki_flow::Flow;
    use toki_ports::channel::ChannelSender;

    use super::Toki;
    use crate::config::MailTransport;

    impl Toki {
        /// The channels as configured: real transports when configured,
        /// outboxes otherwise; webhooks always (each tenant configures its endpoints).
        pub async fn channels(&self) -> anyhow::Result<Vec<Arc<dyn ChannelSender>>> {
            let outbox = self.config.data_dir.join("outbox");
            let clock = self.clock.clone();
            let m = &self.config.mail;
            let timeout = std::time::Duration::from_secs(m.timeout_s.max(1));
            let mail = match (m.effective_transport(), &m.smtp_url) {
                (MailTransport::Smtp, Some(url)) => {
                    MailChannel::smtp(url.expose(), &m.from, m.connections, timeout, clock.clone())?
                }
                (MailTransport::Ses, _) => {
                    let a = &self.config.aws;
                    let sdk =
                        toki_aws::sdk_config(a.endpoint_url.as_deref(), a.region.as_deref()).await;
                    MailChannel::ses(
                        aws_sdk_sesv2::Client::new(&sdk),
                        m.ses_configuration_set.clone(),
                        &m.from,
                        m.connections,
                        timeout,
                        clock.clone(),
                    )?
                }
                _ => MailChannel::outbox(outbox.join("mail"), &m.from, clock.clone())?,
            };
            let slack = match &self.config.slack.token {
                Some(token) => {
                    let s = &self.config.slack;
                    SlackChannel::api_over(
                        &s.api_url,
                        token.expose(),
                        s.concurrency,
                        s.http2_prior_knowledge,
                        clock.clone(),
                    )?
                }
                None => SlackChannel::outbox(outbox.join("slack.jsonl"), clock.clone())
                    .await
                    .context("opening the Slack outbox")?,
            };
            let w = &self.config.webhook;
            let webhook = WebhookChannel::new(
                WebhookOptions {
                    concurrency: w.concurrency,
                    per_host: w.per_host,
                    timeout: std::time::Duration::from_millis(w.timeout_ms.max(1)),
                    policy: w.egress_policy(),
                },
                clock.clone(),
            )?;
            let chat = ChatChannel::new(self.stores.clone(), clock);
            Ok(vec![
                Arc::new(mail),
                Arc::new(chat),
                Arc::new(slack),
                Arc::new(webhook),
            ])
        }

        /// This process's flow control: gates on the configured limits,
        /// shared rates leased from the control store (SQLite) or DynamoDB.
        pub fn flow(&self) -> Arc<Flow> {
            let holder = format!(
                "{}-{}-{:08x}",
                hostname(),
                std::process::id(),
                rand::thread_rng().next_u32()
            );
            // Outboxes (no Slack token, mail to files) have no limits to respect.
            let mut settings = self.config.flow.clone();
            if self.config.slack.token.is_none() {
                settings.limits.retain(|key, _| !key.starts_with("slack:"));
            }
            if self.config.mail.effective_transport() == MailTransport::Outbox {
                settings.limits.retain(|key, _| !key.starts_with("smtp:"));
            }
            let flow = Flow::new(
                settings,
                Some(self.leases.clone()),
                self.clock.clone(),
                holder,
            );
            flow.read_contracts_from(self.directory.clone());
            flow
        }

        pub async fn daemon(&self) -> anyhow::Result<Arc<Daemon>> {
            let notices = self.change_notices();
            let daemon = Daemon::new(
                self.queue.clone(),
                self.stores.clone(),
                self.channels().await?,
                self.clock.clone(),
                self.marks.clone(),
                self.config.daemon_settings(),
            )
            .with_debounce(DebounceChecks {
                debouncer: notices.debouncer,
                settings: Default::default(),
                action: notices.action,
            })
            .with_flow(self.flow())
            .with_directory(self.directory.clone())
            .with_index(self.index.clone())
            .with_observer(self.metrics.clone());
            // The daemon's counters, in-flight messages and flow keys, read at each scrape.
            self.metrics
                .register_collector(Box::new(crate::metrics::DaemonCollector(daemon.gauges())));
            Ok(Arc::new(daemon))
        }
    }

    impl Toki {
        /// The sender of delivery events to the tenants' endpoints.
        pub fn event_dispatcher(&self) -> anyhow::Result<Arc<Dispatcher>> {
            let poster = HttpEventPoster::new(self.config.webhook.egress_policy())
                .context("building the delivery events' HTTP client")?;
            // Unique per dispatcher, not per process: two in one process
            // (tests) must not share a hold.
            let holder = format!(
                "{}-{}-{:08x}",
                hostname(),
                std::process::id(),
                rand::thread_rng().next_u32()
            );
            let dispatcher = Dispatcher::waking(
                self.stores.clone(),
                self.marks.clone(),
                Arc::new(poster),
                self.clock.clone(),
                holder,
                self.config.events_settings(),
                self.events_wake.clone(),
            );
            self.metrics
                .register_collector(Box::new(crate::metrics::EventsCollector(
                    dispatcher.clone(),
                )));
            Ok(dispatcher)
        }
    }

    /// This machine's name, for lease rows (who holds what).
    fn hostname() -> String {
        std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
            })
            .unwrap_or_else(|| "toki".to_owned())
    }
}
