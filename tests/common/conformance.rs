//! The conformance suite: one set of checks every implementation of a port must
//! pass. Each `*_conformance!` macro expands into `#[tokio::test]` functions
//! in the invoking test file, built on a factory that returns a fresh instance.
//! Attributes before the factory go on every generated test:
//! `store_conformance!(#[ignore = "needs Postgres: scripts/test.sh runs it"] store);`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use chrono::{Duration as ChronoDuration, Utc};
use toki_model::index::{Partition, Window};
use toki_model::*;
use toki_ports::message;
use toki_ports::{
    DelayQueue, IndexWrite, OutgoingMessage, ReminderIndex, TenantDirectory, TenantStore,
};
use toki_ports::{StoreError, StoreResult};

pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}{:04x}",
        Utc::now().timestamp_micros() % 1_000_000_000,
        rand_u16()
    )
}

fn rand_u16() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(Utc::now().timestamp_nanos_opt().unwrap_or(0) as u64);
    h.finish() as u16
}

pub fn reminder(tenant: &str, schedule: &str, due_in: ChronoDuration, version: i64) -> Reminder {
    let due = from_millis("due", (Utc::now() + due_in).timestamp_millis()).unwrap();
    let occurrence = Occurrence(due + ChronoDuration::minutes(5));
    Reminder {
        key: ReminderKey {
            tenant: tenant.parse().unwrap(),
            schedule: schedule.parse().unwrap(),
            occurrence,
            minutes_before: 5,
        },
        due_at: Reminder::due_for(occurrence, 5),
        version,
        channels: ChannelSet::new("channels", &[Channel::Mail, Channel::Slack]).unwrap(),
    }
}

fn outgoing(body: &str, delay: Duration) -> OutgoingMessage {
    let r = reminder("acme", "s1", ChronoDuration::minutes(1), 1);
    OutgoingMessage {
        id: body.to_string(),
        body: body.to_string(),
        attributes: message::encode(&r),
        delay,
        group: Some("acme".into()),
    }
}

// ---------------------------------------------------------------- queue

pub mod queue {
    use super::*;

    pub async fn delay_is_honoured(q: Arc<dyn DelayQueue>) {
        q.send_batch(&[outgoing("d", Duration::from_secs(2))])
            .await
            .unwrap();
        let started = StdInstant::now();
        let early = q
            .receive(10, Duration::ZERO, Duration::from_secs(30))
            .await
            .unwrap();
        assert!(early.is_empty(), "a delayed message was visible at once");
        let got = q
            .receive(10, Duration::from_secs(8), Duration::from_secs(30))
            .await
            .unwrap();
        let elapsed = started.elapsed();
        assert_eq!(got.len(), 1, "the delayed message never arrived");
        assert!(
            elapsed >= Duration::from_millis(1_800),
            "arrived after {elapsed:?}, before its 2 s delay"
        );
        assert!(
            elapsed <= Duration::from_secs(5),
            "arrived after {elapsed:?}, long after its 2 s delay"
        );
    }

