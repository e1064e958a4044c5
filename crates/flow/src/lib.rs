//! Flow control across the fleet: limits per resource key, rates leased in
//! partitions and released in small slices, fair permits per key.
//!
//! A delivery passes the gates of every limited key it spends (a Slack DM:
//! the recipient's channel and the workspace) before it is sent. A gate
//! grants at once while there is room, lets a delivery wait a short while
//! (fairly, round-robin across tenants) when there is not, and otherwise
//! says when to come back: the message then returns to the queue with that
//! delay instead of waiting in memory. A shared key's rate is the fleet's:
//! each instance spends only the partitions it leases.

mod contracts;
mod gate;
mod lease;
#[cfg(test)]
mod tests;

use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::info;

pub use gate::{Gate, GateView, Grant, NoRoom};
use toki_model::flow_key::{FlowKey, FlowKind};
use toki_model::limits::{ContractLimits, FlowSettings};
use toki_ports::LeaseStore;

use toki_model::error::chain;
use toki_ports::{Clock, TenantDirectory};

/// How often the guide forgets idle gates and logs busy keys, counted in its
/// ticks (as many as fit in this; none pass while it sleeps).
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// A shared key's gate unused this long is forgotten, its leaser stopped and
/// its partitions given back: a tenant sending every minute or so keeps its
/// reserved partition (its sends go at once), a quiet one costs no task and
/// no lease writes.
const LEASED_IDLE_FOR: Duration = Duration::from_secs(60);

/// A contract not read for this many refreshes is forgotten once its tenant
/// has no gate left. Not sooner: it is the fallback while the directory
/// cannot be read, so a tenant back within this (5 minutes by default) is
/// still held to its contract through an outage.
const CONTRACT_KEPT_REFRESHES: u32 = 10;

/// One key's figures, for logs, metrics and `toki bench`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KeyStats {
    pub key: FlowKey,
    /// What this instance may spend now, per second (its leased share).
    pub granted_rate: f64,
    pub leases: u32,
    pub partitions: u32,
    pub waiting: usize,
    pub granted: u64,
    /// Deliveries sent back to the queue for want of capacity.
    pub refused: u64,
    pub throttle_answers: u64,
    pub revoked: u64,
}

/// The gates of one instance, with their guide and leasers.
pub struct Flow {
    settings: FlowSettings,
    /// Where shared rates are leased; none: this instance spends them whole.
    leases: Option<Arc<dyn LeaseStore>>,
    clock: Arc<dyn Clock>,
    /// This instance, as lease rows name it.
    holder: String,
    gates: Mutex<HashMap<FlowKey, Arc<Gate>>>,
    /// When a delivery was last refused (receives hold off just after).
    refused_at: Mutex<Option<tokio::time::Instant>>,
    tasks: Mutex<JoinSet<()>>,
    stop: watch::Sender<bool>,
    /// Where tenants' contracts are read (none: the configured limits only).
    contracts: std::sync::OnceLock<contracts::ContractReader>,
    /// Contracts as last read, by tenant, with when.
    contract_cache: Mutex<HashMap<String, (tokio::time::Instant, Arc<ContractLimits>)>>,
    /// Some contract caps Slack / mail (their deliveries then pass the gates
    /// even with no configured limit of that kind).
    contracts_cap_slack: std::sync::atomic::AtomicBool,
    contracts_cap_mail: std::sync::atomic::AtomicBool,
    /// Stops the leaser of a gate replaced after its tenant's contract changed.
    retire: Mutex<HashMap<FlowKey, watch::Sender<bool>>>,
    /// Wakes the guide from its sleep (a gate is in use again).
    guide_wake: Arc<tokio::sync::Notify>,
    guide_ticks: std::sync::atomic::AtomicU64,
}

impl Flow {
    pub fn new(
        settings: FlowSettings,
        leases: Option<Arc<dyn LeaseStore>>,
        clock: Arc<dyn Clock>,
        holder: impl Into<String>,
    ) -> Arc<Flow> {
        let flow = Arc::new(Flow {
            settings,
            leases,
            clock,
            holder: holder.into(),
            gates: Mutex::default(),
            refused_at: Mutex::default(),
            tasks: Mutex::default(),
            stop: watch::channel(false).0,
            contracts: Default::default(),
            contract_cache: Mutex::default(),
            contracts_cap_slack: Default::default(),
            contracts_cap_mail: Default::default(),
            retire: Mutex::default(),
            guide_wake: Arc::default(),
            guide_ticks: Default::default(),
        });
        let guide = Arc::downgrade(&flow);
        let slice = flow.settings.slice();
        let stop = flow.stop.subscribe();
        flow.tasks
            .lock()
            .expect("flow tasks")
            .spawn(Self::guide(guide, slice, stop));
        // Keys known ahead hold their reserved partitions before the first send.
        flow.warm(&[
            FlowKey::SlackWorkspace(flow.settings.slack_workspace.clone()),
            FlowKey::Smtp(flow.settings.smtp_account.clone()),
        ]);
        flow
    }

