//! The resources deliveries spend, each under its own limit. A key names one;
//! its text (`slack:T0123`, `tenant:acme:mail`) is what configured patterns,
//! lease rows, logs and metrics show.

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

use crate::error::ValidationError;

/// The kind of resource a key limits: the first part of its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FlowKind {
    Slack,
    Smtp,
    /// A webhook endpoint's host.
    Webhook,
    TenantDb,
    /// A tenant's own cap on a channel.
    Tenant,
}

impl FlowKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FlowKind::Slack => "slack",
            FlowKind::Smtp => "smtp",
            FlowKind::Webhook => "webhook",
            FlowKind::TenantDb => "tenantdb",
            FlowKind::Tenant => "tenant",
        }
    }
}

/// A channel a tenant's own cap applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CappedChannel {
    Slack,
    Mail,
}

impl CappedChannel {
    pub fn as_str(self) -> &'static str {
        match self {
            CappedChannel::Slack => "slack",
            CappedChannel::Mail => "mail",
        }
    }
}

/// One limited resource.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FlowKey {
    /// A Slack workspace's rate (`slack:<workspace>`).
    SlackWorkspace(String),
    /// One channel or user (a DM) in a workspace (`slack:<workspace>:<channel>`).
    SlackChannel { workspace: String, channel: String },
    /// A mail account (`smtp:<account>`).
    Smtp(String),
    /// A webhook endpoint's host (`webhook:<host>`; an IPv6 host's `:` written `-`).
    WebhookHost(String),
    /// A tenant's database (`tenantdb:<tenant>`).
    TenantDb(String),
    /// A tenant's own cap on one channel (`tenant:<tenant>:slack|mail`).
    TenantCap {
        tenant: String,
        channel: CappedChannel,
    },
}

impl FlowKey {
    /// The key of a webhook endpoint's host: one text part, whatever the host.
    pub fn webhook_host(host: &str) -> Self {
        FlowKey::WebhookHost(host.replace(':', "-"))
    }

    pub fn kind(&self) -> FlowKind {
        match self {
            FlowKey::SlackWorkspace(_) | FlowKey::SlackChannel { .. } => FlowKind::Slack,
            FlowKey::Smtp(_) => FlowKind::Smtp,
            FlowKey::WebhookHost(_) => FlowKind::Webhook,
            FlowKey::TenantDb(_) => FlowKind::TenantDb,
            FlowKey::TenantCap { .. } => FlowKind::Tenant,
        }
    }

    /// A Slack channel or DM: such keys come and go by the thousand.
    pub fn is_per_recipient(&self) -> bool {
        matches!(self, FlowKey::SlackChannel { .. })
    }

    /// The tenant whose own key this is (its database, its caps).
    pub fn tenant(&self) -> Option<&str> {
        match self {
            FlowKey::TenantDb(t) | FlowKey::TenantCap { tenant: t, .. } => Some(t),
            _ => None,
        }
    }

    /// The parts of its text, as configured patterns match them.
    pub fn parts(&self) -> Vec<&str> {
        let kind = self.kind().as_str();
        match self {
            FlowKey::SlackWorkspace(a)
            | FlowKey::Smtp(a)
            | FlowKey::WebhookHost(a)
            | FlowKey::TenantDb(a) => vec![kind, a],
            FlowKey::SlackChannel { workspace, channel } => vec![kind, workspace, channel],
            FlowKey::TenantCap { tenant, channel } => vec![kind, tenant, channel.as_str()],
        }
    }
}

impl fmt::Display for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.parts().join(":"))
    }
}

impl Serialize for FlowKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl FromStr for FlowKey {
    type Err = ValidationError;

    /// A key's text, as `Display` writes it.
    fn from_str(s: &str) -> Result<Self, ValidationError> {
        let bad = || ValidationError::new("key", format!("{s:?} is not a flow key"));
        let parts: Vec<&str> = s.split(':').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(bad());
        }
        let own = |p: &str| p.to_owned();
        Ok(match parts.as_slice() {
            ["slack", ws] => FlowKey::SlackWorkspace(own(ws)),
            ["slack", ws, ch] => FlowKey::SlackChannel {
                workspace: own(ws),
                channel: own(ch),
            },
            ["smtp", account] => FlowKey::Smtp(own(account)),
            ["webhook", host] => FlowKey::WebhookHost(own(host)),
            ["tenantdb", tenant] => FlowKey::TenantDb(own(tenant)),
            ["tenant", tenant, "slack"] => FlowKey::TenantCap {
                tenant: own(tenant),
                channel: CappedChannel::Slack,
            },
            ["tenant", tenant, "mail"] => FlowKey::TenantCap {
                tenant: own(tenant),
                channel: CappedChannel::Mail,
            },
            _ => return Err(bad()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_reads_back_as_it_writes() {
        for text in [
            "slack:T1",
            "slack:T1:U2",
            "smtp:ses",
            "webhook:hooks.example.com",
            "tenantdb:acme",
            "tenant:acme:slack",
            "tenant:acme:mail",
        ] {
            let key: FlowKey = text.parse().unwrap();
            assert_eq!(key.to_string(), text);
        }
        for bad in [
            "slack",
            "slack::U",
            "tenant:acme:sms",
            "queue:x",
            "smtp:a:b",
        ] {
            assert!(bad.parse::<FlowKey>().is_err(), "{bad}");
        }
    }

    #[test]
    fn only_a_tenants_own_keys_name_it_and_only_channels_are_per_recipient() {
        let cap: FlowKey = "tenant:acme:mail".parse().unwrap();
        assert_eq!(cap.tenant(), Some("acme"));
        assert_eq!(FlowKey::TenantDb("acme".into()).tenant(), Some("acme"));
        assert_eq!(FlowKey::Smtp("acme".into()).tenant(), None);
        assert!("slack:T:U".parse::<FlowKey>().unwrap().is_per_recipient());
        assert!(!"slack:T".parse::<FlowKey>().unwrap().is_per_recipient());
    }
}
