//! The delay algorithm on tokio's paused clock, with the store and timers in memory.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::testing::{
    monday_morning, Acted, MemoryDebounceStore, RecordingAction, TokioClock, TokioTimers,
};

struct Kit {
    debouncer: Debouncer,
    settings: DebounceSettings,
    action: Arc<RecordingAction>,
    timers: Arc<TokioTimers>,
    start: Instant,
}

fn kit(settings: DebounceSettings) -> Kit {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::starting_at(monday_morning()));
    let timers = TokioTimers::new(clock.clone());
    let debouncer = Debouncer {
        store: Arc::new(MemoryDebounceStore::default()),
        timer: timers.clone(),
        clock: clock.clone(),
    };
    let action = RecordingAction::new(clock.clone());
    timers.run_with(debouncer.clone(), action.clone());
    Kit {
        debouncer,
        settings,
        action,
        timers,
        start: clock.now(),
    }
}

impl Kit {
    async fn call(&self, key: &str) -> CallOutcome {
        self.debouncer
            .call(key, &self.settings, self.action.as_ref())
            .await
            .expect("call")
    }

    /// Seconds after the start at which each action ran, with its edge.
    fn timeline(&self) -> Vec<(f64, Edge)> {
        self.action
            .acted()
            .iter()
            .map(|a: &Acted| {
                let ms = (a.at - self.start).num_milliseconds();
                (ms as f64 / 1000.0, a.edge)
            })
            .collect()
    }
}

