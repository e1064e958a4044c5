//! Delivery events: the endpoints a tenant registers (through the API and
//! the CLI) and, in [`dispatch`], their sending, replays paced per tenant
//! ([`pace`]).

pub mod dispatch;
pub mod failing;
pub mod pace;
pub mod wake;

use std::sync::Arc;

use thiserror::Error;

use toki_model::domain::{EndpointId, Instant, TenantId};
use toki_model::event::{
    EndpointProgress, EndpointSecrets, EndpointSpec, EndpointStatus, EventEndpoint, StoredEvent,
};
use toki_model::quota::{Cap, Counted, TenantCaps};
use toki_model::webhook_signature::WebhookSecret;
use toki_ports::{Clock, StoreError, TenantDirectory, TenantStore, TenantStores, WorkMarks};

use crate::work::Marker;

/// Endpoints one tenant may register unless its cap says otherwise
/// (`max_event_endpoints`): each is a sender's work every pass.
pub const MAX_ENDPOINTS: usize = 10;
/// Events one listing returns at most.
pub const MAX_LISTED: usize = 1000;

#[derive(Debug, Error)]
pub enum EventsError {
    #[error("no event endpoint {0}")]
    NotFound(EndpointId),
    /// A new endpoint would take the tenant past its cap; nothing was written.
    #[error("the tenant has {have} event endpoints and may have {} (max_event_endpoints)", .cap.0)]
    CapReached { cap: Cap, have: u64 },
    #[error("the tenant's database")]
    Store(#[from] StoreError),
}

/// Where a tenant's cap on endpoints is read: its contract over the
/// configured caps.
#[derive(Clone)]
pub struct EndpointCaps {
    pub directory: Arc<dyn TenantDirectory>,
    pub caps: TenantCaps,
}

/// What a `put` did: a new endpoint comes with its secret, shown this once.
pub enum Put {
    Created {
        endpoint: EventEndpoint,
        secret: WebhookSecret,
    },
    Updated(EventEndpoint),
}

/// The tenant-facing operations on endpoints and the event log.
pub struct EventEndpoints {
    stores: Arc<dyn TenantStores>,
    clock: Arc<dyn Clock>,
    /// An endpoint made, enabled or replayed marks its tenant for the dispatcher.
    marker: Marker,
    /// None: the default cap ([`MAX_ENDPOINTS`]) for every tenant.
    caps: Option<EndpointCaps>,
}

impl EventEndpoints {
    pub fn new(
        stores: Arc<dyn TenantStores>,
        marks: Arc<dyn WorkMarks>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            stores,
            marker: Marker::new(marks, clock.clone()),
            clock,
            caps: None,
        }
    }

    /// Each tenant capped as its contract and the configuration say.
    pub fn with_caps(mut self, caps: EndpointCaps) -> Self {
        self.caps = Some(caps);
        self
    }

    /// `tenant`'s cap on endpoints.
    async fn cap(&self, tenant: &TenantId) -> Result<Cap, EventsError> {
        let Some(c) = &self.caps else {
            return Ok(Cap(MAX_ENDPOINTS as u64));
        };
        let contract = c.directory.get(tenant).await?;
        let quota = contract.map(|r| r.limits.quota).unwrap_or_default();
        Ok(c.caps.with(&quota).get(Counted::EventEndpoints))
    }

    async fn store(&self, tenant: &TenantId) -> Result<Arc<dyn TenantStore>, EventsError> {
        Ok(self.stores.open(tenant).await?)
    }

    async fn existing(
        &self,
        store: &dyn TenantStore,
        id: &EndpointId,
    ) -> Result<EventEndpoint, EventsError> {
        match store.event_endpoint(id).await? {
            Some((e, _)) => Ok(e),
            None => Err(EventsError::NotFound(id.clone())),
        }
    }