    pub fn settings(&self) -> &FlowSettings {
        &self.settings
    }

    /// Reads each tenant's contract limits from `directory` (cached, read
    /// again every `contract_refresh_ms`).
    pub fn read_contracts_from(&self, directory: Arc<dyn TenantDirectory>) {
        let _ = self
            .contracts
            .set(contracts::ContractReader::new(directory));
    }

    /// `tenant`'s contract limits (none without a directory, or while its
    /// directory cannot be read and nothing was read before).
    pub async fn contract(&self, tenant: &str) -> Option<Arc<ContractLimits>> {
        let directory = self.contracts.get()?;
        let now = tokio::time::Instant::now();
        let cached = self
            .contract_cache
            .lock()
            .expect("contracts")
            .get(tenant)
            .cloned();
        if let Some((at, c)) = &cached {
            if now.duration_since(*at) < self.settings.contract_refresh() {
                return Some(c.clone());
            }
        }
        let id: toki_model::TenantId = tenant.parse().ok()?;
        let read = match directory.read(id).await {
            Ok(limits) => Arc::new(limits.unwrap_or_default()),
            Err(e) => {
                tracing::warn!(%tenant, error = %chain(&e), "reading the tenant's contract limits failed; the last read (or the configured limits) apply");
                // Not again before the next refresh.
                let keep = cached.map(|(_, c)| c).unwrap_or_default();
                self.contract_cache
                    .lock()
                    .expect("contracts")
                    .insert(tenant.to_owned(), (now, keep.clone()));
                return Some(keep);
            }
        };
        use std::sync::atomic::Ordering::Relaxed;
        if read.caps("slack") {
            self.contracts_cap_slack.store(true, Relaxed);
        }
        if read.caps("mail") {
            self.contracts_cap_mail.store(true, Relaxed);
        }
        let previous = self
            .contract_cache
            .lock()
            .expect("contracts")
            .insert(tenant.to_owned(), (now, read.clone()));
        if previous.is_some_and(|(_, p)| p != read) {
            self.retire_tenant_gates(tenant);
        }
        Some(read)
    }

    /// Deliveries of `tenant` are coming: its contract is read now, while
    /// there is the lead before them, so that their first send finds it
    /// (read at the instant, it would wait on the directory with every
    /// other tenant of a burst).
    pub fn expect_tenant(self: &Arc<Self>, tenant: &str) {
        if self.contracts.get().is_none() || self.contract_fresh(tenant) {
            return;
        }
        let (flow, tenant) = (self.clone(), tenant.to_owned());
        tokio::spawn(async move { flow.contract(&tenant).await });
    }

    /// Whether `tenant`'s contract was read within the refresh.
    fn contract_fresh(&self, tenant: &str) -> bool {
        let now = tokio::time::Instant::now();
        let cache = self.contract_cache.lock().expect("contracts");
        cache
            .get(tenant)
            .is_some_and(|(at, _)| now.duration_since(*at) < self.settings.contract_refresh())
    }

    /// A tenant's contract changed: its own gates are made again with the
    /// new limits (deliveries waiting at the old ones are refused when
    /// their wait ends and come back through the queue).
    fn retire_tenant_gates(&self, tenant: &str) {
        let own = |key: &FlowKey| key.tenant() == Some(tenant);
        self.gates.lock().expect("gates").retain(|key, _| !own(key));
        self.retire.lock().expect("retire").retain(|key, stop| {
            if own(key) {
                let _ = stop.send(true);
                false
            } else {
                true
            }
        });
        info!(%tenant, "the tenant's contract limits changed; its gates follow them");
    }

