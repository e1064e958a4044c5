//! One tenant's slowness holds up no other tenant: the daemon prepares and
//! sends each tenant's part of a received batch on its own, so a tenant
//! whose database stalls (or whose templates are slow to render) delays
//! only its own reminders, on paused time.

use std::time::Duration;

use chrono::Duration as ChronoDuration;

use crate::testing::{meeting, TestKit};
use toki_model::domain::Channel;

const WAIT: Duration = Duration::from_secs(3600);

/// Two tenants due at the same instant, their messages received in one
/// batch; the first tenant's database stalls for 30 s from just before the
/// instant. The other's reminders go out at the instant; the stalled
/// tenant's after the stall, each once.
#[tokio::test(start_paused = true)]
async fn a_stalled_tenant_database_delays_no_other_tenant_in_the_same_batch() {
    let kit = TestKit::new();
    let slow = kit.tenant("slow").await;
    let fast = kit.tenant("fast").await;
    let run = kit.run();
    let due = kit.now() + ChronoDuration::minutes(15);
    let both = meeting(
        due + ChronoDuration::minutes(5),
        5,
        &["u0", "u1", "u2"],
        &[Channel::Chat],
    );
    for t in [&slow, &fast] {
        kit.registrar()
            .put_schedule(t, &"review".parse().unwrap(), &both)
            .await
            .unwrap();
    }
    // Both tenants' messages become visible a lead before the instant: the
    // stall starts before any is received.
    let lead = kit.daemon_settings.lead;
    let stall_from = due - chrono::Duration::from_std(lead).unwrap() - ChronoDuration::seconds(1);
    tokio::time::sleep((stall_from - kit.now()).to_std().unwrap()).await;
    kit.stores
        .get(&slow)
        .unwrap()
        .set_stall(Some(Duration::from_secs(30)));
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 3).await;
    let sent = kit.sent();
    assert_eq!(sent.len(), 3, "only the fast tenant's so far: {sent:?}");
    assert!(
        sent.iter().all(|s| s.tenant == fast && s.at == due),
        "{sent:?}"
    );
    kit.stores.get(&slow).unwrap().set_stall(None);
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 6).await;
    let late: Vec<_> = kit
        .sent()
        .into_iter()
        .filter(|s| s.tenant == slow)
        .collect();
    assert_eq!(late.len(), 3, "each of the stalled tenant's once: {late:?}");
    assert!(late.iter().all(|s| s.at > due), "{late:?}");
    run.stop().await;
}
