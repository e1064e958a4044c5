//! Debounce end to end on real parts, for each backend's pipeline tests.
#![allow(dead_code)]

use std::time::Duration;

/// Rows in `store`, checks as messages on `queue`, run by a daemon that is
/// killed before the burst's checks are due; a new daemon on the same queue
/// runs them: a leading edge at once, one trailing edge after the quiet
/// delay, the row removed afterwards, nothing left in the queue or dead-lettered.
pub async fn both_edges_across_a_daemon_restart(
    queue: std::sync::Arc<dyn toki_ports::DelayQueue>,
    store: std::sync::Arc<dyn toki_ports::DebounceStore>,
) {
    use std::sync::Arc;
    use toki_core::daemon::{Daemon, DaemonSettings, DebounceChecks};
    use toki_core::debounce::{Debouncer, QueueTimer};
    use toki_core::testing::RecordingAction;
    use toki_model::debounce::{DebounceSettings, Edge};
    use toki_ports::DebounceStore;
    use toki_ports::{Clock, DelayQueue, SystemClock};

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
                Arc::new(toki_ports::testing::MemoryWorkMarks::default()),
                DaemonSettings {
                    workers: 1,
                    wait: Duration::from_millis(200),
                    // A check that fails (a busy database under the whole
                    // suite's load) comes back within the test's bounds:
                    // 0.2, 0.4, 0.8 s, ... rather than 1, 2, 4, 8 s.
                    retry: toki_core::daemon::RetryPolicy {
                        base: Duration::from_millis(200),
                        cap: Duration::from_secs(2),
                        // The rest as the daemon's own (busy_wait follows its visibility).
                        ..DaemonSettings::default().retry
                    },
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
    if tokio::time::timeout(Duration::from_secs(20), wait_for(2))
        .await
        .is_err()
    {
        // What was left, for a diagnosis (one CI run timed out here).
        panic!(
            "no trailing edge within 20 s of the restart: acted {:?}; row {:?}; queue {:?}",
            action.acted(),
            store.get("acme:s1").await,
            queue.depth().await,
        );
    }
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

/// Two `toki serve` processes on one deployment (`config`), each taking half
/// of a burst of edits to one schedule at the same moments: the tenant's
/// participants hear of the burst exactly twice — one leading notice, one
/// trailing with the final state — whichever process took which edit, and
/// the debounce row is gone afterwards. `env` reaches the emulator.
pub async fn two_processes_one_burst(config: toki_app::Config, env: Vec<(String, String)>) {
    use std::process::Command;

    use toki_model::change::{ChangeNoticeSettings, NoticeEdge};
    use toki_model::{DeliveryStatus, ScheduleId, TenantId};
    use toki_ports::TenantStore;

    use crate::common::pipeline::{meeting, user};
    use crate::common::process::{Process, TOKI};

    let toki = toki_app::Toki::open(config.clone()).await.unwrap();
    let tenant: TenantId = "acme".parse().unwrap();
    let (mut record, key) = toki.create_tenant(&tenant, true).await.unwrap();
    // A burst of edits a few ms apart stays one burst however the two
    // processes contend; the trailing notice follows 10 s after the last.
    // The burst may last up to 30 s: on a loaded machine (the whole suite
    // at once) 20 edits through the emulator once took more than 5 s, and
    // with a 3 s delay one round's gap once passed it, so a second trailing
    // notice fired mid-burst, as the settings said it should. 10 s of quiet
    // is far beyond any round's gap seen (the test waits 7 s longer).
    record.change_notices = ChangeNoticeSettings {
        enabled: true,
        min_delay_ms: 10_000,
        max_delay_ms: 30_000,
        hard_cap_ms: 60_000,
    };
    toki.directory.put(&record).await.unwrap();
    let registrar = toki.registrar();
    for j in 0..2 {
        registrar
            .put_user(&tenant, &format!("u{j}").parse().unwrap(), &user(j))
            .await
            .unwrap();
    }
    let id: ScheduleId = "review".parse().unwrap();
    let starts = crate::common::pipeline::due_in(3 * 3600);
    registrar
        .put_schedule(&tenant, &id, &meeting(starts))
        .await
        .unwrap();

    let file = config.data_dir.join("toki.toml");
    std::fs::write(&file, toml::to_string(&config).unwrap()).unwrap();
    let serve = || {
        let mut cmd = Command::new(TOKI);
        cmd.arg("--config")
            .arg(&file)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let (process, line) =
            Process::spawn(cmd, "registrar API on http://", Duration::from_secs(60));
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap()
            .to_string();
        (process, base)
    };
    let (mut a, a_url) = serve();
    let (mut b, b_url) = serve();
    let http = reqwest::Client::new();
    let logs = || format!("A:\n{}\nB:\n{}", a.log(), b.log());
    let put = |base: &str, title: String| {
        let mut body = serde_json::to_value(meeting(starts)).unwrap();
        body["title"] = title.into();
        let req = http
            .put(format!("{base}/v1/tenants/acme/schedules/review"))
            .bearer_auth(&key)
            .json(&body);
        async move {
            let r = req.send().await.unwrap();
            (r.status(), r.text().await.unwrap())
        }
    };
    for round in 0..10 {
        let (x, y) = futures::join!(
            put(&a_url, format!("A{round}")),
            put(&b_url, format!("B{round}"))
        );
        for (status, body) in [x, y] {
            assert_eq!(status, 200, "{body}\n{}", logs());
        }
    }
    // Over once the key's row is gone: a trailing edge, then a quiet delay.
    let debounce_key = toki_model::change::debounce_key(&tenant, &id);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while toki.debounce.get(&debounce_key).await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the burst never ended\nA:\n{}\nB:\n{}",
            a.log(),
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for p in [&mut a, &mut b] {
        p.signal("TERM");
        assert!(p.wait_exit(Duration::from_secs(30)).await.is_some());
    }
    let store = toki_ports::TenantStores::open(toki.stores.as_ref(), &tenant)
        .await
        .unwrap();
    let notices = store.change_notices(&id).await.unwrap();
    let edges: Vec<NoticeEdge> = notices.iter().map(|n| n.edge).collect();
    assert_eq!(
        edges,
        [NoticeEdge::Leading, NoticeEdge::Trailing],
        "A:\n{}\nB:\n{}",
        a.log(),
        b.log()
    );
    let final_title = store.get_schedule(&id).await.unwrap().unwrap().title;
    assert_eq!(
        notices[1].after.as_ref().map(|s| s.title.as_str()),
        Some(final_title.as_str())
    );
    let rows: Vec<_> = store
        .deliveries()
        .await
        .unwrap()
        .into_iter()
        .filter(|d| d.key.is_change_notice())
        .collect();
    // Two notices to two participants by each channel of the meeting's rules.
    let channels = meeting(starts).reminders[0].channels.len();
    assert_eq!(rows.len(), 2 * 2 * channels, "{rows:#?}");
    assert!(rows.iter().all(|d| d.status == DeliveryStatus::Delivered));
}
