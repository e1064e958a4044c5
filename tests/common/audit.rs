//! The audit log's conformance case, run on every tenant store (memory,
//! SQLite, Postgres) by `store_conformance!`.

use std::sync::Arc;

use toki_model::audit::{Actor, AuditAction, AuditEntry, OperatorName};
use toki_model::{from_millis, Instant};
use toki_ports::TenantStore;

fn at(ms: i64) -> Instant {
    from_millis("at", ms).unwrap()
}

/// Entries come back as appended, numbered in order from 1, with every
/// field (versions absent or present); pages follow `after`; the purge
/// deletes at most `limit` of those before its bound, oldest first, and
/// numbers never repeat.
pub async fn entries_round_trip_in_order_and_purge_by_age(s: Arc<dyn TenantStore>) {
    let t0 = 1_800_000_000_000;
    let key = Actor::Key("default".parse().unwrap());
    let operator = Actor::Operator(OperatorName::new("ops\u{7}x"));
    let first = vec![
        AuditEntry::new(at(t0), key.clone(), AuditAction::UserPut, Some("ann")),
        AuditEntry::new(
            at(t0 + 1000),
            key.clone(),
            AuditAction::SchedulePut,
            Some("m1"),
        )
        .with_versions(Some(1), Some(2)),
    ];
    s.append_audit(&first).await.unwrap();
    s.append_audit(&[]).await.unwrap();
    let rest: Vec<AuditEntry> = (2..5)
        .map(|i| {
            AuditEntry::new(
                at(t0 + i * 1000),
                operator.clone(),
                AuditAction::ContractSet,
                None,
            )
        })
        .collect();
    s.append_audit(&rest).await.unwrap();

    let all = s.audit_after(0, 100).await.unwrap();
    let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    assert_eq!(all[0].entry, first[0]);
    assert_eq!(all[1].entry, first[1]);
    assert_eq!(all[2].entry, rest[0]);
    assert_eq!(all[2].entry.actor.to_string(), "operator:ops\\u{7}x");
    let page: Vec<u64> = s
        .audit_after(2, 2)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(page, [3, 4]);
    assert!(s.audit_after(5, 10).await.unwrap().is_empty());

    assert_eq!(
        s.purge_audit(at(t0 + 3000), 2).await.unwrap(),
        2,
        "bounded by limit"
    );
    assert_eq!(s.purge_audit(at(t0 + 3000), 10).await.unwrap(), 1);
    assert_eq!(s.purge_audit(at(t0 + 3000), 10).await.unwrap(), 0);
    let left: Vec<u64> = s
        .audit_after(0, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(left, [4, 5], "nothing younger than the bound");
    s.append_audit(&first[..1]).await.unwrap();
    let last = s.audit_after(5, 10).await.unwrap();
    assert_eq!(
        last.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [6],
        "numbers never repeat"
    );
}
