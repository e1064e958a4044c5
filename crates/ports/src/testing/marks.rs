//! Work marks in memory (the same rules as the stored rows).

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::offboard::Holding;
use crate::{Conditional, StoreResult, TenantFootprint, WorkKind, WorkMark, WorkMarks};
use toki_model::domain::{Instant, TenantId};

#[derive(Default)]
pub struct MemoryWorkMarks {
    rows: Mutex<BTreeMap<(WorkKind, TenantId), (Instant, u64)>>,
}

#[async_trait]
impl WorkMarks for MemoryWorkMarks {
    async fn mark(&self, kind: WorkKind, tenant: &TenantId, due: Instant) -> StoreResult<()> {
        let mut rows = self.rows.lock().expect("marks lock");
        let row = rows.entry((kind, tenant.clone())).or_insert((due, 0));
        row.0 = row.0.min(due);
        row.1 += 1;
        Ok(())
    }

    async fn due(&self, kind: WorkKind, now: Instant, limit: usize) -> StoreResult<Vec<WorkMark>> {
        let rows = self.rows.lock().expect("marks lock");
        let mut due: Vec<WorkMark> = rows
            .iter()
            .filter(|((k, _), (at, _))| *k == kind && *at <= now)
            .map(|((k, tenant), (at, revision))| WorkMark {
                kind: *k,
                tenant: tenant.clone(),
                due: *at,
                revision: *revision,
            })
            .collect();
        due.sort_by(|a, b| (a.due, &a.tenant).cmp(&(b.due, &b.tenant)));
        due.truncate(limit);
        Ok(due)
    }

    async fn settle(&self, read: &WorkMark, next: Option<Instant>) -> StoreResult<Conditional> {
        let mut rows = self.rows.lock().expect("marks lock");
        let id = (read.kind, read.tenant.clone());
        let Some(row) = rows.get_mut(&id) else {
            return Ok(Conditional::Refused);
        };
        if row.1 != read.revision {
            if let Some(next) = next {
                row.0 = row.0.min(next);
            }
            return Ok(Conditional::Refused);
        }
        match next {
            Some(next) => row.0 = next,
            None => {
                rows.remove(&id);
            }
        }
        Ok(Conditional::Written)
    }

    async fn marked(&self, kind: WorkKind) -> StoreResult<Vec<TenantId>> {
        let rows = self.rows.lock().expect("marks lock");
        Ok(rows
            .keys()
            .filter(|(k, _)| *k == kind)
            .map(|(_, t)| t.clone())
            .collect())
    }
}

#[async_trait]
impl TenantFootprint for MemoryWorkMarks {
    async fn holdings(&self, tenant: &TenantId) -> StoreResult<Vec<Holding>> {
        let rows = self.rows.lock().expect("marks lock");
        let n = rows.keys().filter(|(_, t)| t == tenant).count();
        Ok(vec![Holding::new("work_marks", n as u64)])
    }

    async fn delete_tenant(&self, tenant: &TenantId) -> StoreResult<Vec<Holding>> {
        let held = self.holdings(tenant).await?;
        self.rows
            .lock()
            .expect("marks lock")
            .retain(|(_, t), _| t != tenant);
        Ok(held)
    }
}
