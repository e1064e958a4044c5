//! The registrar on paused time: what it writes, mirrors and enqueues.

use std::time::Duration;

use chrono::Duration as Minutes;

use crate::registrar::RegistrarError;
use crate::testing::{meeting, TestKit};
use toki_model::domain::{Channel, IndexStatus};
use toki_ports::{DelayQueue, TenantStore};

fn mins(n: i64) -> Minutes {
    Minutes::minutes(n)
}

#[tokio::test(start_paused = true)]
async fn outside_the_window_the_rows_wait_for_the_scanner() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let starts = kit.now() + mins(60);
    let r = kit
        .registrar()
        .put_schedule(
            &t,
            &"review".parse().unwrap(),
            &meeting(starts, 5, &["u0", "u1"], &[Channel::Mail]),
        )
        .await
        .unwrap();
    assert!(r.mirrored);
    assert_eq!(r.enqueued_directly, 0);
    assert_eq!(r.schedule.version, 1);
    let rows = kit.index.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, IndexStatus::Pending);
    assert_eq!(rows[0].reminder.due_at.0, starts - mins(5));
    assert_eq!(kit.queue.depth().await.unwrap().messages, 0);
    let store = kit.stores.get(&t).unwrap();
    assert!(
        store.unmirrored(kit.now()).await.unwrap().is_empty(),
        "the mirror is recorded done"
    );
}

#[tokio::test(start_paused = true)]
async fn inside_the_window_it_goes_straight_to_the_queue() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let starts = kit.now() + mins(10);
    let mut input = meeting(starts, 5, &["u0"], &[Channel::Mail]);
    input.reminders.push(toki_model::input::RuleInput {
        minutes_before: 60,
        channels: vec!["chat".into()],
    });
    let r = kit
        .registrar()
        .put_schedule(&t, &"review".parse().unwrap(), &input)
        .await
        .unwrap();
    // The 5-minute reminder is due in 5 minutes: enqueued now. The 60-minute
    // one is already past (more than the look-back ago): not mirrored at all.
    assert_eq!(r.enqueued_directly, 1);
    let rows = kit.index.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, IndexStatus::Enqueued);
    let got = kit
        .queue
        .receive(10, Duration::from_secs(900), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    // Visible `lead` before due, not earlier.
    assert_eq!(
        kit.now(),
        starts - mins(5) - Minutes::from_std(kit.pipeline.lead).unwrap()
    );
}

#[tokio::test(start_paused = true)]
async fn a_tenant_whose_contract_is_off_is_not_enqueued() {
    let kit = TestKit::new();
    let t = kit.tenant_with("offco", false).await;
    let r = kit
        .registrar()
        .put_schedule(
            &t,
            &"review".parse().unwrap(),
            &meeting(kit.now() + mins(6), 5, &["u0"], &[Channel::Mail]),
        )
        .await
        .unwrap();
    assert_eq!(r.enqueued_directly, 0);
    assert_eq!(
        kit.index.rows()[0].status,
        IndexStatus::Pending,
        "held back, not lost"
    );
}

#[tokio::test(start_paused = true)]
async fn bad_input_names_the_field_and_writes_nothing() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let id = "review".parse().unwrap();
    let err = kit
        .registrar()
        .put_schedule(
            &t,
            &id,
            &meeting(kit.now() + mins(6), 5, &["u0", "ghost"], &[Channel::Mail]),
        )
        .await
        .unwrap_err();
    match err {
        RegistrarError::Invalid(v) => assert_eq!(v.field, "participants[1]"),
        other => panic!("expected invalid input, got {other:?}"),
    }
    assert!(kit.index.rows().is_empty());
    assert!(kit
        .stores
        .get(&t)
        .unwrap()
        .get_schedule(&id)
        .await
        .unwrap()
        .is_none());
    let unknown = kit
        .registrar()
        .put_schedule(
            &"nobody".parse().unwrap(),
            &id,
            &meeting(kit.now(), 5, &["u0"], &[Channel::Mail]),
        )
        .await
        .unwrap_err();
    assert!(matches!(unknown, RegistrarError::UnknownTenant(_)));
}

