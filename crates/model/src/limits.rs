//! Limits per resource key, as configured: which key a delivery spends, and
//! how much of it there is.
//!
//! Keys are `kind:part:part`: `slack:<workspace>`, `slack:<workspace>:<channel
//! or user>`, `smtp:<account>`, `tenantdb:<tenant>`, and a tenant's own cap on
//! a channel, `tenant:<tenant>:slack` / `tenant:<tenant>:mail`. A limit is
//! configured for a key pattern in which `*` stands for one part; the most
//! specific pattern that matches a key wins (fewest `*`, then the longest).
//! A tenant's contract ([`ContractLimits`]) overrides the configured limits of
//! that tenant's own keys.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ValidationError;
use crate::flow_key::FlowKey;
use crate::quota::QuotaOverrides;

/// How much of a resource there is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    /// Operations per second (fleet-wide when `shared`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Operations allowed at once on top of the rate after a quiet spell.
    #[serde(default)]
    pub burst: u32,
    /// Operations in flight at once, per instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// The rate is the fleet's, leased in partitions (true), or each
    /// instance's own (false: per-recipient keys, too many to lease).
    #[serde(default = "yes")]
    pub shared: bool,
}

fn yes() -> bool {
    true
}

impl Limit {
    pub fn rate(per_second: f64, burst: u32) -> Self {
        Limit {
            rate: Some(per_second),
            burst,
            permits: None,
            shared: true,
        }
    }

    pub fn permits(n: u32) -> Self {
        Limit {
            rate: None,
            burst: 0,
            permits: Some(n),
            shared: false,
        }
    }

    /// Per instance, not leased.
    pub fn local(mut self) -> Self {
        self.shared = false;
        self
    }

    /// Whether this limit leases partitions of a fleet-wide rate.
    pub fn leased(&self) -> bool {
        self.shared && self.rate.is_some()
    }

    fn validate(&self, field: &str) -> Result<(), ValidationError> {
        if let Some(rate) = self.rate {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(ValidationError::new(
                    format!("{field}.rate"),
                    "must be a number of operations per second above 0",
                ));
            }
        }
        if self.permits == Some(0) {
            return Err(ValidationError::new(
                format!("{field}.permits"),
                "must be at least 1",
            ));
        }
        if self.rate.is_none() && self.permits.is_none() {
            return Err(ValidationError::new(
                field.to_owned(),
                "needs a rate, permits or both",
            ));
        }
        Ok(())
    }
}

/// The limits and how they are shared out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlowSettings {
    /// Key pattern → limit. Keys no pattern matches are not limited.
    pub limits: BTreeMap<String, Limit>,
    /// Partitions a shared rate is split into.
    pub partitions: u32,
    /// Partitions an instance keeps while it uses a key, even idle, so its
    /// first sends after a quiet spell go at once.
    pub reserved_partitions: u32,
    /// How long a lease lasts unless renewed.
    pub lease_ms: u64,
    /// Capacity is released every slice, not once a second.
    pub slice_ms: u64,
    /// How long a delivery may wait in memory for capacity; beyond it its
    /// message goes back to the queue until there is room.
    pub max_wait_ms: u64,
    /// A permit held this long is revoked (its delivery abandoned, its
    /// message back to the queue).
    pub hold_deadline_ms: u64,
    /// The Slack workspace Toki's token posts to (the `slack:<workspace>` key).
    pub slack_workspace: String,
    /// The mail account Toki sends from (the `smtp:<account>` key).
    pub smtp_account: String,
    /// A tenant's contract limits are read again after this long, so an
    /// edit (`toki tenant set --limit`) takes effect without a restart.
    pub contract_refresh_ms: u64,
}

impl Default for FlowSettings {
    fn default() -> Self {
        FlowSettings {
            limits: default_limits(),
            partitions: 10,
            reserved_partitions: 1,
            lease_ms: 5_000,
            slice_ms: 150,
            max_wait_ms: 2_000,
            hold_deadline_ms: 15_000,
            slack_workspace: "default".into(),
            smtp_account: "default".into(),
            contract_refresh_ms: 30_000,
        }
    }
}

