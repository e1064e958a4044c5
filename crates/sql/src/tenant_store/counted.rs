//! The counts behind a tenant's caps ([`toki_model::quota::Counted`]): one
//! `COUNT(*)` on a table (its primary key's index), two for the
//! suppression list (its entries kept as a hash after an erasure count too).

use toki_model::quota::Counted;

/// The statement that counts `what`: fixed text, never input.
pub(super) fn count_of(what: Counted) -> &'static str {
    match what {
        Counted::Schedules => "SELECT COUNT(*) FROM schedules",
        Counted::Users => "SELECT COUNT(*) FROM users",
        Counted::Templates => "SELECT COUNT(*) FROM reminder_templates",
        Counted::Suppressions => {
            "SELECT (SELECT COUNT(*) FROM suppressed_addresses)
                  + (SELECT COUNT(*) FROM erased_suppressions)"
        }
        Counted::EventEndpoints => "SELECT COUNT(*) FROM event_endpoints",
        Counted::IdempotencyKeys => "SELECT COUNT(*) FROM idempotency_keys",
        Counted::AuditEntries => "SELECT COUNT(*) FROM audit_log",
        Counted::Events => "SELECT COUNT(*) FROM delivery_events",
    }
}
