//! The retention purge's conformance cases (a tenant store's
//! `RetentionStore`), run on memory, SQLite and Postgres: rows on both sides
//! of the cutoff, and the purge deletes exactly the old finished ones, a
//! bounded batch per call, oldest first.
#![allow(dead_code)]

use std::sync::Arc;

use chrono::Duration as ChronoDuration;
use toki_model::event::{
    EndpointProgress, EndpointSecrets, EndpointSpec, EndpointUrl, EventEndpoint, EventKinds,
    EventOrdering,
};
use toki_model::retention::RetentionKind;
use toki_model::*;
use toki_ports::retention::{PurgeRecord, TenantRows};
use toki_ports::{ChatMessage, TenantStore};

/// The cutoff: rows older than this go.
fn cutoff() -> Instant {
    from_millis("cutoff", 1_800_000_000_000).unwrap()
}

/// Ten days before the cutoff, `n` minutes in (so the oldest is known).
fn old(n: i64) -> Instant {
    cutoff() - ChronoDuration::days(10) + ChronoDuration::minutes(n)
}

/// An hour after the cutoff: younger than the retention.
fn young() -> Instant {
    cutoff() + ChronoDuration::hours(1)
}

fn key(recipient: &str, channel: Channel) -> DeliveryKey {
    DeliveryKey {
        schedule: "s".parse().unwrap(),
        occurrence: Occurrence(from_millis("occurrence", 1_700_000_000_000).unwrap()),
        purpose: DeliveryPurpose::Reminder { minutes_before: 5 },
        recipient: recipient.parse().unwrap(),
        channel,
    }
}

fn outcome(recipient: &str, status: DeliveryStatus, at: Instant) -> DeliveryOutcome {
    DeliveryOutcome {
        key: key(recipient, Channel::Mail),
        version: 1,
        due_at: DueAt(at),
        status,
        at,
        detail: None,
    }
}

fn chat(recipient: &str, at: Instant) -> ChatMessage {
    ChatMessage {
        key: key(recipient, Channel::Chat),
        version: 1,
        user: recipient.parse().unwrap(),
        text: "hi".into(),
        created_at: at,
    }
}

/// Users with these ids: an outcome without a claim, and a chat row, are
/// written for a user who exists only (an erased one is not written back).
async fn users(s: &dyn TenantStore, ids: &[&str]) {
    let now = old(0);
    for id in ids {
        s.put_user(&super::conformance::store::user(id), now)
            .await
            .unwrap();
    }
}

/// An endpoint for every kind of event, so that outcomes leave events.
async fn subscribe(s: &dyn TenantStore) {
    s.put_event_endpoint(&EventEndpoint {
        id: "hook".parse().unwrap(),
        spec: EndpointSpec {
            url: EndpointUrl::parse("url", "https://hooks.example/toki").unwrap(),
            kinds: EventKinds::all(),
            ordering: EventOrdering::InOrder,
        },
        secrets: EndpointSecrets {
            current: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse().unwrap(),
            previous: None,
        },
        progress: EndpointProgress::starting_at(0, old(0)),
        created_at: old(0),
    })
    .await
    .unwrap();
}

/// Recipient and status of every delivery row, sorted.
async fn rows(s: &dyn TenantStore) -> Vec<(String, DeliveryStatus)> {
    let mut rows: Vec<_> = s
        .deliveries()
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.key.recipient.to_string(), d.status))
        .collect();
    rows.sort();
    rows
}

/// Drains `kind` with batches of `limit`; what each call deleted.
async fn drain(s: &dyn TenantStore, kind: TenantRows, limit: u32) -> Vec<u64> {
    let mut calls = Vec::new();
    loop {
        let n = s.purge_rows(kind, cutoff(), limit).await.unwrap();
        calls.push(n);
        assert!(n <= u64::from(limit), "a batch stays within its limit");
        if n == 0 || calls.len() > 20 {
            return calls;
        }
    }
}

