//! A tenant's audit log in memory: its state, in a leaf file, so that the
//! store (which holds it) and the log's port (testing/audit.rs) do not
//! import each other.

use std::collections::BTreeMap;

use toki_model::audit::StoredAuditEntry;

#[derive(Default)]
pub(super) struct MemoryAudit {
    pub(super) log: BTreeMap<u64, StoredAuditEntry>,
    pub(super) last_seq: u64,
}

impl MemoryAudit {
    /// An erasure's part: `pseudonym` in place of `user` in the entries
    /// about their user row; how many.
    pub(super) fn pseudonymise(&mut self, user: &str, pseudonym: &str) -> u64 {
        let mut n = 0;
        for e in self.log.values_mut() {
            let entry = &mut e.entry;
            if toki_model::audit::AuditAction::ON_USERS.contains(&entry.action)
                && entry.resource.as_deref() == Some(user)
            {
                entry.resource = Some(pseudonym.to_owned());
                n += 1;
            }
        }
        n
    }
}
