//! A tenant's database in memory, with the same semantics as the SQL one
//! (the conformance suite checks both): versions that never repeat, a mirror
//! journal, and delivery claims that make each delivery exactly once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use toki_model::suppression::{ListUnsubscribe, ListedAddress, Suppression};

use async_trait::async_trait;

use crate::error::{StoreError, StoreResult};
use crate::{
    writable_schedules, ChatMessage, Claims, DeliveryContext, IdempotentStart, KeyedRequest,
    MirrorWork, OwnedDelivery, TenantStore, TenantStores,
};
use toki_model::change::{ChangeNotice, NoticeEdge};
use toki_model::domain::{
    Channel, DeliveryClaim, DeliveryCount, DeliveryKey, DeliveryOutcome, DeliveryStatus, DueAt,
    Instant, ReminderKey, Schedule, ScheduleId, TenantId, User, UserId,
};
use toki_model::error::ValidationError;
use toki_model::event::NewEvent;
use toki_model::idempotency::{IdempotencyKey, KeptAnswer, RequestDigest};
use toki_model::quota::Counted;
use toki_model::template::ReminderTemplate;
use toki_model::ScheduleSnapshot;

mod offboard;

#[derive(Debug, Clone)]
pub(super) struct DeliveryRow {
    version: i64,
    pub(super) status: DeliveryStatus,
    due_at: DueAt,
    claimed_at: Option<Instant>,
    pub(super) finished_at: Option<Instant>,
    pub(super) detail: Option<String>,
    claim_token: Option<u64>,
    failures: u32,
    taken_over: bool,
}

