//! Calendar semantics end to end, on both backends (embedded SQLite; DynamoDB
//! and SQS on the emulator with a Postgres database per tenant): a weekly
//! meeting in New York across both of its DST changes, registered through the
//! HTTP API, delivered by the real daemon to chat rows and the Slack stand-in.
//!
//! The pipeline runs on a clock the test moves forward, from a few seconds
//! before one reminder to a few seconds before the next (March to November
//! 2027), so each reminder is due seconds of real time after the jump. The
//! scanner and the repair pass are run by the test after each jump; the
//! daemon runs on its own. What is checked, from the delivery rows, the chat
//! rows and the stand-in:
//!
//! - exactly one reminder per occurrence per channel per recipient, at its
//!   instant (08:55 EST = 13:55Z, 08:55 EDT = 12:55Z);
//! - an occurrence moved by an exception is reminded at its new time, never at
//!   the old one; a cancelled one sends nothing;
//! - a rule edited after a reminder was enqueued sends nothing stale;
//! - a recipient who turned Slack off gets no Slack reminder (her row says
//!   undeliverable); her Japanese text shows the meeting in Tokyo time.

use crate::aws_support;
use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Duration as ChronoDuration};
use common::clock::OffsetClock;
use serde_json::{json, Value};
use toki_app::{api, Config, Toki};
use toki_model::{Channel, DeliveryStatus, Instant, TenantId};
use toki_ports::TenantStores;

fn at(s: &str) -> Instant {
    DateTime::parse_from_rfc3339(s).unwrap().to_utc()
}

/// The registrar API served on 127.0.0.1, called with the tenant's key.
struct Api {
    base: String,
    key: String,
    http: reqwest::Client,
}

impl Api {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/v1/tenants/acme/{path}", self.base);
        let mut req = self
            .http
            .request(method.clone(), &url)
            .bearer_auth(&self.key);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert!(status.is_success(), "{method} {path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    async fn put(&self, path: &str, body: Value) -> Value {
        self.call(reqwest::Method::PUT, path, Some(body)).await
    }
}

/// The stand-up's body: every Monday of March and November 2027 at `time` in
/// New York, up to 9 November, reminded 5 minutes before by chat and Slack.
fn standup(time: &str) -> Value {
    json!({
        "title": "Stand-up",
        "starts_at": format!("2027-03-08T{time}"),
        "time_zone": "America/New_York",
        "recurrence": {"rrule": "FREQ=WEEKLY;BYDAY=MO;BYMONTH=3,11;UNTIL=20271109T000000Z"},
        "participants": ["ana", "hana"],
        "reminders": [{"minutes_before": 5, "channels": ["chat", "slack"]}]
    })
}

/// Every channel a recipient is asked for, per occurrence: Ana gets both,
/// Hana turned Slack off.
const PER_OCCURRENCE: [(&str, Channel, DeliveryStatus); 4] = [
    ("ana", Channel::Chat, DeliveryStatus::Delivered),
    ("ana", Channel::Slack, DeliveryStatus::Delivered),
    ("hana", Channel::Chat, DeliveryStatus::Delivered),
    ("hana", Channel::Slack, DeliveryStatus::Undeliverable),
];