    /// Ticks every slice while a gate is in use: revokes stuck holders and
    /// hands out capacity; every `SWEEP_EVERY` of its ticks forgets idle
    /// gates and unread contracts and says in the log how the busy keys are
    /// doing. Sleeps while nothing waits or is held at any gate and only
    /// gates of shared limits are left (the others are forgotten once idle),
    /// so an idle daemon is not woken seven times a second; a delivery that
    /// waits or takes a permit, or a new gate, wakes it. Asleep, it still
    /// sweeps every `SWEEP_EVERY` while something is left to forget, and
    /// not at all once only the standing gates are.
    async fn guide(flow: std::sync::Weak<Flow>, slice: Duration, mut stop: watch::Receiver<bool>) {
        let Some(wake) = flow.upgrade().map(|f| f.guide_wake.clone()) else {
            return;
        };
        let mut ticks = tokio::time::interval(slice);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Counted in ticks, so a busy runtime (late ticks) sweeps less often.
        let sweep_every = (SWEEP_EVERY.as_millis() / slice.as_millis().max(1)).max(1) as u64;
        let mut n: u64 = 0;
        let (mut asleep, mut forgettable) = (false, false);
        loop {
            let sweep_now = tokio::select! {
                _ = ticks.tick(), if !asleep => false,
                _ = wake.notified(), if asleep => false,
                _ = tokio::time::sleep(SWEEP_EVERY), if asleep && forgettable => true,
                _ = stop.changed() => return,
            };
            if asleep {
                ticks.reset();
            }
            let Some(flow) = flow.upgrade() else { return };
            let settled = flow.tick_gates();
            n += 1;
            if sweep_now || n.is_multiple_of(sweep_every) {
                flow.forget_idle_gates();
                flow.forget_unread_contracts();
                flow.log_busy_keys();
            }
            asleep = settled && flow.only_leased_gates();
            forgettable = flow.anything_forgettable();
        }
    }

    /// One tick of the guide at every gate; whether every gate is settled
    /// (nothing waits, no permit is held).
    fn tick_gates(&self) -> bool {
        self.guide_ticks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let now = tokio::time::Instant::now();
        let gates = self.every_gate();
        let mut settled = true;
        for gate in &gates {
            settled &= gate.tick(now);
        }
        settled
    }

    /// The gates as they are now (the map is not held while they are used).
    fn every_gate(&self) -> Vec<Arc<Gate>> {
        self.gates
            .lock()
            .expect("gates")
            .values()
            .cloned()
            .collect()
    }

    /// Per-recipient keys come and go: forgets the idle ones so the map and
    /// the tick stay as small as what is in use; a shared key's gate (but a
    /// standing one) goes once unused for `LEASED_IDLE_FOR`, its leaser
    /// stopped. The retire map is changed under the gates' lock, so a gate
    /// made again meanwhile keeps its own leaser.
    fn forget_idle_gates(&self) {
        let now = tokio::time::Instant::now();
        let mut gates = self.gates.lock().expect("gates");
        let mut retire = self.retire.lock().expect("retire");
        gates.retain(|key, gate| {
            let keep = self.keeps(key, gate, retire.contains_key(key), now);
            if !keep {
                if let Some(stop) = retire.remove(key) {
                    // Its leaser gives its partitions back and ends.
                    let _ = stop.send(true);
                }
            }
            keep
        });
        drop((gates, retire));
        reap(&mut self.tasks.lock().expect("flow tasks"));
    }

    /// Whether the sweep keeps `gate` of `key` (with a leaser or not). A
    /// gate someone holds (a delivery between finding it and passing it) is
    /// kept: forgotten, the next delivery would make a second gate of the
    /// key beside it.
    fn keeps(
        &self,
        key: &FlowKey,
        gate: &Arc<Gate>,
        leaser: bool,
        now: tokio::time::Instant,
    ) -> bool {
        // Its leaser holds it too.
        let in_hand = Arc::strong_count(gate) > 1 + usize::from(leaser);
        if in_hand || !gate.is_idle(now) {
            return true;
        }
        gate.limit.leased() && (self.standing(key) || gate.quiet_for(now) < LEASED_IDLE_FOR)
    }

    /// A key made at start (the workspace, the mail account): a constant
    /// few, kept so their reserved partitions are held before a send.
    fn standing(&self, key: &FlowKey) -> bool {
        match key {
            FlowKey::SlackWorkspace(w) => *w == self.settings.slack_workspace,
            FlowKey::Smtp(a) => *a == self.settings.smtp_account,
            _ => false,
        }
    }

