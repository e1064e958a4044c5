//! Offboarding on the testing kit, on paused time: a deleted tenant's
//! reminders are never sent after the delete returns, its queued messages
//! are disposed of with the reason counted, and another tenant is untouched.

use std::sync::Arc;
use std::time::Duration;

use chrono::Duration as ChronoDuration;

use crate::offboard::{OffboardSettings, Offboarding};
use crate::testing::{meeting, TestKit};
use toki_model::domain::{Channel, TenantId};
use toki_ports::{DelayQueue, TenantDirectory, TenantFootprint};

fn mins(n: i64) -> ChronoDuration {
    ChronoDuration::minutes(n)
}

const WAIT: Duration = Duration::from_secs(3600);

fn offboarding(kit: &TestKit) -> Offboarding {
    let footprints: Vec<Arc<dyn TenantFootprint>> =
        vec![kit.index.clone(), kit.debounce.clone(), kit.leases.clone()];
    Offboarding {
        directory: kit.directory.clone(),
        stores: kit.stores.clone(),
        footprints,
        clock: kit.clock.clone(),
        settings: OffboardSettings {
            lease: kit.daemon_settings.visibility,
            ..OffboardSettings::default()
        },
    }
}

/// Meetings `<tenant>-0..n`, reminded by mail and Slack to u0 and u1, the
/// first due `first` from now and the others a minute apart.
async fn meetings(kit: &TestKit, t: &TenantId, n: usize, first: ChronoDuration) {
    for i in 0..n {
        let due = kit.now() + first + mins(i as i64);
        kit.registrar()
            .put_schedule(
                t,
                &format!("{t}-{i}").parse().unwrap(),
                &meeting(
                    due + mins(5),
                    5,
                    &["u0", "u1"],
                    &[Channel::Mail, Channel::Slack],
                ),
            )
            .await
            .unwrap();
    }
}

/// The kit's offboarding, and the database dropped as the app does.
async fn delete(kit: &TestKit, t: &TenantId) {
    let off = offboarding(kit);
    off.quiesce(t).await.unwrap();
    assert!(kit.stores.remove(t), "the database is dropped");
    off.remove(t).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_deleted_tenant_gets_nothing_and_its_queued_messages_are_disposed_of() {
    let kit = TestKit::new();
    let acme = kit.tenant("acme").await;
    let globex = kit.tenant("globex").await;
    // Five due within the scanner's 15 minutes (queued), five beyond (indexed only).
    for t in [&acme, &globex] {
        meetings(&kit, t, 5, mins(8)).await;
    }
    for (t, i) in [(&acme, 5), (&globex, 5)] {
        for j in 0..5 {
            let due = kit.now() + mins(30 + j);
            kit.registrar()
                .put_schedule(
                    t,
                    &format!("{t}-{}", i + j).parse().unwrap(),
                    &meeting(due + mins(5), 5, &["u0"], &[Channel::Mail]),
                )
                .await
                .unwrap();
        }
    }
    let run = kit.run();
    tokio::time::sleep(Duration::from_secs(1)).await; // the first scan
    let queued = kit.queue.depth().await.unwrap().messages;
    assert_eq!(queued, 10, "five reminders of each tenant queued");

    delete(&kit, &acme).await;
    let deleted_at = kit.now();
    assert!(kit.directory.get(&acme).await.unwrap().is_none());
    assert!(kit
        .index
        .rows()
        .iter()
        .all(|r| r.reminder.key.tenant != acme));

    // Past every due instant of both tenants.
    let globex_expected = 5 * 4 + 5;
    run.daemon
        .stats
        .wait_for(WAIT, |s| {
            s.delivered >= globex_expected as u64 && s.tenant_deleted >= 5
        })
        .await;
    tokio::time::sleep(Duration::from_secs(45 * 60)).await;
    let sent = kit.sent();
    assert!(
        sent.iter().all(|s| s.tenant == globex),
        "nothing of acme sent: {:?}",
        sent.iter().filter(|s| s.tenant == acme).collect::<Vec<_>>()
    );
    assert_eq!(sent.len(), globex_expected, "globex gets all of its own");
    let stats = run.daemon.stats.snapshot();
    assert_eq!(
        stats.tenant_deleted, 5,
        "acme's queued messages, disposed of"
    );
    let depth = kit.queue.depth().await.unwrap();
    assert_eq!(
        (depth.messages, depth.dead_letters),
        (0, 0),
        "none retried or dead-lettered"
    );
    assert!(kit
        .sent()
        .iter()
        .all(|s| s.tenant != acme || s.at < deleted_at));
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_send_in_flight_finishes_before_the_delete_returns_and_a_claim_after_the_fence_sends_nothing(
) {
    let kit = TestKit::new();
    let acme = kit.tenant("acme").await;
    // Two meetings: one whose send is in flight (held) when the delete
    // starts, one claimed during the lead just before its instant.
    meetings(&kit, &acme, 1, mins(1)).await;
    let run = kit.run();
    kit.mail.hold(true);
    kit.slack.hold(true);
    let due = kit.now() + mins(1);
    tokio::time::sleep(Duration::from_secs(61)).await; // sending, held
    assert!(kit.sent().is_empty(), "held");
    let later = kit.now() + mins(2);
    kit.registrar()
        .put_schedule(
            &acme,
            &"acme-late".parse().unwrap(),
            &meeting(later + mins(5), 5, &["u0"], &[Channel::Mail]),
        )
        .await
        .unwrap();

    let off = Arc::new(offboarding(&kit));
    let quiesce = {
        let (off, acme) = (off.clone(), acme.clone());
        tokio::spawn(async move { off.quiesce(&acme).await })
    };
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        !quiesce.is_finished(),
        "the delete waits for the send in flight"
    );
    kit.mail.hold(false);
    kit.slack.hold(false);
    quiesce.await.unwrap().unwrap();
    let returned = kit.now();
    let sent = kit.sent();
    assert_eq!(sent.len(), 4, "the send in flight went out: {sent:?}");
    assert!(sent.iter().all(|s| s.due_at.0 == due && s.at <= returned));
    // The later reminder's claim comes after the fence: nothing more is sent.
    tokio::time::sleep(Duration::from_secs(5 * 60)).await;
    assert_eq!(
        kit.sent().len(),
        4,
        "nothing sent after the delete returned"
    );
    run.stop().await;
}
