//! Erasure conformance (docs/erasure.md): a person held in every place a
//! tenant store keeps people is erased, then every table is read back and
//! searched for them. The search knows no table names: on SQL it lists the
//! tables from the catalogue and reads every column of every row as text;
//! in memory it reads the store's whole state. So a table added later that
//! holds them fails the test until the erasure covers it.
#![allow(dead_code)]

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{Duration as ChronoDuration, Utc};
use toki_model::change::NoticeEdge;
use toki_model::erasure::{ErasureReport, PSEUDONYM_PREFIX, SCRUBBED};
use toki_model::event::{
    EndpointProgress, EndpointSecrets, EndpointSpec, EndpointUrl, EventEndpoint, EventKinds,
    EventOrdering,
};
use toki_model::idempotency::{IdempotencyKey, KeptAnswer, RequestDigest};
use toki_model::input::UserInput;
use toki_model::*;
use toki_ports::{IdempotentStart, KeyedRequest, TenantStore};

use super::conformance::store::schedule;

/// Every text value a backend holds, each with where it was found
/// (`table.column`, or `memory`).
#[async_trait]
pub trait Holdings: Send + Sync {
    async fn texts(&self) -> Vec<(String, String)>;
}

/// A tenant store with its holdings, as a factory makes them.
pub type Erasable = (Arc<dyn TenantStore>, Arc<dyn Holdings>);

/// The in-memory store's whole state as text.
pub struct MemoryHoldings(pub Arc<toki_core::testing::MemoryTenantStore>);

#[async_trait]
impl Holdings for MemoryHoldings {
    async fn texts(&self) -> Vec<(String, String)> {
        vec![("memory".into(), self.0.dump())]
    }
}

/// Every column of every table of a SQLite database, as text.
pub struct SqliteHoldings(pub sqlx::SqlitePool);

#[async_trait]
impl Holdings for SqliteHoldings {
    async fn texts(&self) -> Vec<(String, String)> {
        let tables: Vec<String> =
            sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table'")
                .fetch_all(&self.0)
                .await
                .unwrap();
        let mut out = Vec::new();
        for table in tables {
            let columns: Vec<String> = sqlx::query_scalar("SELECT name FROM pragma_table_info(?)")
                .bind(&table)
                .fetch_all(&self.0)
                .await
                .unwrap();
            for c in columns {
                // As bytes: a BLOB column need not hold UTF-8.
                let sql = format!("SELECT CAST(\"{c}\" AS BLOB) FROM \"{table}\"");
                let values: Vec<Option<Vec<u8>>> =
                    sqlx::query_scalar(&sql).fetch_all(&self.0).await.unwrap();
                out.extend(values.into_iter().flatten().map(|v| {
                    let text = String::from_utf8_lossy(&v).into_owned();
                    (format!("{table}.{c}"), text)
                }));
            }
        }
        out
    }
}

/// Every column of every table of a Postgres database's public schema, as text.
pub struct PostgresHoldings(pub sqlx::PgPool);

#[async_trait]
impl Holdings for PostgresHoldings {
    async fn texts(&self) -> Vec<(String, String)> {
        let columns: Vec<(String, String)> = sqlx::query_as(
            "SELECT c.table_name::text, c.column_name::text FROM information_schema.columns c
             JOIN information_schema.tables t
               ON t.table_schema = c.table_schema AND t.table_name = c.table_name
             WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE'",
        )
        .fetch_all(&self.0)
        .await
        .unwrap();
        assert!(!columns.is_empty(), "the catalogue lists the tables");
        let mut out = Vec::new();
        for (table, c) in columns {
            let sql = format!("SELECT CAST(\"{c}\" AS TEXT) FROM \"{table}\"");
            let values: Vec<Option<String>> =
                sqlx::query_scalar(&sql).fetch_all(&self.0).await.unwrap();
            out.extend(
                values
                    .into_iter()
                    .flatten()
                    .map(|v| (format!("{table}.{c}"), v)),
            );
        }
        out
    }
}

pub async fn memory() -> Erasable {
    let store = Arc::new(toki_core::testing::MemoryTenantStore::default());
    (store.clone(), Arc::new(MemoryHoldings(store)))
}

