//! Offboarding a tenant (`toki tenant delete`): close the door, fence its
//! database, wait out the claims in flight, then remove what the control
//! stores hold of it. Dropping the tenant's database itself is the caller's
//! (it needs the provisioning credentials), between [`Offboarding::quiesce`]
//! and [`Offboarding::remove`].
//!
//! Why this order holds "nothing is sent after the delete returns": every
//! send follows a claim in the tenant's database, and after the claim comes a
//! read of that database (the reminders' last look at the schedule versions,
//! a notice's read of its recipients). Once the fence has committed, a claim
//! taken later finds no schedule (stale) or no recipient (undeliverable), so
//! only claims taken before the fence can still send; those are `sending`
//! rows that a live holder renews every third of the lease, and the wait
//! lasts until none is renewed within a lease, and at least one lease. A
//! holder stalled for longer than the lease between its read and its send
//! is the one case not covered (the same bound as every takeover).

use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use toki_model::domain::TenantId;
use toki_model::error::chain;
use toki_model::time::to_chrono;
use toki_model::TenantRecord;
use toki_ports::{
    Clock, Fenced, Holding, StoreError, TenantDirectory, TenantFootprint, TenantStore, TenantStores,
};

/// How long the wait for claims in flight may take, and how it polls.
#[derive(Debug, Clone, Copy)]
pub struct OffboardSettings {
    /// The claims' lease (the daemons' `visibility_timeout_s`): a claim not
    /// renewed for this long has no live holder.
    pub lease: Duration,
    /// Give up (nothing deleted, the tenant stays fenced) after this long.
    pub max_wait: Duration,
    pub poll: Duration,
    /// Fence rounds before giving up on writes that keep arriving.
    pub max_rounds: u32,
}

impl Default for OffboardSettings {
    fn default() -> Self {
        OffboardSettings {
            lease: Duration::from_secs(10),
            max_wait: Duration::from_secs(120),
            poll: Duration::from_millis(500),
            max_rounds: 3,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OffboardError {
    #[error("no tenant {0}")]
    NoSuchTenant(TenantId),
    #[error("{live} deliveries of tenant {tenant} are still being sent after {waited_s} s; nothing was deleted, the tenant stays fenced: run the delete again")]
    ClaimsStillLive {
        tenant: TenantId,
        live: u64,
        waited_s: u64,
    },
    #[error("writes to tenant {0} kept arriving after its fence; nothing was deleted: run the delete again")]
    KeptWriting(TenantId),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What `--dry-run` lists: the directory entry, the tenant database's rows
/// per table (or why they could not be counted), the control stores' rows.
#[derive(Debug, Clone)]
pub struct Inventory {
    pub record: TenantRecord,
    pub database: Result<Vec<Holding>, String>,
    pub control: Vec<Holding>,
}

/// What quiescing did: the rows the fences removed, the time waited.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiesced {
    pub fenced: Fenced,
    pub waited: Duration,
    pub rounds: u32,
}

/// The offboarding of tenants, on the ports of one deployment.
pub struct Offboarding {
    pub directory: Arc<dyn TenantDirectory>,
    pub stores: Arc<dyn TenantStores>,
    /// Every control store that holds rows of tenants (the directory aside).
    pub footprints: Vec<Arc<dyn TenantFootprint>>,
    pub clock: Arc<dyn Clock>,
    pub settings: OffboardSettings,
}

impl Offboarding {
    async fn record(&self, tenant: &TenantId) -> Result<TenantRecord, OffboardError> {
        self.directory
            .get(tenant)
            .await?
            .ok_or_else(|| OffboardError::NoSuchTenant(tenant.clone()))
    }

    /// What a delete would remove; changes nothing.
    pub async fn inventory(&self, tenant: &TenantId) -> Result<Inventory, OffboardError> {
        let record = self.record(tenant).await?;
        let database = match self.stores.open(tenant).await {
            Ok(store) => store.table_counts().await,
            Err(e) => Err(e),
        }
        .map_err(|e| chain(&e).to_string());
        let mut control = vec![
            Holding::new("directory.entry", 1),
            Holding::new("directory.api_keys", record.api_keys.len() as u64),
        ];
        for f in &self.footprints {
            control.extend(f.holdings(tenant).await?);
        }
        Ok(Inventory {
            record,
            database,
            control,
        })
    }

    /// Closes the door (the contract off, suspended, every key revoked: the
    /// scanner enqueues nothing more, the API answers 401), fences the
    /// database and waits until no claim of it is live. Fences again after
    /// the wait: a write that was authorised before the door closed and
    /// landed after the fence is removed, and waited for, in another round.
    pub async fn quiesce(&self, tenant: &TenantId) -> Result<Quiesced, OffboardError> {
        let mut record = self.record(tenant).await?;
        close_door(&mut record, self.clock.now());
        self.directory.put(&record).await?;
        let store = self.stores.open(tenant).await?;
        let started = tokio::time::Instant::now();
        let mut done = Quiesced::default();
        for round in 1..=self.settings.max_rounds.max(1) {
            let fenced = store.fence().await?;
            if round > 1 && fenced.is_empty() {
                done.rounds = round;
                done.waited = started.elapsed();
                info!(%tenant, rounds = round, waited_ms = done.waited.as_millis() as u64, "tenant fenced; no claim in flight");
                return Ok(done);
            }
            add(&mut done.fenced, fenced);
            self.wait_for_claims(tenant, store.as_ref(), started)
                .await?;
        }
        Err(OffboardError::KeptWriting(tenant.clone()))
    }

    /// Waits at least one lease, and until no claim was renewed within one.
    async fn wait_for_claims(
        &self,
        tenant: &TenantId,
        store: &dyn TenantStore,
        started: tokio::time::Instant,
    ) -> Result<(), OffboardError> {
        let fenced_at = tokio::time::Instant::now();
        loop {
            let since = self.clock.now() - to_chrono(self.settings.lease);
            let live = store.live_claims(since).await?;
            if live == 0 && fenced_at.elapsed() >= self.settings.lease {
                return Ok(());
            }
            if started.elapsed() >= self.settings.max_wait {
                return Err(OffboardError::ClaimsStillLive {
                    tenant: tenant.clone(),
                    live,
                    waited_s: started.elapsed().as_secs(),
                });
            }
            tokio::time::sleep(self.settings.poll).await;
        }
    }

    /// Deletes what every control store holds of the tenant, the directory
    /// entry last (a delete that fails halfway can be run again). Returns what went.
    pub async fn remove(&self, tenant: &TenantId) -> Result<Vec<Holding>, OffboardError> {
        let mut gone = Vec::new();
        for f in &self.footprints {
            gone.extend(f.delete_tenant(tenant).await?);
        }
        let entry = self.directory.delete(tenant).await?;
        gone.push(Holding::new("directory.entry", u64::from(entry)));
        Ok(gone)
    }
}

/// The contract off, the tenant suspended, every key revoked at `now`.
fn close_door(record: &mut TenantRecord, now: toki_model::domain::Instant) {
    record.reminders_enabled = false;
    record.active = false;
    for key in &mut record.api_keys {
        key.revoked_at.get_or_insert(now);
    }
}

fn add(total: &mut Fenced, more: Fenced) {
    total.schedules += more.schedules;
    total.users += more.users;
    total.notice_rows += more.notice_rows;
    total.endpoints += more.endpoints;
}
