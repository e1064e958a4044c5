//! An idle tenant costs nothing (issue 60): over six hours of every pass —
//! the delivery-events dispatcher each second, the repair each minute, the
//! retention purge every five minutes, the daemon and the scanner — only
//! the tenant with something to do is opened. The opens are counted through
//! the tenant stores' port.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Duration as ChronoDuration;

use crate::events::dispatch::{DispatchSettings, Dispatcher};
use crate::events::EventEndpoints;
use crate::retention::{PurgeSettings, Purger};
use crate::testing::{meeting, TestKit};
use toki_model::domain::{Channel, TenantId};
use toki_model::event::{EndpointSpec, EndpointUrl, EventKinds, EventOrdering};
use toki_model::input::{RecurrenceInput, ScheduleInput};
use toki_model::EndpointId;
use toki_ports::events::{EventPoster, PostError, SignedPost};
use toki_ports::{WorkKind, WorkMarks};

const IDLE_TENANTS: usize = 40;

/// Counts what reaches the endpoints.
#[derive(Default)]
struct Counting(AtomicUsize);

#[async_trait]
impl EventPoster for Counting {
    async fn post(&self, _: &EndpointUrl, _: &SignedPost) -> Result<(), PostError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Fridays at 10:00 UTC: nothing of it falls due on the kit's Monday.
fn friday_series() -> ScheduleInput {
    ScheduleInput {
        starts_at: "2026-11-27T10:00:00".into(),
        time_zone: "UTC".into(),
        recurrence: Some(RecurrenceInput {
            rrule: "FREQ=WEEKLY;BYDAY=FR".into(),
            exdates: vec![],
        }),
        ..meeting(chrono::Utc::now(), 5, &["u0"], &[Channel::Chat])
    }
}

async fn endpoint(endpoints: &EventEndpoints, tenant: &TenantId) {
    let spec = EndpointSpec {
        url: EndpointUrl::parse("url", "https://hooks.example/").unwrap(),
        kinds: EventKinds::all(),
        ordering: EventOrdering::Unordered,
    };
    let id: EndpointId = "hook".parse().unwrap();
    endpoints.put(tenant, &id, spec).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn over_six_hours_of_every_pass_only_the_busy_tenant_is_opened() {
    let kit = TestKit::new();
    let registrar = kit.registrar();
    let endpoints = EventEndpoints::new(kit.stores.clone(), kit.marks.clone(), kit.clock.clone());
    // Idle tenants: users, a series, an endpoint; nothing due today.
    for i in 0..IDLE_TENANTS {
        let t = kit.tenant(&format!("idle-{i:02}")).await;
        registrar
            .put_schedule(&t, &"weekly".parse().unwrap(), &friday_series())
            .await
            .unwrap();
        endpoint(&endpoints, &t).await;
        // As a migration marks a tenant from before the marks: one visit.
        kit.marks
            .mark(WorkKind::Retention, &t, kit.now())
            .await
            .unwrap();
    }
    // The busy tenant: a meeting every half hour, and an endpoint.
    let busy = kit.tenant("busy").await;
    endpoint(&endpoints, &busy).await;
    for m in 1..=12 {
        let starts = kit.now() + ChronoDuration::minutes(30 * m);
        let input = meeting(starts, 5, &["u0", "u1"], &[Channel::Chat]);
        registrar
            .put_schedule(&busy, &format!("m{m}").parse().unwrap(), &input)
            .await
            .unwrap();
    }

    let running = kit.run();
    let poster = Arc::new(Counting::default());
    let dispatcher = Dispatcher::new(
        kit.stores.clone(),
        kit.marks.clone(),
        poster.clone(),
        kit.clock.clone(),
        "test".into(),
        DispatchSettings::default(),
    );
    let purger = Arc::new(Purger {
        directory: kit.directory.clone(),
        stores: kit.stores.clone(),
        marks: kit.marks.clone(),
        control: None,
        clock: kit.clock.clone(),
        settings: PurgeSettings::default(),
        stats: Default::default(),
    });
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let passes = vec![
        tokio::spawn(dispatcher.run(shutdown.clone())),
        tokio::spawn(purger.clone().run(shutdown.clone())),
        tokio::spawn({
            let shutdown = shutdown.clone();
            async move {
                registrar
                    .run_repair(Duration::from_secs(60), shutdown, |_| {})
                    .await
            }
        }),
    ];
    // The first minutes: each tenant's first visits (its new endpoint, the
    // repair marked by its writes, the purge's migration mark) settle its marks.
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    kit.stores.forget_opened();

    tokio::time::sleep(Duration::from_secs(6 * 3600)).await;
    assert_eq!(kit.stores.opened(), [busy], "only the busy tenant");
    // The busy tenant's work was done: 12 meetings × 2 people, each
    // delivered and its event sent.
    let delivered = kit.chat.sent().len();
    assert_eq!(delivered, 24);
    assert!(
        poster.0.load(Ordering::SeqCst) >= delivered,
        "every delivery's event reached the endpoint"
    );
    assert!(purger.stats.passes.load(Ordering::Relaxed) >= 70);

    stop.send_replace(true);
    for p in passes {
        p.await.unwrap();
    }
    running.stop().await;
}