    /// Forgets the contracts not read for `CONTRACT_KEPT_REFRESHES`
    /// refreshes whose tenant has no gate left (one in use is read again
    /// every refresh, so this counts from its last use, give or take one).
    fn forget_unread_contracts(&self) {
        let now = tokio::time::Instant::now();
        let kept_for = self.settings.contract_refresh() * CONTRACT_KEPT_REFRESHES;
        let gates = self.gates.lock().expect("gates");
        let with_gates: std::collections::HashSet<&str> =
            gates.keys().filter_map(FlowKey::tenant).collect();
        self.contract_cache
            .lock()
            .expect("contracts")
            .retain(|tenant, (at, _)| {
                with_gates.contains(tenant.as_str())
                    || now.saturating_duration_since(*at) < kept_for
            });
    }

    /// No gate is left that the guide would forget at its first sweep once
    /// idle (shared keys' gates are kept a while).
    fn only_leased_gates(&self) -> bool {
        let gates = self.gates.lock().expect("gates");
        gates.values().all(|g| g.limit.leased())
    }

    /// Something the sweep may forget yet: a gate but the standing ones, or
    /// a contract read.
    fn anything_forgettable(&self) -> bool {
        let gates = self.gates.lock().expect("gates");
        let gate = gates.keys().any(|k| !self.standing(k));
        drop(gates);
        gate || !self.contract_cache.lock().expect("contracts").is_empty()
    }

    fn log_busy_keys(&self) {
        for s in self.stats() {
            if s.waiting > 0 || s.refused > 0 || s.throttle_answers > 0 {
                info!(
                    key = %s.key,
                    rate_per_s = s.granted_rate,
                    leases = s.leases,
                    partitions = s.partitions,
                    waiting = s.waiting,
                    granted = s.granted,
                    refused = s.refused,
                    throttle_answers = s.throttle_answers,
                    revoked = s.revoked,
                    "flow"
                );
            }
        }
    }