/// Whether an outcome replaces the row there (the SQL stores' rule): a
/// finished delivery is final, except that a send that happened is always
/// recorded; a stale verdict never overwrites another version's send in progress.
fn replaces(row: &DeliveryRow, o: &DeliveryOutcome) -> bool {
    use DeliveryStatus::*;
    match row.status {
        Failed | Throttled | Deferred => true,
        Sending => o.status != Stale || row.version == o.version,
        Delivered => false,
        _ => o.status == Delivered,
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct MirrorRow {
    version: i64,
    deleted: bool,
    mirrored: bool,
    /// A series' horizon in the index.
    mirrored_until: Option<Instant>,
    changed_at: Instant,
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) users: BTreeMap<UserId, User>,
    pub(super) schedules: BTreeMap<ScheduleId, Schedule>,
    pub(super) mirror: BTreeMap<ScheduleId, MirrorRow>,
    pub(super) deliveries: BTreeMap<DeliveryKey, DeliveryRow>,
    pub(super) chat: BTreeMap<DeliveryKey, ChatMessage>,
    /// What the last purge pass did, per kind (`testing::retention`).
    pub(super) purge_log:
        BTreeMap<toki_model::retention::RetentionKind, crate::retention::PurgeRecord>,
    next_token: u64,
    /// Per schedule: the state its participants know (None after a
    /// cancellation) and the last notice's instant.
    pub(super) baselines: BTreeMap<ScheduleId, (Option<Schedule>, Option<Instant>)>,
    pub(super) notices: Vec<ChangeNotice>,
    /// By channel name then locale: the SQL stores' order.
    templates: BTreeMap<(&'static str, String), ReminderTemplate>,
    webhook: Option<Arc<toki_model::webhook::WebhookSettings>>,
    pub(super) idempotency: BTreeMap<IdempotencyKey, KeyRow>,
    /// The suppression list and `List-Unsubscribe` (testing/suppression.rs).
    pub(super) suppressed: BTreeMap<ListedAddress, Suppression>,
    pub(super) list_unsubscribe: Option<Arc<ListUnsubscribe>>,
    /// Erased people's entries by the keyed hash of their address.
    pub(super) erased_suppressed: super::erased_list::ErasedSuppressions,
}

/// A request under its idempotency key.
#[derive(Debug, Clone)]
pub(super) struct KeyRow {
    digest: RequestDigest,
    started: Instant,
    pub(super) answer: Option<KeptAnswer>,
}

impl KeyRow {
    /// Whether it still holds its key for a request starting `start`.
    fn live(&self, start: &IdempotentStart<'_>) -> bool {
        self.started >= start.expired_before
            && (self.answer.is_some() || self.started >= start.abandoned_before)
    }
}

#[derive(Default)]
pub struct MemoryTenantStore {
    state: Mutex<State>,
    down: AtomicBool,
    /// While set, every call first waits this long (a database that stalls).
    stall: Mutex<Option<std::time::Duration>>,
    /// Calls that reached the state (a test counts round trips).
    entered: AtomicU64,
    /// Taken after `state` when both are (outcomes and their events).
    events: Mutex<super::event_log::MemoryEvents>,
    audit: Mutex<super::audit_log::MemoryAudit>,
    /// The instants of `renew_claims` calls (a test of the heartbeat's timing).
    renewals: Mutex<Vec<Instant>>,
}

impl MemoryTenantStore {
    /// While down, every call fails as an unreachable database would.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Everything it holds, as `Debug` text: what a test searches for a
    /// value that must not be there (a field added later is in it too).
    pub fn dump(&self) -> String {
        let state = format!("{:?}", self.state.lock().expect("store lock"));
        format!("{state}\n{:?}", *self.events())
    }

    /// While `Some`, every call waits that long before it answers.
    pub fn set_stall(&self, stall: Option<std::time::Duration>) {
        *self.stall.lock().expect("stall lock") = stall;
    }

    pub(super) fn events(&self) -> std::sync::MutexGuard<'_, super::event_log::MemoryEvents> {
        self.events.lock().expect("events lock")
    }

    /// The event log, down and stalled when the store is.
    pub(super) async fn enter_events(
        &self,
    ) -> StoreResult<std::sync::MutexGuard<'_, super::event_log::MemoryEvents>> {
        drop(self.enter().await?);
        Ok(self.events())
    }

    /// The audit log, for a caller that holds the state (an erasure).
    pub(super) fn audit_now(&self) -> std::sync::MutexGuard<'_, super::audit_log::MemoryAudit> {
        self.audit.lock().expect("audit lock")
    }

    /// The audit log, down and stalled when the store is.
    pub(super) async fn enter_audit(
        &self,
    ) -> StoreResult<std::sync::MutexGuard<'_, super::audit_log::MemoryAudit>> {
        drop(self.enter().await?);
        Ok(self.audit.lock().expect("audit lock"))
    }

    /// When claims were renewed, call by call (the clock's `now` passed in).
    pub fn renewals(&self) -> Vec<Instant> {
        self.renewals.lock().expect("renewals lock").clone()
    }

    /// Calls so far that waited out any stall and reached the state.
    pub fn calls(&self) -> u64 {
        self.entered.load(Ordering::Relaxed)
    }

    /// Waits out a stall, then takes the state as `lock` does.
    pub(super) async fn enter(&self) -> StoreResult<std::sync::MutexGuard<'_, State>> {
        let stall = *self.stall.lock().expect("stall lock");
        if let Some(stall) = stall {
            tokio::time::sleep(stall).await;
        }
        self.entered.fetch_add(1, Ordering::Relaxed);
        self.lock()
    }

    fn lock(&self) -> StoreResult<std::sync::MutexGuard<'_, State>> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable(
                "memory tenant database",
                std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "database is down"),
            ));
        }
        Ok(self.state.lock().expect("store lock"))
    }
}

pub(super) fn next_version(state: &mut State, id: &ScheduleId, deleted: bool, now: Instant) -> i64 {
    let row = state.mirror.entry(id.clone()).or_insert(MirrorRow {
        version: 0,
        deleted,
        mirrored: false,
        mirrored_until: None,
        changed_at: now,
    });
    row.version += 1;
    row.deleted = deleted;
    row.mirrored = false;
    row.changed_at = now;
    row.version
}

