//! Offboarding on the in-memory tenant store: the fence and the live claims.

use async_trait::async_trait;

use super::MemoryTenantStore;
use crate::error::StoreResult;
use crate::offboard::{Fenced, Holding, TenantOffboard};
use toki_model::domain::{DeliveryStatus, Instant};

#[async_trait]
impl TenantOffboard for MemoryTenantStore {
    async fn table_counts(&self) -> StoreResult<Vec<Holding>> {
        let s = self.enter().await?;
        let endpoints = self.events().endpoints.len();
        Ok([
            ("users", s.users.len()),
            ("schedules", s.schedules.len()),
            ("schedule_mirror", s.mirror.len()),
            ("deliveries", s.deliveries.len()),
            ("chat_messages", s.chat.len()),
            ("change_baselines", s.baselines.len()),
            ("change_notices", s.notices.len()),
            ("reminder_templates", s.templates.len()),
            ("webhook_settings", usize::from(s.webhook.is_some())),
            ("idempotency_keys", s.idempotency.len()),
            ("event_endpoints", endpoints),
        ]
        .into_iter()
        .map(|(t, n)| Holding::new(format!("tenant.{t}"), n as u64))
        .collect())
    }

    async fn fence(&self) -> StoreResult<Fenced> {
        let mut s = self.enter().await?;
        let fenced = Fenced {
            schedules: s.schedules.len() as u64,
            users: s.users.len() as u64,
            notice_rows: (s.baselines.len() + s.notices.len()) as u64,
            endpoints: u64::from(s.webhook.is_some()),
        };
        s.schedules.clear();
        s.users.clear();
        s.baselines.clear();
        s.notices.clear();
        s.webhook = None;
        drop(s);
        let mut events = self.events();
        let endpoints = events.endpoints.len() as u64;
        events.endpoints.clear();
        Ok(Fenced {
            endpoints: fenced.endpoints + endpoints,
            ..fenced
        })
    }

    async fn live_claims(&self, renewed_since: Instant) -> StoreResult<u64> {
        let s = self.enter().await?;
        Ok(s.deliveries
            .values()
            .filter(|d| {
                d.status == DeliveryStatus::Sending
                    && d.claimed_at.is_some_and(|at| at >= renewed_since)
            })
            .count() as u64)
    }
}
