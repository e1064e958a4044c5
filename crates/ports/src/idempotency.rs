//! What a tenant store keeps for idempotent writes ([`crate::TenantStore::start_idempotent`] and its kin).

use toki_model::domain::Instant;
use toki_model::idempotency::{IdempotencyKey, KeptAnswer, RequestDigest};

/// A request about to run under its key.
#[derive(Debug, Clone, Copy)]
pub struct IdempotentStart<'a> {
    pub key: &'a IdempotencyKey,
    pub digest: &'a RequestDigest,
    /// When it starts: also what names this run of the key (see
    /// [`crate::TenantStore::finish_idempotent`]).
    pub now: Instant,
    /// A key first used before this has expired: it starts afresh.
    pub expired_before: Instant,
    /// A key still in progress since before this was abandoned (its process
    /// died): it starts afresh.
    pub abandoned_before: Instant,
}

/// What the store holds under a key when a request starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyedRequest {
    /// Nothing live: the key is now this request's, in progress, and the
    /// caller finishes or releases it.
    Started,
    /// An earlier request's: its digest, and its answer once it finished
    /// (none: still in progress).
    Existing {
        digest: RequestDigest,
        answer: Option<KeptAnswer>,
    },
}