#[tokio::test(start_paused = true)]
async fn a_failed_mirror_is_recorded_and_repaired() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    kit.index.set_down(true);
    let r = kit
        .registrar()
        .put_schedule(
            &t,
            &"review".parse().unwrap(),
            &meeting(kit.now() + mins(30), 5, &["u0"], &[Channel::Mail]),
        )
        .await
        .unwrap();
    assert!(
        !r.mirrored,
        "the tenant database has it; the index does not yet"
    );
    assert_eq!(
        kit.stores
            .get(&t)
            .unwrap()
            .unmirrored(kit.now())
            .await
            .unwrap()
            .len(),
        1
    );
    kit.index.set_down(false);
    assert_eq!(kit.registrar().repair_pass(None).await.unwrap().repaired, 1);
    assert_eq!(kit.index.rows().len(), 1);
    assert!(kit
        .stores
        .get(&t)
        .unwrap()
        .unmirrored(kit.now())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_delete_removes_the_rows_and_a_new_write_gets_a_new_version() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let id = "review".parse().unwrap();
    let input = meeting(kit.now() + mins(30), 5, &["u0"], &[Channel::Mail]);
    kit.registrar().put_schedule(&t, &id, &input).await.unwrap();
    kit.registrar().delete_schedule(&t, &id).await.unwrap();
    assert!(kit.index.rows().is_empty());
    assert!(matches!(
        kit.registrar().delete_schedule(&t, &id).await,
        Err(RegistrarError::NotFound(_))
    ));
    let again = kit.registrar().put_schedule(&t, &id, &input).await.unwrap();
    assert_eq!(again.schedule.version, 3, "versions never repeat");
}

#[tokio::test(start_paused = true)]
async fn a_batch_writes_the_valid_items_and_names_each_error() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let soon = kit.now() + mins(10);
    let later = kit.now() + mins(90);
    let mut bad_time = meeting(soon, 5, &["u0"], &[Channel::Slack]);
    bad_time.starts_at = "not a time".into();
    let items = vec![
        (
            "soon".parse().unwrap(),
            meeting(soon, 5, &["u0", "u1"], &[Channel::Mail]),
        ),
        ("bad-time".parse().unwrap(), bad_time),
        (
            "ghost".parse().unwrap(),
            meeting(soon, 5, &["nobody"], &[Channel::Chat]),
        ),
        (
            "later".parse().unwrap(),
            meeting(later, 5, &["u1"], &[Channel::Chat]),
        ),
    ];
    let results = kit.registrar().put_schedules(&t, &items).await.unwrap();
    assert_eq!(results.len(), 4);
    let soon = results[0].as_ref().expect("soon is written");
    assert!(soon.mirrored);
    assert_eq!(
        soon.enqueued_directly, 1,
        "due in 5 minutes: queued at once"
    );
    match &results[1] {
        Err(RegistrarError::Invalid(v)) => assert_eq!(v.field, "starts_at"),
        other => panic!("expected starts_at to be refused, got {other:?}"),
    }
    match &results[2] {
        Err(RegistrarError::Invalid(v)) => assert_eq!(v.field, "participants[0]"),
        other => panic!("expected the unknown participant to be refused, got {other:?}"),
    }
    let later = results[3].as_ref().expect("later is written");
    assert_eq!(
        later.enqueued_directly, 0,
        "outside the window: left to the scanner"
    );
    // Two schedules in the index, one of them queued; nothing of the refused ones.
    let mut rows: Vec<_> = kit
        .index
        .rows()
        .into_iter()
        .map(|r| (r.reminder.key.schedule.to_string(), r.status))
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0].0, "later");
    assert_eq!(rows[0].1, IndexStatus::Pending);
    assert_eq!(rows[1].0, "soon");
    assert_eq!(rows[1].1, IndexStatus::Enqueued);
    assert_eq!(kit.queue.depth().await.unwrap().messages, 1);
    let store = kit.stores.get(&t).unwrap();
    assert!(store.unmirrored(kit.now()).await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_batch_over_the_limit_is_refused_whole() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let input = meeting(kit.now() + mins(60), 5, &["u0"], &[Channel::Chat]);
    let items: Vec<_> = (0..=crate::registrar::MAX_BATCH)
        .map(|i| (format!("m{i}").parse().unwrap(), input.clone()))
        .collect();
    match kit.registrar().put_schedules(&t, &items).await {
        Err(RegistrarError::Invalid(v)) => assert_eq!(v.field, "schedules"),
        other => panic!(
            "expected the batch to be refused, got {:?}",
            other.map(|r| r.len())
        ),
    }
    assert!(kit.index.rows().is_empty(), "nothing written");
}

