//! What one tenant may use of the API and of its database: a request rate
//! (with a burst) and requests at once, and caps on every table of its
//! database that grows with what it does: schedules, users, templates,
//! suppressions, event endpoints and idempotency keys (refused beyond the
//! cap), audit entries and delivery events (the oldest beyond the cap
//! trimmed by the retention pass). Configured defaults, which a tenant's
//! contract ([`QuotaOverrides`], in [`crate::limits::ContractLimits`])
//! overrides; so one tenant cannot crowd out the others nor fill the disk.

use serde::{Deserialize, Serialize};

use crate::error::ValidationError;

/// What a tenant stores, counted against a cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counted {
    Schedules,
    Users,
    Templates,
    /// Entries of its suppression list (those kept as a hash after an
    /// erasure included).
    Suppressions,
    EventEndpoints,
    /// Idempotency keys kept (a day each).
    IdempotencyKeys,
    /// Audit-log entries (trimmed, not refused: see [`Counted::is_trimmed`]).
    AuditEntries,
    /// Delivery events (trimmed, not refused).
    Events,
}

impl Counted {
    /// Every kind, in the order `toki tenant list` shows their caps.
    pub const ALL: [Counted; 8] = [
        Counted::Schedules,
        Counted::Users,
        Counted::Templates,
        Counted::Suppressions,
        Counted::EventEndpoints,
        Counted::IdempotencyKeys,
        Counted::AuditEntries,
        Counted::Events,
    ];

    /// The cap's name, as the configuration and the contract spell it.
    pub fn cap_name(self) -> &'static str {
        match self {
            Counted::Schedules => "max_schedules",
            Counted::Users => "max_users",
            Counted::Templates => "max_templates",
            Counted::Suppressions => "max_suppressions",
            Counted::EventEndpoints => "max_event_endpoints",
            Counted::IdempotencyKeys => "max_idempotency_keys",
            Counted::AuditEntries => "max_audit_entries",
            Counted::Events => "max_events",
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            Counted::Schedules => "schedules",
            Counted::Users => "users",
            Counted::Templates => "templates",
            Counted::Suppressions => "suppression-list entries",
            Counted::EventEndpoints => "event endpoints",
            Counted::IdempotencyKeys => "idempotency keys",
            Counted::AuditEntries => "audit entries",
            Counted::Events => "delivery events",
        }
    }

    /// Rows Toki keeps because of what the tenant does, not because it
    /// asked: never refused (a write the tenant made is recorded), the
    /// oldest beyond the cap deleted by the retention pass instead.
    pub fn is_trimmed(self) -> bool {
        matches!(self, Counted::AuditEntries | Counted::Events)
    }
}

/// How many of a kind a tenant may store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Cap(pub u64);

/// Caps on what one tenant stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantCaps {
    pub max_schedules: Cap,
    pub max_users: Cap,
    pub max_templates: Cap,
    pub max_suppressions: Cap,
    pub max_event_endpoints: Cap,
    pub max_idempotency_keys: Cap,
    pub max_audit_entries: Cap,
    pub max_events: Cap,
}

impl Default for TenantCaps {
    /// Far above what a tenant of today stores (so nobody is refused on
    /// upgrade), low enough that one tenant cannot fill a shared server.
    /// Templates are one per channel and locale: a few dozen at most.
    /// Event endpoints: ten, as before they were a cap. Idempotency keys
    /// live a day, and a kept answer can weigh up to twice a batch's body:
    /// 100,000 a day is more than one keyed write a second, all day.
    fn default() -> Self {
        TenantCaps {
            max_schedules: Cap(1_000_000),
            max_users: Cap(1_000_000),
            max_templates: Cap(200),
            max_suppressions: Cap(1_000_000),
            max_event_endpoints: Cap(10),
            max_idempotency_keys: Cap(100_000),
            max_audit_entries: Cap(1_000_000),
            max_events: Cap(1_000_000),
        }
    }
}

impl TenantCaps {
    pub fn get(&self, what: Counted) -> Cap {
        match what {
            Counted::Schedules => self.max_schedules,
            Counted::Users => self.max_users,
            Counted::Templates => self.max_templates,
            Counted::Suppressions => self.max_suppressions,
            Counted::EventEndpoints => self.max_event_endpoints,
            Counted::IdempotencyKeys => self.max_idempotency_keys,
            Counted::AuditEntries => self.max_audit_entries,
            Counted::Events => self.max_events,
        }
    }

    /// These caps with the contract's overrides.
    pub fn with(&self, contract: &QuotaOverrides) -> TenantCaps {
        let pick = |set: Option<Cap>, default: Cap| set.unwrap_or(default);
        TenantCaps {
            max_schedules: pick(contract.max_schedules, self.max_schedules),
            max_users: pick(contract.max_users, self.max_users),
            max_templates: pick(contract.max_templates, self.max_templates),
            max_suppressions: pick(contract.max_suppressions, self.max_suppressions),
            max_event_endpoints: pick(contract.max_event_endpoints, self.max_event_endpoints),
            max_idempotency_keys: pick(contract.max_idempotency_keys, self.max_idempotency_keys),
            max_audit_entries: pick(contract.max_audit_entries, self.max_audit_entries),
            max_events: pick(contract.max_events, self.max_events),
        }
    }
}

/// Requests per second a token bucket refills at.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PerSecond(pub f64);

/// One tenant's share of the API: a token bucket of `rate` a second holding
/// up to `burst` requests, and at most `concurrency` requests at once.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiQuota {
    pub rate: PerSecond,
    pub burst: u32,
    pub concurrency: u32,
}