pub async fn sqlite() -> Erasable {
    let dir = tempfile::tempdir().unwrap().keep();
    let path = dir.join("tenant.sqlite");
    toki_sql::create_tenant_database(path.to_str().unwrap())
        .await
        .unwrap();
    let pool = toki_sql::control::open_sqlite(&path).await.unwrap();
    let store = toki_sql::SqliteTenantStore::new(pool.clone());
    (Arc::new(store), Arc::new(SqliteHoldings(pool)))
}

pub async fn postgres() -> Erasable {
    let url = super::services::postgres_database().await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let store = toki_sql::PostgresTenantStore::new(pool.clone());
    (Arc::new(store), Arc::new(PostgresHoldings(pool)))
}

/// The person erased: every value that identifies them is distinctive, so
/// finding it anywhere is finding them.
pub fn person() -> User {
    UserInput {
        name: "Zelda Erasewright".into(),
        email: Some("zelda.erasewright@example.com".into()),
        slack_user_id: Some("UZELDAERASE".into()),
        webhook_url: Some("https://hooks.example.com/zelda-erasewright".into()),
        time_zone: "Europe/Paris".into(),
        locale: "en".into(),
        channels: Default::default(),
    }
    .validate(&"zelda-erase-7q".parse().unwrap())
    .unwrap()
}

/// What must not be found after the erasure.
pub fn needles(u: &User) -> Vec<String> {
    let mut v = vec![u.id.to_string(), u.name.clone()];
    v.extend(u.email.clone());
    v.extend(u.slack_user_id.clone());
    v.extend(u.webhook_url.as_ref().map(|w| w.to_string()));
    v
}