/// A batch whose index write takes long (moto, a throttled DynamoDB) must not
/// make its directly enqueued messages visible late: the delay is taken when
/// the messages go out, not when the write began.
#[tokio::test(start_paused = true)]
async fn a_slow_index_write_does_not_delay_the_direct_messages() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    kit.index.set_write_latency(Duration::from_secs(4));
    let starts = kit.now() + mins(6);
    let items: Vec<_> = (0..4)
        .map(|i| {
            (
                format!("m{i}").parse().unwrap(),
                meeting(starts, 5, &["u0"], &[Channel::Chat]),
            )
        })
        .collect();
    let began = kit.now();
    let results = kit.registrar().put_schedules(&t, &items).await.unwrap();
    assert!(results
        .iter()
        .all(|r| r.as_ref().unwrap().enqueued_directly == 1));
    assert!(
        kit.now() - began >= Minutes::seconds(4),
        "the index write took its time"
    );
    // Due one minute after the start: visible `lead` before that, not later.
    let visible_at = starts - mins(5) - Minutes::from_std(kit.pipeline.lead).unwrap();
    let wait = (visible_at - kit.now()).to_std().unwrap() + Duration::from_millis(1);
    let got = kit
        .queue
        .receive(10, wait, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(got.len(), 4, "every message visible at due - lead");
}

/// Three schedules of two reminders each: six index rows.
fn six_rows(kit: &TestKit) -> Vec<(toki_model::ScheduleId, toki_model::input::ScheduleInput)> {
    let mut input = meeting(kit.now() + mins(120), 5, &["u0"], &[Channel::Chat]);
    input.reminders.push(toki_model::input::RuleInput {
        minutes_before: 60,
        channels: vec!["chat".into()],
    });
    (0..3)
        .map(|i| (format!("m{i}").parse().unwrap(), input.clone()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_batch_past_its_budget_of_index_rows_is_refused_whole() {
    use crate::registrar::OverBudget;
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let mut registrar = kit.registrar();
    registrar.settings.batch.rows = 5;
    match registrar.put_schedules(&t, &six_rows(&kit)).await {
        Err(RegistrarError::OverBudget(OverBudget::Rows { limit: 5 })) => {}
        other => panic!("expected the row budget, got {:?}", other.map(|r| r.len())),
    }
    assert!(kit.index.rows().is_empty(), "nothing mirrored");
    let store = kit.stores.get(&t).unwrap();
    assert_eq!(
        store.get_schedule(&"m0".parse().unwrap()).await.unwrap(),
        None,
        "nothing written"
    );
    // Exactly at the budget, the batch goes through.
    registrar.settings.batch.rows = 6;
    let written = registrar.put_schedules(&t, &six_rows(&kit)).await.unwrap();
    assert!(written.iter().all(|r| r.is_ok()));
    assert_eq!(kit.index.rows().len(), 6);
}

#[tokio::test(start_paused = true)]
async fn a_batch_past_its_budget_of_time_is_refused_whole() {
    use crate::registrar::OverBudget;
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let mut registrar = kit.registrar();
    registrar.settings.batch.time = Duration::ZERO;
    match registrar.put_schedules(&t, &six_rows(&kit)).await {
        Err(RegistrarError::OverBudget(OverBudget::Time { .. })) => {}
        other => panic!("expected the time budget, got {:?}", other.map(|r| r.len())),
    }
    assert!(kit.index.rows().is_empty(), "nothing mirrored");
    let store = kit.stores.get(&t).unwrap();
    assert_eq!(
        store.get_schedule(&"m0".parse().unwrap()).await.unwrap(),
        None
    );
}

/// The rows a batch mirrors carry the version each schedule was written
/// with, though they were expanded before the write.
#[tokio::test(start_paused = true)]
async fn a_batchs_rows_carry_the_written_version() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let registrar = kit.registrar();
    registrar.put_schedules(&t, &six_rows(&kit)).await.unwrap();
    let again = registrar.put_schedules(&t, &six_rows(&kit)).await.unwrap();
    assert!(again
        .iter()
        .all(|r| r.as_ref().unwrap().schedule.version == 2));
    let rows = kit.index.rows();
    assert_eq!(rows.len(), 6);
    assert!(rows.iter().all(|r| r.reminder.version == 2), "{rows:?}");
}