#[async_trait]
impl TenantStore for MemoryTenantStore {
    async fn put_user(&self, user: &User, _now: Instant) -> StoreResult<()> {
        let mut state = self.enter().await?;
        // An erased person's address given again: suppressed again.
        let state = &mut *state;
        state.erased_suppressed.restore(&mut state.suppressed, user);
        state.users.insert(user.id.clone(), user.clone());
        Ok(())
    }

    async fn get_user(&self, id: &UserId) -> StoreResult<Option<User>> {
        Ok(self.enter().await?.users.get(id).cloned())
    }

    async fn put_schedules(
        &self,
        schedules: &[Schedule],
        now: Instant,
    ) -> StoreResult<Vec<Result<Schedule, ValidationError>>> {
        let mut state = self.enter().await?;
        let verdicts = writable_schedules(schedules, |u| state.users.contains_key(u));
        Ok(verdicts
            .into_iter()
            .map(|v| {
                v.map(|schedule| {
                    let version = next_version(&mut state, &schedule.id, false, now);
                    let saved = Schedule {
                        version,
                        ..schedule.clone()
                    };
                    state.schedules.insert(saved.id.clone(), saved.clone());
                    saved
                })
            })
            .collect())
    }

    async fn get_schedule(&self, id: &ScheduleId) -> StoreResult<Option<Schedule>> {
        Ok(self.enter().await?.schedules.get(id).cloned())
    }

    async fn delete_schedule(&self, id: &ScheduleId, now: Instant) -> StoreResult<Option<i64>> {
        let mut state = self.enter().await?;
        if state.schedules.remove(id).is_none() {
            return Ok(None);
        }
        Ok(Some(next_version(&mut state, id, true, now)))
    }

    async fn unmirrored(&self, extend_before: Instant) -> StoreResult<Vec<MirrorWork>> {
        let state = self.enter().await?;
        let short =
            |m: &MirrorRow| !m.deleted && m.mirrored_until.is_some_and(|u| u < extend_before);
        let mut rows: Vec<_> = state
            .mirror
            .iter()
            .filter(|(_, m)| !m.mirrored || short(m))
            .collect();
        rows.sort_by_key(|(_, m)| m.changed_at);
        Ok(rows
            .into_iter()
            .filter_map(|(id, m)| {
                if m.deleted {
                    Some(MirrorWork::Delete {
                        schedule: id.clone(),
                        version: m.version,
                    })
                } else if m.mirrored {
                    state.schedules.get(id).cloned().map(MirrorWork::Extend)
                } else {
                    state.schedules.get(id).cloned().map(MirrorWork::Upsert)
                }
            })
            .collect())
    }

    async fn earliest_mirrored_until(&self) -> StoreResult<Option<Instant>> {
        let state = self.enter().await?;
        Ok(state
            .mirror
            .values()
            .filter(|m| !m.deleted)
            .filter_map(|m| m.mirrored_until)
            .min())
    }

    async fn mark_mirrored(
        &self,
        schedule: &ScheduleId,
        version: i64,
        until: Option<Instant>,
    ) -> StoreResult<()> {
        if let Some(m) = self.enter().await?.mirror.get_mut(schedule) {
            // Only if no newer write came in meanwhile.
            if m.version == version {
                m.mirrored = true;
                m.mirrored_until = until;
            }
        }
        Ok(())
    }

