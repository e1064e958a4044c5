//! Debounce checks carried by the delay queue and run by the daemon, on paused time.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::daemon::{Daemon, DebounceChecks};
use crate::debounce::{Debouncer, QueueTimer};
use crate::testing::{MemoryDebounceStore, RecordingAction, TestKit};
use toki_model::debounce::{DebounceSettings, Edge};
use toki_ports::DebounceStore;
use toki_ports::{Clock, DelayQueue};

struct Debounced {
    debouncer: Debouncer,
    store: Arc<MemoryDebounceStore>,
    action: Arc<RecordingAction>,
    settings: DebounceSettings,
}

fn debounced(kit: &TestKit) -> Debounced {
    let clock: Arc<dyn Clock> = kit.clock.clone();
    let store = Arc::new(MemoryDebounceStore::default());
    Debounced {
        debouncer: Debouncer {
            store: store.clone(),
            timer: Arc::new(QueueTimer {
                queue: kit.queue.clone(),
                clock: clock.clone(),
            }),
            clock: clock.clone(),
        },
        store,
        action: RecordingAction::new(clock),
        settings: DebounceSettings::default(),
    }
}

/// A daemon on the kit's queue, running checks when `with` is given.
fn daemon(kit: &TestKit, with: Option<&Debounced>) -> Arc<Daemon> {
    let d = Daemon::new(
        kit.queue.clone(),
        kit.stores.clone(),
        Vec::new(),
        kit.clock.clone(),
        kit.marks.clone(),
        kit.daemon_settings.clone(),
    );
    Arc::new(match with {
        Some(w) => d.with_debounce(DebounceChecks {
            debouncer: w.debouncer.clone(),
            settings: w.settings.clone(),
            action: w.action.clone(),
        }),
        None => d,
    })
}

#[tokio::test(start_paused = true)]
async fn a_trailing_check_survives_a_daemon_killed_before_it() {
    let kit = TestKit::new();
    let d = debounced(&kit);
    let start = kit.now();
    let (_stop, shutdown) = watch::channel(false);
    let first = tokio::spawn(daemon(&kit, Some(&d)).run(shutdown.clone()));
    for _ in 0..10 {
        d.debouncer
            .call("acme:s1", &d.settings, d.action.as_ref())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Killed 2 s after the burst, before its trailing check (due at 5.9 s).
    tokio::time::sleep(Duration::from_secs(2)).await;
    first.abort();
    let _ = first.await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let edges = |d: &Debounced| d.action.acted().iter().map(|a| a.edge).collect::<Vec<_>>();
    assert_eq!(edges(&d), vec![Edge::Leading], "no daemon, no check run");

    // A new daemon finds the checks in the queue: the trailing edge happens.
    let second = tokio::spawn(daemon(&kit, Some(&d)).run(shutdown.clone()));
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(edges(&d), vec![Edge::Leading, Edge::Trailing]);
    let trailing = d.action.acted()[1].at;
    assert!(
        trailing - start >= chrono::Duration::seconds(62),
        "run after the restart"
    );
    // Then its cleanup check removes the row, and nothing is left in the queue.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(d.store.get("acme:s1").await.unwrap(), None);
    assert_eq!(kit.queue.depth().await.unwrap().messages, 0);
    assert_eq!(kit.queue.depth().await.unwrap().dead_letters, 0);
    second.abort();
}

#[tokio::test(start_paused = true)]
async fn a_check_no_daemon_can_run_is_dead_lettered_not_deleted() {
    let kit = TestKit::new();
    let d = debounced(&kit);
    d.debouncer
        .call("acme:s1", &d.settings, d.action.as_ref())
        .await
        .unwrap();
    let (_stop, shutdown) = watch::channel(false);
    let run = tokio::spawn(daemon(&kit, None).run(shutdown));
    tokio::time::sleep(Duration::from_secs(5 * 60)).await;
    let depth = kit.queue.depth().await.unwrap();
    assert_eq!(
        (depth.messages, depth.dead_letters),
        (1, 0),
        "retried meanwhile"
    );
    tokio::time::sleep(Duration::from_secs(20 * 60)).await;
    let depth = kit.queue.depth().await.unwrap();
    assert_eq!((depth.messages, depth.dead_letters), (0, 1));
    let letter = kit
        .queue
        .dead_letters(1, Duration::from_secs(1))
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert!(letter.attributes[toki_ports::DEAD_LETTER_REASON].contains("no debounce checks"));
    run.abort();
}