    /// The depth by state: delayed, visible, in flight (what `/metrics`
    /// shows of the queue). SQS's figures are approximate but settle at once
    /// on the emulators.
    pub async fn depth_by_state(q: Arc<dyn DelayQueue>) {
        q.send_batch(&[
            outgoing("later", Duration::from_secs(600)),
            outgoing("now-1", Duration::ZERO),
            outgoing("now-2", Duration::ZERO),
        ])
        .await
        .unwrap();
        let d = q.depth().await.unwrap();
        assert_eq!(
            (d.messages, d.delayed, d.visible, d.in_flight),
            (3, 1, 2, 0),
            "{d:?}"
        );
        let got = q
            .receive(1, Duration::from_secs(5), Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        let d = q.depth().await.unwrap();
        assert_eq!(
            (d.messages, d.delayed, d.visible, d.in_flight),
            (3, 1, 1, 1),
            "{d:?}"
        );
        assert_eq!(d.dead_letters, 0);
    }

    pub async fn long_poll_wakes_on_time(q: Arc<dyn DelayQueue>) {
        let q2 = q.clone();
        let started = StdInstant::now();
        let waiter = tokio::spawn(async move {
            q2.receive(10, Duration::from_secs(15), Duration::from_secs(30))
                .await
                .unwrap()
        });
        // Whether the receiver is already waiting or starts after the send, it
        // must come back soon after the message becomes visible (~1 s).
        q.send_batch(&[outgoing("w", Duration::from_secs(1))])
            .await
            .unwrap();
        let got = waiter.await.unwrap();
        let elapsed = started.elapsed();
        assert_eq!(got.len(), 1);
        assert!(
            elapsed < Duration::from_secs(4),
            "long poll returned after {elapsed:?}; the message was visible after ~1.2 s"
        );
    }

    pub async fn visibility_timeout_redelivers(q: Arc<dyn DelayQueue>) {
        q.send_batch(&[outgoing("v", Duration::ZERO)])
            .await
            .unwrap();
        let first = q
            .receive(1, Duration::from_secs(5), Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].receive_count, 1);
        let hidden = q
            .receive(1, Duration::ZERO, Duration::from_secs(1))
            .await
            .unwrap();
        assert!(hidden.is_empty(), "a received message stayed visible");
        let again = q
            .receive(1, Duration::from_secs(6), Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(
            again.len(),
            1,
            "not redelivered after its visibility timeout"
        );
        assert_eq!(again[0].body, "v");
        assert_eq!(again[0].receive_count, 2);
    }

    /// Factory must build the queue with max_receives = 2.
    pub async fn dead_letter_after_max_receives(q: Arc<dyn DelayQueue>) {
        q.send_batch(&[outgoing("x", Duration::ZERO)])
            .await
            .unwrap();
        for n in 1..=2 {
            let got = q
                .receive(1, Duration::from_secs(6), Duration::from_secs(1))
                .await
                .unwrap();
            assert_eq!(got.len(), 1, "receive {n} got nothing");
            assert_eq!(got[0].receive_count, n);
        }
        // Long-poll past the second hold (1 s): the message is over its limit.
        let third = q
            .receive(1, Duration::from_secs(3), Duration::from_secs(1))
            .await
            .unwrap();
        assert!(third.is_empty(), "received a third time: {third:?}");
        let mut depth = q.depth().await.unwrap();
        for _ in 0..20 {
            if depth.dead_letters == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
            depth = q.depth().await.unwrap();
        }
        assert_eq!(depth.dead_letters, 1, "not dead-lettered: {depth:?}");
        assert_eq!(depth.messages, 0);
    }

    pub async fn batch_operations(q: Arc<dyn DelayQueue>) {
        let eleven: Vec<_> = (0..11)
            .map(|i| outgoing(&format!("m{i}"), Duration::ZERO))
            .collect();
        assert!(
            q.send_batch(&eleven).await.is_err(),
            "a batch of 11 was accepted"
        );
        assert!(q
            .send_batch(&eleven[..10])
            .await
            .unwrap()
            .refused
            .is_empty());
        let mut got = Vec::new();
        let deadline = StdInstant::now() + Duration::from_secs(10);
        while got.len() < 10 && StdInstant::now() < deadline {
            got.extend(
                q.receive(10, Duration::from_secs(2), Duration::from_secs(30))
                    .await
                    .unwrap(),
            );
        }
        let mut bodies: Vec<_> = got.iter().map(|m| m.body.clone()).collect();
        bodies.sort();
        let mut want: Vec<_> = (0..10).map(|i| format!("m{i}")).collect();
        want.sort();
        assert_eq!(bodies, want);
        let receipts: Vec<_> = got.iter().map(|m| m.receipt.clone()).collect();
        q.delete_batch(&receipts).await.unwrap();
        let after = q
            .receive(10, Duration::from_secs(1), Duration::from_secs(30))
            .await
            .unwrap();
        assert!(after.is_empty(), "deleted messages came back: {after:?}");
        assert_eq!(q.depth().await.unwrap().messages, 0);
    }

    pub async fn change_visibility_makes_visible_again(q: Arc<dyn DelayQueue>) {
        q.send_batch(&[outgoing("c", Duration::ZERO)])
            .await
            .unwrap();
        let got = q
            .receive(1, Duration::from_secs(5), Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        q.change_visibility(&got[0].receipt, Duration::ZERO)
            .await
            .unwrap();
        let again = q
            .receive(1, Duration::from_secs(3), Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(
            again.len(),
            1,
            "change_visibility(0) did not make it visible"
        );
        q.change_visibility(&again[0].receipt, Duration::from_secs(60))
            .await
            .unwrap();
        let hidden = q
            .receive(1, Duration::from_secs(1), Duration::from_secs(60))
            .await
            .unwrap();
        assert!(hidden.is_empty());
    }

    /// Held messages extended past their first visibility stay hidden; a
    /// receipt already acknowledged is passed over.
    pub async fn extend_visibility_keeps_held_messages_hidden(q: Arc<dyn DelayQueue>) {
        q.send_batch(&[
            outgoing("e1", Duration::ZERO),
            outgoing("e2", Duration::ZERO),
        ])
        .await
        .unwrap();
        let mut got = Vec::new();
        while got.len() < 2 {
            got.extend(
                q.receive(2, Duration::from_secs(5), Duration::from_secs(1))
                    .await
                    .unwrap(),
            );
        }
        q.send_batch(&[outgoing("e3", Duration::ZERO)])
            .await
            .unwrap();
        let acked = q
            .receive(1, Duration::from_secs(5), Duration::from_secs(60))
            .await
            .unwrap();
        q.delete_batch(&[acked[0].receipt.clone()]).await.unwrap();
        let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
        let with_stale: Vec<String> = receipts
            .iter()
            .cloned()
            .chain([acked[0].receipt.clone()])
            .collect();
        q.extend_visibility(&with_stale, Duration::from_secs(60))
            .await
            .unwrap();
        // Past the first visibility (1 s, SQS rounds up): still hidden.
        let hidden = q
            .receive(2, Duration::from_secs(3), Duration::from_secs(60))
            .await
            .unwrap();
        assert!(hidden.is_empty(), "extended messages came back: {hidden:?}");
    }

    /// Factory must build the queue with max_receives = 1.
    pub async fn dead_letters_are_listed_and_moved_back(q: Arc<dyn DelayQueue>) {
        q.send_batch(&[outgoing("dl", Duration::ZERO)])
            .await
            .unwrap();
        let first = q
            .receive(1, Duration::from_secs(5), Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(first.len(), 1);
        // Received once, the limit: the next receive moves it aside.
        let again = q
            .receive(1, Duration::from_secs(3), Duration::from_secs(1))
            .await
            .unwrap();
        assert!(again.is_empty(), "received past its limit: {again:?}");
        let mut listed = Vec::new();
        for _ in 0..20 {
            listed = q.dead_letters(10, Duration::from_secs(30)).await.unwrap();
            if !listed.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert_eq!(listed.len(), 1, "the dead letter is listed");
        assert_eq!(listed[0].body, "dl");
        assert!(message::decode(&listed[0].attributes).is_ok());
        // A dry run leaves it where it is, for the next look.
        q.release_dead_letters(&listed).await.unwrap();
        let listed = q.dead_letters(10, Duration::from_secs(30)).await.unwrap();
        assert_eq!(listed.len(), 1, "released, not lost");
        assert_eq!(q.redrive(&listed).await.unwrap(), 1);
        let back = q
            .receive(1, Duration::from_secs(5), Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(back.len(), 1, "back in the queue");
        assert_eq!((back[0].body.as_str(), back[0].receive_count), ("dl", 1));
        assert!(q
            .dead_letters(10, Duration::from_secs(1))
            .await
            .unwrap()
            .is_empty());
    }

    /// The daemon's verdict: at once to the dead-letter queue, with why;
    /// the reason goes when it is redriven.
    pub async fn dead_letter_moves_a_message_with_its_reason(q: Arc<dyn DelayQueue>) {
        q.send_batch(&[outgoing("poison", Duration::ZERO)])
            .await
            .unwrap();
        let got = q
            .receive(1, Duration::from_secs(5), Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        q.dead_letter(&got[0], "3 failed attempts, the last on slack: HTTP 503")
            .await
            .unwrap();
        let depth = q.depth().await.unwrap();
        assert_eq!((depth.messages, depth.dead_letters), (0, 1), "{depth:?}");
        let letters = q.dead_letters(10, Duration::from_secs(30)).await.unwrap();
        assert_eq!(letters.len(), 1);
        assert_eq!(letters[0].body, "poison");
        assert_eq!(
            letters[0].attributes[toki_ports::DEAD_LETTER_REASON],
            "3 failed attempts, the last on slack: HTTP 503"
        );
        assert_eq!(q.redrive(&letters).await.unwrap(), 1);
        let back = q
            .receive(1, Duration::from_secs(5), Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(back.len(), 1);
        assert!(!back[0]
            .attributes
            .contains_key(toki_ports::DEAD_LETTER_REASON));
        q.delete_batch(&[back[0].receipt.clone()]).await.unwrap();
    }

    /// Factory must build the queue with max_receives = 2. A message that
    /// keeps waiting is renewed before the queue's own limit: the copy has
    /// the same body and attributes, says why, and starts its count over;
    /// the original is gone.
    pub async fn renew_starts_the_receive_count_over(q: Arc<dyn DelayQueue>) {
        assert_eq!(q.receive_limit().await.unwrap(), Some(2));
        let sent = outgoing("waiting", Duration::ZERO);
        q.send_batch(std::slice::from_ref(&sent)).await.unwrap();
        let hold = Duration::from_secs(30);
        let first = q.receive(1, Duration::from_secs(5), hold).await.unwrap();
        assert_eq!(first.len(), 1);
        q.change_visibility(&first[0].receipt, Duration::ZERO)
            .await
            .unwrap();
        let second = q.receive(1, Duration::from_secs(5), hold).await.unwrap();
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].receive_count, 2, "one receive from the limit");
        q.renew(
            &second[0],
            Duration::ZERO,
            "throttled: the service asked for 1000 ms",
        )
        .await
        .unwrap();
        let renewed = q.receive(10, Duration::from_secs(5), hold).await.unwrap();
        assert_eq!(renewed.len(), 1, "one copy, not two: {renewed:?}");
        assert_eq!(renewed[0].receive_count, 1, "the count starts over");
        assert_eq!(renewed[0].body, "waiting");
        assert_eq!(
            renewed[0].attributes[toki_ports::RENEWED_BECAUSE],
            "throttled: the service asked for 1000 ms"
        );
        for (k, v) in &sent.attributes {
            assert_eq!(renewed[0].attributes.get(k), Some(v), "attribute {k}");
        }
        let depth = q.depth().await.unwrap();
        assert_eq!((depth.messages, depth.dead_letters), (1, 0), "{depth:?}");
        q.delete_batch(&[renewed[0].receipt.clone()]).await.unwrap();
    }

    pub async fn batches_respect_the_byte_limits(q: Arc<dyn DelayQueue>) {
        // Five messages of ~250 KB: too heavy for one 1 MiB batch.
        let big: Vec<OutgoingMessage> = (0..5)
            .map(|i| {
                let mut m = outgoing(&format!("big{i}"), Duration::ZERO);
                m.body = format!("{i}{}", "x".repeat(250_000));
                m
            })
            .collect();
        let batches = toki_ports::batches(big);
        assert!(
            batches.len() >= 2,
            "split by bytes: {} batches",
            batches.len()
        );
        for b in &batches {
            let sent = q.send_batch(b).await.unwrap();
            assert!(sent.refused.is_empty(), "{sent:?}");
        }
        let mut got = Vec::new();
        let deadline = StdInstant::now() + Duration::from_secs(15);
        while got.len() < 5 && StdInstant::now() < deadline {
            got.extend(
                q.receive(10, Duration::from_secs(2), Duration::from_secs(30))
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(got.len(), 5);
        assert!(got.iter().all(|m| m.body.len() == 250_001));
        // One message over 256 KiB is refused before anything is sent, naming it.
        let mut huge = outgoing("huge", Duration::ZERO);
        huge.body = "x".repeat(300_000);
        match q.send_batch(&[outgoing("ok", Duration::ZERO), huge]).await {
            Err(StoreError::Invalid(v)) => assert_eq!(v.field, "messages[1]"),
            other => panic!("expected the oversize message refused: {other:?}"),
        }
    }

    pub async fn attributes_round_trip(q: Arc<dyn DelayQueue>) {
        let r = reminder("globex", "weekly-sync", ChronoDuration::minutes(3), 7);
        let m = OutgoingMessage {
            id: "0".into(),
            body: r.key.to_string(),
            attributes: message::encode(&r),
            delay: Duration::ZERO,
            group: Some("globex".into()),
        };
        q.send_batch(&[m]).await.unwrap();
        let got = q
            .receive(1, Duration::from_secs(5), Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(message::decode(&got[0].attributes).unwrap(), r);
    }
}

#[macro_export]
macro_rules! queue_conformance {
    ($(#[$meta:meta])* $factory:path) => {
        mod queue_conformance {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn delay_is_honoured() {
                common::conformance::queue::delay_is_honoured($factory(5).await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn depth_by_state() {
                common::conformance::queue::depth_by_state($factory(5).await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn long_poll_wakes_on_time() {
                common::conformance::queue::long_poll_wakes_on_time($factory(5).await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn visibility_timeout_redelivers() {
                common::conformance::queue::visibility_timeout_redelivers($factory(5).await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn dead_letter_after_max_receives() {
                common::conformance::queue::dead_letter_after_max_receives($factory(2).await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn renew_starts_the_receive_count_over() {
                common::conformance::queue::renew_starts_the_receive_count_over($factory(2).await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn batch_operations() {
                common::conformance::queue::batch_operations($factory(5).await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn change_visibility_makes_visible_again() {
                common::conformance::queue::change_visibility_makes_visible_again($factory(5).await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn extend_visibility_keeps_held_messages_hidden() {
                common::conformance::queue::extend_visibility_keeps_held_messages_hidden(
                    $factory(5).await,
                )
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn dead_letters_are_listed_and_moved_back() {
                common::conformance::queue::dead_letters_are_listed_and_moved_back(
                    $factory(1).await,
                )
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn dead_letter_moves_a_message_with_its_reason() {
                common::conformance::queue::dead_letter_moves_a_message_with_its_reason(
                    $factory(5).await,
                )
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn batches_respect_the_byte_limits() {
                common::conformance::queue::batches_respect_the_byte_limits($factory(5).await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn attributes_round_trip() {
                common::conformance::queue::attributes_round_trip($factory(5).await).await
            }
        }
    };
}

// ---------------------------------------------------------------- index

pub mod index {
    use super::*;
    use toki_ports::TenantSchedule;

    async fn all_in_window(ix: &dyn ReminderIndex, shards: u16) -> Vec<IndexedReminder> {
        let w = Window::at(
            Utc::now(),
            Duration::from_secs(300),
            Duration::from_secs(900),
        );
        let mut out = Vec::new();
        for p in w.partitions(shards) {
            out.extend(ix.query_partition(&p, w.from, w.to).await.unwrap());
        }
        out
    }

    /// Factory shards: 4.
    pub async fn rows_spread_over_shards_and_are_found(ix: Arc<dyn ReminderIndex>) {
        let tenant = unique("t");
        let rows: Vec<_> = (0..12)
            .map(|i| reminder(&tenant, &format!("s{i}"), ChronoDuration::minutes(2), 1))
            .collect();
        for r in &rows {
            ix.replace_schedule(
                &r.key.tenant,
                &r.key.schedule,
                r.version,
                std::slice::from_ref(r),
            )
            .await
            .unwrap();
        }
        let shards: std::collections::BTreeSet<_> =
            rows.iter().map(|r| Partition::of(r, 4).shard).collect();
        assert!(shards.len() > 1, "12 reminders all hashed to one shard");
        let found: Vec<_> = all_in_window(ix.as_ref(), 4)
            .await
            .into_iter()
            .filter(|r| r.reminder.key.tenant.as_str() == tenant)
            .collect();
        assert_eq!(found.len(), 12);
        assert!(found.iter().all(|r| r.status == IndexStatus::Pending));
        let mut want = rows.clone();
        want.sort_by(|a, b| a.key.cmp(&b.key));
        let mut got: Vec<_> = found.into_iter().map(|r| r.reminder).collect();
        got.sort_by(|a, b| a.key.cmp(&b.key));
        assert_eq!(got, want, "rows did not round-trip");
    }

    pub async fn query_respects_the_due_range(ix: Arc<dyn ReminderIndex>) {
        let tenant = unique("t");
        let r = reminder(&tenant, "s", ChronoDuration::minutes(3), 1);
        ix.replace_schedule(
            &r.key.tenant,
            &r.key.schedule,
            r.version,
            std::slice::from_ref(&r),
        )
        .await
        .unwrap();
        let p = Partition::of(&r, 4);
        let before = ix
            .query_partition(
                &p,
                r.due_at.0 - ChronoDuration::minutes(10),
                r.due_at.0 - ChronoDuration::seconds(1),
            )
            .await
            .unwrap();
        assert!(before.iter().all(|x| x.reminder.key != r.key));
        let inside = ix
            .query_partition(
                &p,
                r.due_at.0 - ChronoDuration::seconds(1),
                r.due_at.0 + ChronoDuration::seconds(1),
            )
            .await
            .unwrap();
        assert!(inside.iter().any(|x| x.reminder.key == r.key));
    }

    pub async fn claim_is_conditional(ix: Arc<dyn ReminderIndex>) {
        let tenant = unique("t");
        let r = reminder(&tenant, "s", ChronoDuration::minutes(2), 1);
        ix.replace_schedule(
            &r.key.tenant,
            &r.key.schedule,
            r.version,
            std::slice::from_ref(&r),
        )
        .await
        .unwrap();
        let now = Utc::now();
        let lease = now + ChronoDuration::seconds(60);
        assert!(
            ix.claim(&r, now, lease).await.unwrap(),
            "first claim failed"
        );
        assert!(
            !ix.claim(&r, now, lease).await.unwrap(),
            "claimed twice within the lease"
        );
        // After the lease ends another run may take it over.
        let later = now + ChronoDuration::seconds(61);
        assert!(ix
            .claim(&r, later, later + ChronoDuration::seconds(60))
            .await
            .unwrap());
        ix.mark_enqueued(&r).await.unwrap();
        let much_later = now + ChronoDuration::seconds(600);
        assert!(
            !ix.claim(&r, much_later, much_later).await.unwrap(),
            "an enqueued row was claimed"
        );
        let p = Partition::of(&r, 4);
        let rows = ix
            .query_partition(&p, r.due_at.0, r.due_at.0)
            .await
            .unwrap();
        assert_eq!(
            rows.iter()
                .find(|x| x.reminder.key == r.key)
                .unwrap()
                .status,
            IndexStatus::Enqueued
        );
    }

    pub async fn release_returns_to_pending(ix: Arc<dyn ReminderIndex>) {
        let tenant = unique("t");
        let r = reminder(&tenant, "s", ChronoDuration::minutes(2), 1);
        ix.replace_schedule(
            &r.key.tenant,
            &r.key.schedule,
            r.version,
            std::slice::from_ref(&r),
        )
        .await
        .unwrap();
        let now = Utc::now();
        assert!(ix
            .claim(&r, now, now + ChronoDuration::seconds(60))
            .await
            .unwrap());
        ix.release(&r).await.unwrap();
        assert!(
            ix.claim(&r, now, now + ChronoDuration::seconds(60))
                .await
                .unwrap(),
            "released row not claimable"
        );
    }

    pub async fn replace_removes_old_rows_and_versions(ix: Arc<dyn ReminderIndex>) {
        let tenant = unique("t");
        let old = reminder(&tenant, "s", ChronoDuration::minutes(2), 1);
        assert!(ix
            .replace_schedule(
                &old.key.tenant,
                &old.key.schedule,
                1,
                std::slice::from_ref(&old)
            )
            .await
            .unwrap());
        let new = reminder(&tenant, "s", ChronoDuration::minutes(7), 2);
        assert!(ix
            .replace_schedule(
                &new.key.tenant,
                &new.key.schedule,
                2,
                std::slice::from_ref(&new)
            )
            .await
            .unwrap());
        let mine: Vec<_> = all_in_window(ix.as_ref(), 4)
            .await
            .into_iter()
            .filter(|r| r.reminder.key.tenant.as_str() == tenant)
            .collect();
        assert_eq!(mine.len(), 1, "old rows survived a replace: {mine:?}");
        assert_eq!(mine[0].reminder, new);
        let now = Utc::now();
        assert!(
            !ix.claim(&old, now, now).await.unwrap(),
            "the old version was claimable"
        );
        // An older version arriving late (a slow write, a repair) changes nothing.
        assert!(!ix
            .replace_schedule(
                &old.key.tenant,
                &old.key.schedule,
                1,
                std::slice::from_ref(&old)
            )
            .await
            .unwrap());
        let mine: Vec<_> = all_in_window(ix.as_ref(), 4)
            .await
            .into_iter()
            .filter(|r| r.reminder.key.tenant.as_str() == tenant)
            .collect();
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].reminder, new, "the newer version's rows stayed");
        // Deleting (version 3): replace with nothing.
        assert!(ix
            .replace_schedule(&new.key.tenant, &new.key.schedule, 3, &[])
            .await
            .unwrap());
        let left = all_in_window(ix.as_ref(), 4)
            .await
            .into_iter()
            .filter(|r| r.reminder.key.tenant.as_str() == tenant)
            .count();
        assert_eq!(left, 0);
    }

    /// The versions the index was last mirrored at, for several tenants in
    /// one call (more than a DynamoDB batch): a newer write and a delete
    /// show, an older write late does not, and what was never mirrored is
    /// not in the answer.
    pub async fn mirrored_versions_answer_for_every_tenant(ix: Arc<dyn ReminderIndex>) {
        let (a, b) = (unique("a"), unique("b"));
        let key = |t: &str, s: &str| TenantSchedule {
            tenant: t.parse().unwrap(),
            schedule: s.parse().unwrap(),
        };
        let mut asked = Vec::new();
        for i in 0..120 {
            let r = reminder(&a, &format!("s{i}"), ChronoDuration::minutes(2), 1);
            assert!(ix
                .replace_schedule(&r.key.tenant, &r.key.schedule, 1, std::slice::from_ref(&r))
                .await
                .unwrap());
            asked.push(key(&a, &format!("s{i}")));
        }
        let moved = reminder(&b, "m", ChronoDuration::minutes(2), 2);
        ix.replace_schedule(
            &moved.key.tenant,
            &moved.key.schedule,
            2,
            std::slice::from_ref(&moved),
        )
        .await
        .unwrap();
        // Late: an older version's write changes nothing.
        let old = reminder(&b, "m", ChronoDuration::minutes(3), 1);
        ix.replace_schedule(
            &old.key.tenant,
            &old.key.schedule,
            1,
            std::slice::from_ref(&old),
        )
        .await
        .unwrap();
        ix.replace_schedule(&b.parse().unwrap(), &"gone".parse().unwrap(), 5, &[])
            .await
            .unwrap();
        asked.extend([
            key(&b, "m"),
            key(&b, "gone"),
            key(&b, "never"),
            key(&a, "never"),
        ]);
        let held = ix.mirrored_versions(&asked).await.unwrap();
        assert_eq!(held.len(), 122, "{held:?}");
        assert!((0..120).all(|i| held.get(&key(&a, &format!("s{i}"))) == Some(&1)));
        assert_eq!(held.get(&key(&b, "m")), Some(&2));
        assert_eq!(held.get(&key(&b, "gone")), Some(&5));
        assert!(ix.mirrored_versions(&[]).await.unwrap().is_empty());
    }

    /// A series' horizon extended (the repair pass): the same version again,
    /// without the rows now behind it and with new ones ahead. The rows
    /// already there stay as they are (an enqueued one is not claimable
    /// again), the new ones are added.
    pub async fn extending_at_the_same_version_adds_and_keeps(ix: Arc<dyn ReminderIndex>) {
        let tenant = unique("t");
        let first = reminder(&tenant, "s", ChronoDuration::minutes(2), 4);
        let mut second = reminder(&tenant, "s", ChronoDuration::minutes(6), 4);
        second.key.occurrence = Occurrence(second.key.occurrence.0 + ChronoDuration::seconds(1));
        second.due_at = Reminder::due_for(second.key.occurrence, 5);
        let third = reminder(&tenant, "s", ChronoDuration::minutes(10), 4);
        assert!(ix
            .replace_schedule(
                &first.key.tenant,
                &first.key.schedule,
                4,
                &[first.clone(), second.clone()]
            )
            .await
            .unwrap());
        let now = Utc::now();
        assert!(ix
            .claim(&second, now, now + ChronoDuration::minutes(3))
            .await
            .unwrap());
        ix.mark_enqueued(&second).await.unwrap();
        // The extension: `first` is behind (not in the rows), `third` is new.
        assert!(ix
            .replace_schedule(
                &first.key.tenant,
                &first.key.schedule,
                4,
                &[second.clone(), third.clone()]
            )
            .await
            .unwrap());
        let mut mine: Vec<_> = all_in_window(ix.as_ref(), 4)
            .await
            .into_iter()
            .filter(|r| r.reminder.key.tenant.as_str() == tenant)
            .collect();
        mine.sort_by_key(|r| r.reminder.due_at);
        let got: Vec<_> = mine
            .iter()
            .map(|r| (r.reminder.clone(), r.status))
            .collect();
        assert_eq!(
            got,
            vec![
                (first, IndexStatus::Pending),
                (second.clone(), IndexStatus::Enqueued),
                (third, IndexStatus::Pending),
            ]
        );
        assert!(
            !ix.claim(&second, now, now).await.unwrap(),
            "an enqueued row became claimable again"
        );
    }

    /// Writes of one schedule racing each other: whatever the interleaving,
    /// the index ends with the newest version's rows.
    pub async fn racing_replaces_leave_the_newest_version(ix: Arc<dyn ReminderIndex>) {
        let tenant = unique("t");
        let versions: Vec<Reminder> = (1..=12)
            .map(|v| reminder(&tenant, "s", ChronoDuration::minutes(2 + v), v))
            .collect();
        let writes = versions.iter().rev().map(|r| {
            let ix = ix.clone();
            let r = r.clone();
            async move {
                ix.replace_schedule(
                    &r.key.tenant,
                    &r.key.schedule,
                    r.version,
                    std::slice::from_ref(&r),
                )
                .await
                .unwrap()
            }
        });
        futures::future::join_all(writes).await;
        let mine: Vec<_> = all_in_window(ix.as_ref(), 4)
            .await
            .into_iter()
            .filter(|r| r.reminder.key.tenant.as_str() == tenant)
            .collect();
        assert_eq!(mine.len(), 1, "{mine:?}");
        assert_eq!(mine[0].reminder.version, 12);
    }

    /// The batch forms: several schedules in one call (a newer version
    /// already there wins, each result says so), claims a result per row,
    /// marks for many rows.
    pub async fn batches_write_claim_and_mark_per_row(ix: Arc<dyn ReminderIndex>) {
        let tenant = unique("t");
        let a = reminder(&tenant, "a", ChronoDuration::minutes(2), 1);
        let b_new = reminder(&tenant, "b", ChronoDuration::minutes(3), 5);
        let b_old = reminder(&tenant, "b", ChronoDuration::minutes(4), 4);
        let t = a.key.tenant.clone();
        assert!(ix
            .replace_schedule(&t, &b_new.key.schedule, 5, std::slice::from_ref(&b_new))
            .await
            .unwrap());
        let c = reminder(&tenant, "c", ChronoDuration::minutes(2), 1);
        let writes = [
            IndexWrite {
                schedule: &a.key.schedule,
                version: 1,
                rows: std::slice::from_ref(&a),
            },
            IndexWrite {
                schedule: &b_old.key.schedule,
                version: 4,
                rows: std::slice::from_ref(&b_old),
            },
            IndexWrite {
                schedule: &c.key.schedule,
                version: 1,
                rows: std::slice::from_ref(&c),
            },
        ];
        assert_eq!(
            ix.replace_schedules(&t, &writes).await.unwrap(),
            vec![true, false, true],
            "the older write of b must lose to the newer one already there"
        );
        let found: Vec<_> = all_in_window(ix.as_ref(), 4)
            .await
            .into_iter()
            .filter(|x| x.reminder.key.tenant == t)
            .map(|x| (x.reminder.key.schedule.to_string(), x.reminder.version))
            .collect();
        let mut found = found;
        found.sort();
        assert_eq!(
            found,
            vec![("a".into(), 1), ("b".into(), 5), ("c".into(), 1)],
            "b's older rows must not be written"
        );

        let now = Utc::now();
        let lease = now + ChronoDuration::seconds(60);
        assert!(ix.claim(&c, now, lease).await.unwrap());
        let claims: Vec<bool> = ix
            .claim_all(
                &[a.clone(), b_new.clone(), c.clone(), b_old.clone()],
                now,
                lease,
            )
            .await
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(
            claims,
            vec![true, true, false, false],
            "c is claimed already; b's old version is not in the index"
        );
        ix.mark_all_enqueued(&[&a, &b_new]).await.unwrap();
        let much_later = now + ChronoDuration::seconds(600);
        let again: Vec<bool> = ix
            .claim_all(
                &[a.clone(), b_new.clone(), c.clone()],
                much_later,
                much_later,
            )
            .await
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(
            again,
            vec![false, false, true],
            "enqueued rows stay enqueued; c's lease ran out"
        );
    }

    /// The repair cursor: none at first, then the last one set, and never
    /// a row the scanner's queries find.
    pub async fn repair_cursor_is_kept_and_replaced(ix: Arc<dyn ReminderIndex>) {
        assert_eq!(ix.repair_cursor().await.unwrap(), None);
        let first: TenantId = unique("t").parse().unwrap();
        let second: TenantId = unique("t").parse().unwrap();
        ix.set_repair_cursor(&first).await.unwrap();
        assert_eq!(ix.repair_cursor().await.unwrap(), Some(first));
        ix.set_repair_cursor(&second).await.unwrap();
        assert_eq!(ix.repair_cursor().await.unwrap(), Some(second));
        assert!(
            all_in_window(ix.as_ref(), 4).await.is_empty(),
            "the cursor is no index row"
        );
    }
}

#[macro_export]
macro_rules! index_conformance {
    ($(#[$meta:meta])* $factory:path) => {
        mod index_conformance {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn rows_spread_over_shards_and_are_found() {
                common::conformance::index::rows_spread_over_shards_and_are_found($factory(4).await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn query_respects_the_due_range() {
                common::conformance::index::query_respects_the_due_range($factory(4).await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn mirrored_versions_answer_for_every_tenant() {
                common::conformance::index::mirrored_versions_answer_for_every_tenant(
                    $factory(4).await,
                )
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn claim_is_conditional() {
                common::conformance::index::claim_is_conditional($factory(4).await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn release_returns_to_pending() {
                common::conformance::index::release_returns_to_pending($factory(4).await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn racing_replaces_leave_the_newest_version() {
                common::conformance::index::racing_replaces_leave_the_newest_version(
                    $factory(4).await,
                )
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn extending_at_the_same_version_adds_and_keeps() {
                common::conformance::index::extending_at_the_same_version_adds_and_keeps(
                    $factory(4).await,
                )
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn batches_write_claim_and_mark_per_row() {
                common::conformance::index::batches_write_claim_and_mark_per_row($factory(4).await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn replace_removes_old_rows_and_versions() {
                common::conformance::index::replace_removes_old_rows_and_versions($factory(4).await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn repair_cursor_is_kept_and_replaced() {
                common::conformance::index::repair_cursor_is_kept_and_replaced($factory(4).await)
                    .await
            }
        }
    };
}

// ---------------------------------------------------------------- directory

pub mod directory {
    use super::*;

    pub async fn put_get_list_update(d: Arc<dyn TenantDirectory>) {
        let id: TenantId = unique("t").parse().unwrap();
        assert_eq!(d.get(&id).await.unwrap(), None);
        let mut rec = TenantRecord {
            id: id.clone(),
            reminders_enabled: true,
            active: true,
            database: "/tmp/x.sqlite".into(),
            api_keys: vec![toki_model::api_key::ApiKey::new(
                "default".parse().unwrap(),
                "toki_k",
                "2026-11-23T08:00:00Z".parse().unwrap(),
                None,
            )],
            change_notices: Default::default(),
            limits: Default::default(),
            retention: Default::default(),
        };
        d.put(&rec).await.unwrap();
        assert_eq!(d.get(&id).await.unwrap(), Some(rec.clone()));
        rec.reminders_enabled = false;
        rec.change_notices = toki_model::change::ChangeNoticeSettings {
            enabled: true,
            min_delay_ms: 250,
            max_delay_ms: 2_000,
            hard_cap_ms: 60_000,
        };
        rec.limits.edit("slack=2.5/4,tenantdb=permits:3").unwrap();
        // A second key with an expiry, the first revoked: all kept.
        let expiry = "2027-01-01T00:00:00Z".parse().unwrap();
        let second =
            toki_model::api_key::ApiKey::new("ci".parse().unwrap(), "toki_c", expiry, Some(expiry));
        rec.add_key(second).unwrap();
        rec.revoke_key(&"default".parse().unwrap(), expiry).unwrap();
        d.put(&rec).await.unwrap();
        let back = d.get(&id).await.unwrap().unwrap();
        assert!(!back.reminders_enabled);
        assert_eq!(back.change_notices, rec.change_notices);
        assert_eq!(back.limits, rec.limits);
        assert_eq!(back.api_keys, rec.api_keys);
        assert!(d.list().await.unwrap().contains(&rec));
        // Limits taken off the contract are gone from the stored record.
        rec.limits = Default::default();
        d.put(&rec).await.unwrap();
        assert!(d.get(&id).await.unwrap().unwrap().limits.is_empty());
    }

    /// Many entries read at once (more than one DynamoDB batch): each
    /// found as written, the missing ones left out.
    pub async fn get_many(d: Arc<dyn TenantDirectory>) {
        let prefix = unique("gm");
        let written: Vec<TenantRecord> = (0..105)
            .map(|i| TenantRecord {
                id: format!("{prefix}-{i}").parse().unwrap(),
                reminders_enabled: i % 2 == 0,
                active: true,
                database: format!("/tmp/{i}.sqlite"),
                api_keys: Vec::new(),
                change_notices: Default::default(),
                limits: Default::default(),
                retention: Default::default(),
            })
            .collect();
        for rec in &written {
            d.put(rec).await.unwrap();
        }
        let missing: TenantId = format!("{prefix}-none").parse().unwrap();
        let asked: Vec<TenantId> = written
            .iter()
            .map(|r| r.id.clone())
            .chain([missing.clone()])
            .collect();
        let found = d.get_many(&asked).await.unwrap();
        assert_eq!(found.len(), written.len(), "every written one, no other");
        for rec in &written {
            assert_eq!(found.get(&rec.id), Some(rec));
        }
        assert!(!found.contains_key(&missing));
        assert!(d.get_many(&[]).await.unwrap().is_empty());
    }

    /// Pages by id: each after the last of the one before, none twice,
    /// none left out (other tests' tenants may share the directory).
    pub async fn pages_by_id(d: Arc<dyn TenantDirectory>) {
        let prefix = unique("pg");
        let mut mine: Vec<TenantId> = (0..7)
            .map(|i| format!("{prefix}-{i}").parse().unwrap())
            .collect();
        for id in mine.iter().rev() {
            let rec = TenantRecord {
                id: id.clone(),
                reminders_enabled: true,
                active: true,
                database: "/tmp/x.sqlite".into(),
                api_keys: Vec::new(),
                change_notices: Default::default(),
                limits: Default::default(),
                retention: Default::default(),
            };
            d.put(&rec).await.unwrap();
        }
        mine.sort();
        let mut seen = Vec::new();
        let mut after: Option<TenantId> = None;
        loop {
            let page = d.list_page(after.as_ref(), 3).await.unwrap();
            assert!(page.len() <= 3);
            let ids: Vec<TenantId> = page.iter().map(|r| r.id.clone()).collect();
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "by id: {ids:?}");
            if let (Some(a), Some(first)) = (&after, ids.first()) {
                assert!(first > a, "after the last");
            }
            seen.extend(ids.iter().filter(|i| mine.contains(i)).cloned());
            match ids.last() {
                Some(last) if page.len() == 3 => after = Some(last.clone()),
                _ => break,
            }
        }
        assert_eq!(seen, mine, "each once, in order");
    }
}

#[macro_export]
macro_rules! directory_conformance {
    ($(#[$meta:meta])* $factory:path) => {
        mod directory_conformance {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn put_get_list_update() {
                common::conformance::directory::put_get_list_update($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn pages_by_id() {
                common::conformance::directory::pages_by_id($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn get_many() {
                common::conformance::directory::get_many($factory().await).await
            }
        }
    };
}

// ---------------------------------------------------------------- tenant store

pub mod store {
    use super::*;
    use toki_model::input::{RuleInput, ScheduleInput, UserInput};

    pub fn user(id: &str) -> User {
        UserInput {
            name: format!("User {id}"),
            email: Some(format!("{id}@example.com")),
            slack_user_id: Some(format!("U{}", id.to_uppercase())),
            webhook_url: None,
            time_zone: "Asia/Tokyo".into(),
            locale: "en".into(),
            channels: Default::default(),
        }
        .validate(&id.parse().unwrap())
        .unwrap()
    }

    pub fn schedule(id: &str, participants: &[&str]) -> Schedule {
        schedule_input(id, participants)
            .validate(&id.parse().unwrap(), Utc::now())
            .unwrap()
    }

    pub fn schedule_input(_id: &str, participants: &[&str]) -> ScheduleInput {
        ScheduleInput {
            title: "Weekly sync".into(),
            body: "Room 4".into(),
            starts_at: (Utc::now() + ChronoDuration::hours(1)).to_rfc3339(),
            time_zone: "Europe/Paris".into(),
            participants: participants.iter().map(|p| p.to_string()).collect(),
            reminders: vec![
                RuleInput {
                    minutes_before: 5,
                    channels: vec!["mail".into(), "chat".into()],
                },
                RuleInput {
                    minutes_before: 15,
                    channels: vec!["slack".into()],
                },
            ],
            recurrence: None,
            dst: None,
        }
    }

    /// Change notices: a baseline kept before the first edit, frozen notices
    /// that advance it, a token frozen twice telling the same, a deletion
    /// frozen as a cancellation, a re-created schedule starting afresh.
    pub async fn change_baselines_and_notices(s: Arc<dyn TenantStore>) {
        use toki_model::change::NoticeEdge;
        for id in ["a", "b"] {
            s.put_user(&user(id), Utc::now()).await.unwrap();
        }
        let id: ScheduleId = "sync".parse().unwrap();
        let missing: ScheduleId = "nothing".parse().unwrap();
        let v1 = s
            .put_schedule(&schedule("sync", &["a"]), Utc::now())
            .await
            .unwrap();
        let now = Utc::now();
        assert_eq!(
            s.freeze_change_notice(&id, "t0", NoticeEdge::Leading, now)
                .await
                .unwrap(),
            None,
            "never edited: no baseline, nothing to tell"
        );
        let edits = s
            .keep_change_baselines(&[id.clone(), missing.clone()])
            .await
            .unwrap();
        assert_eq!(edits, [id.clone()].into_iter().collect());
        let mut renamed = schedule("sync", &["a", "b"]);
        renamed.title = "Renamed".into();
        let v2 = s.put_schedule(&renamed, Utc::now()).await.unwrap();
        // A second edit keeps the first baseline.
        s.keep_change_baselines(std::slice::from_ref(&id))
            .await
            .unwrap();
        let first = s
            .freeze_change_notice(&id, "t1", NoticeEdge::Leading, now)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first.before.as_ref().map(|b| b.version), Some(v1.version));
        assert_eq!(
            first.after.as_ref().map(|a| a.title.as_str()),
            Some("Renamed")
        );
        assert_eq!(first.after.as_ref().map(|a| a.version), Some(v2.version));
        assert_eq!(first.edge, NoticeEdge::Leading);
        let again = s
            .freeze_change_notice(&id, "t1", NoticeEdge::Leading, now)
            .await
            .unwrap();
        assert_eq!(
            again.as_ref(),
            Some(&first),
            "a token frozen twice tells the same"
        );
        let second = s
            .freeze_change_notice(&id, "t2", NoticeEdge::Trailing, now)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(second.before, first.after, "the baseline advanced");
        assert!(second.changes().is_empty(), "nothing new since");
        assert!(second.at > first.at, "instants never repeat per schedule");
        s.keep_change_baselines(std::slice::from_ref(&id))
            .await
            .unwrap();
        s.delete_schedule(&id, Utc::now()).await.unwrap();
        let cancelled = s
            .freeze_change_notice(&id, "t3", NoticeEdge::Trailing, Utc::now())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(cancelled.after, None);
        assert_eq!(cancelled.changes().len(), 2, "both participants hear of it");
        // Re-created, then edited: the baseline is the re-created state.
        s.put_schedule(&schedule("sync", &["b"]), Utc::now())
            .await
            .unwrap();
        assert!(s
            .keep_change_baselines(std::slice::from_ref(&id))
            .await
            .unwrap()
            .contains(&id));
        s.put_schedule(&renamed, Utc::now()).await.unwrap();
        let fresh = s
            .freeze_change_notice(&id, "t4", NoticeEdge::Leading, Utc::now())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(fresh.before.as_ref().map(|b| b.participants.len()), Some(1));
        let tokens: Vec<String> = s
            .change_notices(&id)
            .await
            .unwrap()
            .into_iter()
            .map(|n| n.token)
            .collect();
        assert_eq!(tokens, ["t1", "t2", "t3", "t4"]);
        // Turned off and on again: nothing edited meanwhile is told as news.
        assert_eq!(s.clear_change_baselines().await.unwrap(), 1);
        assert_eq!(
            s.freeze_change_notice(&id, "t5", NoticeEdge::Leading, Utc::now())
                .await
                .unwrap(),
            None
        );
    }

    /// Freezes of one schedule racing each other: the change is told by
    /// exactly one of them, never by none or two.
    pub async fn racing_freezes_tell_a_change_once(s: Arc<dyn TenantStore>) {
        use toki_model::change::NoticeEdge;
        s.put_user(&user("a"), Utc::now()).await.unwrap();
        let id: ScheduleId = "race".parse().unwrap();
        s.put_schedule(&schedule("race", &["a"]), Utc::now())
            .await
            .unwrap();
        s.keep_change_baselines(std::slice::from_ref(&id))
            .await
            .unwrap();
        let mut renamed = schedule("race", &["a"]);
        renamed.title = "Renamed".into();
        s.put_schedule(&renamed, Utc::now()).await.unwrap();
        let now = Utc::now();
        let freezes = (0..8).map(|i| {
            let (s, id) = (s.clone(), id.clone());
            tokio::spawn(async move {
                s.freeze_change_notice(&id, &format!("t{i}"), NoticeEdge::Trailing, now)
                    .await
                    .unwrap()
                    .unwrap()
            })
        });
        let notices: Vec<_> = futures::future::join_all(freezes)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let telling = notices.iter().filter(|n| !n.changes().is_empty()).count();
        assert_eq!(telling, 1, "{notices:#?}");
        let mut ats: Vec<_> = notices.iter().map(|n| n.at).collect();
        ats.sort();
        ats.dedup();
        assert_eq!(ats.len(), 8, "each its own instant");
    }

    pub async fn users_round_trip(s: Arc<dyn TenantStore>) {
        let u = user("alice");
        s.put_user(&u, Utc::now()).await.unwrap();
        assert_eq!(s.get_user(&u.id).await.unwrap(), Some(u.clone()));
        let mut u2 = u.clone();
        u2.email = None;
        s.put_user(&u2, Utc::now()).await.unwrap();
        assert_eq!(s.get_user(&u.id).await.unwrap(), Some(u2.clone()));
        // Many at once: those that exist.
        let nobody: UserId = "nobody".parse().unwrap();
        let found = s.get_users(&[u.id.clone(), nobody]).await.unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found.get(&u.id), Some(&u2));
        let counted = s.count(toki_model::quota::Counted::Users).await.unwrap();
        assert_eq!(counted, 1, "an update is not a new user");
        // Channels turned off are kept, and read with the participants.
        let mut u3 = u2.clone();
        u3.channels_off = [Channel::Slack, Channel::Mail].into();
        s.put_user(&u3, Utc::now()).await.unwrap();
        assert_eq!(s.get_user(&u.id).await.unwrap(), Some(u3.clone()));
        let sch = schedule("prefs", &["alice"]);
        s.put_schedule(&sch, Utc::now()).await.unwrap();
        let ctx = s
            .delivery_context(std::slice::from_ref(&sch.id))
            .await
            .unwrap();
        assert_eq!(ctx.users.get(&u.id).map(|u| u.as_ref()), Some(&u3));
    }

    /// The webhook settings and a user's endpoint: kept, rotated, and read
    /// with the delivery context.
    pub async fn webhook_settings_round_trip(s: Arc<dyn TenantStore>) {
        use toki_model::egress::EndpointUrl;
        use toki_model::webhook::WebhookSettings;
        assert_eq!(s.webhook_settings().await.unwrap(), None);
        let url = |u: &str| EndpointUrl::parse("url", u).unwrap();
        let mut w = WebhookSettings::new(
            Some(url("https://hooks.example.com/t?k=1")),
            &mut rand::thread_rng(),
        );
        s.put_webhook_settings(&w, Utc::now()).await.unwrap();
        assert_eq!(s.webhook_settings().await.unwrap(), Some(w.clone()));
        // Rotated (the instant to the millisecond, as stored).
        let now = toki_model::from_millis("now", Utc::now().timestamp_millis()).unwrap();
        w.rotate(&mut rand::thread_rng(), now);
        w.default_url = None;
        s.put_webhook_settings(&w, Utc::now()).await.unwrap();
        assert_eq!(s.webhook_settings().await.unwrap(), Some(w.clone()));
        let mut u = user("hooked");
        u.webhook_url = Some(url("https://own.example.com/hook"));
        s.put_user(&u, Utc::now()).await.unwrap();
        assert_eq!(s.get_user(&u.id).await.unwrap(), Some(u.clone()));
        let sch = schedule("hooks", &["hooked"]);
        s.put_schedule(&sch, Utc::now()).await.unwrap();
        let ctx = s
            .delivery_context(std::slice::from_ref(&sch.id))
            .await
            .unwrap();
        assert_eq!(ctx.users.get(&u.id).map(|u| u.as_ref()), Some(&u));
        assert_eq!(ctx.webhook.as_deref(), Some(&w));
        assert_eq!(ctx.schedules.len(), 1, "the settings are no schedule");
    }

    pub async fn templates_round_trip(s: Arc<dyn TenantStore>) {
        use toki_model::template::ReminderTemplate;
        assert!(s.templates().await.unwrap().is_empty());
        let slack = ReminderTemplate {
            channel: Channel::Slack,
            locale: "ja".into(),
            subject: None,
            text: "<!here> *{{ title }}* は {{ time }} から".into(),
            html: None,
        };
        let mail = ReminderTemplate {
            channel: Channel::Mail,
            locale: "en-gb".into(),
            subject: Some("[{{ minutes }}] {{ title }}".into()),
            text: "{{ title }}".into(),
            html: Some("<p>{{ title }}</p>".into()),
        };
        s.put_template(&slack, Utc::now()).await.unwrap();
        s.put_template(&mail, Utc::now()).await.unwrap();
        // Replaced in place, by channel and locale.
        let mail2 = ReminderTemplate {
            html: None,
            ..mail.clone()
        };
        s.put_template(&mail2, Utc::now()).await.unwrap();
        assert_eq!(
            s.templates().await.unwrap(),
            vec![mail2.clone(), slack.clone()]
        );
        let templates = toki_model::quota::Counted::Templates;
        assert_eq!(s.count(templates).await.unwrap(), 2);
        assert!(s.delete_template(Channel::Mail, "en-gb").await.unwrap());
        assert_eq!(s.count(templates).await.unwrap(), 1);
        assert!(!s.delete_template(Channel::Mail, "en-gb").await.unwrap());
        assert!(!s.delete_template(Channel::Chat, "ja").await.unwrap());
        assert_eq!(s.templates().await.unwrap(), vec![slack]);
    }

    pub async fn schedule_versions_never_repeat(s: Arc<dyn TenantStore>) {
        for id in ["a", "b", "c"] {
            s.put_user(&user(id), Utc::now()).await.unwrap();
        }
        let sch = schedule("sync", &["c", "a", "b"]);
        let v1 = s.put_schedule(&sch, Utc::now()).await.unwrap();
        assert_eq!(v1.version, 1);
        let got = s.get_schedule(&sch.id).await.unwrap().unwrap();
        assert_eq!(got.participants, sch.participants, "participant order lost");
        assert_eq!(got.rules.len(), 2);
        assert_eq!(
            got.starts_at.timestamp_millis(),
            sch.starts_at.timestamp_millis()
        );
        let v2 = s
            .put_schedule(&schedule("sync", &["a"]), Utc::now())
            .await
            .unwrap();
        assert_eq!(v2.version, 2);
        assert_eq!(
            s.get_schedule(&sch.id)
                .await
                .unwrap()
                .unwrap()
                .participants
                .len(),
            1
        );
        let schedules = toki_model::quota::Counted::Schedules;
        assert_eq!(
            s.count(schedules).await.unwrap(),
            1,
            "one schedule, two versions"
        );
        let deleted = s.delete_schedule(&sch.id, Utc::now()).await.unwrap();
        assert_eq!(deleted, Some(3));
        assert_eq!(s.count(schedules).await.unwrap(), 0);
        assert_eq!(s.get_schedule(&sch.id).await.unwrap(), None);
        assert_eq!(s.delete_schedule(&sch.id, Utc::now()).await.unwrap(), None);
        let v4 = s.put_schedule(&sch, Utc::now()).await.unwrap();
        assert_eq!(v4.version, 4, "a re-created schedule reused a version");
    }

    pub async fn unknown_participant_is_rejected_and_nothing_written(s: Arc<dyn TenantStore>) {
        s.put_user(&user("a"), Utc::now()).await.unwrap();
        let sch = schedule("x", &["a", "ghost"]);
        match s.put_schedule(&sch, Utc::now()).await {
            Err(StoreError::Invalid(v)) => {
                assert_eq!(v.field, "participants[1]");
                assert!(v.problem.contains("ghost"), "{v}");
            }
            other => panic!("expected a validation error, got {other:?}"),
        }
        assert_eq!(s.get_schedule(&sch.id).await.unwrap(), None);
        assert!(s.unmirrored(Utc::now()).await.unwrap().is_empty());
    }

    /// A batch writes what it can: an item with an unknown participant or
    /// an id seen earlier in the batch gets its error, the rest is written
    /// (a schedule written before gets its next version).
    pub async fn a_batch_writes_each_valid_schedule(s: Arc<dyn TenantStore>) {
        let now = Utc::now();
        s.put_user(&user("a"), now).await.unwrap();
        s.put_user(&user("b"), now).await.unwrap();
        let first = s.put_schedule(&schedule("old", &["a"]), now).await.unwrap();
        assert_eq!(first.version, 1);
        let batch = [
            schedule("new", &["a", "b"]),
            schedule("ghostly", &["a", "ghost"]),
            schedule("old", &["b"]),
            schedule("new", &["b"]),
        ];
        let results = s.put_schedules(&batch, now).await.unwrap();
        assert_eq!(results.len(), 4);
        let new = results[0].as_ref().expect("new is written");
        assert_eq!((new.version, new.participants.len()), (1, 2));
        let ghostly = results[1].as_ref().expect_err("a participant is unknown");
        assert_eq!(ghostly.field, "participants[1]");
        assert_eq!(results[2].as_ref().unwrap().version, 2);
        let twice = results[3].as_ref().expect_err("new appears twice");
        assert_eq!(twice.field, "id");
        assert_eq!(
            s.get_schedule(&"ghostly".parse().unwrap()).await.unwrap(),
            None
        );
        let stored_new = s
            .get_schedule(&"new".parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            stored_new.participants, batch[0].participants,
            "the first item wins"
        );
        let stored_old = s
            .get_schedule(&"old".parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((stored_old.version, stored_old.participants.len()), (2, 1));
        let mut unmirrored: Vec<String> = s
            .unmirrored(now)
            .await
            .unwrap()
            .into_iter()
            .map(|w| match w {
                toki_ports::MirrorWork::Upsert(s) => format!("{}@{}", s.id, s.version),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        unmirrored.sort();
        assert_eq!(unmirrored, vec!["new@1", "old@2"]);
        s.mark_all_mirrored(&[
            ("new".parse().unwrap(), 1, None),
            ("old".parse().unwrap(), 1, None),
        ])
        .await
        .unwrap();
        let left: Vec<String> = s
            .unmirrored(now)
            .await
            .unwrap()
            .into_iter()
            .map(|w| match w {
                toki_ports::MirrorWork::Upsert(s) => s.id.to_string(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            left,
            vec!["old"],
            "a mark for an older version leaves the newer write unmirrored"
        );
    }

    pub async fn mirror_journal(s: Arc<dyn TenantStore>) {
        s.put_user(&user("a"), Utc::now()).await.unwrap();
        let saved = s
            .put_schedule(&schedule("m", &["a"]), Utc::now())
            .await
            .unwrap();
        let work = s.unmirrored(Utc::now()).await.unwrap();
        assert_eq!(work.len(), 1);
        assert!(
            matches!(&work[0], toki_ports::MirrorWork::Upsert(x) if x.version == saved.version)
        );
        s.mark_mirrored(&saved.id, saved.version, None)
            .await
            .unwrap();
        assert!(s.unmirrored(Utc::now()).await.unwrap().is_empty());
        let v = s
            .delete_schedule(&saved.id, Utc::now())
            .await
            .unwrap()
            .unwrap();
        let work = s.unmirrored(Utc::now()).await.unwrap();
        assert_eq!(
            work,
            vec![toki_ports::MirrorWork::Delete {
                schedule: saved.id.clone(),
                version: v
            }]
        );
        // A stale mark (older version) does not hide newer work.
        s.mark_mirrored(&saved.id, saved.version, None)
            .await
            .unwrap();
        assert_eq!(s.unmirrored(Utc::now()).await.unwrap().len(), 1);
    }

    /// A series is stored as its rule (never expanded), with its exceptions;
    /// its mirror is done up to a horizon, and it comes back as work to
    /// extend once the horizon is short; a one-off never does.
    pub async fn series_round_trip_and_horizon(s: Arc<dyn TenantStore>) {
        s.put_user(&user("a"), Utc::now()).await.unwrap();
        let mut input = schedule_input("weekly", &["a"]);
        input.starts_at = "2026-11-23T09:00:00".into();
        input.recurrence = Some(toki_model::input::RecurrenceInput {
            rrule: "FREQ=WEEKLY;BYDAY=MO;COUNT=10".into(),
            exdates: vec!["2026-11-30T09:00:00".into()],
        });
        let mut series = input
            .validate(&"weekly".parse().unwrap(), Utc::now())
            .unwrap();
        let moved = toki_model::OccurrenceException {
            original: "2026-12-07T08:00:00Z".parse().unwrap(),
            cancelled: false,
            starts_at: Some("2026-12-07T10:00:00Z".parse().unwrap()),
            title: Some("Moved sync".into()),
            body: None,
        };
        series
            .recurrence
            .as_mut()
            .unwrap()
            .exceptions
            .push(moved.clone());
        let saved = s.put_schedule(&series, Utc::now()).await.unwrap();
        let loaded = s.get_schedule(&saved.id).await.unwrap().unwrap();
        assert_eq!(loaded.recurrence, series.recurrence);
        assert_eq!(loaded.starts_at, series.starts_at);
        let ctx = s
            .delivery_context(std::slice::from_ref(&saved.id))
            .await
            .unwrap();
        assert_eq!(ctx.schedules[&saved.id].exceptions, vec![moved]);
        assert_eq!(
            ctx.schedules[&saved.id]
                .texts_at("2026-12-07T10:00:00Z".parse().unwrap())
                .0,
            "Moved sync"
        );
        let one_off = s
            .put_schedule(&schedule("once", &["a"]), Utc::now())
            .await
            .unwrap();
        let horizon: toki_model::Instant = "2026-12-01T00:00:00Z".parse().unwrap();
        s.mark_mirrored(&saved.id, saved.version, Some(horizon))
            .await
            .unwrap();
        s.mark_mirrored(&one_off.id, one_off.version, None)
            .await
            .unwrap();
        // Horizon still long enough: nothing to do.
        assert!(s.unmirrored(horizon).await.unwrap().is_empty());
        // Short: the series (only) comes back, to be extended at its version.
        let work = s
            .unmirrored(horizon + ChronoDuration::seconds(1))
            .await
            .unwrap();
        assert_eq!(work.len(), 1, "{work:?}");
        assert!(
            matches!(&work[0], toki_ports::MirrorWork::Extend(x) if x.id == saved.id && x.version == saved.version),
            "{work:?}"
        );
        // A deleted series is not extended; its delete is mirrored.
        let v = s
            .delete_schedule(&saved.id, Utc::now())
            .await
            .unwrap()
            .unwrap();
        let work = s
            .unmirrored(horizon + ChronoDuration::days(30))
            .await
            .unwrap();
        assert_eq!(
            work,
            vec![toki_ports::MirrorWork::Delete {
                schedule: saved.id.clone(),
                version: v
            }]
        );
    }

    pub async fn delivery_context_in_one_call(s: Arc<dyn TenantStore>) {
        for id in ["a", "b", "c"] {
            s.put_user(&user(id), Utc::now()).await.unwrap();
        }
        let saved = s
            .put_schedule(&schedule("ctx", &["b", "a"]), Utc::now())
            .await
            .unwrap();
        let other = s
            .put_schedule(&schedule("other", &["c"]), Utc::now())
            .await
            .unwrap();
        let ctx = s
            .delivery_context(&[saved.id.clone(), "missing".parse().unwrap()])
            .await
            .unwrap();
        assert_eq!(ctx.schedules.len(), 1);
        let snap = &ctx.schedules[&saved.id];
        assert_eq!(snap.version, saved.version);
        assert_eq!(snap.title, "Weekly sync");
        let ids = |v: &[UserId]| v.iter().map(|u| u.to_string()).collect::<Vec<_>>();
        assert_eq!(
            ids(&snap.participants),
            ["b", "a"],
            "the participants, in order"
        );
        assert_eq!(ctx.users.len(), 2, "only the participants' users");
        assert_eq!(*ctx.users[&"a".parse::<UserId>().unwrap()], user("a"));
        // A later version's participants, for the daemon to deliver to.
        s.put_schedule(&schedule("ctx", &["a"]), Utc::now())
            .await
            .unwrap();
        let ctx = s
            .delivery_context(&[saved.id.clone(), other.id.clone()])
            .await
            .unwrap();
        assert_eq!(ids(&ctx.schedules[&saved.id].participants), ["a"]);
        assert_eq!(ids(&ctx.schedules[&other.id].participants), ["c"]);
        assert_eq!(ctx.users.len(), 2);
    }

    pub async fn one_reminders_deliveries(s: Arc<dyn TenantStore>) {
        let now = Utc::now();
        s.put_user(&user("a"), now).await.unwrap();
        let k = key("a", Channel::Mail);
        let elsewhere = DeliveryKey {
            purpose: DeliveryPurpose::Reminder { minutes_before: 15 },
            ..key("a", Channel::Mail)
        };
        s.record_outcomes(&[
            DeliveryOutcome {
                key: k.clone(),
                version: 1,
                due_at: DueAt(now),
                status: DeliveryStatus::Failed,
                at: now,
                detail: Some("slack: HTTP 503".into()),
            },
            DeliveryOutcome {
                key: elsewhere,
                version: 1,
                due_at: DueAt(now),
                status: DeliveryStatus::Delivered,
                at: now,
                detail: None,
            },
        ])
        .await
        .unwrap();
        let rows = s
            .reminder_deliveries(&ReminderKey {
                tenant: "acme".parse().unwrap(),
                schedule: k.schedule.clone(),
                occurrence: k.occurrence,
                minutes_before: 5,
            })
            .await
            .unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].detail.as_deref(), Some("slack: HTTP 503"));
    }

    pub(super) fn key(recipient: &str, channel: Channel) -> DeliveryKey {
        DeliveryKey {
            schedule: "s".parse().unwrap(),
            occurrence: Occurrence(from_millis("occurrence", 1_800_000_000_000).unwrap()),
            purpose: DeliveryPurpose::Reminder { minutes_before: 5 },
            recipient: recipient.parse().unwrap(),
            channel,
        }
    }

    fn claim(key: &DeliveryKey, version: i64, due: DueAt) -> DeliveryClaim {
        DeliveryClaim {
            key: key.clone(),
            version,
            due_at: due,
        }
    }

    pub async fn claims_make_deliveries_exactly_once(s: Arc<dyn TenantStore>) {
        let now = Utc::now();
        let minute_before = |t: chrono::DateTime<Utc>| t - ChronoDuration::seconds(60);
        let k1 = key("a", Channel::Mail);
        let k2 = key("b", Channel::Mail);
        let due = DueAt(now);
        let first = s
            .claim_deliveries(
                &[claim(&k1, 1, due), claim(&k2, 1, due)],
                now,
                minute_before(now),
            )
            .await
            .unwrap();
        assert_eq!(first.owned.len(), 2);
        assert!(
            !first.token.is_empty(),
            "a claim has a token to renew it by"
        );
        let again = s
            .claim_deliveries(&[claim(&k1, 1, due)], now, minute_before(now))
            .await
            .unwrap();
        assert!(again.owned.is_empty(), "claimed twice");
        assert_eq!(
            again.busy,
            vec![k1.clone()],
            "a delivery someone else is sending is reported busy"
        );
        // One identity whatever the version: a newer version meeting the claim
        // in flight is busy too (it must come back, not be acknowledged).
        let newer = s
            .claim_deliveries(&[claim(&k1, 2, due)], now, minute_before(now))
            .await
            .unwrap();
        assert_eq!((keys(&newer), newer.busy), (vec![], vec![k1.clone()]));
        // A claim older than the cut-off is taken over (its holder died).
        let later = now + ChronoDuration::seconds(120);
        let taken = s
            .claim_deliveries(&[claim(&k1, 1, due)], later, minute_before(later))
            .await
            .unwrap();
        assert_eq!(keys(&taken), vec![k1.clone()]);
        assert!(
            taken.owned[0].taken_over,
            "taken over from a holder that stopped"
        );
        let out = |k: &DeliveryKey, version, status| DeliveryOutcome {
            key: k.clone(),
            version,
            due_at: due,
            status,
            at: later,
            detail: None,
        };
        s.record_outcomes(&[
            out(&k1, 1, DeliveryStatus::Delivered),
            out(&k2, 1, DeliveryStatus::Failed),
        ])
        .await
        .unwrap();
        // One claim mixing a final row, a failed one and a new one.
        let k4 = key("d", Channel::Mail);
        let retry = s
            .claim_deliveries(
                &[claim(&k1, 1, due), claim(&k2, 1, due), claim(&k4, 1, due)],
                later,
                later,
            )
            .await
            .unwrap();
        assert_eq!(retry.owned.len(), 2, "{retry:?}");
        let got: BTreeMap<_, _> = retry
            .owned
            .iter()
            .map(|o| (o.key.clone(), (o.failures, o.taken_over)))
            .collect();
        assert_eq!(
            got,
            BTreeMap::from([(k2.clone(), (1, false)), (k4.clone(), (0, false))]),
            "the failed delivery is claimed again, its failed attempt counted and not \
             a takeover; the new one is claimed; the delivered one is not"
        );
        assert!(retry.busy.is_empty(), "a delivered row is final, not busy");
        // An edit after the reminder went out (newer version, same delivery) sends nothing again.
        let edited = s
            .claim_deliveries(&[claim(&k1, 2, due)], later, later)
            .await
            .unwrap();
        assert!(
            edited.owned.is_empty() && edited.busy.is_empty(),
            "{edited:?}"
        );
        // A stale verdict (older version) gives way to the current version's claim.
        let k3 = key("c", Channel::Mail);
        s.record_outcomes(&[out(&k3, 1, DeliveryStatus::Stale)])
            .await
            .unwrap();
        let current = s
            .claim_deliveries(&[claim(&k3, 2, due)], later, minute_before(later))
            .await
            .unwrap();
        assert_eq!(keys(&current), vec![k3.clone()]);
        // A stale verdict never overwrites a send in progress; delivered is final.
        s.record_outcomes(&[
            out(&k3, 1, DeliveryStatus::Stale),
            out(&k1, 1, DeliveryStatus::Stale),
        ])
        .await
        .unwrap();
        let rows: BTreeMap<_, _> = s
            .deliveries()
            .await
            .unwrap()
            .into_iter()
            .map(|o| (o.key.clone(), o))
            .collect();
        assert_eq!(rows[&k1].status, DeliveryStatus::Delivered);
        assert_eq!(rows[&k1].at.timestamp_millis(), later.timestamp_millis());
        assert_eq!(rows[&k2].status, DeliveryStatus::Sending);
        assert_eq!(
            (rows[&k3].status, rows[&k3].version),
            (DeliveryStatus::Sending, 2),
            "the row carries the claiming version"
        );
        let counts = s.delivery_counts().await.unwrap();
        assert!(counts.contains(&DeliveryCount {
            channel: Channel::Mail,
            status: DeliveryStatus::Delivered,
            count: 1
        }));
    }

    fn keys(c: &toki_ports::Claims) -> Vec<DeliveryKey> {
        c.owned.iter().map(|o| o.key.clone()).collect()
    }

    /// Failed attempts accumulate; throttled and deferred rows are claimed
    /// again without using the budget.
    pub async fn claims_carry_the_failure_budget(s: Arc<dyn TenantStore>) {
        let now = Utc::now();
        let due = DueAt(now);
        let k = key("budget", Channel::Slack);
        let row = |status| DeliveryOutcome {
            key: k.clone(),
            version: 1,
            due_at: due,
            status,
            at: now,
            detail: Some(format!("{status:?}")),
        };
        for (n, status) in [
            DeliveryStatus::Failed,
            DeliveryStatus::Throttled,
            DeliveryStatus::Failed,
            DeliveryStatus::Deferred,
        ]
        .into_iter()
        .enumerate()
        {
            let c = s
                .claim_deliveries(&[claim(&k, 1, due)], now, now - ChronoDuration::seconds(60))
                .await
                .unwrap();
            assert_eq!(keys(&c), vec![k.clone()], "claim {n} after {status:?}");
            s.record_outcomes(&[row(status)]).await.unwrap();
        }
        let c = s
            .claim_deliveries(&[claim(&k, 1, due)], now, now - ChronoDuration::seconds(60))
            .await
            .unwrap();
        assert_eq!(
            c.owned[0].failures, 2,
            "two failures; a throttle and a deferral are not"
        );
    }

    /// Delivered rows are counted by the process that claimed them (this
    /// one); rows not delivered are not counted.
    pub async fn delivered_rows_name_their_holder(s: Arc<dyn TenantStore>) {
        let now = Utc::now();
        let due = DueAt(now);
        let sent = key("holder-sent", Channel::Slack);
        let failed = key("holder-failed", Channel::Slack);
        s.claim_deliveries(
            &[claim(&sent, 1, due), claim(&failed, 1, due)],
            now,
            now - ChronoDuration::seconds(60),
        )
        .await
        .unwrap();
        assert!(
            s.delivered_by_holder().await.unwrap().is_empty(),
            "nothing delivered yet"
        );
        let outcome = |k: &DeliveryKey, status| DeliveryOutcome {
            key: k.clone(),
            version: 1,
            due_at: due,
            status,
            at: now,
            detail: None,
        };
        s.record_outcomes(&[
            outcome(&sent, DeliveryStatus::Delivered),
            outcome(&failed, DeliveryStatus::Failed),
        ])
        .await
        .unwrap();
        assert_eq!(
            s.delivered_by_holder().await.unwrap(),
            vec![(std::process::id().to_string(), 1)]
        );
    }

    /// A live holder's renewal keeps its claims from being taken over.
    pub async fn renewed_claims_are_not_taken_over(s: Arc<dyn TenantStore>) {
        let t0 = Utc::now();
        let due = DueAt(t0);
        let renewed = key("renewed", Channel::Mail);
        let lapsed = key("lapsed", Channel::Mail);
        let a = s
            .claim_deliveries(
                &[claim(&renewed, 1, due)],
                t0,
                t0 - ChronoDuration::seconds(10),
            )
            .await
            .unwrap();
        let b = s
            .claim_deliveries(
                &[claim(&lapsed, 1, due)],
                t0,
                t0 - ChronoDuration::seconds(10),
            )
            .await
            .unwrap();
        assert_ne!(a.token, b.token);
        s.renew_claims(
            std::slice::from_ref(&a.token),
            t0 + ChronoDuration::seconds(8),
        )
        .await
        .unwrap();
        // At t0 + 12 s a 10 s lease has run out for the claim not renewed only.
        let t1 = t0 + ChronoDuration::seconds(12);
        let c = s
            .claim_deliveries(
                &[claim(&renewed, 1, due), claim(&lapsed, 1, due)],
                t1,
                t1 - ChronoDuration::seconds(10),
            )
            .await
            .unwrap();
        assert_eq!(keys(&c), vec![lapsed.clone()]);
        assert_eq!(c.busy, vec![renewed.clone()]);
        assert!(c.owned[0].taken_over);
    }

    /// The last look before firing: current versions, deleted schedules absent.
    pub async fn schedule_versions_are_read_at_once(s: Arc<dyn TenantStore>) {
        let now = Utc::now();
        for u in ["a", "b"] {
            s.put_user(&user(u), now).await.unwrap();
        }
        s.put_schedule(&schedule("one", &["a"]), now).await.unwrap();
        s.put_schedule(&schedule("two", &["a"]), now).await.unwrap();
        let two = s.put_schedule(&schedule("two", &["b"]), now).await.unwrap();
        s.put_schedule(&schedule("gone", &["a"]), now)
            .await
            .unwrap();
        s.delete_schedule(&"gone".parse().unwrap(), now)
            .await
            .unwrap();
        let ids: Vec<ScheduleId> = ["one", "two", "gone", "never"]
            .iter()
            .map(|i| i.parse().unwrap())
            .collect();
        let v = s.schedule_versions(&ids).await.unwrap();
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!(v[&ids[0]], 1);
        assert_eq!(v[&ids[1]], two.version);
        assert!(s.schedule_versions(&[]).await.unwrap().is_empty());
    }

    /// A change seen at the last look turns the holder's own claim stale;
    /// a stale verdict of another version never overwrites a claim.
    pub async fn a_revoked_claim_is_recorded_stale(s: Arc<dyn TenantStore>) {
        let now = Utc::now();
        let due = DueAt(now);
        let own = key("own", Channel::Chat);
        s.claim_deliveries(
            &[claim(&own, 3, due)],
            now,
            now - ChronoDuration::seconds(10),
        )
        .await
        .unwrap();
        let stale = |version| DeliveryOutcome {
            key: own.clone(),
            version,
            due_at: due,
            status: DeliveryStatus::Stale,
            at: now,
            detail: Some("schedule deleted just before it was due".into()),
        };
        s.record_outcomes(&[stale(2)]).await.unwrap();
        let rows = s.deliveries().await.unwrap();
        assert_eq!(
            rows[0].status,
            DeliveryStatus::Sending,
            "another version's verdict"
        );
        s.record_outcomes(&[stale(3)]).await.unwrap();
        let rows = s.deliveries().await.unwrap();
        assert_eq!(rows[0].status, DeliveryStatus::Stale);
    }

    pub async fn chat_messages_are_idempotent(s: Arc<dyn TenantStore>) {
        // Outcomes without a claim, and chat rows, are for users who exist.
        s.put_user(&user("a"), Utc::now()).await.unwrap();
        let k = key("a", Channel::Chat);
        let m = toki_ports::ChatMessage {
            key: k.clone(),
            version: 3,
            user: "a".parse().unwrap(),
            text: "hi".into(),
            created_at: Utc::now(),
        };
        s.insert_chat_messages(std::slice::from_ref(&m))
            .await
            .unwrap();
        s.insert_chat_messages(std::slice::from_ref(&m))
            .await
            .unwrap();
        let got = s.chat_messages(&"a".parse().unwrap()).await.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].text, "hi");
        assert_eq!((got[0].key.clone(), got[0].version), (k, 3));
    }
}

// ---------------------------------------------------------------- idempotency keys (a tenant store's)

pub mod idempotency {
    use super::*;
    use toki_model::idempotency::{IdempotencyKey, KeptAnswer, RequestDigest};
    use toki_ports::{IdempotentStart, KeyedRequest};

    fn at(ms: i64) -> Instant {
        from_millis("at", ms).unwrap()
    }

    /// A start at `now` under the API's rules: a day to expire, five
    /// minutes in progress to be abandoned.
    fn start<'a>(
        key: &'a IdempotencyKey,
        digest: &'a RequestDigest,
        now: Instant,
    ) -> IdempotentStart<'a> {
        IdempotentStart {
            key,
            digest,
            now,
            expired_before: now - ChronoDuration::hours(24),
            abandoned_before: now - ChronoDuration::minutes(5),
        }
    }

    fn answer(status: u16, body: &str) -> KeptAnswer {
        KeptAnswer {
            status,
            body: body.into(),
        }
    }

    fn existing(digest: &RequestDigest, answer: Option<KeptAnswer>) -> KeyedRequest {
        KeyedRequest::Existing {
            digest: digest.clone(),
            answer,
        }
    }

    /// A key starts once; a repeat sees it in progress, then its first
    /// answer (a second finish, or one of another run, changes nothing),
    /// and another request's digest sees the first's; a day later it starts afresh.
    pub async fn a_key_keeps_its_first_answer_for_a_day(s: Arc<dyn TenantStore>) {
        let t0 = Utc::now().timestamp_millis();
        let key: IdempotencyKey = "batch-1".parse().unwrap();
        let digest = RequestDigest::of("POST", "/v1/tenants/acme/schedules:batch", b"{}");
        let other = RequestDigest::of("POST", "/v1/tenants/acme/schedules:batch", b"{ }");
        let go = |d: &RequestDigest, ms: i64| {
            let (s, key, d) = (s.clone(), key.clone(), d.clone());
            async move { s.start_idempotent(&start(&key, &d, at(ms))).await.unwrap() }
        };
        assert_eq!(go(&digest, t0).await, KeyedRequest::Started);
        assert_eq!(go(&digest, t0 + 1_000).await, existing(&digest, None));
        s.finish_idempotent(&key, at(t0 + 1), &answer(200, "{\"x\":0}"))
            .await
            .unwrap();
        assert_eq!(
            go(&digest, t0 + 1_000).await,
            existing(&digest, None),
            "another run's finish"
        );
        s.finish_idempotent(&key, at(t0), &answer(200, "{\"x\":1}"))
            .await
            .unwrap();
        s.finish_idempotent(&key, at(t0), &answer(201, "{\"x\":2}"))
            .await
            .unwrap();
        s.release_idempotent(&key, at(t0)).await.unwrap();
        let first = Some(answer(200, "{\"x\":1}"));
        assert_eq!(
            go(&digest, t0 + 2_000).await,
            existing(&digest, first.clone())
        );
        assert_eq!(
            go(&other, t0 + 3_000).await,
            existing(&digest, first.clone())
        );
        // Still there until a day is up; gone (and taken afresh) after.
        let day = 24 * 3_600_000;
        assert_eq!(go(&digest, t0 + day).await, existing(&digest, first));
        assert_eq!(go(&other, t0 + day + 1).await, KeyedRequest::Started);
        assert_eq!(go(&digest, t0 + day + 2).await, existing(&other, None));
    }

    /// A run in progress for five minutes is taken over (and its late
    /// finish ignored); a released key starts afresh at once.
    pub async fn abandoned_and_released_keys_start_afresh(s: Arc<dyn TenantStore>) {
        let t0 = Utc::now().timestamp_millis();
        let (key, digest): (IdempotencyKey, _) =
            ("k".parse().unwrap(), RequestDigest::of("POST", "/p", b"1"));
        let go = |ms: i64| {
            let s = s.clone();
            let (key, digest) = (key.clone(), digest.clone());
            async move {
                s.start_idempotent(&start(&key, &digest, at(ms)))
                    .await
                    .unwrap()
            }
        };
        assert_eq!(go(t0).await, KeyedRequest::Started);
        assert_eq!(go(t0 + 299_999).await, existing(&digest, None));
        assert_eq!(go(t0 + 300_001).await, KeyedRequest::Started, "abandoned");
        s.finish_idempotent(&key, at(t0), &answer(200, "late"))
            .await
            .unwrap();
        assert_eq!(
            go(t0 + 300_002).await,
            existing(&digest, None),
            "the late finish is ignored"
        );
        s.release_idempotent(&key, at(t0)).await.unwrap();
        assert_eq!(
            go(t0 + 300_003).await,
            existing(&digest, None),
            "not the old run's to release"
        );
        s.release_idempotent(&key, at(t0 + 300_001)).await.unwrap();
        assert_eq!(go(t0 + 300_004).await, KeyedRequest::Started, "released");
    }

    /// Of many requests racing for one key, one starts.
    pub async fn racing_starts_take_a_key_once(s: Arc<dyn TenantStore>) {
        let now = at(Utc::now().timestamp_millis());
        let racers = (0..8).map(|_| {
            let s = s.clone();
            tokio::spawn(async move {
                let key: IdempotencyKey = "race".parse().unwrap();
                let digest = RequestDigest::of("POST", "/p", b"");
                s.start_idempotent(&start(&key, &digest, now))
                    .await
                    .unwrap()
            })
        });
        let started = futures::future::join_all(racers)
            .await
            .into_iter()
            .filter(|r| matches!(r.as_ref().unwrap(), KeyedRequest::Started))
            .count();
        assert_eq!(started, 1);
    }

    /// The purge takes keys first used before its instant, oldest first, at
    /// most its limit at a time; younger keys stay.
    pub async fn the_purge_is_bounded_and_oldest_first(s: Arc<dyn TenantStore>) {
        let t0 = Utc::now().timestamp_millis();
        let day = 24 * 3_600_000;
        let digest = RequestDigest::of("POST", "/p", b"");
        let keys: Vec<IdempotencyKey> = (0..4).map(|i| format!("p{i}").parse().unwrap()).collect();
        // p0 ten days old, p1 nine, p2 eight; p3 now.
        for (i, k) in keys.iter().enumerate() {
            let ms = if i == 3 {
                t0
            } else {
                t0 - (10 - i as i64) * day
            };
            let begun = s
                .start_idempotent(&start(k, &digest, at(ms)))
                .await
                .unwrap();
            assert_eq!(begun, KeyedRequest::Started);
            s.finish_idempotent(k, at(ms), &answer(200, "{}"))
                .await
                .unwrap();
        }
        let week_ago = at(t0 - 7 * day);
        assert_eq!(s.purge_idempotency_keys(week_ago, 2).await.unwrap(), 2);
        // p2 is left (the youngest of the old): as it was, seen from its own day.
        let p2 = s
            .start_idempotent(&start(&keys[2], &digest, at(t0 - 8 * day + 1)))
            .await
            .unwrap();
        assert_eq!(p2, existing(&digest, Some(answer(200, "{}"))));
        assert_eq!(s.purge_idempotency_keys(week_ago, 2).await.unwrap(), 1);
        assert_eq!(s.purge_idempotency_keys(week_ago, 2).await.unwrap(), 0);
        let p3 = s
            .start_idempotent(&start(&keys[3], &digest, at(t0 + 1)))
            .await
            .unwrap();
        assert_eq!(
            p3,
            existing(&digest, Some(answer(200, "{}"))),
            "a young key stays"
        );
    }
}

// ---------------------------------------------------------------- event log

pub mod events {
    use super::*;
    use toki_model::event::{
        EndpointProgress, EndpointSecrets, EndpointSpec, EndpointStatus, EndpointUrl,
        EventEndpoint, EventKind, EventKinds, EventOrdering, NewEvent,
    };
    use toki_model::webhook_signature::WebhookSecret;
    use toki_ports::ProgressWrite;

    fn at(ms: i64) -> Instant {
        from_millis("at", ms).unwrap()
    }

    fn secret(s: &str) -> WebhookSecret {
        s.parse().unwrap()
    }

    fn endpoint(id: &str, kinds: EventKinds, now: Instant) -> EventEndpoint {
        EventEndpoint {
            id: id.parse().unwrap(),
            spec: EndpointSpec {
                url: EndpointUrl::parse("url", "https://hooks.example/toki").unwrap(),
                kinds,
                ordering: EventOrdering::InOrder,
            },
            secrets: EndpointSecrets {
                current: secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
                previous: None,
            },
            progress: EndpointProgress::starting_at(0, now),
            created_at: now,
        }
    }

    fn outcome(schedule: &str, status: DeliveryStatus, now: Instant) -> DeliveryOutcome {
        DeliveryOutcome {
            key: DeliveryKey {
                schedule: schedule.parse().unwrap(),
                ..store::key("a", Channel::Mail)
            },
            version: 1,
            due_at: DueAt(now),
            status,
            at: now,
            detail: (status != DeliveryStatus::Delivered).then(|| "smtp: 421".into()),
        }
    }

    /// Events are kept only for the types an enabled endpoint wants, only
    /// when the outcome changed the row, numbered in order; a failure's
    /// event carries its attempt.
    pub async fn outcomes_make_the_events_endpoints_want(s: Arc<dyn TenantStore>) {
        // Outcomes without a claim, and chat rows, are for users who exist.
        s.put_user(&store::user("a"), Utc::now()).await.unwrap();
        let now = at(1_800_000_000_000);
        s.record_outcomes(&[outcome("before", DeliveryStatus::Delivered, now)])
            .await
            .unwrap();
        assert_eq!(
            s.last_event_seq().await.unwrap(),
            0,
            "no endpoint, no event"
        );
        let wanted: EventKinds = [EventKind::Delivered, EventKind::Failed]
            .into_iter()
            .collect();
        s.put_event_endpoint(&endpoint("hook", wanted, now))
            .await
            .unwrap();
        for status in [
            DeliveryStatus::Failed,
            DeliveryStatus::Failed,
            DeliveryStatus::Delivered,
        ] {
            s.record_outcomes(&[outcome("s1", status, now)])
                .await
                .unwrap();
        }
        // Final already: the row does not change, so no event.
        s.record_outcomes(&[outcome("s1", DeliveryStatus::Stale, now)])
            .await
            .unwrap();
        // Not wanted.
        s.record_outcomes(&[outcome("s2", DeliveryStatus::Undeliverable, now)])
            .await
            .unwrap();
        let events = s.events_after(0, 100).await.unwrap();
        let kinds: Vec<_> = events
            .iter()
            .map(|e| (e.seq, e.kind, e.data.attempt))
            .collect();
        assert_eq!(
            kinds,
            [
                (1, EventKind::Failed, Some(1)),
                (2, EventKind::Failed, Some(2)),
                (3, EventKind::Delivered, None)
            ]
        );
        assert_eq!(events[0].data.reason.as_deref(), Some("smtp: 421"));
        assert_eq!(events[2].data.schedule_id, "s1");
        assert_eq!(s.events_after(2, 100).await.unwrap().len(), 1);
        // Reminder-wide events go through the same filter.
        let appended = s
            .append_events(&[NewEvent {
                kind: EventKind::Redriven,
                ..NewEvent::of_outcome(&outcome("s3", DeliveryStatus::Delivered, now), 0).unwrap()
            }])
            .await
            .unwrap();
        assert_eq!(appended, 0, "redriven is not wanted");
        assert_eq!(s.last_event_seq().await.unwrap(), 3);
    }

    /// The sender's progress is refused once the tenant changed the
    /// endpoint; a hold is one process's until it lapses.
    pub async fn progress_never_undoes_the_tenants_change(s: Arc<dyn TenantStore>) {
        let now = at(1_800_000_000_000);
        let id: EndpointId = "hook".parse().unwrap();
        s.put_event_endpoint(&endpoint("hook", EventKinds::all(), now))
            .await
            .unwrap();
        let (read, revision) = s.event_endpoint(&id).await.unwrap().unwrap();
        let rotated = EventEndpoint {
            secrets: read
                .secrets
                .rotate(secret("whsec_YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFh"), now),
            ..read.clone()
        };
        s.put_event_endpoint(&rotated).await.unwrap();
        let failed = read.progress.failed(0, "HTTP 503".into(), now);
        let write = ProgressWrite {
            id: &id,
            read_revision: revision,
            progress: &failed,
        };
        assert!(
            !s.set_endpoint_progress(write).await.unwrap(),
            "stale revision refused"
        );
        let (now_read, revision) = s.event_endpoint(&id).await.unwrap().unwrap();
        assert_eq!(now_read, rotated, "secrets round-trip, rotation kept");
        let write = ProgressWrite {
            id: &id,
            read_revision: revision,
            progress: &failed,
        };
        assert!(s.set_endpoint_progress(write).await.unwrap());
        let (after, _) = s.event_endpoint(&id).await.unwrap().unwrap();
        assert_eq!(after.progress, failed);
        let disabled = EndpointProgress {
            status: EndpointStatus::Disabled {
                reason: "15 failed attempts".into(),
            },
            ..failed
        };
        let (_, revision) = s.event_endpoint(&id).await.unwrap().unwrap();
        let write = ProgressWrite {
            id: &id,
            read_revision: revision,
            progress: &disabled,
        };
        assert!(s.set_endpoint_progress(write).await.unwrap());
        assert_eq!(s.event_endpoints().await.unwrap()[0].0.progress, disabled);
        // A replay's end round-trips, through a progress write and a whole put.
        let replaying = disabled.replaying(1, 42, now);
        let (_, revision) = s.event_endpoint(&id).await.unwrap().unwrap();
        let write = ProgressWrite {
            id: &id,
            read_revision: revision,
            progress: &replaying,
        };
        assert!(s.set_endpoint_progress(write).await.unwrap());
        let (mut whole, _) = s.event_endpoint(&id).await.unwrap().unwrap();
        assert_eq!(whole.progress.replay_through, 42);
        whole.progress = whole.progress.resumed(now);
        s.put_event_endpoint(&whole).await.unwrap();
        assert_eq!(
            s.event_endpoint(&id).await.unwrap().unwrap().0.progress,
            replaying.resumed(now)
        );
        let (_, revision) = s.event_endpoint(&id).await.unwrap().unwrap();
        let write = ProgressWrite {
            id: &id,
            read_revision: revision,
            progress: &disabled,
        };
        assert!(s.set_endpoint_progress(write).await.unwrap());

        let later = now + ChronoDuration::seconds(30);
        let until = now + ChronoDuration::seconds(60);
        assert!(s.hold_endpoint(&id, "p1", until, now).await.unwrap());
        assert!(
            !s.hold_endpoint(&id, "p2", until, later).await.unwrap(),
            "held by p1"
        );
        assert!(
            s.hold_endpoint(&id, "p1", until, later).await.unwrap(),
            "renewed"
        );
        let lapsed = until + ChronoDuration::seconds(1);
        assert!(
            s.hold_endpoint(&id, "p2", lapsed, lapsed).await.unwrap(),
            "taken once lapsed"
        );
        assert!(s.delete_event_endpoint(&id).await.unwrap());
        assert!(s.event_endpoint(&id).await.unwrap().is_none());
        assert!(!s.delete_event_endpoint(&id).await.unwrap());
    }

    /// A replay finds where to rewind by instant; the purge deletes only
    /// what is older than its bound.
    pub async fn replay_point_and_purge_respect_instants(s: Arc<dyn TenantStore>) {
        // Outcomes without a claim, and chat rows, are for users who exist.
        s.put_user(&store::user("a"), Utc::now()).await.unwrap();
        let t0 = 1_800_000_000_000;
        s.put_event_endpoint(&endpoint("hook", EventKinds::all(), at(t0)))
            .await
            .unwrap();
        for i in 0..5 {
            let o = outcome(
                &format!("s{i}"),
                DeliveryStatus::Delivered,
                at(t0 + i * 1000),
            );
            s.record_outcomes(&[o]).await.unwrap();
        }
        assert_eq!(s.event_seq_before(at(t0)).await.unwrap(), 0);
        assert_eq!(s.event_seq_before(at(t0 + 2500)).await.unwrap(), 3);
        let events = toki_ports::retention::TenantRows::Events;
        assert_eq!(s.purge_rows(events, at(t0 + 2000), 500).await.unwrap(), 2);
        let left: Vec<u64> = s
            .events_after(0, 10)
            .await
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(left, [3, 4, 5], "nothing younger than the bound");
        assert_eq!(s.purge_rows(events, at(t0 + 2000), 500).await.unwrap(), 0);
        assert_eq!(s.last_event_seq().await.unwrap(), 5, "numbers never repeat");
    }
}

/// The suppression list: entries kept first-come, recipients listed by
/// their stored address, found with the delivery context, paged, removed;
/// the tenant's `List-Unsubscribe` read back and with the context.
pub mod suppression {
    use super::store::{schedule, user};
    use super::*;
    use toki_model::suppression::{ListUnsubscribe, ListedAddress, Suppression, SuppressionReason};
    use toki_ports::RefusedRecipient;

    fn address(a: &str) -> ListedAddress {
        ListedAddress::parse("address", a).unwrap()
    }

    pub async fn listed_recipients_are_found_with_the_context(s: Arc<dyn TenantStore>) {
        let now = Utc::now();
        let mut ana = user("ana");
        ana.email = Some("Ana.Sato@Example.com".into());
        let mut carla = user("carla");
        carla.email = None;
        for u in [&ana, &user("ben"), &carla, &user("dan")] {
            s.put_user(u, now).await.unwrap();
        }
        let sch = schedule("standup", &["ana", "ben", "carla", "dan"]);
        s.put_schedule(&sch, now).await.unwrap();
        let manual = Suppression {
            address: address("ana.sato@example.com"),
            reason: SuppressionReason::Manual,
            detail: Some("asked by phone".into()),
            at: from_millis("at", 1_700_000_000_000).unwrap(),
        };
        assert_eq!(s.suppress(std::slice::from_ref(&manual)).await.unwrap(), 1);
        let again = Suppression {
            reason: SuppressionReason::Bounce,
            ..manual.clone()
        };
        assert_eq!(
            s.suppress(&[again]).await.unwrap(),
            0,
            "the first entry stays"
        );
        let refused = |id: &str| RefusedRecipient {
            user: id.parse().unwrap(),
            reason: SuppressionReason::Refused,
            detail: "smtp: 550 5.1.1 no such user".into(),
        };
        let added = s
            .suppress_recipients(&[refused("ben"), refused("carla"), refused("nobody")], now)
            .await
            .unwrap();
        assert_eq!(added, 1, "carla has no address, nobody is no user");

        let ctx = s
            .delivery_context(std::slice::from_ref(&sch.id))
            .await
            .unwrap();
        let mut listed: Vec<_> = ctx.suppressed.keys().map(|a| a.to_string()).collect();
        listed.sort();
        assert_eq!(listed, ["ana.sato@example.com", "ben@example.com"]);
        assert_eq!(ctx.suppressed[&address("ana.sato@example.com")], manual);
        assert_eq!(ctx.users.len(), 4, "listing takes no participant away");
        assert_eq!(ctx.list_unsubscribe, None);

        let first = s.suppressions(None, 1).await.unwrap();
        assert_eq!(first, vec![manual.clone()]);
        let next = s.suppressions(Some(&first[0].address), 10).await.unwrap();
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].address, address("ben@example.com"));
        assert_eq!(next[0].reason, SuppressionReason::Refused);

        assert!(s
            .unsuppress(&address("ANA.SATO@example.com"))
            .await
            .unwrap());
        assert!(!s
            .unsuppress(&address("ana.sato@example.com"))
            .await
            .unwrap());
        assert_eq!(
            s.suppression(&address("ana.sato@example.com"))
                .await
                .unwrap(),
            None
        );
        let ctx = s
            .delivery_context(std::slice::from_ref(&sch.id))
            .await
            .unwrap();
        assert_eq!(ctx.suppressed.len(), 1);

        let unsubscribe = ListUnsubscribe {
            url: Some("https://app.example.com/unsubscribe?u={user}".into()),
            mailto: None,
        };
        s.put_list_unsubscribe(&unsubscribe, now).await.unwrap();
        assert_eq!(s.list_unsubscribe().await.unwrap(), unsubscribe);
        let ctx = s
            .delivery_context(std::slice::from_ref(&sch.id))
            .await
            .unwrap();
        assert_eq!(ctx.list_unsubscribe.as_deref(), Some(&unsubscribe));
        s.put_list_unsubscribe(&ListUnsubscribe::default(), now)
            .await
            .unwrap();
        let ctx = s
            .delivery_context(std::slice::from_ref(&sch.id))
            .await
            .unwrap();
        assert_eq!(ctx.list_unsubscribe, None, "both parts absent: off");
    }
}

// ---------------------------------------------------------------- report

/// The report's aggregate reads (`toki_ports::report`) against the rows.
pub mod report {
    use super::*;
    use toki_ports::report::{
        lateness_bucket, ChannelDelivered, DueCount, LatenessCount, ReportWindow, SecondCount,
    };

    /// Delivered rows due at `due`, `late` ms late each, on `channel`
    /// (a recipient each, a user who exists: an outcome is recorded only
    /// for one); `tag` keeps the recipients apart.
    async fn delivered(
        s: &Arc<dyn TenantStore>,
        tag: &str,
        channel: Channel,
        due: DueAt,
        late: &[i64],
    ) {
        for i in 0..late.len() {
            let user = super::store::user(&format!("{tag}{i}"));
            s.put_user(&user, due.0).await.unwrap();
        }
        let rows: Vec<DeliveryOutcome> = late
            .iter()
            .enumerate()
            .map(|(i, ms)| DeliveryOutcome {
                key: super::store::key(&format!("{tag}{i}"), channel),
                version: 1,
                due_at: due,
                status: DeliveryStatus::Delivered,
                at: due.0 + ChronoDuration::milliseconds(*ms),
                detail: None,
            })
            .collect();
        s.record_outcomes(&rows).await.unwrap();
    }

    pub async fn aggregates_are_computed_from_the_delivered_rows(s: Arc<dyn TenantStore>) {
        let base = from_millis("base", 1_800_000_000_000).unwrap();
        let at = |minutes: i64| DueAt(base + ChronoDuration::minutes(minutes));
        let mail = [0, 37, 99, 100, 150, 999, 1_500, 12_345, 2_000_000];
        let slack = [-1, -1_200, -400_000, 250_000];
        delivered(&s, "m", Channel::Mail, at(10), &mail).await;
        delivered(&s, "s", Channel::Slack, at(20), &slack).await;
        delivered(&s, "c", Channel::Chat, at(20), &[5, 5]).await;
        // Before the window, and not delivered: neither counts.
        delivered(&s, "old", Channel::Mail, at(-120), &[1, 2, 3]).await;
        let failed = super::store::user("failed");
        s.put_user(&failed, base).await.unwrap();
        s.record_outcomes(&[DeliveryOutcome {
            key: super::store::key("failed", Channel::Mail),
            version: 1,
            due_at: at(10),
            status: DeliveryStatus::Failed,
            at: base,
            detail: Some("smtp: 451".into()),
        }])
        .await
        .unwrap();

        let window = ReportWindow {
            since: base - ChronoDuration::minutes(60),
            busiest: 1,
        };
        let summary = s.delivery_summary(&window).await.unwrap();
        let extremes = |channel, late: &[i64]| ChannelDelivered {
            channel,
            count: late.len() as u64,
            min_ms: *late.iter().min().unwrap(),
            max_ms: *late.iter().max().unwrap(),
        };
        let mut channels = vec![
            extremes(Channel::Mail, &mail),
            extremes(Channel::Slack, &slack),
            extremes(Channel::Chat, &[5, 5]),
        ];
        channels.sort_by_key(|c| c.channel);
        assert_eq!(summary.channels, channels);
        let mut buckets: BTreeMap<(Channel, i64), u64> = BTreeMap::new();
        for (channel, late) in [
            (Channel::Mail, &mail[..]),
            (Channel::Slack, &slack[..]),
            (Channel::Chat, &[5, 5][..]),
        ] {
            for ms in late {
                *buckets.entry((channel, lateness_bucket(*ms))).or_default() += 1;
            }
        }
        let lateness: Vec<LatenessCount> = buckets
            .into_iter()
            .map(|((channel, bucket_ms), count)| LatenessCount {
                channel,
                bucket_ms,
                count,
            })
            .collect();
        assert_eq!(summary.lateness, lateness);
        assert_eq!(
            summary.busiest,
            [DueCount {
                due_at: at(10),
                count: mail.len() as u64
            }],
            "the busiest instant only"
        );
        assert_eq!(summary.due_instants, 2);

        let seconds = s.delivered_per_second(&[at(20)], 5).await.unwrap();
        let second = |second, count| SecondCount {
            due_at: at(20),
            second,
            count,
        };
        assert_eq!(
            seconds,
            [
                second(-6, 1),
                second(-2, 1),
                second(-1, 1),
                second(0, 2),
                second(5, 1)
            ],
            "floored to the second, clamped to -6..=5"
        );
        assert!(s.delivered_per_second(&[], 5).await.unwrap().is_empty());
    }
}

#[macro_export]
macro_rules! store_conformance {
    ($(#[$meta:meta])* $factory:path) => {
        mod store_conformance {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn suppression_listed_recipients_are_found_with_the_context() {
                common::conformance::suppression::listed_recipients_are_found_with_the_context(
                    $factory().await,
                )
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn report_aggregates_are_computed_from_the_delivered_rows() {
                common::conformance::report::aggregates_are_computed_from_the_delivered_rows(
                    $factory().await,
                )
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn users_round_trip() {
                common::conformance::store::users_round_trip($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn webhook_settings_round_trip() {
                common::conformance::store::webhook_settings_round_trip($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn templates_round_trip() {
                common::conformance::store::templates_round_trip($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn schedule_versions_never_repeat() {
                common::conformance::store::schedule_versions_never_repeat($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn delivered_rows_name_their_holder() {
                common::conformance::store::delivered_rows_name_their_holder($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn a_batch_writes_each_valid_schedule() {
                common::conformance::store::a_batch_writes_each_valid_schedule($factory().await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn unknown_participant_is_rejected_and_nothing_written() {
                common::conformance::store::unknown_participant_is_rejected_and_nothing_written(
                    $factory().await,
                )
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn mirror_journal() {
                common::conformance::store::mirror_journal($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn series_round_trip_and_horizon() {
                common::conformance::store::series_round_trip_and_horizon($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn delivery_context_in_one_call() {
                common::conformance::store::delivery_context_in_one_call($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn one_reminders_deliveries() {
                common::conformance::store::one_reminders_deliveries($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn claims_make_deliveries_exactly_once() {
                common::conformance::store::claims_make_deliveries_exactly_once($factory().await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn chat_messages_are_idempotent() {
                common::conformance::store::chat_messages_are_idempotent($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn claims_carry_the_failure_budget() {
                common::conformance::store::claims_carry_the_failure_budget($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn renewed_claims_are_not_taken_over() {
                common::conformance::store::renewed_claims_are_not_taken_over($factory().await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn schedule_versions_are_read_at_once() {
                common::conformance::store::schedule_versions_are_read_at_once($factory().await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn change_baselines_and_notices() {
                common::conformance::store::change_baselines_and_notices($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn racing_freezes_tell_a_change_once() {
                common::conformance::store::racing_freezes_tell_a_change_once($factory().await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn a_revoked_claim_is_recorded_stale() {
                common::conformance::store::a_revoked_claim_is_recorded_stale($factory().await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn a_key_keeps_its_first_answer_for_a_day() {
                common::conformance::idempotency::a_key_keeps_its_first_answer_for_a_day(
                    $factory().await,
                )
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn abandoned_and_released_keys_start_afresh() {
                common::conformance::idempotency::abandoned_and_released_keys_start_afresh(
                    $factory().await,
                )
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn racing_starts_take_a_key_once() {
                common::conformance::idempotency::racing_starts_take_a_key_once($factory().await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn the_purge_is_bounded_and_oldest_first() {
                common::conformance::idempotency::the_purge_is_bounded_and_oldest_first(
                    $factory().await,
                )
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn outcomes_make_the_events_endpoints_want() {
                common::conformance::events::outcomes_make_the_events_endpoints_want($factory().await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn progress_never_undoes_the_tenants_change() {
                common::conformance::events::progress_never_undoes_the_tenants_change($factory().await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn replay_point_and_purge_respect_instants() {
                common::conformance::events::replay_point_and_purge_respect_instants($factory().await)
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn audit_entries_round_trip_in_order_and_purge_by_age() {
                common::audit::entries_round_trip_in_order_and_purge_by_age($factory().await).await
            }
        }
    };
}

// ---------------------------------------------------------------- debounce store

pub mod debounce {
    use super::*;
    use toki_core::debounce::{DebounceTimer, Debouncer};
    use toki_core::testing::RecordingAction;
    use toki_model::debounce::{DebounceEntry, DebounceSettings};
    use toki_ports::DebounceStore;

    fn entry(key: &str, token: &str, pending: bool) -> DebounceEntry {
        let now = from_millis("now", Utc::now().timestamp_millis()).unwrap();
        DebounceEntry {
            key: key.into(),
            token: token.into(),
            burst_started: now,
            last_call: now + ChronoDuration::milliseconds(1_250),
            delay: Duration::from_millis(7_100),
            pending,
        }
    }

    pub async fn created_only_when_absent(s: Arc<dyn DebounceStore>) {
        let key = unique("t:s");
        assert_eq!(s.get(&key).await.unwrap(), None);
        let first = entry(&key, "a", false);
        assert!(s.put_if(&first, None).await.unwrap().is_written());
        assert!(!s
            .put_if(&entry(&key, "b", true), None)
            .await
            .unwrap()
            .is_written());
        assert_eq!(s.get(&key).await.unwrap(), Some(first), "round trip");
    }

    pub async fn replaced_only_by_the_holder_of_its_token(s: Arc<dyn DebounceStore>) {
        let key = unique("t:s");
        assert!(s
            .put_if(&entry(&key, "a", false), None)
            .await
            .unwrap()
            .is_written());
        assert!(!s
            .put_if(&entry(&key, "b", true), Some("x"))
            .await
            .unwrap()
            .is_written());
        let second = entry(&key, "b", true);
        assert!(s.put_if(&second, Some("a")).await.unwrap().is_written());
        assert_eq!(s.get(&key).await.unwrap(), Some(second));
        assert!(
            !s.put_if(&entry(&key, "c", true), Some("a"))
                .await
                .unwrap()
                .is_written(),
            "the old token no longer holds the row"
        );
        // A row that is gone cannot be replaced.
        assert!(!s
            .put_if(&entry(&unique("t:s"), "z", true), Some("a"))
            .await
            .unwrap()
            .is_written());
    }

    pub async fn removed_only_with_its_token(s: Arc<dyn DebounceStore>) {
        let key = unique("t:s");
        assert!(
            !s.remove_if(&key, "a").await.unwrap().is_written(),
            "nothing there"
        );
        assert!(s
            .put_if(&entry(&key, "a", false), None)
            .await
            .unwrap()
            .is_written());
        assert!(!s.remove_if(&key, "b").await.unwrap().is_written());
        assert!(s.get(&key).await.unwrap().is_some());
        assert!(s.remove_if(&key, "a").await.unwrap().is_written());
        assert_eq!(s.get(&key).await.unwrap(), None);
    }

    /// Timers that only count (the conformance is about the rows).
    #[derive(Default)]
    struct CountingTimer(std::sync::atomic::AtomicUsize);

    #[async_trait::async_trait]
    impl DebounceTimer for CountingTimer {
        async fn arm(&self, _: &str, _: &str, _: Instant, _: &DebounceSettings) -> StoreResult<()> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
    }

    /// Many tasks call one key at once: exactly one acts on the leading edge,
    /// every call lands (each armed a check) and the row holds one of their tokens.
    pub async fn racing_calls_make_one_leading_edge(s: Arc<dyn DebounceStore>) {
        let key = unique("t:s");
        let clock: Arc<dyn toki_ports::Clock> = Arc::new(toki_ports::SystemClock);
        let timer = Arc::new(CountingTimer::default());
        let debouncer = Debouncer {
            store: s.clone(),
            timer: timer.clone(),
            clock: clock.clone(),
        };
        let action = RecordingAction::new(clock);
        let settings = DebounceSettings::default();
        let calls = (0..16).map(|_| {
            let (d, a, k, st) = (
                debouncer.clone(),
                action.clone(),
                key.clone(),
                settings.clone(),
            );
            tokio::spawn(async move { d.call(&k, &st, a.as_ref()).await })
        });
        let outcomes: Vec<_> = futures::future::join_all(calls)
            .await
            .into_iter()
            .map(|r| r.unwrap().unwrap())
            .collect();
        assert_eq!(outcomes.iter().filter(|o| o.acted).count(), 1);
        assert_eq!(action.acted().len(), 1);
        assert_eq!(timer.0.load(std::sync::atomic::Ordering::Relaxed), 16);
        let row = s.get(&key).await.unwrap().expect("the row");
        assert!(outcomes.iter().any(|o| o.token == row.token));
        assert!(row.pending, "the later calls wait for the trailing edge");
    }
}

#[macro_export]
macro_rules! debounce_conformance {
    ($(#[$meta:meta])* $factory:path) => {
        mod debounce_conformance {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn created_only_when_absent() {
                common::conformance::debounce::created_only_when_absent($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn replaced_only_by_the_holder_of_its_token() {
                common::conformance::debounce::replaced_only_by_the_holder_of_its_token(
                    $factory().await,
                )
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn removed_only_with_its_token() {
                common::conformance::debounce::removed_only_with_its_token($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn racing_calls_make_one_leading_edge() {
                common::conformance::debounce::racing_calls_make_one_leading_edge($factory().await)
                    .await
            }
        }
    };
}

// ---------------------------------------------------------------- lease store

pub mod marks {
    use super::*;
    use toki_ports::{WorkKind, WorkMarks};

    /// A fixed instant with a millisecond part (a store rounding to seconds
    /// would not read it back).
    fn t0() -> Instant {
        "2026-11-23T08:00:00.123Z".parse().unwrap()
    }

    fn at(s: i64) -> Instant {
        t0() + ChronoDuration::seconds(s)
    }

    fn tenant(prefix: &str) -> TenantId {
        unique(prefix).parse().unwrap()
    }

    /// A mark is due from its instant on, earliest first, by kind; marking
    /// again keeps the earlier instant; at most `limit` are read.
    pub async fn marks_fall_due_in_order_and_keep_the_earliest(m: Arc<dyn WorkMarks>) {
        let (a, b, c) = (tenant("a"), tenant("b"), tenant("c"));
        m.mark(WorkKind::Events, &a, at(10)).await.unwrap();
        m.mark(WorkKind::Events, &b, at(5)).await.unwrap();
        m.mark(WorkKind::Events, &c, at(60)).await.unwrap();
        m.mark(WorkKind::Repair, &a, at(0)).await.unwrap();
        // Later: the earlier instant stands.
        m.mark(WorkKind::Events, &b, at(30)).await.unwrap();
        assert!(m.due(WorkKind::Events, at(4), 10).await.unwrap().is_empty());
        let due = m.due(WorkKind::Events, at(10), 10).await.unwrap();
        let names: Vec<_> = due.iter().map(|d| d.tenant.clone()).collect();
        assert_eq!(names, [b.clone(), a.clone()], "earliest first, c not yet");
        assert_eq!(due[0].due, at(5));
        assert_eq!(due[0].kind, WorkKind::Events);
        assert_eq!(m.due(WorkKind::Events, at(100), 1).await.unwrap().len(), 1);
        // Earlier: it moves forward.
        m.mark(WorkKind::Events, &c, at(1)).await.unwrap();
        let due = m.due(WorkKind::Events, at(2), 10).await.unwrap();
        assert_eq!(due.iter().map(|d| &d.tenant).collect::<Vec<_>>(), [&c]);
        let repair = m.due(WorkKind::Repair, at(0), 10).await.unwrap();
        assert_eq!(repair.len(), 1, "kinds apart");
        let mut marked = m.marked(WorkKind::Events).await.unwrap();
        marked.sort();
        let mut all = vec![a, b, c];
        all.sort();
        assert_eq!(marked, all);
    }

    /// A settle of what was read removes the mark or moves it; one after
    /// the mark was written again leaves it (the new work stays), moved to
    /// the settle's instant only if that is earlier.
    pub async fn a_settle_never_clears_work_marked_after_the_read(m: Arc<dyn WorkMarks>) {
        let (a, b) = (tenant("a"), tenant("b"));
        m.mark(WorkKind::Events, &a, at(0)).await.unwrap();
        m.mark(WorkKind::Events, &b, at(0)).await.unwrap();
        let read = m.due(WorkKind::Events, at(0), 10).await.unwrap();
        let (ra, rb) = (
            read.iter().find(|r| r.tenant == a).unwrap().clone(),
            read.iter().find(|r| r.tenant == b).unwrap().clone(),
        );
        // a: done; gone.
        assert!(m.settle(&ra, None).await.unwrap().is_written());
        // b: marked again meanwhile (later), then settled as done: it stays.
        m.mark(WorkKind::Events, &b, at(20)).await.unwrap();
        assert!(!m.settle(&rb, None).await.unwrap().is_written());
        let left = m.due(WorkKind::Events, at(100), 10).await.unwrap();
        assert_eq!(left.iter().map(|r| &r.tenant).collect::<Vec<_>>(), [&b]);
        assert_eq!(
            left[0].due,
            at(0),
            "the earlier instant of the two markings"
        );
        // Settled to later with the new revision: moved.
        let rb2 = left[0].clone();
        assert!(m.settle(&rb2, Some(at(50))).await.unwrap().is_written());
        assert!(m
            .due(WorkKind::Events, at(49), 10)
            .await
            .unwrap()
            .is_empty());
        let again = m.due(WorkKind::Events, at(50), 10).await.unwrap();
        assert_eq!(again.len(), 1);
        // A stale read's settle to an earlier instant brings it forward; to
        // a later one changes nothing.
        assert!(!m.settle(&rb, Some(at(70))).await.unwrap().is_written());
        assert_eq!(
            m.due(WorkKind::Events, at(50), 10).await.unwrap()[0].due,
            at(50)
        );
        assert!(!m.settle(&rb, Some(at(40))).await.unwrap().is_written());
        assert_eq!(
            m.due(WorkKind::Events, at(50), 10).await.unwrap()[0].due,
            at(40)
        );
        // A settle of a removed mark writes nothing back.
        assert!(!m.settle(&ra, Some(at(1))).await.unwrap().is_written());
        assert!(!m.marked(WorkKind::Events).await.unwrap().contains(&a));
    }

    /// Marks written at once by many writers for one tenant leave one mark
    /// at the earliest instant, and a settle of a read taken before them
    /// leaves it.
    pub async fn racing_marks_leave_one_at_the_earliest(m: Arc<dyn WorkMarks>) {
        let a = tenant("a");
        m.mark(WorkKind::Retention, &a, at(100)).await.unwrap();
        let read = m.due(WorkKind::Retention, at(100), 10).await.unwrap();
        let writes = (0..16).map(|i| {
            let (m, a) = (m.clone(), a.clone());
            tokio::spawn(async move { m.mark(WorkKind::Retention, &a, at(10 + i)).await })
        });
        for w in futures::future::join_all(writes).await {
            w.unwrap().unwrap();
        }
        assert!(!m.settle(&read[0], None).await.unwrap().is_written());
        let due = m.due(WorkKind::Retention, at(1000), 10).await.unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].due, at(10));
    }
}

pub mod lease {
    use super::*;
    use toki_ports::{LeaseStore, PartitionLease};

    /// Now, to the millisecond (what every store keeps).
    fn now() -> Instant {
        from_millis("now", Utc::now().timestamp_millis()).unwrap()
    }

    /// An instant with a millisecond part, so that a store rounding to
    /// seconds would not read it back.
    fn at(base: Instant, ms: i64) -> Instant {
        base + ChronoDuration::milliseconds(ms)
    }

    fn row(key: &str, partition: u32, holder: &str, expires_at: Instant) -> PartitionLease {
        PartitionLease {
            key: key.into(),
            partition,
            holder: holder.into(),
            expires_at,
        }
    }

    pub async fn a_free_partition_is_acquired(s: Arc<dyn LeaseStore>) {
        let key = unique("limit:");
        let t0 = now();
        assert_eq!(s.leases(&key).await.unwrap(), vec![], "nothing yet");
        let until = at(t0, 10_137);
        assert!(s
            .acquire(&key, 3, "a", until, t0)
            .await
            .unwrap()
            .is_written());
        assert_eq!(
            s.leases(&key).await.unwrap(),
            vec![row(&key, 3, "a", until)],
            "holder and expiry read back to the millisecond"
        );
    }

    pub async fn a_live_lease_is_refused_to_others_and_renewed_by_its_holder(
        s: Arc<dyn LeaseStore>,
    ) {
        let key = unique("limit:");
        let t0 = now();
        let first = at(t0, 10_001);
        assert!(s
            .acquire(&key, 0, "a", first, t0)
            .await
            .unwrap()
            .is_written());
        // Live until `first`, even a millisecond before it.
        assert!(!s
            .acquire(&key, 0, "b", at(t0, 20_000), at(t0, 10_000))
            .await
            .unwrap()
            .is_written());
        assert_eq!(
            s.leases(&key).await.unwrap(),
            vec![row(&key, 0, "a", first)]
        );
        let renewed = at(t0, 25_503);
        assert!(s
            .acquire(&key, 0, "a", renewed, at(t0, 5_000))
            .await
            .unwrap()
            .is_written());
        assert_eq!(
            s.leases(&key).await.unwrap(),
            vec![row(&key, 0, "a", renewed)],
            "the renewal's expiry reads back"
        );
        assert!(
            !s.acquire(&key, 0, "b", at(t0, 30_000), at(t0, 20_000))
                .await
                .unwrap()
                .is_written(),
            "still refused past the first expiry: the renewal counts"
        );
    }

    pub async fn an_expired_lease_is_taken_over(s: Arc<dyn LeaseStore>) {
        let key = unique("limit:");
        let t0 = now();
        let a_until = at(t0, 1_250);
        assert!(s
            .acquire(&key, 7, "a", a_until, t0)
            .await
            .unwrap()
            .is_written());
        // Expired at its own instant (expires_at <= now).
        let b_until = at(t0, 11_250);
        assert!(s
            .acquire(&key, 7, "b", b_until, a_until)
            .await
            .unwrap()
            .is_written());
        assert_eq!(
            s.leases(&key).await.unwrap(),
            vec![row(&key, 7, "b", b_until)]
        );
        assert!(
            !s.acquire(&key, 7, "a", at(t0, 12_000), at(t0, 2_000))
                .await
                .unwrap()
                .is_written(),
            "the old holder cannot renew what it lost"
        );
        assert!(
            !s.release(&key, 7, "a").await.unwrap().is_written(),
            "nor give it back"
        );
        assert_eq!(
            s.leases(&key).await.unwrap(),
            vec![row(&key, 7, "b", b_until)]
        );
    }

    pub async fn released_only_by_its_holder(s: Arc<dyn LeaseStore>) {
        let key = unique("limit:");
        let t0 = now();
        assert!(
            !s.release(&key, 1, "a").await.unwrap().is_written(),
            "nothing there"
        );
        let a_until = at(t0, 60_000);
        assert!(s
            .acquire(&key, 1, "a", a_until, t0)
            .await
            .unwrap()
            .is_written());
        assert!(!s.release(&key, 1, "b").await.unwrap().is_written());
        assert!(
            !s.release(&key, 2, "a").await.unwrap().is_written(),
            "another partition"
        );
        assert_eq!(
            s.leases(&key).await.unwrap(),
            vec![row(&key, 1, "a", a_until)]
        );
        assert!(s.release(&key, 1, "a").await.unwrap().is_written());
        assert_eq!(s.leases(&key).await.unwrap(), vec![], "the row is gone");
        assert!(!s.release(&key, 1, "a").await.unwrap().is_written(), "once");
        // Free again well before the old lease would have expired.
        let b_until = at(t0, 30_000);
        assert!(s
            .acquire(&key, 1, "b", b_until, at(t0, 1))
            .await
            .unwrap()
            .is_written());
        assert_eq!(
            s.leases(&key).await.unwrap(),
            vec![row(&key, 1, "b", b_until)]
        );
    }

    /// Many holders race for one free partition: exactly one gets it, and the
    /// row names the winner.
    pub async fn racing_holders_make_one_winner(s: Arc<dyn LeaseStore>) {
        let key = unique("limit:");
        let t0 = now();
        let until = at(t0, 30_000);
        let tries = (0..16).map(|i| {
            let (s, key) = (s.clone(), key.clone());
            tokio::spawn(async move {
                let holder = format!("h{i}");
                let won = s
                    .acquire(&key, 5, &holder, until, t0)
                    .await
                    .unwrap()
                    .is_written();
                (holder, won)
            })
        });
        let outcomes: Vec<_> = futures::future::join_all(tries)
            .await
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        let winners: Vec<_> = outcomes.iter().filter(|(_, won)| *won).collect();
        assert_eq!(winners.len(), 1, "{outcomes:?}");
        assert_eq!(
            s.leases(&key).await.unwrap(),
            vec![row(&key, 5, &winners[0].0, until)]
        );
    }

    /// A key's leases, by partition; a key sharing its prefix is another key.
    pub async fn leases_lists_one_keys_partitions(s: Arc<dyn LeaseStore>) {
        let key = unique("limit:");
        let other = format!("{key}:x");
        let t0 = now();
        let live = at(t0, 60_000);
        let expired = at(t0, -5_000);
        // Written out of order, and 12 < 3 were they compared as text.
        for (p, holder, until) in [(12, "a", live), (3, "b", expired), (0, "a", live)] {
            assert!(s
                .acquire(&key, p, holder, until, at(t0, -10_000))
                .await
                .unwrap()
                .is_written());
        }
        assert!(s
            .acquire(&other, 1, "c", live, t0)
            .await
            .unwrap()
            .is_written());
        assert_eq!(
            s.leases(&key).await.unwrap(),
            vec![
                row(&key, 0, "a", live),
                row(&key, 3, "b", expired),
                row(&key, 12, "a", live),
            ],
            "live and expired rows, by partition, none of {other}"
        );
        assert_eq!(
            s.leases(&other).await.unwrap(),
            vec![row(&other, 1, "c", live)]
        );
    }
}

#[macro_export]
macro_rules! lease_conformance {
    ($(#[$meta:meta])* $factory:path) => {
        mod lease_conformance {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn a_free_partition_is_acquired() {
                common::conformance::lease::a_free_partition_is_acquired($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn a_live_lease_is_refused_to_others_and_renewed_by_its_holder() {
                common::conformance::lease::a_live_lease_is_refused_to_others_and_renewed_by_its_holder(
                    $factory().await,
                )
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn an_expired_lease_is_taken_over() {
                common::conformance::lease::an_expired_lease_is_taken_over($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn released_only_by_its_holder() {
                common::conformance::lease::released_only_by_its_holder($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn racing_holders_make_one_winner() {
                common::conformance::lease::racing_holders_make_one_winner($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn leases_lists_one_keys_partitions() {
                common::conformance::lease::leases_lists_one_keys_partitions($factory().await)
                    .await
            }
        }
    };
}

#[macro_export]
macro_rules! marks_conformance {
    ($(#[$meta:meta])* $factory:path) => {
        mod marks_conformance {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn marks_fall_due_in_order_and_keep_the_earliest() {
                common::conformance::marks::marks_fall_due_in_order_and_keep_the_earliest($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn a_settle_never_clears_work_marked_after_the_read() {
                common::conformance::marks::a_settle_never_clears_work_marked_after_the_read($factory().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$meta])*
            async fn racing_marks_leave_one_at_the_earliest() {
                common::conformance::marks::racing_marks_leave_one_at_the_earliest($factory().await).await
            }
        }
    };
}