/// Where each needle is found: (needle, place) pairs.
pub async fn found(h: &dyn Holdings, needles: &[String]) -> Vec<(String, String)> {
    let texts = h.texts().await;
    let mut out = Vec::new();
    for n in needles {
        for (place, text) in &texts {
            if text.contains(n.as_str()) {
                out.push((n.clone(), place.clone()));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn delivery(
    schedule: &str,
    occurrence_ms: i64,
    recipient: &UserId,
    channel: Channel,
) -> DeliveryKey {
    DeliveryKey {
        schedule: schedule.parse().unwrap(),
        occurrence: Occurrence(from_millis("occurrence", occurrence_ms).unwrap()),
        purpose: DeliveryPurpose::Reminder { minutes_before: 5 },
        recipient: recipient.clone(),
        channel,
    }
}

fn outcome(key: &DeliveryKey, status: DeliveryStatus, detail: Option<&str>) -> DeliveryOutcome {
    let at = from_millis("at", Utc::now().timestamp_millis()).unwrap();
    DeliveryOutcome {
        key: key.clone(),
        version: 1,
        due_at: DueAt(at),
        status,
        at,
        detail: detail.map(str::to_owned),
    }
}

fn endpoint(now: Instant) -> EventEndpoint {
    EventEndpoint {
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
        progress: EndpointProgress::starting_at(0, now),
        created_at: now,
    }
}

/// Two kept answers: one quoting the person (a batch's participants), one not.
async fn keep_answers(s: &dyn TenantStore, who: &User, now: Instant) -> [IdempotencyKey; 2] {
    let keys: [IdempotencyKey; 2] = ["batch-1".parse().unwrap(), "batch-2".parse().unwrap()];
    let bodies = [
        format!(
            "{{\"results\":[{{\"participants\":[\"{}\",\"bob\"]}}]}}",
            who.id
        ),
        "{\"results\":[{\"participants\":[\"bob\"]}]}".to_owned(),
    ];
    for (key, body) in keys.iter().zip(bodies) {
        let digest = RequestDigest::of("POST", "/v1/tenants/t/schedules:batch", body.as_bytes());
        let start = IdempotentStart {
            key,
            digest: &digest,
            now,
            expired_before: now - ChronoDuration::hours(24),
            abandoned_before: now - ChronoDuration::minutes(5),
        };
        assert_eq!(
            s.start_idempotent(&start).await.unwrap(),
            KeyedRequest::Started
        );
        let answer = KeptAnswer { status: 200, body };
        s.finish_idempotent(key, now, &answer).await.unwrap();
    }
    keys
}

/// The person in every place: user row, two schedules (one shared with
/// bob), a change baseline and a frozen notice, a delivered, a failed
/// (pending) and a claimed delivery, events, a chat message, a kept answer.
async fn hold_everywhere(s: &dyn TenantStore, who: &User) {
    let now = from_millis("now", Utc::now().timestamp_millis()).unwrap();
    s.put_user(who, now).await.unwrap();
    s.put_user(&super::conformance::store::user("bob"), now)
        .await
        .unwrap();
    s.put_event_endpoint(&endpoint(now)).await.unwrap();
    let z = who.id.as_str();
    s.put_schedule(&schedule("shared", &[z, "bob"]), now)
        .await
        .unwrap();
    s.put_schedule(&schedule("alone", &[z]), now).await.unwrap();
    // An edit with change notices: the baseline and the notice list them.
    let shared: ScheduleId = "shared".parse().unwrap();
    s.keep_change_baselines(std::slice::from_ref(&shared))
        .await
        .unwrap();
    s.put_schedule(&schedule("shared", &[z, "bob"]), now)
        .await
        .unwrap();
    s.freeze_change_notice(&shared, "tok-1", NoticeEdge::Leading, now)
        .await
        .unwrap()
        .expect("a notice");
    s.keep_change_baselines(std::slice::from_ref(&shared))
        .await
        .unwrap();
    let delivered = delivery("shared", 1_800_000_000_000, &who.id, Channel::Mail);
    let failed = delivery("shared", 1_800_000_600_000, &who.id, Channel::Mail);
    let claimed = delivery("shared", 1_800_001_200_000, &who.id, Channel::Slack);
    let bobs = delivery(
        "shared",
        1_800_000_000_000,
        &"bob".parse().unwrap(),
        Channel::Mail,
    );
    let claims: Vec<DeliveryClaim> = [&delivered, &failed, &claimed, &bobs]
        .into_iter()
        .map(|k| DeliveryClaim {
            key: k.clone(),
            version: 1,
            due_at: DueAt(now),
        })
        .collect();
    s.claim_deliveries(&claims, now, now - ChronoDuration::seconds(10))
        .await
        .unwrap();
    let bounce = format!("550 5.1.1 <{}> unknown", who.email.as_deref().unwrap());
    s.record_outcomes(&[
        outcome(&delivered, DeliveryStatus::Delivered, Some("250 ok")),
        outcome(&failed, DeliveryStatus::Failed, Some(&bounce)),
        outcome(&bobs, DeliveryStatus::Delivered, None),
    ])
    .await
    .unwrap();
    s.insert_chat_messages(&[toki_ports::ChatMessage {
        key: delivery("shared", 1_800_000_000_000, &who.id, Channel::Chat),
        version: 1,
        user: who.id.clone(),
        text: format!("Hi {}, the sync starts in 5 minutes", who.name),
        created_at: now,
    }])
    .await
    .unwrap();
    keep_answers(s, who, now).await;
    // Their address bounced once: it is on the tenant's suppression list.
    let bounced = toki_model::suppression::Suppression {
        address: toki_model::suppression::ListedAddress::parse(
            "email",
            who.email.as_deref().unwrap(),
        )
        .unwrap(),
        reason: toki_model::suppression::SuppressionReason::Bounce,
        detail: Some("smtp; 550 5.1.1 user unknown".into()),
        at: now,
    };
    assert_eq!(s.suppress(&[bounced]).await.unwrap(), 1);
    // The tenant's key wrote their user row: the audit log names them.
    use toki_model::audit::{Actor, AuditAction, AuditEntry};
    let actor = Actor::Key("default".parse().unwrap());
    let wrote = AuditEntry::new(
        now,
        actor.clone(),
        AuditAction::UserPut,
        Some(who.id.as_str()),
    );
    let schedule = AuditEntry::new(now, actor, AuditAction::SchedulePut, Some("shared"));
    s.append_audit(&[wrote, schedule]).await.unwrap();
}

/// After erasure nothing in the tenant store names the person; before it,
/// the same search finds them in every table that holds people, so a miss
/// is the erasure's, not the search's.
pub async fn erasure_leaves_no_trace(make: Erasable) {
    let (s, holdings) = make;
    let who = person();
    let needles = needles(&who);
    hold_everywhere(s.as_ref(), &who).await;
    let before = found(holdings.as_ref(), &needles).await;
    for n in &needles {
        assert!(
            before.iter().any(|(m, _)| m == n),
            "the search does not find {n} before the erasure: {before:?}"
        );
    }
    let places: std::collections::BTreeSet<&str> = before
        .iter()
        .map(|(_, p)| p.split('.').next().unwrap())
        .collect();
    if !places.contains("memory") {
        for table in [
            "users",
            "participants",
            "deliveries",
            "chat_messages",
            "delivery_events",
            "change_baselines",
            "change_notices",
            "idempotency_keys",
            "suppressed_addresses",
            "audit_log",
        ] {
            assert!(
                places.contains(table),
                "not found in {table} before: {places:?}"
            );
        }
    }
    let now = Utc::now();
    let pseudonym = toki_model::erasure::pseudonym();
    let report = s.erase_user(&who.id, &pseudonym, now).await.unwrap();
    assert_eq!(
        report,
        ErasureReport {
            users: 1,
            participations: 2,
            schedules_changed: 2,
            deliveries_cancelled: 2,
            deliveries_pseudonymised: 1,
            chat_messages: 1,
            delivery_events: 2,
            change_baselines: 1,
            change_notices: 1,
            idempotency_keys: 1,
            suppressions: 1,
            audit_entries: 1,
        }
    );
    let after = found(holdings.as_ref(), &needles).await;
    assert!(after.is_empty(), "found after the erasure: {after:?}");
    what_remains(s.as_ref(), &who, &pseudonym).await;
    // Nothing left: a second erasure finds nothing.
    let again = s
        .erase_user(&who.id, &toki_model::erasure::pseudonym(), Utc::now())
        .await
        .unwrap();
    assert_eq!(again.total(), 0);
}

/// What the erasure keeps: bob whole, the schedules at their next version
/// and left to mirror, the past delivery and its events under the pseudonym.
async fn what_remains(s: &dyn TenantStore, who: &User, pseudonym: &UserId) {
    let bob: UserId = "bob".parse().unwrap();
    assert!(s.get_user(&bob).await.unwrap().is_some());
    assert!(s.get_user(&who.id).await.unwrap().is_none());
    let shared = s
        .get_schedule(&"shared".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (shared.participants.clone(), shared.version),
        (vec![bob.clone()], 3)
    );
    let alone = s
        .get_schedule(&"alone".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((alone.participants.len(), alone.version), (0, 2));
    let versions = s
        .schedule_versions(&[shared.id.clone(), alone.id.clone()])
        .await
        .unwrap();
    assert_eq!((versions[&shared.id], versions[&alone.id]), (3, 2));
    let unmirrored = s.unmirrored(Utc::now()).await.unwrap();
    assert_eq!(
        unmirrored.len(),
        2,
        "both schedules are to mirror again: {unmirrored:?}"
    );
    let rows = s.deliveries().await.unwrap();
    assert_eq!(rows.len(), 2, "bob's and the pseudonym's: {rows:?}");
    let kept = rows.iter().find(|r| &r.key.recipient == pseudonym).unwrap();
    assert_eq!(
        (kept.status, kept.detail.as_deref()),
        (DeliveryStatus::Delivered, Some(SCRUBBED))
    );
    assert!(pseudonym.as_str().starts_with(PSEUDONYM_PREFIX));
    assert!(rows.iter().any(|r| r.key.recipient == bob));
    assert!(s.chat_messages(&who.id).await.unwrap().is_empty());
    let events = s.events_after(0, 100).await.unwrap();
    assert_eq!(
        events.len(),
        3,
        "delivered and failed for them, delivered for bob"
    );
    let theirs: Vec<_> = events
        .iter()
        .filter(|e| e.data.recipient.as_deref() == Some(pseudonym.as_str()))
        .collect();
    assert_eq!(theirs.len(), 2);
    assert!(theirs.iter().all(|e| e
        .data
        .delivery
        .as_deref()
        .unwrap()
        .contains(pseudonym.as_str())));
    let notices = s.change_notices(&shared.id).await.unwrap();
    assert_eq!(notices[0].after.as_ref().unwrap().participants, vec![bob]);
}

/// The id of an erased user may be given to someone new: the rows kept
/// under the pseudonym do not stand in their way.
pub async fn an_erased_id_starts_afresh(make: Erasable) {
    let (s, _) = make;
    let who = person();
    hold_everywhere(s.as_ref(), &who).await;
    s.erase_user(&who.id, &toki_model::erasure::pseudonym(), Utc::now())
        .await
        .unwrap();
    let now = Utc::now();
    s.put_user(&who, now).await.unwrap();
    let key = delivery("shared", 1_800_000_000_000, &who.id, Channel::Mail);
    let claims = s
        .claim_deliveries(
            &[DeliveryClaim {
                key: key.clone(),
                version: 3,
                due_at: DueAt(now),
            }],
            now,
            now - ChronoDuration::seconds(10),
        )
        .await
        .unwrap();
    assert_eq!(
        claims.owned.len(),
        1,
        "the new user's delivery is theirs to send"
    );
}

/// A send in flight while the person is erased (claimed before, finished
/// after): its outcome, its chat row and its delivery event would name them
/// again. They are fenced on the claim's row and the user's row, which the
/// erasure removed: nothing is written of them, bob's outcome is, and a
/// second erasure finds nothing left.
pub async fn a_send_in_flight_writes_nothing_back(make: Erasable) {
    let (s, holdings) = make;
    let who = person();
    hold_everywhere(s.as_ref(), &who).await;
    let now = from_millis("now", Utc::now().timestamp_millis()).unwrap();
    // Claimed before the erasure: their Slack reminder and bob's.
    let theirs = delivery("shared", 1_800_003_000_000, &who.id, Channel::Slack);
    let bobs = delivery(
        "shared",
        1_800_003_000_000,
        &"bob".parse().unwrap(),
        Channel::Slack,
    );
    let claims: Vec<DeliveryClaim> = [&theirs, &bobs]
        .into_iter()
        .map(|k| DeliveryClaim {
            key: k.clone(),
            version: 2,
            due_at: DueAt(now),
        })
        .collect();
    let claimed = s
        .claim_deliveries(&claims, now, now - ChronoDuration::seconds(10))
        .await
        .unwrap();
    assert_eq!(claimed.owned.len(), 2);
    s.erase_user(&who.id, &toki_model::erasure::pseudonym(), Utc::now())
        .await
        .unwrap();
    let events_before = s.events_after(0, 1000).await.unwrap().len();

    // The sends finish: delivered (with a chat row), and a stale verdict on
    // a delivery of theirs never claimed (a late look at an old version).
    let unclaimed = delivery("shared", 1_800_004_000_000, &who.id, Channel::Mail);
    s.record_outcomes(&[
        outcome(&theirs, DeliveryStatus::Delivered, None),
        outcome(&bobs, DeliveryStatus::Delivered, None),
        outcome(
            &unclaimed,
            DeliveryStatus::Stale,
            Some("schedule is at version 3"),
        ),
    ])
    .await
    .unwrap();
    s.insert_chat_messages(&[toki_ports::ChatMessage {
        key: delivery("shared", 1_800_003_000_000, &who.id, Channel::Chat),
        version: 2,
        user: who.id.clone(),
        text: format!("Hi {}, the sync starts in 5 minutes", who.name),
        created_at: now,
    }])
    .await
    .unwrap();

    let after = found(holdings.as_ref(), &needles(&who)).await;
    assert!(
        after.is_empty(),
        "written back after the erasure: {after:?}"
    );
    let rows = s.deliveries().await.unwrap();
    let bob_row = rows.iter().find(|r| r.key == bobs).expect("bob's outcome");
    assert_eq!(bob_row.status, DeliveryStatus::Delivered);
    let events = s.events_after(0, 1000).await.unwrap();
    assert_eq!(events.len(), events_before + 1, "bob's event only");
    let again = s
        .erase_user(&who.id, &toki_model::erasure::pseudonym(), Utc::now())
        .await
        .unwrap();
    assert_eq!(again.total(), 0, "nothing left to erase: {again:?}");
}

/// A person who complained is erased: the list no longer holds their
/// address (the search finds it nowhere), yet it still answers for it, and
/// when the tenant adds someone with that address again (another id,
/// another spelling) the entry is back on the list and in what the daemon
/// reads, so the complainer is not mailed. An address another user shares
/// stays listed as it is; lifting an erased entry by address works.
pub async fn an_erased_complainer_stays_suppressed(make: Erasable) {
    use toki_model::suppression::{ListedAddress, Suppression, SuppressionReason};
    let (s, holdings) = make;
    let who = person();
    let now = from_millis("now", Utc::now().timestamp_millis()).unwrap();
    s.put_user(&who, now).await.unwrap();
    let email = who.email.clone().unwrap();
    let address = ListedAddress::parse("email", &email).unwrap();
    let complaint = Suppression {
        address: address.clone(),
        reason: SuppressionReason::Complaint,
        detail: Some(format!("complaint from <{email}>")),
        at: now,
    };
    assert_eq!(s.suppress(&[complaint]).await.unwrap(), 1);

    let report = s
        .erase_user(&who.id, &toki_model::erasure::pseudonym(), Utc::now())
        .await
        .unwrap();
    assert_eq!(report.suppressions, 1);
    let left = found(holdings.as_ref(), &needles(&who)).await;
    assert!(left.is_empty(), "found after the erasure: {left:?}");
    assert!(s.suppressions(None, 100).await.unwrap().is_empty());
    let kept = s
        .suppression(&address)
        .await
        .unwrap()
        .expect("still suppressed");
    assert_eq!(
        (kept.reason, kept.detail, kept.at),
        (SuppressionReason::Complaint, None, now)
    );

    let back = User {
        id: "zelda-again".parse().unwrap(),
        email: Some(email.to_uppercase()),
        ..who.clone()
    };
    s.put_user(&back, now).await.unwrap();
    let listed = s.suppressions(None, 100).await.unwrap();
    assert_eq!(listed.len(), 1, "listed again by address: {listed:?}");
    assert_eq!(listed[0].reason, SuppressionReason::Complaint);
    s.put_schedule(&schedule("again", &["zelda-again"]), now)
        .await
        .unwrap();
    let ctx = s
        .delivery_context(&["again".parse().unwrap()])
        .await
        .unwrap();
    assert!(ctx.suppressed.contains_key(&address), "the daemon sees it");

    // Shared with another user: the entry is not the erased person's alone.
    let twin = User {
        id: "zelda-twin".parse().unwrap(),
        ..back.clone()
    };
    s.put_user(&twin, now).await.unwrap();
    let shared = s
        .erase_user(&back.id, &toki_model::erasure::pseudonym(), Utc::now())
        .await
        .unwrap();
    assert_eq!(shared.suppressions, 0);
    assert_eq!(s.suppressions(None, 100).await.unwrap().len(), 1);

    // Lifted by hand after the twin is erased too: mailed again.
    s.erase_user(&twin.id, &toki_model::erasure::pseudonym(), Utc::now())
        .await
        .unwrap();
    assert!(s.suppression(&address).await.unwrap().is_some());
    assert!(s.unsuppress(&address).await.unwrap());
    assert!(s.suppression(&address).await.unwrap().is_none());
}

#[macro_export]
macro_rules! erasure_conformance {
    ($(#[$meta:meta])* $factory:path) => {
        mod erasure_conformance {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn erasure_leaves_no_trace() {
                common::erasure::erasure_leaves_no_trace($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn an_erased_id_starts_afresh() {
                common::erasure::an_erased_id_starts_afresh($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn a_send_in_flight_writes_nothing_back() {
                common::erasure::a_send_in_flight_writes_nothing_back($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn an_erased_complainer_stays_suppressed() {
                common::erasure::an_erased_complainer_stays_suppressed($factory().await).await
            }
        }
    };
}