    /// How many times the guide has ticked (it sleeps while no gate is in
    /// use).
    pub fn guide_ticks(&self) -> u64 {
        self.guide_ticks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The gate of `key`, if it is limited (made at first use; a shared key
    /// starts its leaser then, with no share until its first lease).
    pub fn gate(&self, key: &FlowKey) -> Option<Arc<Gate>> {
        self.gate_with(key, None)
    }

    /// The gate of `key`, with the limit of `contract` (of `tenant`) when
    /// the key is the tenant's own and the contract limits it.
    fn gate_with(
        &self,
        key: &FlowKey,
        contract: Option<(&str, &ContractLimits)>,
    ) -> Option<Arc<Gate>> {
        let mut gates = self.gates.lock().expect("gates");
        if let Some(g) = gates.get(key) {
            return Some(g.clone());
        }
        let limit = contract
            .and_then(|(tenant, c)| c.limit_for(key, tenant))
            .or_else(|| self.settings.limit_for(key))?
            .clone();
        let leased = limit.leased() && self.leases.is_some();
        let gate = Gate::new(
            key.clone(),
            limit,
            if leased { 0.0 } else { 1.0 },
            if leased { self.settings.partitions } else { 1 },
            self.settings.slice(),
            self.settings.hold_deadline(),
            tokio::time::Instant::now(),
        );
        gate.report_to(self.guide_wake.clone());
        // A new gate is forgotten once idle: the guide wakes to see to it.
        self.guide_wake.notify_one();
        if let (true, Some(store)) = (leased, &self.leases) {
            let leaser = lease::Leaser {
                key: key.to_string(),
                holder: self.holder.clone(),
                store: store.clone(),
                clock: self.clock.clone(),
                gate: gate.clone(),
                settings: self.settings.clone(),
            };
            let (retire, retired) = watch::channel(false);
            self.retire
                .lock()
                .expect("retire")
                .insert(key.clone(), retire);
            let mut tasks = self.tasks.lock().expect("flow tasks");
            reap(&mut tasks);
            tasks.spawn(leaser.run(self.stop.subscribe(), retired));
        }
        gates.insert(key.clone(), gate.clone());
        Some(gate)
    }

    /// Makes the gates of keys known ahead (the workspace, the mail
    /// account), so their reserved leases are held before the first send.
    /// Deliveries on `keys` are coming (at their due instant, a lead from
    /// now): their gates take the fleet's partitions now rather than once
    /// deliveries wait, so that at the instant they admit at the rate they
    /// will have. A tenant's own key is told only if its gate exists (its
    /// contract's limit is known once it has been admitted through).
    pub fn expect(&self, keys: &std::collections::BTreeSet<&FlowKey>, until: tokio::time::Instant) {
        for key in keys {
            let gate = if key.kind() == FlowKind::Tenant {
                self.gates.lock().expect("gates").get(*key).cloned()
            } else {
                self.gate(key)
            };
            if let Some(gate) = gate {
                gate.expect_demand(until);
            }
        }
    }

    pub fn warm(&self, keys: &[FlowKey]) {
        for key in keys {
            self.gate(key);
        }
    }

    /// Passes every gate of `keys` for `tenant`, waiting at most the
    /// configured while: the grants (held until the send is done), or when
    /// to come back.
    pub async fn admit<K: Borrow<FlowKey>>(
        &self,
        keys: &[K],
        tenant: &str,
    ) -> Result<Vec<Grant>, NoRoom> {
        let contract = self.contract(tenant).await;
        let contract = contract.as_deref().map(|c| (tenant, c));
        let mut grants = Vec::with_capacity(keys.len());
        for key in keys {
            let Some(gate) = self.gate_with(key.borrow(), contract) else {
                continue;
            };
            match gate.acquire(tenant, self.settings.max_wait()).await {
                Ok(grant) => grants.push(grant),
                Err(no_room) => {
                    *self.refused_at.lock().expect("refused_at") =
                        Some(tokio::time::Instant::now());
                    return Err(no_room);
                }
            }
        }
        Ok(grants)
    }

    /// How long to hold off receiving more work: a slice or two while some
    /// key refuses deliveries (the queue keeps what cannot be sent now),
    /// else nothing.
    pub fn hold_off(&self) -> Option<Duration> {
        let slice = self.settings.slice();
        let refused = *self.refused_at.lock().expect("refused_at");
        refused
            .is_some_and(|at| at.elapsed() < slice)
            .then_some(slice * 2)
    }

    /// Whether any key of `kind` (Slack, SMTP, tenant databases) is
    /// limited, by configuration or by a contract read so far: if not, its
    /// deliveries skip the gates altogether.
    pub fn limits_kind(&self, kind: FlowKind) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let (by_contract, capped) = match kind {
            FlowKind::Slack => (self.contracts_cap_slack.load(Relaxed), "slack"),
            FlowKind::Smtp => (self.contracts_cap_mail.load(Relaxed), "mail"),
            _ => (false, kind.as_str()),
        };
        // Configured patterns are text: `kind:…`, or `tenant:<tenant>:<channel>`.
        by_contract
            || self.settings.limits.keys().any(|k| {
                let mut parts = k.split(':');
                match parts.next() {
                    Some("tenant") => parts.nth(1) == Some(capped),
                    first => first == Some(kind.as_str()),
                }
            })
    }

    /// The service answered "slow down" on `keys`.
    pub fn throttled<K: Borrow<FlowKey>>(&self, keys: &[K], retry_after: Duration) {
        for key in keys {
            if let Some(gate) = self.gate(key.borrow()) {
                gate.throttled(retry_after);
            }
        }
    }

    pub fn stats(&self) -> Vec<KeyStats> {
        use std::sync::atomic::Ordering::Relaxed;
        let gates = self.every_gate();
        let mut stats: Vec<KeyStats> = gates
            .iter()
            .map(|g| {
                let view = g.view();
                let partitions = g.partitions;
                let leases = (g.share() * f64::from(partitions)).round() as u32;
                KeyStats {
                    key: g.key.clone(),
                    granted_rate: view.per_second,
                    leases,
                    partitions,
                    waiting: view.waiting,
                    granted: g.counters.granted.load(Relaxed),
                    refused: g.counters.refused.load(Relaxed),
                    throttle_answers: g.counters.throttle_answers.load(Relaxed),
                    revoked: g.counters.revoked.load(Relaxed),
                }
            })
            .collect();
        stats.sort_by(|a, b| a.key.cmp(&b.key));
        stats
    }

    /// Stops everything at once without giving leases back, as a process
    /// that dies does.
    #[cfg(any(test, feature = "testing"))]
    pub fn crash(&self) {
        self.tasks.lock().expect("flow tasks").abort_all();
    }

    /// Stops the guide and the leasers; leases are given back.
    pub async fn close(&self) {
        let _ = self.stop.send(true);
        let mut tasks = std::mem::take(&mut *self.tasks.lock().expect("flow tasks"));
        while tasks.join_next().await.is_some() {}
    }
}

/// Lets go of the tasks that ended (leasers of forgotten or retired gates):
/// a join set keeps each until it is joined.
fn reap(tasks: &mut JoinSet<()>) {
    while tasks.try_join_next().is_some() {}
}

impl Drop for Flow {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
