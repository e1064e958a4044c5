//! A tenant's event log in memory, with the SQL one's semantics.

use async_trait::async_trait;

use super::event_log::Endpoint;
use super::store::MemoryTenantStore;
use crate::error::StoreResult;
use crate::events::{EventLog, ProgressWrite};
use toki_model::domain::{EndpointId, Instant};
use toki_model::event::{EventEndpoint, NewEvent, StoredEvent};

#[async_trait]
impl EventLog for MemoryTenantStore {
    async fn append_events(&self, events: &[NewEvent]) -> StoreResult<usize> {
        Ok(self.enter_events().await?.append(events.iter().cloned()))
    }

    async fn events_after(&self, after: u64, limit: usize) -> StoreResult<Vec<StoredEvent>> {
        let events = self.enter_events().await?;
        Ok(events
            .log
            .range(after + 1..)
            .take(limit)
            .map(|(_, e)| e.clone())
            .collect())
    }

    async fn last_event_seq(&self) -> StoreResult<u64> {
        Ok(self.enter_events().await?.next_seq)
    }

    async fn event_seq_before(&self, since: Instant) -> StoreResult<u64> {
        let events = self.enter_events().await?;
        Ok(events
            .log
            .values()
            .filter(|e| e.occurred_at < since)
            .map(|e| e.seq)
            .max()
            .unwrap_or(0))
    }

    async fn put_event_endpoint(&self, endpoint: &EventEndpoint) -> StoreResult<()> {
        let mut events = self.enter_events().await?;
        let entry = events
            .endpoints
            .entry(endpoint.id.clone())
            .or_insert_with(|| Endpoint {
                endpoint: endpoint.clone(),
                revision: 0,
                held: None,
            });
        entry.endpoint = endpoint.clone();
        entry.revision += 1;
        Ok(())
    }

    async fn event_endpoint(&self, id: &EndpointId) -> StoreResult<Option<(EventEndpoint, u64)>> {
        let events = self.enter_events().await?;
        Ok(events
            .endpoints
            .get(id)
            .map(|e| (e.endpoint.clone(), e.revision)))
    }

    async fn event_endpoints(&self) -> StoreResult<Vec<(EventEndpoint, u64)>> {
        let events = self.enter_events().await?;
        Ok(events
            .endpoints
            .values()
            .map(|e| (e.endpoint.clone(), e.revision))
            .collect())
    }

    async fn delete_event_endpoint(&self, id: &EndpointId) -> StoreResult<bool> {
        Ok(self.enter_events().await?.endpoints.remove(id).is_some())
    }

    async fn set_endpoint_progress(&self, write: ProgressWrite<'_>) -> StoreResult<bool> {
        let mut events = self.enter_events().await?;
        match events.endpoints.get_mut(write.id) {
            Some(e) if e.revision == write.read_revision => {
                e.endpoint.progress = write.progress.clone();
                e.revision += 1;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn hold_endpoint(
        &self,
        id: &EndpointId,
        holder: &str,
        until: Instant,
        now: Instant,
    ) -> StoreResult<bool> {
        let mut events = self.enter_events().await?;
        let Some(e) = events.endpoints.get_mut(id) else {
            return Ok(false);
        };
        let free = match &e.held {
            None => true,
            Some((h, held_until)) => h == holder || *held_until <= now,
        };
        if free {
            e.held = Some((holder.to_owned(), until));
        }
        Ok(free)
    }
}