    async fn delivery_context(&self, schedules: &[ScheduleId]) -> StoreResult<DeliveryContext> {
        let state = self.enter().await?;
        let mut ctx = DeliveryContext::default();
        for s in schedules.iter().filter_map(|id| state.schedules.get(id)) {
            let participants: Vec<UserId> = s
                .participants
                .iter()
                .filter(|p| state.users.contains_key(*p))
                .cloned()
                .collect();
            for p in &participants {
                ctx.users
                    .insert(p.clone(), Arc::new(state.users[p].clone()));
            }
            ctx.schedules.insert(
                s.id.clone(),
                ScheduleSnapshot {
                    id: s.id.clone(),
                    title: s.title.clone(),
                    body: s.body.clone(),
                    version: s.version,
                    participants,
                    exceptions: s
                        .recurrence
                        .as_ref()
                        .map(|r| r.exceptions.clone())
                        .unwrap_or_default(),
                },
            );
        }
        ctx.webhook = state.webhook.clone();
        ctx.suppressed = listed_among(&state.suppressed, ctx.users.values());
        ctx.list_unsubscribe = state.list_unsubscribe.clone();
        Ok(ctx)
    }

    async fn webhook_settings(&self) -> StoreResult<Option<toki_model::webhook::WebhookSettings>> {
        Ok(self.enter().await?.webhook.as_deref().cloned())
    }

    async fn put_webhook_settings(
        &self,
        settings: &toki_model::webhook::WebhookSettings,
        _now: Instant,
    ) -> StoreResult<()> {
        self.enter().await?.webhook = Some(Arc::new(settings.clone()));
        Ok(())
    }

    async fn claim_deliveries(
        &self,
        claims: &[DeliveryClaim],
        now: Instant,
        takeover_before: Instant,
    ) -> StoreResult<Claims> {
        let mut state = self.enter().await?;
        state.next_token += 1;
        let token = state.next_token;
        let mut out = Claims::default();
        for c in claims {
            let previous = state.deliveries.get(&c.key).cloned();
            let claimable = match &previous {
                None => true,
                Some(row) => match row.status {
                    DeliveryStatus::Failed
                    | DeliveryStatus::Stale
                    | DeliveryStatus::Throttled
                    | DeliveryStatus::Deferred => true,
                    DeliveryStatus::Sending => row.claimed_at.is_some_and(|t| t < takeover_before),
                    _ => false,
                },
            };
            if claimable {
                let failures = previous.as_ref().map_or(0, |p| p.failures);
                let taken_over = previous
                    .as_ref()
                    .is_some_and(|p| p.status == DeliveryStatus::Sending);
                state.deliveries.insert(
                    c.key.clone(),
                    DeliveryRow {
                        version: c.version,
                        status: DeliveryStatus::Sending,
                        due_at: c.due_at,
                        claimed_at: Some(now),
                        finished_at: None,
                        detail: None,
                        claim_token: Some(token),
                        failures,
                        taken_over,
                    },
                );
                out.owned.push(OwnedDelivery {
                    key: c.key.clone(),
                    failures,
                    taken_over,
                });
            } else if previous.is_some_and(|r| {
                r.status == DeliveryStatus::Sending && r.claim_token != Some(token)
            }) {
                out.busy.push(c.key.clone());
            }
        }
        out.token = token.to_string();
        Ok(out)
    }

    async fn renew_claims(&self, tokens: &[String], now: Instant) -> StoreResult<()> {
        let mut state = self.enter().await?;
        self.renewals.lock().expect("renewals lock").push(now);
        let tokens: HashSet<u64> = tokens.iter().filter_map(|t| t.parse().ok()).collect();
        for row in state.deliveries.values_mut() {
            if row.status == DeliveryStatus::Sending
                && row.claim_token.is_some_and(|t| tokens.contains(&t))
            {
                row.claimed_at = Some(now);
            }
        }
        Ok(())
    }

    async fn schedule_versions(
        &self,
        schedules: &[ScheduleId],
    ) -> StoreResult<HashMap<ScheduleId, i64>> {
        let state = self.enter().await?;
        Ok(schedules
            .iter()
            .filter_map(|id| state.schedules.get(id).map(|s| (id.clone(), s.version)))
            .collect())
    }