    /// Registers an endpoint (it gets what occurs from now on) or changes
    /// what it receives (its secret and progress stay).
    pub async fn put(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        spec: EndpointSpec,
    ) -> Result<Put, EventsError> {
        let store = self.store(tenant).await?;
        let now = self.clock.now();
        if let Some((mut endpoint, _)) = store.event_endpoint(id).await? {
            endpoint.spec = spec;
            store.put_event_endpoint(&endpoint).await?;
            self.marker.events(tenant).await;
            return Ok(Put::Updated(endpoint));
        }
        let (cap, have) = (
            self.cap(tenant).await?,
            store.count(Counted::EventEndpoints).await?,
        );
        if have >= cap.0 {
            return Err(EventsError::CapReached { cap, have });
        }
        let secret = WebhookSecret::generate(&mut rand::thread_rng());
        let endpoint = EventEndpoint {
            id: id.clone(),
            spec,
            secrets: EndpointSecrets {
                current: secret.clone(),
                previous: None,
            },
            progress: EndpointProgress::starting_at(store.last_event_seq().await?, now),
            created_at: now,
        };
        store.put_event_endpoint(&endpoint).await?;
        self.marker.events(tenant).await;
        Ok(Put::Created { endpoint, secret })
    }

    pub async fn get(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
    ) -> Result<EventEndpoint, EventsError> {
        let store = self.store(tenant).await?;
        self.existing(store.as_ref(), id).await
    }

    pub async fn list(&self, tenant: &TenantId) -> Result<Vec<EventEndpoint>, EventsError> {
        let store = self.store(tenant).await?;
        Ok(store
            .event_endpoints()
            .await?
            .into_iter()
            .map(|(e, _)| e)
            .collect())
    }

    pub async fn delete(&self, tenant: &TenantId, id: &EndpointId) -> Result<bool, EventsError> {
        Ok(self.store(tenant).await?.delete_event_endpoint(id).await?)
    }

    /// A new secret; the old one keeps signing for a day (both are sent).
    pub async fn rotate_secret(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
    ) -> Result<(EventEndpoint, WebhookSecret), EventsError> {
        self.change(tenant, id, |e, now| {
            let fresh = WebhookSecret::generate(&mut rand::thread_rng());
            e.secrets = e.secrets.rotate(fresh.clone(), now);
            fresh
        })
        .await
    }

    /// Sends to a disabled endpoint again, from where it stopped.
    pub async fn enable(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
    ) -> Result<EventEndpoint, EventsError> {
        let (e, ()) = self
            .change(tenant, id, |e, now| {
                e.progress = e.progress.resumed(now);
            })
            .await?;
        Ok(e)
    }

    /// Sends again every event that occurred from `since` on (and enables),
    /// those logged by now at the tenant's replay rate
    /// ([`dispatch::DispatchSettings::replay_rate`]).
    pub async fn replay(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        since: Instant,
    ) -> Result<EventEndpoint, EventsError> {
        let store = self.store(tenant).await?;
        let cursor = store.event_seq_before(since).await?;
        let through = store.last_event_seq().await?;
        let (e, ()) = self
            .change(tenant, id, |e, now| {
                e.progress = e.progress.replaying(cursor, through, now);
            })
            .await?;
        Ok(e)
    }

    /// Events after `after`, in order, at most [`MAX_LISTED`].
    pub async fn events(
        &self,
        tenant: &TenantId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, EventsError> {
        let store = self.store(tenant).await?;
        Ok(store.events_after(after, limit.min(MAX_LISTED)).await?)
    }

    /// Reads an endpoint, changes it, writes it whole.
    async fn change<T>(
        &self,
        tenant: &TenantId,
        id: &EndpointId,
        f: impl FnOnce(&mut EventEndpoint, Instant) -> T,
    ) -> Result<(EventEndpoint, T), EventsError> {
        let store = self.store(tenant).await?;
        let mut endpoint = self.existing(store.as_ref(), id).await?;
        let out = f(&mut endpoint, self.clock.now());
        store.put_event_endpoint(&endpoint).await?;
        // An enabled or replayed endpoint has events to send now.
        self.marker.events(tenant).await;
        Ok((endpoint, out))
    }
}

/// Whether the endpoint is sent to.
pub fn is_enabled(e: &EventEndpoint) -> bool {
    e.progress.status == EndpointStatus::Enabled
}