async fn weekly_meeting_across_both_dst_changes(mut config: Config) {
    let clock = Arc::new(OffsetClock::default());
    let step = ChronoDuration::seconds(4);
    // Registered an hour before the first reminder, so that every reminder
    // reaches the queue the same way: the repair pass or the scan after a jump.
    clock.set(at("2027-03-08T12:55:00Z"));

    let (standin, slack_url) =
        common::services::slack_standin_on(Default::default(), clock.clone()).await;
    config.slack.api_url = slack_url;
    config.slack.token = Some("xoxb-calendar".into());
    config.flow.limits.clear();
    config.pipeline.lead_ms = 1000;
    // Fewer index partitions per scan (21 minutes x 2 rather than x 16): the
    // test scans eight times, on a shared emulator under the whole suite.
    config.pipeline.shards = 2;
    config.daemon.workers = 2;
    config.validate().unwrap();

    let toki = Toki::open_with_clock(config, clock.clone()).await.unwrap();
    let tenant: TenantId = "acme".parse().unwrap();
    let (_, key) = toki.create_tenant(&tenant, true).await.unwrap();
    let router = api::router(Arc::new(toki.registrar()));
    let base = format!("http://{}", toki_devtools::serve_locally(router).await);
    let api = Api {
        base,
        key,
        http: reqwest::Client::new(),
    };

    let daemon = toki.daemon().await.unwrap();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let daemon_task = tokio::spawn(daemon.clone().run(shutdown));

    api.put(
        "users/ana",
        json!({"name": "Ana", "slack_user_id": "UANA", "time_zone": "America/New_York", "locale": "en"}),
    )
    .await;
    let hana = api
        .put(
            "users/hana",
            json!({"name": "花子", "slack_user_id": "UHANA", "time_zone": "Asia/Tokyo",
                   "locale": "ja", "channels": {"slack": false}}),
        )
        .await;
    assert_eq!(hana["channels"]["slack"], false, "{hana}");

    // The first occurrence is Monday 8 March, 09:00 EST.
    api.put("schedules/standup", standup("09:00:00")).await;
    // 22 March moves to 10:30 (EDT); 29 March is cancelled. Named by local time.
    api.put(
        "schedules/standup/occurrences/2027-03-22T09:00:00",
        json!({"starts_at": "2027-03-22T10:30:00"}),
    )
    .await;
    api.call(
        reqwest::Method::DELETE,
        "schedules/standup/occurrences/2027-03-29T09:00:00",
        None,
    )
    .await;

    let registrar = toki.registrar();
    let scanner = toki.scanner();
    // Moves the clock to `ahead` before `due`, extends the series' horizon
    // (which enqueues what is due soon) and scans, as the repair pass and the
    // scanner do every minute; returns how many index rows (one per
    // occurrence and reminder) the scan found in its window.
    let jump_ahead = |due: &'static str, ahead: ChronoDuration| {
        clock.set(at(due) - ahead);
        let (registrar, scanner) = (&registrar, &scanner);
        async move {
            registrar.repair_pass(None).await.unwrap();
            let summary = scanner.scan_once().await.unwrap();
            assert_eq!(summary.failed, 0, "{summary:?}");
            summary.scanned
        }
    };
    let jump = |due: &'static str| jump_ahead(due, step);
    let delivered = |n: u64| {
        let daemon = daemon.clone();
        async move {
            // And every message received so far acknowledged: the next jump
            // moves the clock past the visibility timeout of any still held.
            daemon
                .stats
                .wait_for(Duration::from_secs(30), |s| {
                    s.delivered >= n && s.acked >= s.received
                })
                .await;
            assert_eq!(daemon.stats.snapshot().delivered, n);
        }
    };

    // 8 March, EST.
    assert_eq!(jump("2027-03-08T13:55:00Z").await, 1);
    delivered(3).await;
    // 15 March, the day after spring forward: 08:55 EDT.
    assert_eq!(jump("2027-03-15T12:55:00Z").await, 1);
    delivered(6).await;
    // 22 March: nothing at the old time, the reminder at the new one.
    assert_eq!(jump("2027-03-22T12:55:00Z").await, 0, "the moved time");
    assert_eq!(jump("2027-03-22T14:25:00Z").await, 1);
    delivered(9).await;
    // 29 March: cancelled.
    assert_eq!(jump("2027-03-29T12:55:00Z").await, 0, "the cancelled one");
    // 1 November, still EDT (New York falls back on the 7th): seven months
    // on, the repair pass has put the series' next weeks in the index.
    assert_eq!(jump("2027-11-01T12:55:00Z").await, 1);
    delivered(12).await;
    // 8 November, EST. Its reminder is on the queue when the rule changes
    // to 09:30: the old one is dropped as stale, the new one goes at 09:25.
    // 15 s ahead rather than 4, so that the edit surely lands before the
    // daemon's last look at the version (200 ms before the instant).
    assert_eq!(
        jump_ahead("2027-11-08T13:55:00Z", ChronoDuration::seconds(15)).await,
        1
    );
    api.put("schedules/standup", standup("09:30:00")).await;
    let s = daemon
        .stats
        .wait_for(Duration::from_secs(40), |s| {
            s.stale >= 4 && s.acked >= s.received
        })
        .await;
    assert_eq!((s.stale, s.delivered), (4, 12), "{s:?}");
    assert_eq!(jump("2027-11-08T14:25:00Z").await, 1);
    delivered(15).await;
    stop.send(true).unwrap();
    daemon_task.await.unwrap();
    let s = daemon.stats.snapshot();
    assert_eq!(
        (s.delivered, s.stale, s.undeliverable, s.failed),
        (15, 4, 5, 0),
        "{s:?}"
    );

    // The delivery rows: per (due instant, recipient, channel), one row.
    let store = toki.stores.open(&tenant).await.unwrap();
    let mut rows = BTreeMap::new();
    for d in store.deliveries().await.unwrap() {
        let late = (d.at - d.due_at.0).num_milliseconds();
        // One row per delivery key by construction (a second send would
        // overwrite it): sends are counted at the stand-in and in the chat
        // rows below.
        rows.insert(
            (d.due_at.0, d.key.recipient.to_string(), d.key.channel),
            (d.status, d.version),
        );
        // Sent at its own occurrence, not before it and not at a later
        // jump of the clock (the next is a week on, a day is far short of
        // it); how punctual the pipeline is, is the bench's and the fault
        // suite's business.
        if d.status == DeliveryStatus::Delivered {
            assert!(
                (0..ChronoDuration::days(1).num_milliseconds()).contains(&late),
                "{} sent {late} ms after its instant, not at its own occurrence",
                d.key,
            );
        }
    }
    let mut expected = BTreeMap::new();
    // Versions: 1 registered, 2 the move, 3 the cancel (both before the first
    // reminder went: it goes for version 3), 4 the rule edit.
    for (due, version) in [
        ("2027-03-08T13:55:00Z", 3),
        ("2027-03-15T12:55:00Z", 3),
        ("2027-03-22T14:25:00Z", 3),
        ("2027-11-01T12:55:00Z", 3),
        ("2027-11-08T14:25:00Z", 4),
    ] {
        for (user, channel, status) in PER_OCCURRENCE {
            expected.insert((at(due), user.to_owned(), channel), (status, version));
        }
    }
    // What the stale copy of 8 November wrote: its rows say stale.
    for (user, channel, _) in PER_OCCURRENCE {
        expected.insert(
            (at("2027-11-08T13:55:00Z"), user.to_owned(), channel),
            (DeliveryStatus::Stale, 3),
        );
    }
    assert_eq!(rows, expected);

    // What reached the people, in their zone and language.
    let ana: Vec<String> = standin.texts("UANA");
    let ana_times: Vec<&str> = vec!["09:00", "09:00", "10:30", "09:00", "09:30"];
    assert_eq!(ana.len(), ana_times.len(), "{ana:?}");
    for (text, time) in ana.iter().zip(&ana_times) {
        assert!(
            text.starts_with("Hi Ana, \"Stand-up\" starts in 5 minutes")
                && text.contains(&format!("{time} America/New_York")),
            "{text} (expected {time})"
        );
    }
    assert!(standin.texts("UHANA").is_empty(), "Hana turned Slack off");
    let ana_chat = store.chat_messages(&"ana".parse().unwrap()).await.unwrap();
    assert_eq!(ana_chat.len(), 5, "{ana_chat:?}");
    let hana: Vec<String> = store
        .chat_messages(&"hana".parse().unwrap())
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.text)
        .collect();
    // 09:00 EST = 23:00 JST, 09:00 EDT = 22:00, 10:30 EDT = 23:30, 09:30 EST = 23:30.
    let hana_times = [
        "2027-03-08 23:00",
        "2027-03-15 22:00",
        "2027-03-22 23:30",
        "2027-11-01 22:00",
        "2027-11-08 23:30",
    ];
    assert_eq!(hana.len(), hana_times.len(), "{hana:?}");
    for (text, time) in hana.iter().zip(hana_times) {
        assert!(
            text.starts_with("花子さん、「Stand-up」が5分後に開始します")
                && text.contains(&format!("{time} Asia/Tokyo")),
            "{text} (expected {time})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_weekly_meeting_across_both_dst_changes() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        data_dir: dir.path().to_path_buf(),
        ..Config::default()
    };
    weekly_meeting_across_both_dst_changes(config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto) and Postgres: scripts/test.sh runs it"]
async fn aws_weekly_meeting_across_both_dst_changes() {
    let dir = tempfile::tempdir().unwrap();
    weekly_meeting_across_both_dst_changes(aws_support::backend_config("cal", dir.path())).await;
}