    async fn record_outcomes(&self, outcomes: &[DeliveryOutcome]) -> StoreResult<usize> {
        let mut state = self.enter().await?;
        let mut events = Vec::new();
        for o in outcomes {
            // The claim's row, or for a delivery never claimed a user who
            // exists: an erased recipient is written back by nothing.
            let replace = match state.deliveries.get(&o.key) {
                None => state.users.contains_key(&o.key.recipient),
                Some(row) => replaces(row, o),
            };
            if replace {
                let previous = state.deliveries.get(&o.key).cloned();
                state.deliveries.insert(
                    o.key.clone(),
                    DeliveryRow {
                        version: o.version,
                        status: o.status,
                        due_at: previous.as_ref().map_or(o.due_at, |p| p.due_at),
                        claimed_at: previous.as_ref().and_then(|p| p.claimed_at),
                        finished_at: Some(o.at),
                        detail: o.detail.clone(),
                        failures: previous.as_ref().map_or(0, |p| p.failures)
                            + u32::from(o.status == DeliveryStatus::Failed),
                        taken_over: previous.as_ref().is_some_and(|p| p.taken_over),
                        claim_token: previous.and_then(|p| p.claim_token),
                    },
                );
                let failures = state.deliveries[&o.key].failures;
                events.extend(NewEvent::of_outcome(o, failures));
            }
        }
        Ok(self.events().append(events))
    }

    async fn insert_chat_messages(&self, messages: &[ChatMessage]) -> StoreResult<()> {
        let mut state = self.enter().await?;
        for m in messages {
            // For a user who exists only (the SQL stores' fence).
            if state.users.contains_key(&m.user) {
                state.chat.entry(m.key.clone()).or_insert_with(|| m.clone());
            }
        }
        Ok(())
    }

    /// Every claim here is this process's.
    async fn delivered_by_holder(&self) -> StoreResult<Vec<(String, u64)>> {
        let state = self.enter().await?;
        let n = state
            .deliveries
            .values()
            .filter(|r| r.status == DeliveryStatus::Delivered && r.claim_token.is_some())
            .count() as u64;
        Ok(if n == 0 {
            Vec::new()
        } else {
            vec![(std::process::id().to_string(), n)]
        })
    }

    async fn delivery_counts(&self) -> StoreResult<Vec<DeliveryCount>> {
        let state = self.enter().await?;
        let mut counts: BTreeMap<_, u64> = BTreeMap::new();
        for (k, r) in &state.deliveries {
            *counts.entry((k.channel, r.status)).or_default() += 1;
        }
        Ok(counts
            .into_iter()
            .map(|((channel, status), count)| DeliveryCount {
                channel,
                status,
                count,
            })
            .collect())
    }

    async fn deliveries(&self) -> StoreResult<Vec<DeliveryOutcome>> {
        let state = self.enter().await?;
        Ok(state
            .deliveries
            .iter()
            .map(|(k, r)| DeliveryOutcome {
                key: k.clone(),
                version: r.version,
                due_at: r.due_at,
                status: r.status,
                at: r.finished_at.or(r.claimed_at).unwrap_or(r.due_at.0),
                detail: r.detail.clone(),
            })
            .collect())
    }

    async fn reminder_deliveries(
        &self,
        reminder: &ReminderKey,
    ) -> StoreResult<Vec<DeliveryOutcome>> {
        Ok(self
            .deliveries()
            .await?
            .into_iter()
            .filter(|o| {
                o.key.schedule == reminder.schedule
                    && o.key.occurrence == reminder.occurrence
                    && o.key.purpose.code() == reminder.minutes_before
            })
            .collect())
    }

    async fn chat_messages(&self, user: &UserId) -> StoreResult<Vec<ChatMessage>> {
        let state = self.enter().await?;
        let mut v: Vec<_> = state
            .chat
            .values()
            .filter(|m| &m.user == user)
            .cloned()
            .collect();
        v.sort_by_key(|m| m.created_at);
        Ok(v)
    }

