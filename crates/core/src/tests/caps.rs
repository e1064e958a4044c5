//! Caps on what a tenant stores: a write that adds beyond one is refused
//! naming it, whole; updating what exists is always allowed.

use chrono::Duration as Minutes;

use crate::registrar::RegistrarError;
use crate::testing::{meeting, TestKit};
use toki_model::domain::{Channel, TenantId};
use toki_model::input::UserInput;
use toki_model::quota::{Cap, Counted, QuotaOverrides};
use toki_model::template::TemplateInput;
use toki_ports::{TenantDirectory, TenantStore};

/// `tenant`'s contract set to `quota`.
async fn contract(kit: &TestKit, tenant: &TenantId, quota: QuotaOverrides) {
    let mut record = kit.directory.get(tenant).await.unwrap().unwrap();
    record.limits.quota = quota;
    kit.directory.put(&record).await.unwrap();
}

fn cap_reached(r: Result<impl std::fmt::Debug, RegistrarError>, what: Counted) {
    match r {
        Err(e @ RegistrarError::CapReached { what: w, .. }) if w == what => {
            assert!(e.to_string().contains(what.cap_name()), "{e}");
        }
        other => panic!("expected the {} cap, got {other:?}", what.cap_name()),
    }
}

#[tokio::test(start_paused = true)]
async fn a_batch_crossing_the_schedule_cap_writes_nothing_and_updates_pass() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    contract(
        &kit,
        &t,
        QuotaOverrides {
            max_schedules: Some(Cap(2)),
            ..Default::default()
        },
    )
    .await;
    let registrar = kit.registrar();
    let input = meeting(kit.now() + Minutes::hours(2), 5, &["u0"], &[Channel::Mail]);
    registrar
        .put_schedule(&t, &"s1".parse().unwrap(), &input)
        .await
        .unwrap();
    let batch: Vec<_> = ["s1", "s2", "s3"]
        .iter()
        .map(|id| (id.parse().unwrap(), input.clone()))
        .collect();
    cap_reached(
        registrar.put_schedules(&t, &batch).await,
        Counted::Schedules,
    );
    let store = kit.stores.get(&t).unwrap();
    assert_eq!(store.count(Counted::Schedules).await.unwrap(), 1);
    let s1 = store.get_schedule(&"s1".parse().unwrap()).await.unwrap();
    assert_eq!(s1.unwrap().version, 1, "s1 was not written again");
    // Up to the cap, with an update of s1 in the same batch: written.
    let written = registrar.put_schedules(&t, &batch[..2]).await.unwrap();
    assert!(written.iter().all(Result::is_ok), "{written:?}");
    cap_reached(
        registrar
            .put_schedule(&t, &"s3".parse().unwrap(), &input)
            .await,
        Counted::Schedules,
    );
    let again = registrar
        .put_schedule(&t, &"s2".parse().unwrap(), &input)
        .await
        .unwrap();
    assert_eq!(again.schedule.version, 2, "an update at the cap passes");
}

#[tokio::test(start_paused = true)]
async fn users_and_templates_stop_at_their_caps_but_update() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await; // u0..u9
    contract(
        &kit,
        &t,
        QuotaOverrides {
            max_users: Some(Cap(10)),
            max_templates: Some(Cap(1)),
            ..Default::default()
        },
    )
    .await;
    let registrar = kit.registrar();
    let ana: UserInput = serde_json::from_value(serde_json::json!({"name": "Ana"})).unwrap();
    cap_reached(
        registrar.put_user(&t, &"ana".parse().unwrap(), &ana).await,
        Counted::Users,
    );
    let u0 = registrar.put_user(&t, &"u0".parse().unwrap(), &ana).await;
    assert_eq!(u0.unwrap().name, "Ana", "an update at the cap passes");
    let text = TemplateInput {
        subject: None,
        text: "{{ title }}".into(),
        html: None,
    };
    registrar
        .put_template(&t, Channel::Chat, "en", &text)
        .await
        .unwrap();
    cap_reached(
        registrar.put_template(&t, Channel::Chat, "ja", &text).await,
        Counted::Templates,
    );
    registrar
        .put_template(&t, Channel::Chat, "en", &text)
        .await
        .expect("an update at the cap passes");
    let store = kit.stores.get(&t).unwrap();
    assert_eq!(store.count(Counted::Users).await.unwrap(), 10);
    assert_eq!(store.count(Counted::Templates).await.unwrap(), 1);
}
