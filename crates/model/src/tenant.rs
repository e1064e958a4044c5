//! A tenant as the directory holds it: its contract (reminders on, active,
//! change notices, limits) and where its database lives.

use serde::{Deserialize, Serialize};

use crate::api_key::{ApiKey, KeyError};
use crate::change::ChangeNoticeSettings;
use crate::domain::{KeyName, TenantId};
use crate::limits::ContractLimits;
use crate::retention::RetentionSettings;
use crate::time::Instant;

/// A tenant's contract and where its database lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantRecord {
    pub id: TenantId,
    /// The reminder feature is part of the tenant's contract.
    pub reminders_enabled: bool,
    /// The tenant is active (not suspended or cancelled); a suspended
    /// tenant's valid keys get 403.
    pub active: bool,
    /// Where the tenant's database is: a SQLite file path or a Postgres URL.
    pub database: String,
    /// The tenant's keys for the registrar API, revoked ones included.
    #[serde(default)]
    pub api_keys: Vec<ApiKey>,
    /// Whether and how participants hear of changes to their schedules.
    #[serde(default)]
    pub change_notices: ChangeNoticeSettings,
    /// Limits the contract sets on the tenant's own resources (its
    /// database, its caps on Slack and mail), over the configured ones.
    #[serde(default, skip_serializing_if = "ContractLimits::is_empty")]
    pub limits: ContractLimits,
    /// How long each kind of the tenant's records is kept.
    #[serde(default)]
    pub retention: RetentionSettings,
}

impl TenantRecord {
    pub fn may_receive_reminders(&self) -> bool {
        self.reminders_enabled && self.active
    }

    pub fn key(&self, name: &KeyName) -> Option<&ApiKey> {
        self.api_keys.iter().find(|k| &k.name == name)
    }

    pub fn add_key(&mut self, key: ApiKey) -> Result<(), KeyError> {
        if self.key(&key.name).is_some() {
            return Err(KeyError::NameTaken(key.name));
        }
        self.api_keys.push(key);
        Ok(())
    }

    /// Revokes a key for good; revoking it again keeps the first instant.
    pub fn revoke_key(&mut self, name: &KeyName, now: Instant) -> Result<(), KeyError> {
        let key = self
            .api_keys
            .iter_mut()
            .find(|k| &k.name == name)
            .ok_or_else(|| KeyError::NoSuchKey(name.clone()))?;
        key.revoked_at.get_or_insert(now);
        Ok(())
    }
}
