//! Erased people's suppression entries in memory, kept by the keyed hash of
//! their address as the SQL stores keep them (`erased_suppressions`): a leaf
//! file, so that the store (which holds them) and the list's port
//! (testing/suppression.rs) do not import each other.

use std::collections::BTreeMap;

use toki_model::domain::{Instant, User, UserId};
use toki_model::suppression::{ListedAddress, Suppression, SuppressionReason};
use toki_model::suppression_hash::{AddressDigest, SuppressionHashKey};

/// The in-memory store's key: a fixed one, so that a test or a simulated
/// run hashes the same way every time (this store holds no real person;
/// the SQL stores make a random key per tenant).
fn memory_key() -> SuppressionHashKey {
    let stored = "5e".repeat(32);
    SuppressionHashKey::parse(&stored).expect("64 hex digits")
}

/// An erased entry: its reason and since when.
#[derive(Debug, Clone)]
struct ErasedEntry {
    reason: SuppressionReason,
    at: Instant,
}

/// The entries, and the tenant's key (made at first use).
#[derive(Debug, Default)]
pub(super) struct ErasedSuppressions {
    entries: BTreeMap<AddressDigest, ErasedEntry>,
    key: Option<SuppressionHashKey>,
}

fn listed(user: &User) -> Option<ListedAddress> {
    user.email
        .as_deref()
        .and_then(|e| ListedAddress::parse("email", e).ok())
}

impl ErasedSuppressions {
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Replaces `list`'s entry of an erased person's `address` by its keyed
    /// hash, unless one of `users` has the address; 1 if it was replaced.
    pub(super) fn erase(
        &mut self,
        list: &mut BTreeMap<ListedAddress, Suppression>,
        users: &BTreeMap<UserId, User>,
        address: &ListedAddress,
    ) -> u64 {
        if users.values().any(|u| listed(u).as_ref() == Some(address)) {
            return 0;
        }
        let Some(entry) = list.remove(address) else {
            return 0;
        };
        let digest = self.key.get_or_insert_with(memory_key).digest(address);
        let erased = ErasedEntry {
            reason: entry.reason,
            at: entry.at,
        };
        self.entries.entry(digest).or_insert(erased);
        1
    }

    /// The erased entry of `address`, if any; `take` removes it.
    pub(super) fn entry(&mut self, address: &ListedAddress, take: bool) -> Option<Suppression> {
        let digest = self.key.as_ref()?.digest(address);
        let entry = if take {
            self.entries.remove(&digest)?
        } else {
            self.entries.get(&digest)?.clone()
        };
        Some(Suppression {
            address: address.clone(),
            reason: entry.reason,
            detail: None,
            at: entry.at,
        })
    }

    /// A user written with an address an erased entry hashes: it is listed
    /// again by address (an entry there already stays).
    pub(super) fn restore(&mut self, list: &mut BTreeMap<ListedAddress, Suppression>, user: &User) {
        let address = listed(user);
        if let Some(entry) = address.and_then(|a| self.entry(&a, true)) {
            list.entry(entry.address.clone()).or_insert(entry);
        }
    }
}