/// Slack documents one `chat.postMessage` per second per channel with short
/// bursts (a DM is a channel); its workspace-wide limit has no published
/// figure, so none is set. Amazon SES starts production accounts at 14
/// messages per second. Nothing else is limited until configured.
pub fn default_limits() -> BTreeMap<String, Limit> {
    BTreeMap::from([
        ("slack:*:*".to_owned(), Limit::rate(1.0, 3).local()),
        ("smtp:ses".to_owned(), Limit::rate(14.0, 0)),
    ])
}

impl FlowSettings {
    pub fn slice(&self) -> Duration {
        Duration::from_millis(self.slice_ms)
    }
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }
    pub fn max_wait(&self) -> Duration {
        Duration::from_millis(self.max_wait_ms)
    }
    pub fn hold_deadline(&self) -> Duration {
        Duration::from_millis(self.hold_deadline_ms)
    }
    pub fn contract_refresh(&self) -> Duration {
        Duration::from_millis(self.contract_refresh_ms)
    }

    /// The limit of `key`, by its most specific matching pattern.
    pub fn limit_for(&self, key: &FlowKey) -> Option<&Limit> {
        let parts = key.parts();
        self.limits
            .iter()
            .filter(|(pattern, _)| matches(pattern, &parts))
            .min_by_key(|(pattern, _)| {
                let wild = pattern.split(':').filter(|p| *p == "*").count();
                (wild, std::cmp::Reverse(pattern.len()))
            })
            .map(|(_, limit)| limit)
    }

    pub fn validate(&self) -> Result<(), ValidationError> {
        for (pattern, limit) in &self.limits {
            let field = format!("flow.limits.\"{pattern}\"");
            let parts: Vec<&str> = pattern.split(':').collect();
            if parts.len() < 2 || parts.iter().any(|p| p.is_empty()) {
                return Err(ValidationError::new(
                    field,
                    "a key is kind:part[:part] (slack:<workspace>[:<channel>], smtp:<account>, webhook:<host>, tenantdb:<tenant>, tenant:<tenant>:slack|mail)",
                ));
            }
            if !["slack", "smtp", "webhook", "tenantdb", "tenant"].contains(&parts[0]) {
                return Err(ValidationError::new(
                    field,
                    "the kind must be slack, smtp, webhook, tenantdb or tenant",
                ));
            }
            if parts[0] == "tenant"
                && (parts.len() != 3 || !["slack", "mail", "*"].contains(&parts[2]))
            {
                return Err(ValidationError::new(
                    field,
                    "a tenant's own cap is tenant:<tenant>:slack or tenant:<tenant>:mail",
                ));
            }
            limit.validate(&field)?;
        }
        let positive = [
            ("partitions", u64::from(self.partitions)),
            ("lease_ms", self.lease_ms),
            ("slice_ms", self.slice_ms),
            ("max_wait_ms", self.max_wait_ms),
            ("hold_deadline_ms", self.hold_deadline_ms),
            ("contract_refresh_ms", self.contract_refresh_ms),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(ValidationError::new(
                    format!("flow.{name}"),
                    "must be more than 0",
                ));
            }
        }
        if self.reserved_partitions > self.partitions {
            return Err(ValidationError::new(
                "flow.reserved_partitions",
                "must not be more than partitions",
            ));
        }
        if !(50..=1_000).contains(&self.slice_ms) {
            return Err(ValidationError::new(
                "flow.slice_ms",
                "must be between 50 and 1000",
            ));
        }
        Ok(())
    }
}

fn matches(pattern: &str, parts: &[&str]) -> bool {
    let pattern: Vec<&str> = pattern.split(':').collect();
    pattern.len() == parts.len() && pattern.iter().zip(parts).all(|(p, k)| *p == "*" || p == k)
}

/// What a tenant's contract says about its limits: resource → limit, where
/// the resource is `tenantdb` (its database: usually permits), `slack` or
/// `mail` (its own cap on that channel, fleet-wide unless `shared: false`).
/// Each overrides the configured limit of that tenant's key. Under `quota`,
/// its share of the API and caps on what it stores ([`QuotaOverrides`]);
/// rows written before there was one load with none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ContractLimits {
    #[serde(flatten)]
    pub flows: BTreeMap<String, Limit>,
    #[serde(default, skip_serializing_if = "QuotaOverrides::is_empty")]
    pub quota: QuotaOverrides,
}

