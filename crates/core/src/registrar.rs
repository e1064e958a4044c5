//! The registrar: writes users and schedules to the tenant's database, then
//! mirrors the reminder instances into the index, enqueueing directly those
//! due inside the window the scanner has already covered.

use std::sync::Arc;

use thiserror::Error;
use tracing::{info, warn};

use crate::domain::{Schedule, ScheduleId, TenantId, TenantRecord, User, UserId};
use crate::enqueue::{enqueue, EnqueueSummary};
use crate::error::{chain, StoreError, ValidationError};
use crate::input::{ScheduleInput, UserInput};
use crate::plan::{reminders_for, Window};
use crate::ports::{Clock, DelayQueue, MirrorWork, ReminderIndex, TenantDirectory, TenantStores};
use crate::settings::PipelineSettings;

/// Why a registrar call failed: the caller's input, or ours (with its source).
#[derive(Debug, Error)]
pub enum RegistrarError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error("unknown tenant {0}")]
    UnknownTenant(TenantId),
    #[error("{0} not found")]
    NotFound(String),
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for RegistrarError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid(v) => RegistrarError::Invalid(v),
            other => RegistrarError::Store(other),
        }
    }
}

/// One repair pass over every tenant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RepairSummary {
    pub tenants: usize,
    /// Writes whose mirror was finished.
    pub repaired: usize,
    /// Tenants whose repair failed (their database or the index was unreachable).
    pub failed_tenants: usize,
}

/// The result of a schedule write.
#[derive(Debug, Clone)]
pub struct Registered {
    pub schedule: Schedule,
    /// Whether the index mirror is done; if not, a repair pass finishes it.
    pub mirrored: bool,
    pub enqueued_directly: usize,
}

pub struct Registrar {
    pub directory: Arc<dyn TenantDirectory>,
    pub stores: Arc<dyn TenantStores>,
    pub index: Arc<dyn ReminderIndex>,
    pub queue: Arc<dyn DelayQueue>,
    pub clock: Arc<dyn Clock>,
    pub settings: PipelineSettings,
}

impl Registrar {
    pub async fn tenant(&self, tenant: &TenantId) -> Result<TenantRecord, RegistrarError> {
        self.directory
            .get(tenant)
            .await?
            .ok_or_else(|| RegistrarError::UnknownTenant(tenant.clone()))
    }

    pub async fn put_user(
        &self,
        tenant: &TenantId,
        id: &UserId,
        input: &UserInput,
    ) -> Result<User, RegistrarError> {
        let user = input.validate(id)?;
        self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        store.put_user(&user, self.clock.now()).await?;
        Ok(user)
    }

    pub async fn get_user(&self, tenant: &TenantId, id: &UserId) -> Result<User, RegistrarError> {
        self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        store
            .get_user(id)
            .await?
            .ok_or_else(|| RegistrarError::NotFound(format!("user {id}")))
    }

    pub async fn put_schedule(
        &self,
        tenant: &TenantId,
        id: &ScheduleId,
        input: &ScheduleInput,
    ) -> Result<Registered, RegistrarError> {
        let schedule = input.validate(id)?;
        let record = self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        let saved = store.put_schedule(&schedule, self.clock.now()).await?;
        let (mirrored, enqueued_directly) = match self
            .mirror(&record, MirrorWork::Upsert(saved.clone()))
            .await
        {
            Ok(s) => (true, s.enqueued),
            Err(e) => {
                warn!(%tenant, schedule = %saved.id, error = %chain(&e), "mirror failed; repair will retry");
                (false, 0)
            }
        };
        Ok(Registered {
            schedule: saved,
            mirrored,
            enqueued_directly,
        })
    }

    pub async fn get_schedule(
        &self,
        tenant: &TenantId,
        id: &ScheduleId,
    ) -> Result<Schedule, RegistrarError> {
        self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        store
            .get_schedule(id)
            .await?
            .ok_or_else(|| RegistrarError::NotFound(format!("schedule {id}")))
    }

