//! Debounce end to end on real parts, for each backend's pipeline tests.
#![allow(dead_code)]

use std::time::Duration;

/// Rows in `store`, checks as messages on `queue`, run by a daemon that is
/// killed before the burst's checks are due; a new daemon on the same queue
/// runs them: a leading edge at once, one trailing edge after the quiet
/// delay, the row removed afterwards, nothing left in the queue or dead-lettered.
pub async fn both_edges_across_a_daemon_restart(
    queue: std::sync::Arc<dyn toki_core::ports::DelayQueue>,
    store: std::sync::Arc<dyn toki_core::debounce::DebounceStore>,
) {
    use std::sync::Arc;
    use toki_core::daemon::{Daemon, DaemonSettings, DebounceChecks};
    use toki_core::debounce::{DebounceSettings, DebounceStore, Debouncer, Edge, QueueTimer};
    use toki_core::ports::{Clock, DelayQueue, SystemClock};
    use toki_core::testing::RecordingAction;

    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let debouncer = Debouncer {
        store: store.clone(),
        timer: Arc::new(QueueTimer {
            queue: queue.clone(),
            clock: clock.clone(),
        }),
        clock: clock.clone(),
    };
    let settings = DebounceSettings {
        min_delay: Duration::from_millis(700),
        max_delay: Duration::from_secs(2),
        hard_cap: Duration::from_secs(10),
    };
    let action = RecordingAction::new(clock.clone());
    let stores = Arc::new(toki_core::testing::MemoryTenantStores::default());
    let daemon = || {
        Arc::new(
            Daemon::new(
                queue.clone(),
                stores.clone(),
                Vec::new(),
                clock.clone(),
                DaemonSettings {
                    workers: 1,
                    wait: Duration::from_millis(200),
                    ..DaemonSettings::default()
                },
            )
            .with_debounce(DebounceChecks {
                debouncer: debouncer.clone(),
                settings: settings.clone(),
                action: action.clone(),
            }),
        )
    };
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    // Killed at once: the burst's checks wait in the queue with no daemon.
    let first = tokio::spawn(daemon().run(shutdown.clone()));
    first.abort();
    let _ = first.await;
    for _ in 0..10 {
        debouncer
            .call("acme:s1", &settings, action.as_ref())
            .await
            .unwrap();
    }
    assert_eq!(action.acted().len(), 1, "the leading edge, at once");
    let second = tokio::spawn(daemon().run(shutdown.clone()));
    let wait_for = |n: usize| {
        let action = action.clone();
        async move {
            loop {
                let woken = action.notify.notified();
                if action.acted().len() >= n {
                    return;
                }
                woken.await;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), wait_for(2))
        .await
        .expect("the trailing edge after the restart");
    let edges: Vec<Edge> = action.acted().iter().map(|a| a.edge).collect();
    assert_eq!(edges, vec![Edge::Leading, Edge::Trailing]);
    let acted = action.acted();
    let after = (acted[1].at - acted[0].at).num_milliseconds();
    assert!(
        after >= 700,
        "trailing only after the quiet delay: {after} ms"
    );
    // The row goes with its cleanup check; the queue empties, nothing dead-lettered.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while store.get("acme:s1").await.unwrap().is_some() || queue.depth().await.unwrap().messages > 0
    {
        assert!(tokio::time::Instant::now() < deadline, "row or checks left");
        // Polls a condition: nothing signals a removed row.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(queue.depth().await.unwrap().dead_letters, 0);
    second.abort();
}
