//! The reminder index and the tenant directory in memory, keyed like the real
//! ones: (partition = due minute + shard, sort key = due + identity).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::error::{StoreError, StoreResult};
use crate::{ReminderIndex, TenantDirectory, TenantSchedule};
use toki_model::domain::{IndexStatus, IndexedReminder, Instant, Reminder, ScheduleId, TenantId};
use toki_model::index::{sort_key, Partition};
use toki_model::TenantRecord;

mod footprint;

pub struct MemoryIndex {
    shards: u16,
    rows: Mutex<BTreeMap<(String, String), IndexedReminder>>,
    /// The version whose rows each schedule has.
    versions: Mutex<BTreeMap<(TenantId, ScheduleId), i64>>,
    down: AtomicBool,
    /// How long each schedule's write takes (a slow DynamoDB), on tokio's clock.
    write_latency: Mutex<std::time::Duration>,
    repair_cursor: Mutex<Option<TenantId>>,
}

impl MemoryIndex {
    pub fn new(shards: u16) -> Self {
        MemoryIndex {
            shards: shards.max(1),
            rows: Mutex::default(),
            versions: Mutex::default(),
            down: AtomicBool::new(false),
            write_latency: Mutex::default(),
            repair_cursor: Mutex::default(),
        }
    }

    /// Makes every schedule's write take `latency` (on tokio's clock).
    pub fn set_write_latency(&self, latency: std::time::Duration) {
        *self.write_latency.lock().expect("index lock") = latency;
    }

    /// While down, every call fails as an unreachable service would.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn check_up(&self) -> StoreResult<()> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable(
                "memory index",
                std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "index is down"),
            ));
        }
        Ok(())
    }

    fn key(&self, r: &Reminder) -> (String, String) {
        (Partition::of(r, self.shards).key(), sort_key(r))
    }

    /// Every row, in key order (for assertions).
    pub fn rows(&self) -> Vec<IndexedReminder> {
        self.rows
            .lock()
            .expect("index lock")
            .values()
            .cloned()
            .collect()
    }

    /// Updates a row of the same version if `when` holds; returns whether it did.
    fn update(&self, r: &Reminder, when: impl Fn(IndexStatus) -> bool, to: IndexStatus) -> bool {
        let mut rows = self.rows.lock().expect("index lock");
        match rows.get_mut(&self.key(r)) {
            Some(row) if row.reminder.version == r.version && when(row.status) => {
                row.status = to;
                true
            }
            _ => false,
        }
    }
}

#[async_trait]
impl ReminderIndex for MemoryIndex {
    async fn replace_schedule(
        &self,
        tenant: &TenantId,
        schedule: &ScheduleId,
        version: i64,
        new: &[Reminder],
    ) -> StoreResult<bool> {
        self.check_up()?;
        let latency = *self.write_latency.lock().expect("index lock");
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut versions = self.versions.lock().expect("index lock");
        let held = versions
            .entry((tenant.clone(), schedule.clone()))
            .or_insert(version);
        if *held > version {
            return Ok(false);
        }
        *held = version;
        let mut rows = self.rows.lock().expect("index lock");
        // Older versions' rows go; this version's rows already there stay as they are.
        rows.retain(|_, r| {
            !(&r.reminder.key.tenant == tenant
                && &r.reminder.key.schedule == schedule
                && r.reminder.version < version)
        });
        for r in new {
            rows.entry(self.key(r)).or_insert_with(|| IndexedReminder {
                reminder: r.clone(),
                status: IndexStatus::Pending,
            });
        }
        Ok(true)
    }

    async fn query_partition(
        &self,
        partition: &Partition,
        from: Instant,
        to: Instant,
    ) -> StoreResult<Vec<IndexedReminder>> {
        self.check_up()?;
        let rows = self.rows.lock().expect("index lock");
        let pk = partition.key();
        Ok(rows
            .iter()
            .filter(|((p, _), r)| {
                *p == pk && r.reminder.due_at.0 >= from && r.reminder.due_at.0 <= to
            })
            .map(|(_, r)| r.clone())
            .collect())
    }

    async fn claim(&self, r: &Reminder, now: Instant, lease_until: Instant) -> StoreResult<bool> {
        self.check_up()?;
        // A real index answers over the network: let rival scanners interleave.
        tokio::task::yield_now().await;
        Ok(self.update(
            r,
            |s| match s {
                IndexStatus::Pending => true,
                IndexStatus::Enqueuing { lease_until } => lease_until < now,
                IndexStatus::Enqueued => false,
            },
            IndexStatus::Enqueuing { lease_until },
        ))
    }

    async fn mark_enqueued(&self, r: &Reminder) -> StoreResult<()> {
        self.check_up()?;
        self.update(r, |_| true, IndexStatus::Enqueued);
        Ok(())
    }

    async fn release(&self, r: &Reminder) -> StoreResult<()> {
        self.check_up()?;
        self.update(
            r,
            |s| matches!(s, IndexStatus::Enqueuing { .. }),
            IndexStatus::Pending,
        );
        Ok(())
    }

    async fn repair_cursor(&self) -> StoreResult<Option<TenantId>> {
        self.check_up()?;
        Ok(self.repair_cursor.lock().expect("index lock").clone())
    }

    async fn set_repair_cursor(&self, next: &TenantId) -> StoreResult<()> {
        self.check_up()?;
        *self.repair_cursor.lock().expect("index lock") = Some(next.clone());
        Ok(())
    }

    async fn mirrored_versions(
        &self,
        schedules: &[TenantSchedule],
    ) -> StoreResult<HashMap<TenantSchedule, i64>> {
        self.check_up()?;
        let versions = self.versions.lock().expect("index lock");
        Ok(schedules
            .iter()
            .filter_map(|k| {
                let v = versions.get(&(k.tenant.clone(), k.schedule.clone()))?;
                Some((k.clone(), *v))
            })
            .collect())
    }
}

#[derive(Default)]
pub struct MemoryDirectory {
    tenants: Mutex<BTreeMap<TenantId, TenantRecord>>,
}

#[async_trait]
impl TenantDirectory for MemoryDirectory {
    async fn get(&self, tenant: &TenantId) -> StoreResult<Option<TenantRecord>> {
        Ok(self
            .tenants
            .lock()
            .expect("directory lock")
            .get(tenant)
            .cloned())
    }

    async fn put(&self, record: &TenantRecord) -> StoreResult<()> {
        self.tenants
            .lock()
            .expect("directory lock")
            .insert(record.id.clone(), record.clone());
        Ok(())
    }

    async fn list(&self) -> StoreResult<Vec<TenantRecord>> {
        Ok(self
            .tenants
            .lock()
            .expect("directory lock")
            .values()
            .cloned()
            .collect())
    }

    async fn delete(&self, tenant: &TenantId) -> StoreResult<bool> {
        Ok(self
            .tenants
            .lock()
            .expect("directory lock")
            .remove(tenant)
            .is_some())
    }
}
