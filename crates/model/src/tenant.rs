//! A tenant as the directory holds it: its contract (reminders on, active,
//! change notices, limits) and where its database lives.

use serde::{Deserialize, Serialize};

use crate::change::ChangeNoticeSettings;
use crate::domain::TenantId;
use crate::limits::ContractLimits;

/// A tenant's contract and where its database lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantRecord {
    pub id: TenantId,
    /// The reminder feature is part of the tenant's contract.
    pub reminders_enabled: bool,
    /// The tenant is active (not suspended or cancelled).
    pub active: bool,
    /// Where the tenant's database is: a SQLite file path or a Postgres URL.
    pub database: String,
    /// SHA-256 (hex) of the tenant's API key for the registrar API.
    pub api_key_sha256: String,
    /// Whether and how participants hear of changes to their schedules.
    #[serde(default)]
    pub change_notices: ChangeNoticeSettings,
    /// Limits the contract sets on the tenant's own resources (its
    /// database, its caps on Slack and mail), over the configured ones.
    #[serde(default, skip_serializing_if = "ContractLimits::is_empty")]
    pub limits: ContractLimits,
}

impl TenantRecord {
    pub fn may_receive_reminders(&self) -> bool {
        self.reminders_enabled && self.active
    }
}