    async fn put_template(&self, template: &ReminderTemplate, _now: Instant) -> StoreResult<()> {
        self.enter().await?.templates.insert(
            (template.channel.as_str(), template.locale.clone()),
            template.clone(),
        );
        Ok(())
    }

    async fn delete_template(&self, channel: Channel, locale: &str) -> StoreResult<bool> {
        Ok(self
            .lock()?
            .templates
            .remove(&(channel.as_str(), locale.to_string()))
            .is_some())
    }

    async fn templates(&self) -> StoreResult<Vec<ReminderTemplate>> {
        Ok(self.enter().await?.templates.values().cloned().collect())
    }

    async fn count(&self, what: Counted) -> StoreResult<u64> {
        let state = self.enter().await?;
        let n = match what {
            Counted::Schedules => state.schedules.len(),
            Counted::Users => state.users.len(),
            Counted::Templates => state.templates.len(),
            Counted::Suppressions => state.suppressed.len() + state.erased_suppressed.len(),
            Counted::IdempotencyKeys => state.idempotency.len(),
            // Taken after `state`, as recording outcomes does.
            Counted::EventEndpoints => self.events().endpoints.len(),
            Counted::Events => self.events().log.len(),
            Counted::AuditEntries => self.audit_now().log.len(),
        };
        Ok(n as u64)
    }

    async fn keep_change_baselines(
        &self,
        schedules: &[ScheduleId],
    ) -> StoreResult<HashSet<ScheduleId>> {
        let mut state = self.enter().await?;
        let mut existing = HashSet::new();
        for id in schedules {
            let Some(current) = state.schedules.get(id).cloned() else {
                continue;
            };
            existing.insert(id.clone());
            let kept = state.baselines.entry(id.clone()).or_insert((None, None));
            if kept.0.is_none() {
                kept.0 = Some(current);
            }
        }
        Ok(existing)
    }

    async fn freeze_change_notice(
        &self,
        schedule: &ScheduleId,
        token: &str,
        edge: NoticeEdge,
        now: Instant,
    ) -> StoreResult<Option<ChangeNotice>> {
        let mut state = self.enter().await?;
        if let Some(n) = state
            .notices
            .iter()
            .find(|n| &n.schedule == schedule && n.token == token)
        {
            return Ok(Some(n.clone()));
        }
        let after = state.schedules.get(schedule).cloned();
        let Some((before, last)) = state.baselines.get_mut(schedule) else {
            return Ok(None);
        };
        // Milliseconds, as the SQL stores keep instants.
        let now = toki_model::domain::from_millis("now", now.timestamp_millis())?;
        let at = match last {
            Some(l) if *l >= now => *l + chrono::Duration::milliseconds(1),
            _ => now,
        };
        let notice = ChangeNotice {
            schedule: schedule.clone(),
            token: token.to_owned(),
            edge,
            at,
            before: before.clone(),
            after: after.clone(),
        };
        *before = after;
        *last = Some(at);
        state.notices.push(notice.clone());
        Ok(Some(notice))
    }

    async fn clear_change_baselines(&self) -> StoreResult<u64> {
        let mut state = self.enter().await?;
        let n = state.baselines.len() as u64;
        state.baselines.clear();
        Ok(n)
    }

    async fn change_notices(&self, schedule: &ScheduleId) -> StoreResult<Vec<ChangeNotice>> {
        Ok(self
            .lock()?
            .notices
            .iter()
            .filter(|n| &n.schedule == schedule)
            .cloned()
            .collect())
    }

    async fn start_idempotent(&self, start: &IdempotentStart<'_>) -> StoreResult<KeyedRequest> {
        let mut state = self.enter().await?;
        if let Some(row) = state.idempotency.get(start.key) {
            if row.live(start) {
                return Ok(KeyedRequest::Existing {
                    digest: row.digest.clone(),
                    answer: row.answer.clone(),
                });
            }
        }
        let row = KeyRow {
            digest: start.digest.clone(),
            started: start.now,
            answer: None,
        };
        state.idempotency.insert(start.key.clone(), row);
        Ok(KeyedRequest::Started)
    }