/// Old delivered, failed, stale and undeliverable rows go, two at a time;
/// old throttled and deferred ones (pending a retry), an old claim being
/// sent, and every young row stay.
pub async fn purge_deletes_only_old_finished_deliveries(s: Arc<dyn TenantStore>) {
    use DeliveryStatus::*;
    users(
        s.as_ref(),
        &["d1", "d2", "f1", "x1", "u1", "p1", "p2", "y1", "y2"],
    )
    .await;
    let old_outcomes = [
        outcome("d1", Delivered, old(1)),
        outcome("d2", Delivered, old(2)),
        outcome("f1", Failed, old(3)),
        outcome("x1", Stale, old(4)),
        outcome("u1", Undeliverable, old(5)),
        outcome("p1", Throttled, old(6)),
        outcome("p2", Deferred, old(7)),
    ];
    s.record_outcomes(&old_outcomes).await.unwrap();
    s.record_outcomes(&[
        outcome("y1", Delivered, young()),
        outcome("y2", Failed, young()),
    ])
    .await
    .unwrap();
    // Claimed long ago and still being sent (a holder that renews it).
    let claim = DeliveryClaim {
        key: key("c1", Channel::Mail),
        version: 1,
        due_at: DueAt(old(0)),
    };
    let claims = s
        .claim_deliveries(&[claim], old(0), old(0) - ChronoDuration::minutes(1))
        .await
        .unwrap();
    assert_eq!(claims.owned.len(), 1);

    assert_eq!(
        drain(s.as_ref(), TenantRows::Deliveries, 2).await,
        [2, 2, 1, 0]
    );
    let left = rows(s.as_ref()).await;
    assert_eq!(
        left,
        vec![
            ("c1".into(), Sending),
            ("p1".into(), Throttled),
            ("p2".into(), Deferred),
            ("y1".into(), Delivered),
            ("y2".into(), Failed),
        ],
        "pending, sending and young rows stay"
    );
}

/// The oldest go first: a bounded batch never skips an older row for a younger.
pub async fn purge_takes_the_oldest_first(s: Arc<dyn TenantStore>) {
    users(s.as_ref(), &["r0", "r1", "r2", "r3"]).await;
    let outcomes: Vec<_> = (0..4)
        .rev()
        .map(|i| outcome(&format!("r{i}"), DeliveryStatus::Delivered, old(i)))
        .collect();
    s.record_outcomes(&outcomes).await.unwrap();
    assert_eq!(
        s.purge_rows(TenantRows::Deliveries, cutoff(), 3)
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        rows(s.as_ref()).await,
        vec![("r3".into(), DeliveryStatus::Delivered)]
    );
}

/// Chat rows and events older than the cutoff go in batches; younger stay.
pub async fn purge_deletes_old_chat_rows_and_events(s: Arc<dyn TenantStore>) {
    subscribe(s.as_ref()).await;
    users(
        s.as_ref(),
        &[
            "u0", "u1", "u2", "u3", "u4", "young", "e0", "e1", "e2", "ey",
        ],
    )
    .await;
    let messages: Vec<_> = (0..5)
        .map(|i| chat(&format!("u{i}"), old(i)))
        .chain([chat("young", young())])
        .collect();
    s.insert_chat_messages(&messages).await.unwrap();
    assert_eq!(drain(s.as_ref(), TenantRows::Chat, 2).await, [2, 2, 1, 0]);
    for i in 0..5 {
        let user: UserId = format!("u{i}").parse().unwrap();
        assert!(s.chat_messages(&user).await.unwrap().is_empty());
    }
    let kept = s.chat_messages(&"young".parse().unwrap()).await.unwrap();
    assert_eq!(kept.len(), 1, "a young chat row stays");

    for i in 0..3 {
        let o = outcome(&format!("e{i}"), DeliveryStatus::Delivered, old(i));
        s.record_outcomes(&[o]).await.unwrap();
    }
    s.record_outcomes(&[outcome("ey", DeliveryStatus::Delivered, young())])
        .await
        .unwrap();
    let before = s.events_after(0, 100).await.unwrap();
    assert_eq!(before.len(), 4, "each outcome left an event");
    assert_eq!(drain(s.as_ref(), TenantRows::Events, 2).await, [2, 1, 0]);
    let after = s.events_after(0, 100).await.unwrap();
    assert_eq!(after.len(), 1);
    assert!(
        after[0].occurred_at >= cutoff(),
        "only the young event stays"
    );

    use toki_model::audit::{Actor, AuditAction, AuditEntry};
    let actor = Actor::Key("default".parse().unwrap());
    let entry = |at| AuditEntry::new(at, actor.clone(), AuditAction::SchedulePut, Some("s"));
    let entries: Vec<_> = (0..3)
        .map(|i| entry(old(i)))
        .chain([entry(young())])
        .collect();
    s.append_audit(&entries).await.unwrap();
    assert_eq!(drain(s.as_ref(), TenantRows::Audit, 2).await, [2, 1, 0]);
    let kept = s.audit_after(0, 100).await.unwrap();
    assert_eq!(kept.len(), 1, "the young audit entry stays");
    assert!(kept[0].entry.at >= cutoff());
}

