//! Sending delivery events to their endpoints: at least once, signed, with
//! backoff; in order where the endpoint asks for it. Each endpoint's sending
//! is a task of its own, so a slow or failing endpoint holds up nobody else
//! (and never a delivery: the events are read from the log, after the fact).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{self, StreamExt};
use tokio::sync::watch;
use tracing::warn;

use toki_model::domain::{EndpointId, TenantId};
use toki_model::error::chain;
use toki_model::event::{
    EndpointProgress, EndpointStatus, EventEndpoint, EventOrdering, StoredEvent,
};
use toki_model::webhook_signature::signature_header;
use toki_ports::events::{EventPoster, PostError, ProgressWrite, SignedPost};
use toki_ports::{Clock, TenantDirectory, TenantStore, TenantStores};

use super::failing::FailingTenants;
use super::pace::ReplayPace;

#[derive(Debug, Clone)]
pub struct DispatchSettings {
    /// How often the endpoints are looked at.
    pub poll: Duration,
    /// How long a process holds an endpoint it sends to (renewed each pass).
    pub hold: Duration,
    /// Events read per request to the log.
    pub batch: usize,
    /// Requests at once to an unordered endpoint.
    pub unordered_concurrency: usize,
    /// Replayed events a second, per tenant (its endpoints together), in
    /// this process ([`super::pace`]).
    pub replay_rate: f64,
    /// Replayed events at once after a quiet spell, per tenant.
    pub replay_burst: u32,
}

impl Default for DispatchSettings {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(1),
            hold: Duration::from_secs(60),
            batch: 50,
            unordered_concurrency: 8,
            replay_rate: 50.0,
            replay_burst: 200,
        }
    }
}

/// Counts since the process started (`/metrics`, `toki report`).
#[derive(Debug, Default)]
pub struct DispatchStats {
    pub sent: AtomicU64,
    pub failed: AtomicU64,
    pub endpoints_disabled: AtomicU64,
}

pub struct Dispatcher {
    stores: Arc<dyn TenantStores>,
    directory: Arc<dyn TenantDirectory>,
    poster: Arc<dyn EventPoster>,
    clock: Arc<dyn Clock>,
    /// Names this process in endpoint holds.
    holder: String,
    settings: DispatchSettings,
    busy: Mutex<HashSet<(TenantId, EndpointId)>>,
    /// Each tenant's replayed events, paced.
    pace: ReplayPace,
    /// Tenants whose database cannot be read, reported once.
    pub failing: FailingTenants,
    pub stats: DispatchStats,
}

/// What one pass over an endpoint came to.
enum Pass {
    /// Everything up to the cursor is through (more may be waiting).
    Through {
        cursor: u64,
        full: bool,
    },
    Failed {
        cursor: u64,
        error: PostError,
    },
}

impl Dispatcher {
    pub fn new(
        stores: Arc<dyn TenantStores>,
        directory: Arc<dyn TenantDirectory>,
        poster: Arc<dyn EventPoster>,
        clock: Arc<dyn Clock>,
        holder: String,
        settings: DispatchSettings,
    ) -> Arc<Self> {
        Arc::new(Self {
            stores,
            directory,
            poster,
            clock,
            holder,
            pace: ReplayPace::new(settings.replay_rate, settings.replay_burst),
            settings,
            busy: Mutex::default(),
            failing: FailingTenants::default(),
            stats: DispatchStats::default(),
        })
    }