impl Default for ApiQuota {
    /// A batch carries up to 1000 schedules, so 50 requests a second is a
    /// lot of registration; a burst of 100 lets a client's start-up sync go
    /// at once; 16 at once is more than a client needs to keep a server busy.
    fn default() -> Self {
        ApiQuota {
            rate: PerSecond(50.0),
            burst: 100,
            concurrency: 16,
        }
    }
}

impl ApiQuota {
    /// This quota with the contract's overrides.
    pub fn with(&self, contract: &QuotaOverrides) -> ApiQuota {
        ApiQuota {
            rate: contract.api_rate.unwrap_or(self.rate),
            burst: contract.api_burst.unwrap_or(self.burst),
            concurrency: contract.api_concurrency.unwrap_or(self.concurrency),
        }
    }

    /// Checks the quota; the error names `{prefix}.rate` and the like.
    pub fn validate(&self, prefix: &str) -> Result<(), ValidationError> {
        check_rate(&format!("{prefix}.rate"), self.rate)?;
        check_burst(&format!("{prefix}.burst"), self.burst)?;
        check_concurrency(&format!("{prefix}.concurrency"), self.concurrency)
    }
}

/// The slowest rate a quota may set: one request in about 17 minutes. Below
/// it the wait for a token overflows what a `Retry-After` can say.
pub const MIN_RATE: f64 = 0.001;

fn check_rate(field: &str, rate: PerSecond) -> Result<(), ValidationError> {
    if !(rate.0.is_finite() && rate.0 >= MIN_RATE) {
        return Err(ValidationError::new(
            field,
            format!("must be a number of requests per second, at least {MIN_RATE}"),
        ));
    }
    Ok(())
}

fn check_burst(field: &str, burst: u32) -> Result<(), ValidationError> {
    // A bucket that holds less than one request never lets one through.
    if burst == 0 {
        return Err(ValidationError::new(field, "must be at least 1"));
    }
    Ok(())
}

fn check_concurrency(field: &str, n: u32) -> Result<(), ValidationError> {
    if n == 0 {
        return Err(ValidationError::new(field, "must be at least 1"));
    }
    Ok(())
}

/// What a tenant's contract sets of its quota; unset: the configured default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_schedules: Option<Cap>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_users: Option<Cap>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_templates: Option<Cap>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_suppressions: Option<Cap>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_event_endpoints: Option<Cap>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_idempotency_keys: Option<Cap>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_audit_entries: Option<Cap>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_events: Option<Cap>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_rate: Option<PerSecond>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_burst: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_concurrency: Option<u32>,
}

impl QuotaOverrides {
    pub fn is_empty(&self) -> bool {
        *self == QuotaOverrides::default()
    }

    /// Checks what is set; the error names `limits.quota.api_rate` and the like.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if let Some(rate) = self.api_rate {
            check_rate("limits.quota.api_rate", rate)?;
        }
        if let Some(burst) = self.api_burst {
            check_burst("limits.quota.api_burst", burst)?;
        }
        if let Some(n) = self.api_concurrency {
            check_concurrency("limits.quota.api_concurrency", n)?;
        }
        Ok(())
    }

    /// `max_schedules=100,api_rate=5`, as `toki tenant list` shows them.
    pub fn parts(&self) -> Vec<String> {
        let mut out = Vec::new();
        let caps = [
            ("max_schedules", self.max_schedules),
            ("max_users", self.max_users),
            ("max_templates", self.max_templates),
            ("max_suppressions", self.max_suppressions),
            ("max_event_endpoints", self.max_event_endpoints),
            ("max_idempotency_keys", self.max_idempotency_keys),
            ("max_audit_entries", self.max_audit_entries),
            ("max_events", self.max_events),
        ];
        for (name, cap) in caps {
            if let Some(Cap(n)) = cap {
                out.push(format!("{name}={n}"));
            }
        }
        if let Some(PerSecond(r)) = self.api_rate {
            out.push(format!("api_rate={r}"));
        }
        if let Some(b) = self.api_burst {
            out.push(format!("api_burst={b}"));
        }
        if let Some(c) = self.api_concurrency {
            out.push(format!("api_concurrency={c}"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_overrides_only_what_it_sets() {
        let contract = QuotaOverrides {
            max_users: Some(Cap(5)),
            api_burst: Some(3),
            ..QuotaOverrides::default()
        };
        let caps = TenantCaps::default().with(&contract);
        assert_eq!(caps.max_users, Cap(5));
        assert_eq!(caps.max_schedules, TenantCaps::default().max_schedules);
        let api = ApiQuota::default().with(&contract);
        assert_eq!((api.burst, api.rate), (3, ApiQuota::default().rate));
    }

    #[test]
    fn a_contract_without_a_quota_loads_and_one_with_it_round_trips() {
        use crate::limits::ContractLimits;
        let old: ContractLimits = serde_json::from_str(r#"{"slack": {"rate": 2.0}}"#).unwrap();
        assert!(old.quota.is_empty());
        assert!(old.flows.contains_key("slack"));
        let mut new = old.clone();
        new.quota.max_schedules = Some(Cap(10));
        let json = serde_json::to_string(&new).unwrap();
        assert_eq!(serde_json::from_str::<ContractLimits>(&json).unwrap(), new);
        assert_eq!(new.to_string(), "slack=2,max_schedules=10");
    }

    #[test]
    fn bad_overrides_name_the_field() {
        for (bad, field) in [
            (r#"{"api_rate": 0}"#, "limits.quota.api_rate"),
            (r#"{"api_burst": 0}"#, "limits.quota.api_burst"),
            (r#"{"api_concurrency": 0}"#, "limits.quota.api_concurrency"),
        ] {
            let o: QuotaOverrides = serde_json::from_str(bad).unwrap();
            assert_eq!(o.validate().unwrap_err().field, field, "{bad}");
        }
    }
}
