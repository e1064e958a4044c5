//! Sending delivery events to their endpoints: at least once, signed, with
//! backoff; in order where the endpoint asks for it. Each endpoint's sending
//! is a task of its own, so a slow or failing endpoint holds up nobody else
//! (and never a delivery: the events are read from the log, after the fact).
//!
//! Only tenants with an events mark due are looked at ([`toki_ports::marks`]):
//! an outcome that logs an event marks its tenant, and when the tenant's
//! endpoints are through, the mark is settled (removed, or moved to the
//! next retry of a failing endpoint). A tenant with nothing to send is
//! never opened. A mark written in this process wakes the dispatcher at
//! once ([`super::wake`]); the poll finds the others'.

use std::collections::{HashMap, HashSet};
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
use toki_ports::{Clock, TenantStore, TenantStores, WorkKind, WorkMark, WorkMarks};

use super::failing::FailingTenants;
use super::pace::ReplayPace;
use super::wake::EventsWake;

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
    /// Tenants' marks read per poll (the earliest first).
    pub tenants_per_poll: usize,
    /// Tenants served at once (each in a turn of [`TURN`] at most): fewer
    /// than the tenant databases the process keeps open, so that a tenant's
    /// database stays open while it is served. With every marked tenant at
    /// once (1,000 in a burst), databases were let go while in use, and
    /// calls on them failed ("a closed pool"), the deliveries' too.
    pub tenants_at_once: usize,
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
            tenants_per_poll: 1000,
            tenants_at_once: 16,
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
    marks: Arc<dyn WorkMarks>,
    poster: Arc<dyn EventPoster>,
    clock: Arc<dyn Clock>,
    /// Names this process in endpoint holds.
    holder: String,
    settings: DispatchSettings,
    /// Tenants whose endpoints are being listed now (one look at a time).
    looking: Mutex<HashSet<TenantId>>,
    /// The mark each tenant is being served for, until it is settled: read
    /// again meanwhile (it stays due until then), it is not news.
    serving: Arc<Mutex<HashMap<TenantId, WorkMark>>>,
    /// Endpoints being sent to now, each by a task of its own, and whether
    /// a newer mark asked for another pass after the current one.
    busy: Arc<Mutex<HashMap<(TenantId, EndpointId), FollowUp>>>,
    /// Told when this process marks a tenant's events.
    wake: Arc<EventsWake>,
    /// Turns of the tenants served at once ([`DispatchSettings::tenants_at_once`]).
    turns: Arc<tokio::sync::Semaphore>,
    /// Each tenant's replayed events, paced.
    pace: ReplayPace,
    /// Tenants whose database cannot be read, reported once.
    pub failing: FailingTenants,
    pub stats: DispatchStats,
}

/// An endpoint's sending, and when it asks to be looked at again.
type EndpointTask = tokio::task::JoinHandle<Option<toki_model::domain::Instant>>;

/// Polls after which a tenant that could not be read is looked at again.
const RETRY_POLLS: u32 = 5;

/// How long a tenant keeps its place among those served at once: a slow
/// endpoint (10 s a request) then gives it up and goes on beside the others.
pub const TURN: Duration = Duration::from_millis(500);

/// After a wake, how long the marks of a burst's next writes are gathered
/// before one read of the marks: a burst writes thousands a second.
const WAKE_GATHER: Duration = Duration::from_millis(50);

/// What taking an endpoint's hold came to.
enum Hold {
    Held,
    /// Another process holds it.
    Elsewhere,
    /// The tenant's database did not answer.
    Unknown,
}

/// Whether an endpoint being sent to owes another pass when this one ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FollowUp {
    None,
    /// A mark newer than the pass's read of the log came meanwhile.
    Asked,
}