    async fn finish_idempotent(
        &self,
        key: &IdempotencyKey,
        started: Instant,
        answer: &KeptAnswer,
    ) -> StoreResult<()> {
        let mut state = self.enter().await?;
        if let Some(row) = state.idempotency.get_mut(key) {
            if row.started == started && row.answer.is_none() {
                row.answer = Some(answer.clone());
            }
        }
        Ok(())
    }

    async fn release_idempotent(&self, key: &IdempotencyKey, started: Instant) -> StoreResult<()> {
        let mut state = self.enter().await?;
        let ours = |r: &KeyRow| r.started == started && r.answer.is_none();
        if state.idempotency.get(key).is_some_and(ours) {
            state.idempotency.remove(key);
        }
        Ok(())
    }

    async fn purge_idempotency_keys(&self, before: Instant, limit: u32) -> StoreResult<u64> {
        let mut state = self.enter().await?;
        let mut old: Vec<(Instant, IdempotencyKey)> = state
            .idempotency
            .iter()
            .filter(|(_, r)| r.started < before)
            .map(|(k, r)| (r.started, k.clone()))
            .collect();
        old.sort();
        old.truncate(limit as usize);
        for (_, k) in &old {
            state.idempotency.remove(k);
        }
        Ok(old.len() as u64)
    }
}

/// Tenant stores in memory; a tenant's store exists once it is added.
#[derive(Default)]
pub struct MemoryTenantStores {
    stores: Mutex<BTreeMap<TenantId, Arc<MemoryTenantStore>>>,
    opened: Mutex<HashSet<TenantId>>,
}

impl MemoryTenantStores {
    pub fn add(&self, tenant: &TenantId) -> Arc<MemoryTenantStore> {
        self.stores
            .lock()
            .expect("stores lock")
            .entry(tenant.clone())
            .or_default()
            .clone()
    }

    pub fn get(&self, tenant: &TenantId) -> Option<Arc<MemoryTenantStore>> {
        self.stores
            .lock()
            .expect("stores lock")
            .get(tenant)
            .cloned()
    }

    /// Removes a tenant's store (its database dropped): opening it fails from now on.
    pub fn remove(&self, tenant: &TenantId) -> bool {
        self.stores
            .lock()
            .expect("stores lock")
            .remove(tenant)
            .is_some()
    }

    /// Forgets which stores were opened (to watch one phase of a test).
    pub fn forget_opened(&self) {
        self.opened.lock().expect("opened lock").clear();
    }

    /// Tenants whose store was opened through the port.
    pub fn opened(&self) -> Vec<TenantId> {
        let mut v: Vec<_> = self
            .opened
            .lock()
            .expect("opened lock")
            .iter()
            .cloned()
            .collect();
        v.sort();
        v
    }
}

#[async_trait]
impl TenantStores for MemoryTenantStores {
    async fn open(&self, tenant: &TenantId) -> StoreResult<Arc<dyn TenantStore>> {
        let store = self
            .get(tenant)
            .ok_or_else(|| StoreError::NotFound(format!("tenant {tenant}")))?;
        self.opened
            .lock()
            .expect("opened lock")
            .insert(tenant.clone());
        Ok(store)
    }
}

/// The suppression-list entries of `users`' addresses (a delivery context's).
fn listed_among<'a>(
    list: &BTreeMap<ListedAddress, Suppression>,
    users: impl Iterator<Item = &'a Arc<User>>,
) -> HashMap<ListedAddress, Suppression> {
    if list.is_empty() {
        return HashMap::new();
    }
    users
        .filter_map(|u| u.email.as_deref())
        .filter_map(|e| ListedAddress::parse("email", e).ok())
        .filter_map(|a| list.get(&a).map(|s| (a, s.clone())))
        .collect()
}