// Rates are validated finite, so equality is an equivalence.
impl Eq for ContractLimits {}

/// The resources a contract may limit.
pub const CONTRACT_RESOURCES: [&str; 3] = ["tenantdb", "slack", "mail"];

impl ContractLimits {
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty() && self.quota.is_empty()
    }

    /// The contract's limit of `key`, if the key is one of `tenant`'s own.
    pub fn limit_for(&self, key: &FlowKey, tenant: &str) -> Option<&Limit> {
        let resource = match key {
            FlowKey::TenantDb(t) if t == tenant => "tenantdb",
            FlowKey::TenantCap { tenant: t, channel } if t == tenant => channel.as_str(),
            _ => return None,
        };
        self.flows.get(resource)
    }

    /// Whether the contract caps `channel` (`slack`, `mail`).
    pub fn caps(&self, channel: &str) -> bool {
        self.flows.contains_key(channel)
    }

    /// Checks every limit; the error names the field (`limits.slack.rate`).
    pub fn validate(&self) -> Result<(), ValidationError> {
        for (resource, limit) in &self.flows {
            let field = format!("limits.{resource}");
            if !CONTRACT_RESOURCES.contains(&resource.as_str()) {
                return Err(ValidationError::new(
                    field,
                    "a contract limits tenantdb, slack or mail",
                ));
            }
            limit.validate(&field)?;
        }
        self.quota.validate()
    }

    /// `slack=10/5,tenantdb=permits:4,mail=2` (a rate per second with an
    /// optional `/burst`, `permits:N`, or both joined by `+`;
    /// `resource=none` drops it) applied on top of these.
    pub fn edit(&mut self, spec: &str) -> Result<(), ValidationError> {
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (resource, value) = part.split_once('=').ok_or_else(|| {
                ValidationError::new("limits", format!("{part:?} is not RESOURCE=LIMIT"))
            })?;
            let field = format!("limits.{resource}");
            if value == "none" {
                self.flows.remove(resource);
                continue;
            }
            let mut limit = Limit {
                rate: None,
                burst: 0,
                permits: None,
                shared: true,
            };
            for piece in value.split('+') {
                if let Some(n) = piece.strip_prefix("permits:") {
                    limit.permits = Some(n.parse().map_err(|_| {
                        ValidationError::new(
                            format!("{field}.permits"),
                            format!("{n:?} is not a whole number"),
                        )
                    })?);
                } else {
                    let (rate, burst) = piece.split_once('/').unwrap_or((piece, "0"));
                    limit.rate = Some(rate.parse().map_err(|_| {
                        ValidationError::new(
                            format!("{field}.rate"),
                            format!("{rate:?} is not a number"),
                        )
                    })?);
                    limit.burst = burst.parse().map_err(|_| {
                        ValidationError::new(
                            format!("{field}.burst"),
                            format!("{burst:?} is not a whole number"),
                        )
                    })?;
                }
            }
            self.flows.insert(resource.to_owned(), limit);
        }
        self.validate()
    }
}

impl std::fmt::Display for ContractLimits {
    /// The flow limits as `edit` reads them, then the quota's overrides
    /// (`max_users=5`), or `-` when the contract sets none.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return f.write_str("-");
        }
        let mut parts: Vec<String> = self
            .flows
            .iter()
            .map(|(resource, l)| {
                let mut v = Vec::new();
                if let Some(rate) = l.rate {
                    v.push(if l.burst > 0 {
                        format!("{rate}/{}", l.burst)
                    } else {
                        format!("{rate}")
                    });
                }
                if let Some(p) = l.permits {
                    v.push(format!("permits:{p}"));
                }
                format!("{resource}={}", v.join("+"))
            })
            .collect();
        parts.extend(self.quota.parts());
        f.write_str(&parts.join(","))
    }
}