    /// Deletes a schedule; its queued reminders become stale and deliver
    /// nothing. Returns whether the index mirror is done (else repair finishes it).
    pub async fn delete_schedule(
        &self,
        tenant: &TenantId,
        id: &ScheduleId,
    ) -> Result<bool, RegistrarError> {
        let record = self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        let version = store
            .delete_schedule(id, self.clock.now())
            .await?
            .ok_or_else(|| RegistrarError::NotFound(format!("schedule {id}")))?;
        if let Err(e) = self
            .mirror(
                &record,
                MirrorWork::Delete {
                    schedule: id.clone(),
                    version,
                },
            )
            .await
        {
            warn!(%tenant, schedule = %id, error = %chain(&e), "mirror of delete failed; repair will retry");
            return Ok(false);
        }
        Ok(true)
    }

    /// Mirrors one write into the index and records it done in the tenant database.
    async fn mirror(
        &self,
        record: &TenantRecord,
        work: MirrorWork,
    ) -> Result<EnqueueSummary, StoreError> {
        let tenant = &record.id;
        let now = self.clock.now();
        let store = self.stores.open(tenant).await?;
        let (schedule_id, version, rows) = match &work {
            MirrorWork::Upsert(s) => (
                s.id.clone(),
                s.version,
                // Reminders already past the scanner's look-back are not mirrored.
                reminders_for(
                    tenant,
                    s,
                    now - crate::plan::to_chrono(self.settings.look_back),
                ),
            ),
            MirrorWork::Delete { schedule, version } => (schedule.clone(), *version, Vec::new()),
        };
        if !self
            .index
            .replace_schedule(tenant, &schedule_id, version, &rows)
            .await?
        {
            // A newer write of this schedule is mirrored already: it wins.
            store.mark_mirrored(&schedule_id, version).await?;
            return Ok(EnqueueSummary::default());
        }
        // What the scanner has already covered (or will not reach in time) goes straight in.
        let window = Window::at(now, self.settings.look_back, self.settings.window);
        // A tenant whose contract is off gets nothing; its rows wait in the index
        // (the scanner holds them back too) in case the contract comes back on.
        let direct: Vec<_> = if record.may_receive_reminders() {
            rows.into_iter()
                .filter(|r| window.contains(r.due_at))
                .collect()
        } else {
            Vec::new()
        };
        let summary = if direct.is_empty() {
            EnqueueSummary::default()
        } else {
            enqueue(
                self.index.as_ref(),
                self.queue.as_ref(),
                direct,
                now,
                &self.settings,
                None,
            )
            .await
        };
        if summary.failed > 0 {
            // They stay pending in the index; the next scan enqueues them.
            warn!(%tenant, schedule = %schedule_id, failed = summary.failed, "direct enqueue failed; left to the scanner");
        }
        store.mark_mirrored(&schedule_id, version).await?;
        Ok(summary)
    }

    /// Finishes failed mirrors for every tenant (`toki serve` every minute;
    /// the repair Lambda on AWS). A tenant whose repair fails is counted and
    /// retried next time; the others go on.
    pub async fn repair_all(&self) -> Result<RepairSummary, RegistrarError> {
        let mut summary = RepairSummary::default();
        for t in self.directory.list().await? {
            summary.tenants += 1;
            match self.repair(&t.id).await {
                Ok(0) => {}
                Ok(n) => {
                    info!(tenant = %t.id, repaired = n, "repaired index mirrors");
                    summary.repaired += n;
                }
                Err(e) => {
                    warn!(tenant = %t.id, error = %chain(&e), "repair failed; next pass retries");
                    summary.failed_tenants += 1;
                }
            }
        }
        Ok(summary)
    }

    /// Repairs every `every` until `shutdown` turns true.
    pub async fn run_repair(
        &self,
        every: std::time::Duration,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => break,
            }
            if let Err(e) = self.repair_all().await {
                warn!(error = %chain(&e), "repair: listing tenants failed");
            }
        }
    }

    /// Finishes mirrors that failed (or were cut short) for one tenant.
    /// Returns how many writes were repaired.
    pub async fn repair(&self, tenant: &TenantId) -> Result<usize, RegistrarError> {
        let record = self.tenant(tenant).await?;
        let store = self.stores.open(tenant).await?;
        let mut repaired = 0;
        for work in store.unmirrored().await? {
            self.mirror(&record, work).await?;
            repaired += 1;
        }
        Ok(repaired)
    }
}