/// A pass's record replaces the last one and adds to the total.
pub async fn the_purge_log_keeps_the_last_pass_and_a_total(s: Arc<dyn TenantStore>) {
    assert!(s.purge_log().await.unwrap().is_empty());
    let record = |at: Instant, n: u64| PurgeRecord {
        kind: RetentionKind::Chat,
        last_pass_at: at,
        cutoff: at - ChronoDuration::days(90),
        last_purged: n,
        total_purged: n,
    };
    s.record_purge(&record(cutoff(), 7)).await.unwrap();
    s.record_purge(&record(young(), 3)).await.unwrap();
    let log = s.purge_log().await.unwrap();
    assert_eq!(
        log,
        vec![PurgeRecord {
            total_purged: 10,
            ..record(young(), 3)
        }]
    );
}

/// The caps on events and audit entries (issue 59): the oldest beyond the
/// newest `keep` go, a bounded batch per call, whatever their age.
pub async fn trimming_keeps_the_newest_rows(s: Arc<dyn TenantStore>) {
    use toki_ports::retention::Trimmed;
    subscribe(s.as_ref()).await;
    users(s.as_ref(), &["e0", "e1", "e2", "e3", "e4"]).await;
    for i in 0..5 {
        let o = outcome(&format!("e{i}"), DeliveryStatus::Delivered, young());
        s.record_outcomes(&[o]).await.unwrap();
    }
    assert_eq!(s.trim_rows(Trimmed::Events, 10, 500).await.unwrap(), 0);
    assert_eq!(
        s.trim_rows(Trimmed::Events, 3, 1).await.unwrap(),
        1,
        "a batch"
    );
    assert_eq!(s.trim_rows(Trimmed::Events, 3, 500).await.unwrap(), 1);
    let seqs: Vec<u64> = s
        .events_after(0, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, [3, 4, 5], "the newest three stay");

    use toki_model::audit::{Actor, AuditAction, AuditEntry};
    let actor = Actor::Key("default".parse().unwrap());
    let entries: Vec<_> = (0..4)
        .map(|i| {
            AuditEntry::new(
                young(),
                actor.clone(),
                AuditAction::SchedulePut,
                Some(&format!("s{i}")),
            )
        })
        .collect();
    s.append_audit(&entries).await.unwrap();
    assert_eq!(s.trim_rows(Trimmed::Audit, 1, 500).await.unwrap(), 3);
    let kept = s.audit_after(0, 100).await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        kept[0].entry.resource.as_deref(),
        Some("s3"),
        "the newest stays"
    );
}

#[macro_export]
macro_rules! retention_conformance {
    ($(#[$meta:meta])* $factory:path) => {
        mod retention {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn trimming_keeps_the_newest_rows() {
                common::retention::trimming_keeps_the_newest_rows($factory().await).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn purge_deletes_only_old_finished_deliveries() {
                common::retention::purge_deletes_only_old_finished_deliveries($factory().await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn purge_takes_the_oldest_first() {
                common::retention::purge_takes_the_oldest_first($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn purge_deletes_old_chat_rows_and_events() {
                common::retention::purge_deletes_old_chat_rows_and_events($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn the_purge_log_keeps_the_last_pass_and_a_total() {
                common::retention::the_purge_log_keeps_the_last_pass_and_a_total(
                    $factory().await,
                )
                .await
            }
        }
    };
}