async fn advance(d: Duration) {
    tokio::time::sleep(d).await;
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

#[tokio::test(start_paused = true)]
async fn one_call_acts_once_at_once_and_the_row_goes() {
    let k = kit(DebounceSettings::default());
    let out = k.call("t:s").await;
    assert!(out.acted);
    assert_eq!(k.timeline(), vec![(0.0, Edge::Leading)]);
    advance(Duration::from_secs(600)).await;
    assert_eq!(k.timeline(), vec![(0.0, Edge::Leading)], "nothing more");
    assert_eq!(k.debouncer.store.get("t:s").await.unwrap(), None);
    // Quiet again: the next call is a leading edge once more.
    assert!(k.call("t:s").await.acted);
}

#[tokio::test(start_paused = true)]
async fn ten_calls_in_a_second_act_leading_and_once_trailing() {
    let k = kit(DebounceSettings::default());
    for i in 0..10 {
        let out = k.call("t:s").await;
        assert_eq!(out.acted, i == 0);
        advance(secs(0.1)).await;
    }
    advance(Duration::from_secs(120)).await;
    // The last call at 0.9 s; quiet for the 5 s minimum.
    assert_eq!(
        k.timeline(),
        vec![(0.0, Edge::Leading), (5.9, Edge::Trailing)]
    );
    assert_eq!(k.debouncer.store.get("t:s").await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn a_second_burst_soon_after_grows_the_delay() {
    let k = kit(DebounceSettings::default());
    for _ in 0..10 {
        k.call("t:s").await;
        advance(secs(0.1)).await;
    }
    // First burst: 0.0..0.9, trailing at 5.9. Second burst from 8.0.
    advance(secs(8.0 - 1.0)).await;
    for _ in 0..5 {
        assert!(
            !k.call("t:s").await.acted,
            "a continuation, not a new leading edge"
        );
        advance(secs(0.1)).await;
    }
    advance(Duration::from_secs(120)).await;
    // The gap 0.9 → 8.0 (7.1 s) became the delay: the last call at 8.4, trailing at 15.5.
    assert_eq!(
        k.timeline(),
        vec![
            (0.0, Edge::Leading),
            (5.9, Edge::Trailing),
            (15.5, Edge::Trailing)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_trickle_waits_no_longer_than_the_maximum() {
    let settings = DebounceSettings {
        min_delay: Duration::from_secs(5),
        max_delay: Duration::from_secs(60),
        hard_cap: Duration::from_secs(3600),
    };
    let k = kit(settings);
    // A call every 90 s: longer than the maximum delay.
    for _ in 0..4 {
        k.call("t:s").await;
        advance(Duration::from_secs(90)).await;
    }
    advance(Duration::from_secs(600)).await;
    let timeline = k.timeline();
    // Leading at 0; the row lives 5 s, so the call at 90 is a new leading edge...
    assert_eq!(timeline[0], (0.0, Edge::Leading));
    assert_eq!(timeline[1], (90.0, Edge::Leading));
    // ...and so on: a trickle slower than the delay acts at every call.
    assert_eq!(timeline.len(), 4, "{timeline:?}");

    // A trickle that comes back while the row is kept: each gap becomes the
    // delay, up to the 60 s maximum.
    let k = kit(DebounceSettings {
        min_delay: Duration::from_secs(5),
        max_delay: Duration::from_secs(60),
        hard_cap: Duration::from_secs(3600),
    });
    let mut t = 0.0;
    for at in [0.0, 4.0, 13.0, 30.0, 63.0, 128.0] {
        advance(secs(at - t)).await;
        t = at;
        k.call("t:s").await;
    }
    advance(Duration::from_secs(600)).await;
    // 4: delay 5 → 9. 13: gap 9 → 22. 30: gap 17 → 47. 63: gap 33 → 96.
    // 128: gap 65, capped at 60 → 188.
    assert_eq!(
        k.timeline(),
        vec![
            (0.0, Edge::Leading),
            (9.0, Edge::Trailing),
            (22.0, Edge::Trailing),
            (47.0, Edge::Trailing),
            (96.0, Edge::Trailing),
            (188.0, Edge::Trailing)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_key_never_quiet_acts_at_the_hard_cap() {
    let k = kit(DebounceSettings {
        min_delay: Duration::from_secs(5),
        max_delay: Duration::from_secs(30),
        hard_cap: Duration::from_secs(60),
    });
    // A call every second for 150 s: never quiet for 5 s.
    for _ in 0..150 {
        k.call("t:s").await;
        advance(Duration::from_secs(1)).await;
    }
    let during: Vec<_> = k.timeline();
    assert_eq!(during[0], (0.0, Edge::Leading));
    // Capped: trailing at 60 and 120 (each cap counted from the last action).
    let trailing: Vec<f64> = during
        .iter()
        .filter(|(_, e)| *e == Edge::Trailing)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(trailing, vec![60.0, 120.0], "{during:?}");
    advance(Duration::from_secs(600)).await;
    // Quiet at last: the final trailing edge after the last call (149) + delay 5.
    let last = *k.timeline().last().unwrap();
    assert_eq!(last, (154.0, Edge::Trailing));
}

#[tokio::test(start_paused = true)]
async fn concurrent_calls_make_one_leading_and_one_trailing_action() {
    let k = Arc::new(kit(DebounceSettings::default()));
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let k = k.clone();
            tokio::spawn(async move { k.call("t:s").await })
        })
        .collect();
    let leading = futures::future::join_all(calls)
        .await
        .into_iter()
        .filter(|r| r.as_ref().unwrap().acted)
        .count();
    assert_eq!(leading, 1);
    advance(Duration::from_secs(600)).await;
    let edges: Vec<Edge> = k.action.distinct().iter().map(|a| a.edge).collect();
    assert_eq!(edges, vec![Edge::Leading, Edge::Trailing]);
}

#[tokio::test(start_paused = true)]
async fn a_check_delivered_twice_acts_with_the_same_token() {
    let k = kit(DebounceSettings::default());
    k.call("t:s").await;
    advance(secs(1.0)).await;
    let out = k.call("t:s").await;
    advance(secs(5.5)).await;
    // The timer ran the check (trailing); a copy of it arrives again.
    let again = k
        .debouncer
        .check("t:s", &out.token, &k.settings, k.action.as_ref())
        .await
        .unwrap();
    assert_eq!(
        again,
        CheckOutcome::Superseded,
        "the row moved on after acting"
    );
    assert_eq!(k.action.distinct().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_call_racing_the_removal_is_not_lost() {
    let k = kit(DebounceSettings::default());
    let first = k.call("t:s").await;
    // The cleanup check is due at 5 s; a call lands just before it runs.
    advance(secs(4.99)).await;
    k.call("t:s").await;
    // The old token's removal finds another token and leaves the row.
    assert!(!k
        .debouncer
        .store
        .remove_if("t:s", &first.token)
        .await
        .unwrap()
        .is_written());
    advance(Duration::from_secs(60)).await;
    assert_eq!(
        k.timeline(),
        vec![(0.0, Edge::Leading), (9.99, Edge::Trailing)]
    );
}

#[tokio::test(start_paused = true)]
async fn timers_lost_with_a_process_are_not_lost_when_durable() {
    // In-memory timers die with the process: the row stays and the next
    // call still acts (a trailing edge) — but only durable timers (a queue)
    // keep a lone trailing call. Here: the checks re-armed from the row.
    let k = kit(DebounceSettings::default());
    k.call("t:s").await;
    advance(secs(1.0)).await;
    let pending = k.call("t:s").await;
    k.timers.drop_pending();
    advance(Duration::from_secs(60)).await;
    assert_eq!(k.timeline(), vec![(0.0, Edge::Leading)], "the timer died");
    // A durable timer would deliver the check carrying the token now:
    let out = k
        .debouncer
        .check("t:s", &pending.token, &k.settings, k.action.as_ref())
        .await
        .unwrap();
    assert_eq!(out, CheckOutcome::Acted);
}

#[test]
fn a_check_before_its_instant_waits() {
    let settings = DebounceSettings::default();
    let t0 = crate::testing::monday_morning();
    let e = DebounceEntry {
        key: "k".into(),
        token: "a".into(),
        burst_started: t0,
        last_call: t0,
        delay: Duration::from_secs(5),
        pending: true,
    };
    assert_eq!(
        on_check(Some(&e), "a", t0 + chrono::Duration::seconds(1), &settings),
        CheckVerdict::NotYet(t0 + chrono::Duration::seconds(5))
    );
    assert_eq!(
        on_check(Some(&e), "b", t0 + chrono::Duration::seconds(9), &settings),
        CheckVerdict::Superseded
    );
    assert_eq!(
        on_check(Some(&e), "a", t0 + chrono::Duration::seconds(5), &settings),
        CheckVerdict::Act
    );
    assert_eq!(on_check(None, "a", t0, &settings), CheckVerdict::Superseded);
}

#[test]
fn settings_name_the_field_at_fault() {
    let bad = DebounceSettings {
        min_delay: Duration::from_secs(10),
        max_delay: Duration::from_secs(5),
        hard_cap: Duration::from_secs(60),
    };
    assert_eq!(bad.validate().unwrap_err().field, "max_delay");
    let bad = DebounceSettings {
        hard_cap: Duration::from_secs(1),
        ..DebounceSettings::default()
    };
    assert_eq!(bad.validate().unwrap_err().field, "hard_cap");
    assert!(DebounceSettings::default().validate().is_ok());
}

/// Fails its first action, then records like [`RecordingAction`].
struct FailsFirst {
    failed: std::sync::atomic::AtomicBool,
    then: Arc<RecordingAction>,
}

#[async_trait]
impl DebounceAction for FailsFirst {
    async fn act(&self, key: &str, token: &str, edge: Edge) -> Result<(), ActionError> {
        if !self.failed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(ActionError("the queue refused the notice".into()));
        }
        self.then.act(key, token, edge).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_leading_action_that_fails_is_taken_by_its_check() {
    let k = kit(DebounceSettings::default());
    let action = Arc::new(FailsFirst {
        failed: Default::default(),
        then: k.action.clone(),
    });
    k.timers.run_with(k.debouncer.clone(), action.clone());
    let failed = k.debouncer.call("t:s", &k.settings, action.as_ref()).await;
    assert!(matches!(failed, Err(DebounceError::Action { .. })));
    assert!(k.timeline().is_empty());
    // One edit, nothing after it: its check acts once the delay is over.
    advance(Duration::from_secs(600)).await;
    assert_eq!(k.timeline(), vec![(5.0, Edge::Trailing)]);
    assert_eq!(k.debouncer.store.get("t:s").await.unwrap(), None);
}