/// A tenant's mark being served, forgotten when dropped (after its settle,
/// or if the task ends early).
struct Serving {
    serving: Arc<Mutex<HashMap<TenantId, WorkMark>>>,
    mark: WorkMark,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let mut serving = self.serving.lock().expect("serving lock");
        if serving.get(&self.mark.tenant) == Some(&self.mark) {
            serving.remove(&self.mark.tenant);
        }
    }
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
    /// A dispatcher that finds marks by its poll alone.
    pub fn new(
        stores: Arc<dyn TenantStores>,
        marks: Arc<dyn WorkMarks>,
        poster: Arc<dyn EventPoster>,
        clock: Arc<dyn Clock>,
        holder: String,
        settings: DispatchSettings,
    ) -> Arc<Self> {
        Self::waking(
            stores,
            marks,
            poster,
            clock,
            holder,
            settings,
            Arc::default(),
        )
    }

    /// A dispatcher also woken by `wake`: the process's marks, wrapped by
    /// [`super::wake::WakingMarks`], tell it of their events marks at once.
    pub fn waking(
        stores: Arc<dyn TenantStores>,
        marks: Arc<dyn WorkMarks>,
        poster: Arc<dyn EventPoster>,
        clock: Arc<dyn Clock>,
        holder: String,
        settings: DispatchSettings,
        wake: Arc<EventsWake>,
    ) -> Arc<Self> {
        let turns = Arc::new(tokio::sync::Semaphore::new(settings.tenants_at_once.max(1)));
        Arc::new(Self {
            stores,
            marks,
            poster,
            clock,
            holder,
            pace: ReplayPace::new(settings.replay_rate, settings.replay_burst),
            settings,
            looking: Mutex::default(),
            serving: Arc::default(),
            busy: Arc::default(),
            wake,
            turns,
            failing: FailingTenants::default(),
            stats: DispatchStats::default(),
        })
    }

    /// Looks at the marked tenants' endpoints each poll, and soon after
    /// this process marks one, until `shutdown`.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            if let Err(e) = self.clone().start_due().await {
                warn!(error = %chain(&e), "delivery events: reading the marks failed");
            }
            tokio::select! {
                _ = tokio::time::sleep(self.settings.poll) => {}
                _ = self.wake.woken() => tokio::time::sleep(WAKE_GATHER).await,
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Starts a task for every marked tenant not being looked at now, nor
    /// served for this very mark.
    async fn start_due(self: Arc<Self>) -> Result<(), toki_ports::StoreError> {
        let now = self.clock.now();
        let due = self
            .marks
            .due(WorkKind::Events, now, self.settings.tenants_per_poll)
            .await?;
        for mark in due {
            let Some(serving) = self.begin(&mark) else {
                continue;
            };
            let this = self.clone();
            tokio::spawn(async move {
                let next = this.serve_in_turn(&mark).await;
                this.settle(&mark, next).await;
                drop(serving);
            });
        }
        Ok(())
    }

    /// Takes `mark` to serve, unless its tenant is being looked at or served
    /// for this same mark (a mark stays due until settled: the woken passes
    /// of a burst read it again and again).
    fn begin(&self, mark: &WorkMark) -> Option<Serving> {
        let mut serving = self.serving.lock().expect("serving lock");
        if serving.get(&mark.tenant) == Some(mark) {
            return None;
        }
        if !self
            .looking
            .lock()
            .expect("looking lock")
            .insert(mark.tenant.clone())
        {
            return None;
        }
        serving.insert(mark.tenant.clone(), mark.clone());
        Some(Serving {
            serving: self.serving.clone(),
            mark: mark.clone(),
        })
    }

    /// Serves the tenant once its turn comes (marks wait in the order they
    /// were read); after [`TURN`] it goes on without it.
    async fn serve_in_turn(
        self: &Arc<Self>,
        mark: &WorkMark,
    ) -> Option<toki_model::domain::Instant> {
        // The semaphore is never closed: this is always a permit.
        let turn = self.turns.clone().acquire_owned().await;
        let serve = self.serve_tenant(mark);
        tokio::pin!(serve);
        match tokio::time::timeout(TURN, &mut serve).await {
            Ok(next) => next,
            Err(_) => {
                drop(turn);
                serve.await
            }
        }
    }

    /// Settles the tenant's mark: removed, or at the next retry.
    async fn settle(&self, mark: &WorkMark, next: Option<toki_model::domain::Instant>) {
        if let Err(e) = self.marks.settle(mark, next).await {
            let tenant = &mark.tenant;
            warn!(%tenant, error = %chain(&e), "delivery events: settling the mark failed; the tenant is looked at again");
        }
    }

    /// Starts a task for each of the tenant's enabled endpoints not being
    /// sent to already, then waits for them: when the tenant should be looked
    /// at again (None: everything is through). The tenant is open to the
    /// next look once its tasks are started, so a slow endpoint holds up
    /// only itself.
    async fn serve_tenant(
        self: &Arc<Self>,
        mark: &WorkMark,
    ) -> Option<toki_model::domain::Instant> {
        let tenant = &mark.tenant;
        let started = self.start_endpoints(tenant).await;
        self.looking.lock().expect("looking lock").remove(tenant);
        let (mut next, tasks) = match started {
            Ok(started) => started,
            Err(retry) => return Some(retry),
        };
        for task in tasks {
            next = match (next, task.await.unwrap_or(None)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        next
    }

    /// The tasks of the tenant's endpoints that are due and free, and the
    /// earliest look the others ask for; Err: when to look again, the
    /// tenant's database could not be read.
    async fn start_endpoints(
        self: &Arc<Self>,
        tenant: &TenantId,
    ) -> Result<(Option<toki_model::domain::Instant>, Vec<EndpointTask>), toki_model::domain::Instant>
    {
        let retry = self.clock.now() + self.retry_after();
        let store = self.stores.open(tenant).await.map_err(|e| {
            let why = chain(&e);
            self.failing
                .failed(tenant, "opening the tenant's database", &why);
            retry
        })?;
        // Old events are purged by the retention pass (`crate::retention`).
        let endpoints = store.event_endpoints().await.map_err(|e| {
            let why = chain(&e);
            self.failing.failed(tenant, "reading the endpoints", &why);
            retry
        })?;
        self.failing.read(tenant);
        let now = self.clock.now();
        let (mut next, mut tasks) = (None, Vec::new());
        for (endpoint, revision) in endpoints {
            if endpoint.progress.status != EndpointStatus::Enabled {
                continue;
            }
            let later = endpoint.progress.next_attempt_at;
            let key = (tenant.clone(), endpoint.id.clone());
            let ask = if later > now {
                Some(later)
            } else if !self.claim(&key) {
                // Its own task is sending, and passes again after (this
                // look may bring events its pass read too early for); the
                // retry stands in case that pass fails.
                Some(retry)
            } else {
                let (this, store) = (self.clone(), store.clone());
                tasks.push(tokio::spawn(async move {
                    this.serve_claimed(&key, store.as_ref(), endpoint, revision)
                        .await
                }));
                None
            };
            next = match (next, ask) {
                (Some(a), Some(b)) => Some(std::cmp::min(a, b)),
                (a, b) => a.or(b),
            };
        }
        Ok((next, tasks))
    }

    /// Claims the endpoint for a task of this look; if another task has it,
    /// asks that one for another pass.
    fn claim(&self, key: &(TenantId, EndpointId)) -> bool {
        let mut busy = self.busy.lock().expect("busy lock");
        match busy.get_mut(key) {
            Some(follow_up) => {
                *follow_up = FollowUp::Asked;
                false
            }
            None => {
                busy.insert(key.clone(), FollowUp::None);
                true
            }
        }
    }

    /// Serves a claimed endpoint, again while later looks ask for it and it
    /// is through (a failing one keeps its backoff), then lets it go.
    async fn serve_claimed(
        &self,
        key: &(TenantId, EndpointId),
        store: &dyn TenantStore,
        endpoint: EventEndpoint,
        revision: u64,
    ) -> Option<toki_model::domain::Instant> {
        loop {
            // Each pass reads the endpoint afresh once held.
            let next = self.serve(&key.0, store, endpoint.clone(), revision).await;
            let mut busy = self.busy.lock().expect("busy lock");
            match busy.get_mut(key) {
                Some(follow_up) if next.is_none() && *follow_up == FollowUp::Asked => {
                    *follow_up = FollowUp::None;
                }
                _ => {
                    busy.remove(key);
                    return next;
                }
            }
        }
    }

    /// When a tenant whose database or endpoint could not be read is looked at again.
    fn retry_after(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.settings.poll * RETRY_POLLS).expect("fits")
    }

    /// Sends what the endpoint has not had yet, if this process holds it,
    /// then lets the hold go: kept, it made the next look by another
    /// process (its dispatcher took the tenant's next mark) wait out the
    /// hold, a minute, though nothing was being sent. When the endpoint
    /// should be looked at again (None: it is through).
    async fn serve(
        &self,
        tenant: &TenantId,
        store: &dyn TenantStore,
        endpoint: EventEndpoint,
        revision: u64,
    ) -> Option<toki_model::domain::Instant> {
        let id = endpoint.id.clone();
        let next = self.serve_held(tenant, store, endpoint, revision).await;
        // Held until now: free to any process (none if another holds it).
        let now = self.clock.now();
        if let Err(e) = store.hold_endpoint(&id, &self.holder, now, now).await {
            warn!(%tenant, endpoint = %id, error = %chain(&e), "delivery events: letting the endpoint's hold go failed; another process waits for it to end");
        }
        next
    }

    /// [`Self::serve`]'s passes, while this process holds the endpoint.
    async fn serve_held(
        &self,
        tenant: &TenantId,
        store: &dyn TenantStore,
        endpoint: EventEndpoint,
        revision: u64,
    ) -> Option<toki_model::domain::Instant> {
        let mut progress = endpoint.progress.clone();
        let mut revision = revision;
        let mut endpoint = endpoint;
        let mut first = true;
        let later = |this: &Self| Some(this.clock.now() + this.retry_after());
        loop {
            // Held again each pass: a long catch-up (a paced replay) keeps it.
            match self.hold(tenant, store, &endpoint.id).await {
                Hold::Held => {}
                Hold::Elsewhere => {
                    // Another process sends (and settles); looked at again once its hold ends.
                    let hold = chrono::Duration::from_std(self.settings.hold).expect("fits");
                    return Some(self.clock.now() + hold);
                }
                // Not another's hold: waiting it out would delay the events a minute.
                Hold::Unknown => return later(self),
            }
            // Read again once held: read before, it may be a pass behind
            // (read while the last holder's pass ended, its hold let go).
            if std::mem::take(&mut first) {
                match self.read_held(store, &endpoint.id).await {
                    Ok(Some((fresh, at))) => {
                        (endpoint, progress, revision) = (fresh.clone(), fresh.progress, at)
                    }
                    Ok(None) => return None,
                    Err(e) => {
                        warn!(%tenant, endpoint = %endpoint.id, error = %chain(&e), "delivery events: reading the endpoint failed");
                        return later(self);
                    }
                }
            }
            let pass = match self.pass(tenant, store, &endpoint, &progress).await {
                Ok(pass) => pass,
                Err(e) => {
                    warn!(%tenant, endpoint = %endpoint.id, error = %chain(&e), "delivery events: reading the log failed");
                    return later(self);
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
                return None;
            }
            let write = ProgressWrite {
                id: &endpoint.id,
                read_revision: revision,
                progress: &next,
            };
            match store.set_endpoint_progress(write).await {
                Ok(true) => {}
                // The tenant changed the endpoint meanwhile: its change stands.
                Ok(false) => return Some(now),
                Err(e) => {
                    warn!(%tenant, endpoint = %endpoint.id, error = %chain(&e), "delivery events: storing progress failed; events will be sent again");
                    return later(self);
                }
            }
            progress = next;
            revision += 1;
            if !more {
                return match &progress.status {
                    EndpointStatus::Enabled if progress.failures > 0 => {
                        Some(progress.next_attempt_at)
                    }
                    _ => None,
                };
            }
        }
    }

    /// The endpoint and its revision as stored now; None if it is gone or
    /// no longer enabled.
    async fn read_held(
        &self,
        store: &dyn TenantStore,
        id: &EndpointId,
    ) -> Result<Option<(EventEndpoint, u64)>, toki_ports::StoreError> {
        Ok(store
            .event_endpoint(id)
            .await?
            .filter(|(e, _)| e.progress.status == EndpointStatus::Enabled))
    }

    /// Takes (or renews) this process's hold on the endpoint.
    async fn hold(&self, tenant: &TenantId, store: &dyn TenantStore, id: &EndpointId) -> Hold {
        let now = self.clock.now();
        let until = now + chrono::Duration::from_std(self.settings.hold).expect("fits");
        match store.hold_endpoint(id, &self.holder, until, now).await {
            Ok(true) => Hold::Held,
            Ok(false) => Hold::Elsewhere,
            Err(e) => {
                warn!(%tenant, endpoint = %id, error = %chain(&e), "delivery events: holding the endpoint failed");
                Hold::Unknown
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
