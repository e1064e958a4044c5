//! Tunables of the pipeline, with the defaults the design calls for.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct PipelineSettings {
    /// Write shards per due minute in the index.
    pub shards: u16,
    /// How far ahead the scanner looks (15 minutes: the SQS delay limit).
    pub window: Duration,
    /// How far back the scanner also looks, for a run that was missed.
    pub look_back: Duration,
    /// Messages become visible this long before due, so the daemon can load
    /// and render ahead and fire at the due instant.
    pub lead: Duration,
    /// How much earlier each further tenant enqueued for one instant has
    /// its messages visible ([`crate::crowd`]): about what the daemon spends
    /// opening one tenant's database to claim.
    pub lead_per_tenant: Duration,
    /// The longest a crowded instant's lead grows to.
    pub max_lead: Duration,
    /// How long a scanner's or registrar's claim on an index row lasts.
    pub claim_lease: Duration,
    /// Index rows are kept this long after their due instant (TTL).
    pub retention: Duration,
    /// How far ahead a recurring schedule's reminders are put in the index;
    /// a repair pass extends a series once less than half of it is left.
    pub horizon: Duration,
    /// How many schedules, users and templates a tenant may store, unless
    /// its contract says otherwise.
    pub caps: toki_model::quota::TenantCaps,
    /// Where tenants' endpoints may point (the webhook channel's SSRF policy),
    /// checked when they are set.
    pub egress: toki_model::egress::EgressPolicy,
    /// How the repair pass spreads over the tenants.
    pub repair: RepairSettings,
    /// What one batch's validation and expansion may cost.
    pub batch: BatchBudget,
}

/// The repair pass's bounds: how many tenants at once, how long each may
/// take, how long the whole pass may run (see [`crate::repair`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairSettings {
    /// Tenants repaired at once.
    pub concurrency: usize,
    /// A tenant's repair still running this long after it began is cut
    /// short, counted, and left for the next pass.
    pub tenant_deadline: Duration,
    /// No tenant is begun, and none is left running, past this long after
    /// the pass began (the repair Lambda also stops short of its own timeout).
    pub pass_budget: Duration,
}

impl Default for RepairSettings {
    fn default() -> Self {
        RepairSettings {
            concurrency: 8,
            // Well under the Lambda's 60 s: a stalled tenant holds one slot
            // for a third of the pass at most.
            tenant_deadline: Duration::from_secs(20),
            // The pass runs every minute; it ends before the next begins.
            pass_budget: Duration::from_secs(50),
        }
    }
}

impl Default for PipelineSettings {
    fn default() -> Self {
        PipelineSettings {
            shards: 16,
            window: Duration::from_secs(15 * 60),
            look_back: Duration::from_secs(5 * 60),
            lead: Duration::from_secs(5),
            lead_per_tenant: Duration::from_millis(2),
            max_lead: Duration::from_secs(30),
            // Longer than a scanner run can last (the Lambda's 60 s timeout).
            claim_lease: Duration::from_secs(180),
            retention: Duration::from_secs(24 * 3600),
            horizon: Duration::from_secs(7 * 24 * 3600),
            caps: toki_model::quota::TenantCaps::default(),
            egress: toki_model::egress::EgressPolicy::default(),
            repair: RepairSettings::default(),
            batch: BatchBudget::default(),
        }
    }
}

impl PipelineSettings {
    /// The lead of the messages of the tenant at `place` among those
    /// enqueued for one instant: the plain lead for the first wave of
    /// [`crate::crowd::WAVE`] tenants, then `lead_per_tenant` more for each
    /// place before the wave's, up to `max_lead`. In waves, not one tenant
    /// at a time: a message visible every 2 ms had the daemon's workers
    /// receive one or two at a time, a quarter more CPU at 1,000 tenants.
    pub fn lead_at(&self, place: crate::crowd::Place) -> Duration {
        let wave_start = place.0 - place.0 % crate::crowd::WAVE;
        let grown = self.lead + self.lead_per_tenant.saturating_mul(wave_start);
        grown.min(self.max_lead).max(self.lead)
    }

    /// Places a crowd remembers: past them, every tenant has the longest
    /// lead (the place that reaches it, rounded up to a whole wave).
    pub fn remembered_places(&self) -> u32 {
        let room = self.max_lead.saturating_sub(self.lead);
        let wave = crate::crowd::WAVE;
        match self.lead_per_tenant.as_nanos() {
            0 => 0,
            step => {
                let reaching = (room.as_nanos() / step).min(u32::MAX as u128) as u32;
                reaching.saturating_add(wave - reaching % wave)
            }
        }
    }
}

/// What one batch's validation and expansion may cost
/// (`crate::registrar::Registrar::put_schedules`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchBudget {
    /// Index rows its schedules may make together (each reminder of each
    /// occurrence within the horizon is one, about 200 bytes in memory).
    pub rows: usize,
    /// Time its items may take to validate and expand, together.
    pub time: Duration,
}

impl Default for BatchBudget {
    fn default() -> Self {
        BatchBudget {
            rows: 200_000,
            time: Duration::from_secs(2),
        }
    }
}
