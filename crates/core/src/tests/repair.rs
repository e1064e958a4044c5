//! The repair pass over many tenants on paused time: a stalled or failing
//! tenant delays no other's index repair or series extension, is counted,
//! retried and caught up; the tenants at once are bounded; a pass out of
//! budget is continued by the next from where it stopped.

use std::time::Duration;

use chrono::{Duration as ChronoDuration, Utc};

use crate::repair::RepairSummary;
use crate::settings::RepairSettings;
use crate::testing::{meeting, TestKit};
use toki_model::domain::{Channel, TenantId};
use toki_model::input::{RecurrenceInput, ScheduleInput};
use toki_ports::{ReminderIndex, TenantStore};

const STALL: Duration = Duration::from_secs(3600);

/// Every Monday at 10:00 UTC from the kit's first Monday, reminded 5 minutes before.
fn weekly_standup() -> ScheduleInput {
    ScheduleInput {
        starts_at: "2026-11-23T10:00:00".into(),
        time_zone: "UTC".into(),
        recurrence: Some(RecurrenceInput {
            rrule: "FREQ=WEEKLY;BYDAY=MO".into(),
            exdates: vec![],
        }),
        ..meeting(Utc::now(), 5, &["u0"], &[Channel::Chat])
    }
}

/// Tenants with a weekly series whose horizon runs short (4 days on) and a
/// write whose mirror failed: each has 2 writes for the repair pass.
async fn tenants_due_for_repair(kit: &TestKit, names: &[&str]) -> Vec<TenantId> {
    let mut tenants = Vec::new();
    for name in names {
        let t = kit.tenant(name).await;
        kit.registrar()
            .put_schedule(&t, &"standup".parse().unwrap(), &weekly_standup())
            .await
            .unwrap();
        tenants.push(t);
    }
    tokio::time::advance(Duration::from_secs(4 * 86_400)).await;
    kit.index.set_down(true);
    for t in &tenants {
        let review = meeting(
            kit.now() + ChronoDuration::hours(2),
            5,
            &["u0"],
            &[Channel::Mail],
        );
        let r = kit
            .registrar()
            .put_schedule(t, &"review".parse().unwrap(), &review)
            .await
            .unwrap();
        assert!(!r.mirrored);
    }
    kit.index.set_down(false);
    tenants
}

/// Whether `tenant`'s repair is done: next Monday's standup (the series
/// extended) and the review (the failed mirror) are in the index.
fn repaired(kit: &TestKit, tenant: &TenantId) -> bool {
    let schedules: Vec<String> = kit
        .index
        .rows()
        .into_iter()
        .filter(|r| &r.reminder.key.tenant == tenant)
        .map(|r| r.reminder.key.schedule.to_string())
        .collect();
    let standups = schedules.iter().filter(|s| *s == "standup").count();
    standups == 2 && schedules.iter().any(|s| s == "review")
}

