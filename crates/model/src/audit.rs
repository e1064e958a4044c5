//! The audit log's values: who changed what in a tenant, and when
//! (docs/audit.md). An entry's actor comes from authentication (an API
//! key's name) or from the operator running the CLI, never from a body.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::domain::KeyName;
use crate::time::Instant;

/// The longest operator name kept; longer ones are cut.
pub const MAX_OPERATOR_CHARS: usize = 64;
/// The longest resource id kept; longer ones are cut.
pub const MAX_RESOURCE_CHARS: usize = 200;
/// The most entries one listing returns.
pub const MAX_LISTED: usize = 1000;

/// What a write did. One name per write route and CLI command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AuditAction {
    TenantCreate,
    /// A tenant-wide contract change (`toki tenant set`).
    ContractSet,
    KeyAdd,
    KeyRevoke,
    SchedulePut,
    ScheduleDelete,
    OccurrencePut,
    OccurrenceCancel,
    SeriesSplit,
    UserPut,
    UserDelete,
    UserErase,
    TemplatePut,
    TemplateDelete,
    WebhookPut,
    WebhookRotateSecret,
    EventEndpointPut,
    EventEndpointDelete,
    EventEndpointEnable,
    EventEndpointRotateSecret,
    EventEndpointReplay,
    /// An address put on the suppression list by hand (the address is not
    /// kept in the entry: it is personal data).
    SuppressionPut,
    SuppressionDelete,
    /// The tenant's mail settings (`List-Unsubscribe`).
    MailSettingsPut,
}

impl AuditAction {
    /// The actions whose resource is a user id: an erasure replaces it.
    pub const ON_USERS: [AuditAction; 3] = [
        AuditAction::UserPut,
        AuditAction::UserDelete,
        AuditAction::UserErase,
    ];

    pub const ALL: [AuditAction; 24] = [
        AuditAction::TenantCreate,
        AuditAction::ContractSet,
        AuditAction::KeyAdd,
        AuditAction::KeyRevoke,
        AuditAction::SchedulePut,
        AuditAction::ScheduleDelete,
        AuditAction::OccurrencePut,
        AuditAction::OccurrenceCancel,
        AuditAction::SeriesSplit,
        AuditAction::UserPut,
        AuditAction::UserDelete,
        AuditAction::UserErase,
        AuditAction::TemplatePut,
        AuditAction::TemplateDelete,
        AuditAction::WebhookPut,
        AuditAction::WebhookRotateSecret,
        AuditAction::EventEndpointPut,
        AuditAction::EventEndpointDelete,
        AuditAction::EventEndpointEnable,
        AuditAction::EventEndpointRotateSecret,
        AuditAction::EventEndpointReplay,
        AuditAction::SuppressionPut,
        AuditAction::SuppressionDelete,
        AuditAction::MailSettingsPut,
    ];

    pub fn as_str(self) -> &'static str {
        use AuditAction::*;
        match self {
            TenantCreate => "tenant.create",
            ContractSet => "contract.set",
            KeyAdd => "key.add",
            KeyRevoke => "key.revoke",
            SchedulePut => "schedule.put",
            ScheduleDelete => "schedule.delete",
            OccurrencePut => "occurrence.put",
            OccurrenceCancel => "occurrence.cancel",
            SeriesSplit => "series.split",
            UserPut => "user.put",
            UserDelete => "user.delete",
            UserErase => "user.erase",
            TemplatePut => "template.put",
            TemplateDelete => "template.delete",
            WebhookPut => "webhook.put",
            WebhookRotateSecret => "webhook.rotate_secret",
            EventEndpointPut => "event_endpoint.put",
            EventEndpointDelete => "event_endpoint.delete",
            EventEndpointEnable => "event_endpoint.enable",
            EventEndpointRotateSecret => "event_endpoint.rotate_secret",
            EventEndpointReplay => "event_endpoint.replay",
            SuppressionPut => "suppression.put",
            SuppressionDelete => "suppression.delete",
            MailSettingsPut => "mail.put",
        }
    }
}

impl fmt::Display for AuditAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AuditAction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not an audit action"))
    }
}

impl Serialize for AuditAction {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// `s` with every control character written as `\u{..}` and cut to `max`
/// characters: a stored name cannot forge a line or a terminal sequence of
/// a listing. Idempotent (the result has no control character left).
pub fn escape_controls(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max));
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out.chars().take(max).collect()
}

