//! Offboarding a tenant: what each store holds of it, a fence that stops its
//! deliveries, and the removal of everything (`toki tenant delete`).

use async_trait::async_trait;
use toki_model::domain::{Instant, TenantId};

use crate::error::StoreResult;

/// How many rows (or items, or messages) of one kind a store holds of a
/// tenant: one line of `toki tenant delete --dry-run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// Where: `control.reminder_index`, `tenant.deliveries`, `dynamodb.index`...
    pub place: String,
    pub count: u64,
}

impl Holding {
    pub fn new(place: impl Into<String>, count: u64) -> Self {
        Holding {
            place: place.into(),
            count,
        }
    }
}

/// What a tenant's fence removed: the rows that could still lead to a send.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fenced {
    pub schedules: u64,
    pub users: u64,
    /// Change baselines and frozen notices (a notice is built from them).
    pub notice_rows: u64,
    /// Event endpoints and webhook settings (where the tenant is posted to).
    pub endpoints: u64,
}

impl Fenced {
    /// Nothing was left to remove: no write reached the database since the last fence.
    pub fn is_empty(&self) -> bool {
        *self == Fenced::default()
    }
}

/// A tenant database's part in offboarding. A supertrait of
/// [`crate::TenantStore`], as [`crate::EventLog`] is.
#[async_trait]
pub trait TenantOffboard: Send + Sync {
    /// Rows per table, every table of the database (`tenant.<table>`).
    async fn table_counts(&self) -> StoreResult<Vec<Holding>>;

    /// In one transaction, removes what a delivery is built from: schedules
    /// (their participants and rules with them), users, change baselines and
    /// frozen notices, event endpoints and webhook settings. After it
    /// commits, a claim's last look finds no schedule (the reminder is
    /// stale) and a notice finds no recipient. Delivery rows stay, so that
    /// claims in flight can be waited for ([`Self::live_claims`]).
    async fn fence(&self) -> StoreResult<Fenced>;

    /// Deliveries claimed (`sending`) whose claim was taken or renewed at
    /// or after `renewed_since`: a holder alive and sending.
    async fn live_claims(&self, renewed_since: Instant) -> StoreResult<u64>;
}

/// A control store's part in offboarding (the index, the queue, debounce
/// and lease rows, the directory): what it holds of a tenant, and its removal.
#[async_trait]
pub trait TenantFootprint: Send + Sync {
    /// What it holds of `tenant`, by place (places with nothing included).
    async fn holdings(&self, tenant: &TenantId) -> StoreResult<Vec<Holding>>;

    /// Deletes all of it; returns what went, by place.
    async fn delete_tenant(&self, tenant: &TenantId) -> StoreResult<Vec<Holding>>;
}

/// Whether a debounce key (`<tenant>:<schedule>`) is `tenant`'s.
pub fn is_tenants_debounce_key(key: &str, tenant: &TenantId) -> bool {
    toki_model::change::parse_debounce_key(key).is_ok_and(|(t, _)| &t == tenant)
}

/// Whether a rate lease's key (a [`toki_model::flow_key::FlowKey`]) is one of
/// `tenant`'s own (its database's permits, its own caps).
pub fn is_tenants_lease_key(key: &str, tenant: &TenantId) -> bool {
    key.parse::<toki_model::flow_key::FlowKey>()
        .is_ok_and(|k| k.tenant() == Some(tenant.as_str()))
}