#[tokio::test(start_paused = true)]
async fn a_stalled_tenant_delays_no_other_tenants_repair_and_catches_up() {
    let kit = TestKit::new();
    // By id the stalled tenant comes first: a pass in turn would wait on it.
    let names = ["a-stalled", "b-down", "c", "d", "e"];
    let tenants = tenants_due_for_repair(&kit, &names).await;
    let (stalled, down, healthy) = (&tenants[0], &tenants[1], &tenants[2..]);
    kit.stores.get(stalled).unwrap().set_stall(Some(STALL));
    kit.stores.get(down).unwrap().set_down(true);
    let began = kit.now();

    let registrar = kit.registrar();
    let pass = tokio::spawn(async move { registrar.repair_pass(None).await });
    // A second into the pass, with the stalled tenant still held: every
    // healthy tenant's mirror is repaired and its series extended.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for t in healthy {
        assert!(repaired(&kit, t), "{t} waited behind the stalled tenant");
    }
    assert!(!pass.is_finished(), "the stalled tenant is still held");
    let summary = pass.await.unwrap().unwrap();
    assert_eq!(
        summary,
        RepairSummary {
            tenants: 5,
            repaired: 6,
            failed_tenants: 1,
            timed_out_tenants: 1,
            deferred_tenants: 0,
        }
    );
    let deadline = RepairSettings::default().tenant_deadline;
    assert_eq!(
        kit.now() - began,
        ChronoDuration::from_std(deadline).unwrap()
    );
    assert!(!repaired(&kit, stalled) && !repaired(&kit, down));

    // Still stalled and down: counted again, and the others have nothing left.
    let again = kit.registrar().repair_pass(None).await.unwrap();
    assert_eq!(
        (
            again.repaired,
            again.failed_tenants,
            again.timed_out_tenants
        ),
        (0, 1, 1)
    );

    // Recovered: the next pass catches both up.
    kit.stores.get(stalled).unwrap().set_stall(None);
    kit.stores.get(down).unwrap().set_down(false);
    let recovered = kit.registrar().repair_pass(None).await.unwrap();
    assert_eq!(
        recovered,
        RepairSummary {
            tenants: 5,
            repaired: 4,
            ..RepairSummary::default()
        }
    );
    for t in &tenants {
        assert!(repaired(&kit, t), "{t}");
        let store = kit.stores.get(t).unwrap();
        assert!(store.unmirrored(kit.now()).await.unwrap().is_empty());
    }
}

/// Ten stalled tenants, 2 at a time, 20 s each, 50 s a pass.
fn ten_stalled_tenants_kit() -> TestKit {
    let mut kit = TestKit::new();
    kit.pipeline.repair = RepairSettings {
        concurrency: 2,
        tenant_deadline: Duration::from_secs(20),
        pass_budget: Duration::from_secs(50),
    };
    kit
}

fn ids(range: std::ops::Range<usize>) -> Vec<TenantId> {
    range.map(|i| format!("t{i}").parse().unwrap()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_pass_out_of_budget_is_continued_by_the_next_from_where_it_stopped() {
    let kit = ten_stalled_tenants_kit();
    for t in ids(0..10) {
        kit.tenant(t.as_str()).await;
        kit.stores.get(&t).unwrap().set_stall(Some(STALL));
    }
    kit.stores.forget_opened();

    let registrar = kit.registrar();
    let pass = tokio::spawn(async move { registrar.repair_pass(None).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(kit.stores.opened(), ids(0..2), "two tenants at a time");
    // Begun at 0, 20 and 40 s: t0..t3 time out, t4 and t5 are cut at 50 s,
    // t6..t9 never begin. The next pass starts at t4.
    let first = pass.await.unwrap().unwrap();
    assert_eq!(kit.stores.opened(), ids(0..6));
    assert_eq!((first.timed_out_tenants, first.deferred_tenants), (4, 6));
    let t4: TenantId = "t4".parse().unwrap();
    assert_eq!(kit.index.repair_cursor().await.unwrap(), Some(t4));

    kit.stores.forget_opened();
    let second = kit.registrar().repair_pass(None).await.unwrap();
    assert_eq!(kit.stores.opened(), ids(4..10), "continued at t4");
    assert_eq!((second.timed_out_tenants, second.deferred_tenants), (4, 6));

    // Recovered: one pass (from t8, round to t7) reaches every tenant, and
    // the next starts one further on.
    for t in ids(0..10) {
        kit.stores.get(&t).unwrap().set_stall(None);
    }
    kit.stores.forget_opened();
    let third = kit.registrar().repair_pass(None).await.unwrap();
    assert_eq!(kit.stores.opened(), ids(0..10));
    assert_eq!(third.unfinished_tenants() + third.deferred_tenants, 0);
    let t9: TenantId = "t9".parse().unwrap();
    assert_eq!(kit.index.repair_cursor().await.unwrap(), Some(t9));
}