/// The person running the CLI, as they named themselves (`TOKI_OPERATOR`)
/// or as the OS knows them: escaped and bounded, never empty.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OperatorName(String);

impl OperatorName {
    pub fn new(raw: &str) -> Self {
        let name = escape_controls(raw.trim(), MAX_OPERATOR_CHARS);
        if name.is_empty() {
            Self("unknown".into())
        } else {
            Self(name)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Who made a write: one of the tenant's API keys, by name, or an operator
/// at the CLI. Stored as `key:<name>` or `operator:<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Actor {
    Key(KeyName),
    Operator(OperatorName),
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Key(k) => write!(f, "key:{k}"),
            Actor::Operator(o) => write!(f, "operator:{}", o.as_str()),
        }
    }
}

impl FromStr for Actor {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            Some(("key", name)) => name
                .parse()
                .map(Actor::Key)
                .map_err(|e: crate::ValidationError| e.problem),
            Some(("operator", name)) => Ok(Actor::Operator(OperatorName::new(name))),
            _ => Err(format!("{s:?} is not key:<name> or operator:<name>")),
        }
    }
}

impl Serialize for Actor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One write, as it is appended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditEntry {
    pub at: Instant,
    pub actor: Actor,
    pub action: AuditAction,
    /// The resource's id (a schedule's, a user's, `mail/en` for a template;
    /// none for the tenant-wide ones): its own column, so that an erasure
    /// can pseudonymise a user's with one UPDATE.
    pub resource: Option<String>,
    /// A schedule's version before and after the write (none where the
    /// resource has no version, or there was none before).
    pub version_before: Option<i64>,
    pub version_after: Option<i64>,
}

impl AuditEntry {
    /// An entry without versions; the resource escaped and bounded.
    pub fn new(at: Instant, actor: Actor, action: AuditAction, resource: Option<&str>) -> Self {
        Self {
            at,
            actor,
            action,
            resource: resource.map(|r| escape_controls(r, MAX_RESOURCE_CHARS)),
            version_before: None,
            version_after: None,
        }
    }

    pub fn with_versions(mut self, before: Option<i64>, after: Option<i64>) -> Self {
        self.version_before = before;
        self.version_after = after;
        self
    }
}

/// An entry as the log holds it: numbered in order of appending, from 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredAuditEntry {
    pub seq: u64,
    #[serde(flatten)]
    pub entry: AuditEntry,
}

/// A schedule write's versions: each write takes the next version (1 for
/// the first), so the one before is the version less one, or none.
pub fn schedule_versions(after: i64) -> (Option<i64>, Option<i64>) {
    ((after > 1).then_some(after - 1), Some(after))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_round_trip_through_their_names() {
        for a in AuditAction::ALL {
            assert_eq!(a.as_str().parse::<AuditAction>(), Ok(a));
        }
        assert!("schedule.nuke".parse::<AuditAction>().is_err());
    }

    #[test]
    fn operator_names_are_escaped_bounded_and_never_empty() {
        let evil = OperatorName::new("eve\nkey:default\u{1b}[2J");
        assert_eq!(evil.as_str(), "eve\\u{a}key:default\\u{1b}[2J");
        assert!(!evil.as_str().chars().any(char::is_control));
        assert_eq!(OperatorName::new(evil.as_str()), evil, "idempotent");
        assert_eq!(OperatorName::new(&"x".repeat(500)).as_str().len(), 64);
        assert_eq!(OperatorName::new("  ").as_str(), "unknown");
    }

    #[test]
    fn actors_round_trip_through_their_text() {
        for a in [
            Actor::Key("ci-2026".parse().unwrap()),
            Actor::Operator(OperatorName::new("alice")),
            Actor::Operator(OperatorName::new("a:b")),
        ] {
            assert_eq!(a.to_string().parse::<Actor>(), Ok(a));
        }
        assert!("key:bad name".parse::<Actor>().is_err());
        assert!("root".parse::<Actor>().is_err());
    }

    #[test]
    fn schedule_versions_step_by_one() {
        assert_eq!(schedule_versions(1), (None, Some(1)));
        assert_eq!(schedule_versions(4), (Some(3), Some(4)));
    }
}