    /// Looks at every tenant's endpoints each poll until `shutdown`.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            if let Err(e) = self.clone().start_due().await {
                warn!(error = %chain(&e), "delivery events: reading the tenants failed");
            }
            tokio::select! {
                _ = tokio::time::sleep(self.settings.poll) => {}
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Starts a task for every endpoint that is due and not already being sent to.
    async fn start_due(self: Arc<Self>) -> Result<(), toki_ports::StoreError> {
        let now = self.clock.now();
        for tenant in self.directory.list().await? {
            let store = match self.stores.open(&tenant.id).await {
                Ok(store) => store,
                Err(e) => {
                    let why = chain(&e);
                    self.failing
                        .failed(&tenant.id, "opening the tenant's database", &why);
                    continue;
                }
            };
            // Old events are purged by the retention pass (`crate::retention`).
            let endpoints = match store.event_endpoints().await {
                Ok(endpoints) => endpoints,
                Err(e) => {
                    let why = chain(&e);
                    self.failing
                        .failed(&tenant.id, "reading the endpoints", &why);
                    continue;
                }
            };
            self.failing.read(&tenant.id);
            for (endpoint, revision) in endpoints {
                let due = endpoint.progress.status == EndpointStatus::Enabled
                    && endpoint.progress.next_attempt_at <= now;
                let key = (tenant.id.clone(), endpoint.id.clone());
                if !due || !self.busy.lock().expect("busy lock").insert(key.clone()) {
                    continue;
                }
                let this = self.clone();
                let store = store.clone();
                tokio::spawn(async move {
                    this.serve(&key.0, store.as_ref(), endpoint, revision).await;
                    this.busy.lock().expect("busy lock").remove(&key);
                });
            }
        }
        Ok(())
    }

    /// Sends what the endpoint has not had yet, if this process holds it.
    async fn serve(
        &self,
        tenant: &TenantId,
        store: &dyn TenantStore,
        endpoint: EventEndpoint,
        revision: u64,
    ) {
        let mut progress = endpoint.progress.clone();
        let mut revision = revision;
        // Held again each pass: a long catch-up (a paced replay) keeps it.
        while self.hold(tenant, store, &endpoint.id).await {
            let pass = match self.pass(tenant, store, &endpoint, &progress).await {
                Ok(pass) => pass,
                Err(e) => {
                    warn!(%tenant, endpoint = %endpoint.id, error = %chain(&e), "delivery events: reading the log failed");
                    return;
                }
            };
            let now = self.clock.now();
            let (next, more) = match pass {
                Pass::Through { cursor, full } => (progress.succeeded(cursor, now), full),
                Pass::Failed { cursor, error } => {
                    let next = progress.failed(cursor, error.0, now);
                    self.note_failure(tenant, &endpoint.id, &next);
                    (next, false)
                }
            };
            if next == progress {
                return;
            }
            let write = ProgressWrite {
                id: &endpoint.id,
                read_revision: revision,
                progress: &next,
            };
            match store.set_endpoint_progress(write).await {
                Ok(true) => {}
                // The tenant changed the endpoint meanwhile: its change stands.
                Ok(false) => return,
                Err(e) => {
                    warn!(%tenant, endpoint = %endpoint.id, error = %chain(&e), "delivery events: storing progress failed; events will be sent again");
                    return;
                }
            }
            progress = next;
            revision += 1;
            if !more {
                return;
            }
        }
    }

    /// Takes (or renews) this process's hold on the endpoint; whether it has it.
    async fn hold(&self, tenant: &TenantId, store: &dyn TenantStore, id: &EndpointId) -> bool {
        let now = self.clock.now();
        let until = now + chrono::Duration::from_std(self.settings.hold).expect("fits");
        match store.hold_endpoint(id, &self.holder, until, now).await {
            Ok(held) => held,
            Err(e) => {
                warn!(%tenant, endpoint = %id, error = %chain(&e), "delivery events: holding the endpoint failed");
                false
            }
        }
    }

    fn note_failure(&self, tenant: &TenantId, endpoint: &EndpointId, next: &EndpointProgress) {
        self.stats.failed.fetch_add(1, Ordering::Relaxed);
        if let EndpointStatus::Disabled { reason } = &next.status {
            self.stats
                .endpoints_disabled
                .fetch_add(1, Ordering::Relaxed);
            warn!(%tenant, %endpoint, %reason, "delivery events: endpoint disabled; the tenant re-enables it");
        }
    }

    /// One read of the log after the cursor and its sending, a replayed
    /// event only once the tenant's pace lets it.
    async fn pass(
        &self,
        tenant: &TenantId,
        store: &dyn TenantStore,
        endpoint: &EventEndpoint,
        progress: &EndpointProgress,
    ) -> Result<Pass, toki_ports::StoreError> {
        let cursor = progress.cursor;
        let events = store.events_after(cursor, self.settings.batch).await?;
        let full = events.len() == self.settings.batch;
        let last = events.last().map_or(cursor, |e| e.seq);
        let wanted: Vec<&StoredEvent> = events
            .iter()
            .filter(|e| endpoint.spec.kinds.contains(e.kind))
            .collect();
        let concurrency = match endpoint.spec.ordering {
            EventOrdering::InOrder => 1,
            EventOrdering::Unordered => self.settings.unordered_concurrency,
        };
        // In order of the log; the cursor stops before the first failure.
        // Futures start when polled: `buffered` starts `concurrency` at a time.
        let sends: Vec<_> = wanted
            .into_iter()
            .map(|e| async move {
                if progress.is_replay(e.seq) {
                    self.pace.take(tenant).await;
                }
                (e.seq, self.send(endpoint, e).await)
            })
            .collect();
        let sends = stream::iter(sends).buffered(concurrency);
        let results = up_to_first_error(sends).await;
        let mut through = cursor;
        for (seq, result) in results {
            match result {
                Ok(()) => through = seq,
                Err(error) => {
                    return Ok(Pass::Failed {
                        cursor: through,
                        error,
                    })
                }
            }
        }
        Ok(Pass::Through { cursor: last, full })
    }

    async fn send(&self, endpoint: &EventEndpoint, event: &StoredEvent) -> Result<(), PostError> {
        let now = self.clock.now();
        let body = event.body();
        let webhook_id = event.webhook_id();
        let timestamp_s = now.timestamp();
        let signature = signature_header(
            endpoint.secrets.signing(now),
            &webhook_id,
            timestamp_s,
            &body,
        );
        let request = SignedPost {
            webhook_id,
            timestamp_s,
            signature,
            body,
        };
        let result = self.poster.post(&endpoint.spec.url, &request).await;
        if result.is_ok() {
            self.stats.sent.fetch_add(1, Ordering::Relaxed);
        }
        result
    }
}

/// Collects a stream of results up to and including its first error (the
/// requests after a failure of an ordered endpoint are never started; an
/// unordered endpoint's already started ones are dropped and sent again).
async fn up_to_first_error(
    results: impl futures::Stream<Item = (u64, Result<(), PostError>)>,
) -> Vec<(u64, Result<(), PostError>)> {
    let mut out = Vec::new();
    let mut results = std::pin::pin!(results);
    while let Some((seq, result)) = results.next().await {
        let failed = result.is_err();
        out.push((seq, result));
        if failed {
            break;
        }
    }
    out
}
