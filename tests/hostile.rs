//! A hostile tenant beside an honest one, on `toki serve` (embedded): while
//! tenant A sends every probe SECURITY.md lists, tenant B registers through
//! the same API and its reminders, due at one instant, are all delivered
//! while A's probes are still running; each probe is refused with a 4xx that
//! names the problem, and the server's memory stays bounded. Then A erases
//! a person (found in no byte of its files after) and the operator deletes
//! and re-creates a third tenant under the running server (the new key's
//! write lands in the new database).
//!
//! How long each probe took (`scripts/hostile.py` measures it on a release
//! build for SECURITY.md) and how late B's reminders went are printed on
//! stderr, not asserted.

use crate::common;

use std::io::Write;
use std::time::Duration;

use chrono::Duration as ChronoDuration;
use serde_json::{json, Value};

use common::process::{assert_in_no_byte, create_tenant, serve_operated, tenant_file, TOKI};

/// The "status" of a request the server cut off while it was still sending.
const CUT_OFF: u16 = 0;

/// B's participants; each gets one chat reminder at the shared instant.
const B_USERS: usize = 100;

/// What the API answered a probe, and how long it took.
struct Answer {
    probe: &'static str,
    status: u16,
    body: Value,
    took: Duration,
    /// When the answer was read.
    ended: chrono::DateTime<chrono::Utc>,
}

struct Probes {
    /// A's client.
    http: reqwest::Client,
    /// A stranger's, guessing keys from another address (failed
    /// authentications are throttled per address).
    stranger: reqwest::Client,
    base: String,
    key: String,
}

/// A client whose connections leave from `address` (any 127.0.0.0/8
/// address reaches the server on 127.0.0.1): each party has its own, as
/// tenants and strangers would.
fn client_from(address: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(address))
        .build()
        .unwrap()
}

impl Probes {
    fn url(&self, path: &str) -> String {
        format!("{}/v1/tenants/tenant-a/{path}", self.base)
    }

    async fn send(&self, probe: &'static str, request: reqwest::RequestBuilder) -> Answer {
        let started = std::time::Instant::now();
        // A body over the limit may be cut off mid-upload: the server
        // refused it and closed before the client finished writing.
        let (status, body) = match request.send().await {
            Ok(r) => (r.status().as_u16(), r.json().await.unwrap_or(Value::Null)),
            Err(e) if e.is_request() && probe == "8 MB body" => (CUT_OFF, Value::Null),
            Err(e) => panic!("{probe}: the server answers: {e}"),
        };
        Answer {
            probe,
            status,
            body,
            took: started.elapsed(),
            ended: chrono::Utc::now(),
        }
    }

    async fn template_bomb(&self) -> Answer {
        let text = "{% for a in range(100000) %}{% for b in range(100000) %}xxxxxxxxxx{% endfor %}{% endfor %}";
        let put = self.http.put(self.url("templates/chat/en"));
        self.send(
            "template bomb",
            put.bearer_auth(&self.key).json(&json!({"text": text})),
        )
        .await
    }

    /// Each `in` walks a whole range: bounded by the work it does, not by
    /// its instructions.
    async fn range_walk(&self) -> Answer {
        let text = "{% for i in range(1500) %}{% if 9999 in range(10000) %}{% endif %}{% endfor %}Hi {{ name }}";
        let put = self.http.put(self.url("templates/chat/en"));
        self.send(
            "range-walking template",
            put.bearer_auth(&self.key).json(&json!({"text": text})),
        )
        .await
    }

    async fn broadcast_mention(&self) -> Answer {
        let put = self.http.put(self.url("templates/slack/en"));
        let text = "<!channel> {{ title }} starts soon";
        self.send(
            "broadcast mention",
            put.bearer_auth(&self.key).json(&json!({"text": text})),
        )
        .await
    }

    async fn slack_channel_id(&self) -> Answer {
        let put = self.http.put(self.url("users/channel"));
        let body = json!({"name": "A channel", "slack_user_id": "C024BE91L"});
        self.send("Slack channel id", put.bearer_auth(&self.key).json(&body))
            .await
    }

    /// The operator's surfaces, asked for on the tenant API's port.
    async fn keyless(&self, probe: &'static str, path: &str) -> Answer {
        let get = self.stranger.get(format!("{}{path}", self.base));
        self.send(probe, get).await
    }

    async fn ancient_series(&self) -> Answer {
        let put = self
            .http
            .put(self.url("schedules/ancient"))
            .bearer_auth(&self.key);
        let body = json!({
            "title": "Daily since 1900", "starts_at": "1900-01-01T09:00:00Z",
            "participants": ["a0"], "reminders": [{"minutes_before": 5, "channels": ["chat"]}],
            "recurrence": {"rrule": "FREQ=DAILY"}
        });
        self.send("series from 1900", put.json(&body)).await
    }

    async fn never_matching_rule(&self) -> Answer {
        let put = self
            .http
            .put(self.url("schedules/never"))
            .bearer_auth(&self.key);
        let body = json!({
            "title": "February 31st", "starts_at": "2027-01-04T09:00:00Z",
            "participants": ["a0"], "reminders": [{"minutes_before": 5, "channels": ["chat"]}],
            "recurrence": {"rrule": "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=31"}
        });
        self.send("rule never matching", put.json(&body)).await
    }

    async fn far_listing(&self) -> Answer {
        let get = self
            .http
            .get(self.url("schedules/daily/occurrences"))
            .query(&[
                ("from", "9998-01-01T00:00:00Z"),
                ("to", "9998-12-31T00:00:00Z"),
            ]);
        self.send("listing in 9998", get.bearer_auth(&self.key))
            .await
    }

    async fn huge_body(&self) -> Answer {
        let title = "x".repeat(8 << 20);
        let put = self
            .http
            .put(self.url("schedules/huge"))
            .bearer_auth(&self.key);
        self.send("8 MB body", put.json(&json!({"title": title})))
            .await
    }

    async fn deep_json(&self) -> Answer {
        let body = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let put = self.http.put(self.url("users/deep")).bearer_auth(&self.key);
        let put = put.header("content-type", "application/json").body(body);
        self.send("JSON 100,000 deep", put).await
    }

    async fn wrong_key(&self, i: usize) -> Answer {
        let get = self.stranger.get(self.url("users/a0"));
        self.send("wrong key", get.bearer_auth(format!("toki_{i:048x}")))
            .await
    }

    async fn storm_put(&self, i: usize) -> Answer {
        let put = self.http.put(self.url(&format!("users/storm{i}")));
        self.send(
            "PUT storm",
            put.bearer_auth(&self.key).json(&json!({"name": "Storm"})),
        )
        .await
    }
}

/// Connections that send half a request line and then nothing.
fn slow_clients(base: &str, n: usize) -> Vec<std::net::TcpStream> {
    let addr = base.trim_start_matches("http://");
    (0..n)
        .filter_map(|_| {
            let mut s = std::net::TcpStream::connect(addr).ok()?;
            s.write_all(b"PUT /v1/tenants/tenant-a/users/slow HTTP/1.1\r\nHost: x\r\n")
                .ok()?;
            Some(s)
        })
        .collect()
}

/// The peak resident memory of process `pid`, in MB (Linux).
fn peak_rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kb / 1024.0
}

/// B's users and its meeting: every participant reminded by chat at one
/// instant, a few seconds after the users are in (chosen then, so that a set-up
/// slowed by A's storm cannot overtake it). Returns the instant.
async fn register_b(
    http: &reqwest::Client,
    base: &str,
    key: &str,
) -> chrono::DateTime<chrono::Utc> {
    let url = |p: &str| format!("{base}/v1/tenants/tenant-b/{p}");
    for i in 0..B_USERS {
        let r = http
            .put(url(&format!("users/b{i}")))
            .bearer_auth(key)
            .json(&json!({"name": format!("B {i}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "B's writes pass beside A's storm");
    }
    let participants: Vec<String> = (0..B_USERS).map(|i| format!("b{i}")).collect();
    let due = common::pipeline::due_in(5);
    let r = http
        .put(url("schedules/all-hands"))
        .bearer_auth(key)
        .json(&json!({
            "title": "All hands", "starts_at": (due + ChronoDuration::minutes(1)).to_rfc3339(),
            "participants": participants,
            "reminders": [{"minutes_before": 1, "channels": ["chat"]}]
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    due
}

/// Waits until the server has delivered B's chat reminders (`/metrics` on
/// its operator listener: A has none), scraped every 200 ms; returns when
/// that was seen, or `None` after `timeout`.
async fn b_delivered(
    http: &reqwest::Client,
    operator: &str,
    timeout: Duration,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let series = "toki_delivery_lateness_seconds_count{channel=\"chat\"}";
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let text = http
            .get(format!("{operator}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let delivered = text
            .lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        if delivered >= B_USERS as f64 {
            return Some(chrono::Utc::now());
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What A's erased person was called: found in no byte of A's files after.
const ERASED: [&str; 3] = [
    "Wilhelmina Quuxbridge",
    "wilhelmina.quuxbridge@example.com",
    "U0WQUUX1234",
];

/// A writes a person twice (an edit leaves an old version of the row in
/// its pages) and erases them through the API.
async fn erase_a_person(probes: &Probes) {
    let [name, email, slack] = ERASED;
    for n in [format!("{name} (old)"), name.to_owned()] {
        let body = json!({"name": n, "email": email, "slack_user_id": slack});
        let put = probes.http.put(probes.url("users/erased"));
        let r = put.bearer_auth(&probes.key).json(&body).send().await;
        assert_eq!(r.unwrap().status(), 200);
    }
    let delete = probes.http.delete(probes.url("users/erased?erase=true"));
    let r = delete.bearer_auth(&probes.key).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

/// The operator deletes tenant C and creates it again while the server
/// runs: the old key opens nothing, the new key's write lands in the new
/// database (its name is in C's one file), the old user is not there.
async fn recreate_under_a_running_server(
    http: &reqwest::Client,
    base: &str,
    data: &std::path::Path,
) {
    let url = format!("{base}/v1/tenants/tenant-c/users/c1");
    let put = |key: &str, name: &str| http.put(&url).bearer_auth(key).json(&json!({"name": name}));
    let old_key = create_tenant(data, "tenant-c");
    assert_eq!(
        put(&old_key, "Before Deletion")
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let deleted = std::process::Command::new(TOKI)
        .args(["tenant", "delete", "tenant-c", "--yes", "--data-dir"])
        .arg(data)
        .output()
        .unwrap();
    assert!(deleted.status.success(), "{deleted:?}");
    let new_key = create_tenant(data, "tenant-c");
    let get = http.get(&url).bearer_auth(&new_key).send().await.unwrap();
    assert_eq!(get.status(), 404, "the new tenant starts empty");
    assert_eq!(put(&old_key, "Old Key").send().await.unwrap().status(), 401);
    assert_eq!(
        put(&new_key, "After Creation")
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

/// After the server stopped: C's one database holds the new key's write,
/// not the old one's.
fn check_recreated(data: &std::path::Path) {
    let file = tenant_file(data, "tenant-c");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.extend(std::fs::read(format!("{}-wal", file.display())).unwrap_or_default());
    let holds = |s: &str| bytes.windows(s.len()).any(|w| w == s.as_bytes());
    assert!(
        holds("After Creation"),
        "the new key's write is in the new database"
    );
    assert!(!holds("Before Deletion"), "nothing of the old one");
}

/// A's probes, over and over until `stop`: every answer kept.
async fn probe_until(probes: &Probes, stop: &std::sync::atomic::AtomicBool) -> Vec<Answer> {
    let mut answers = Vec::new();
    let mut round = 0;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        answers.push(probes.template_bomb().await);
        answers.push(probes.range_walk().await);
        answers.push(probes.broadcast_mention().await);
        answers.push(probes.slack_channel_id().await);
        answers.push(probes.keyless("keyless report", "/report").await);
        answers.push(probes.keyless("keyless metrics", "/metrics").await);
        answers.push(probes.ancient_series().await);
        answers.push(probes.never_matching_rule().await);
        answers.push(probes.far_listing().await);
        answers.push(probes.huge_body().await);
        answers.push(probes.deep_json().await);
        for i in 0..20 {
            answers.push(probes.wrong_key(round * 20 + i).await);
        }
        let storm = (0..200).map(|i| probes.storm_put(round * 200 + i));
        answers.extend(futures::future::join_all(storm).await);
        round += 1;
    }
    answers
}

/// Each probe refused with the status and the field or code it should name,
/// or throttled: after A's storm its bucket may be empty, after the
/// stranger's first failures its address is throttled, and a 429 costs
/// nothing either. Every probe got its own answer at least once.
fn check_answers(answers: &[Answer]) {
    let mut answered: std::collections::BTreeMap<&str, usize> = Default::default();
    for a in answers.iter().filter(|a| a.status != 429) {
        let named = |status: u16, field: &str| {
            assert_eq!(a.status, status, "{}: {}", a.probe, a.body);
            assert_eq!(a.body["error"]["field"], field, "{}: {}", a.probe, a.body);
        };
        let says = |status: u16, words: &str| {
            assert_eq!(a.status, status, "{}: {}", a.probe, a.body);
            let message = a.body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains(words), "{}: {}", a.probe, a.body);
        };
        match a.probe {
            "template bomb" => says(422, "range has more than 10000 numbers"),
            "range-walking template" => says(422, "(work limit)"),
            "broadcast mention" => says(422, "whole channel"),
            "Slack channel id" => named(422, "slack_user_id"),
            "keyless report" | "keyless metrics" => assert_eq!(a.status, 404, "{}", a.probe),
            "series from 1900" | "rule never matching" => named(422, "starts_at"),
            "listing in 9998" => assert!(
                a.status == 200 || a.status == 422,
                "listed at the window's cost or refused: {} {}",
                a.status,
                a.body
            ),
            "8 MB body" => assert!(
                [413, CUT_OFF].contains(&a.status),
                "{} {}",
                a.status,
                a.body
            ),
            "JSON 100,000 deep" => assert_eq!(a.status, 400, "{}", a.body),
            "wrong key" => assert_eq!(a.status, 401, "{}", a.body),
            // Written, or past A's cap on users.
            _ => assert!([200, 422].contains(&a.status), "{}: {}", a.status, a.body),
        }
        *answered.entry(a.probe).or_default() += 1;
    }
    assert_eq!(
        answered.len(),
        13,
        "every probe answered on its own: {answered:?}"
    );
    let wrong: Vec<u16> = answers
        .iter()
        .filter(|a| a.probe == "wrong key")
        .map(|a| a.status)
        .collect();
    assert!(
        wrong[..10].iter().all(|&s| s == 401),
        "401 first: {wrong:?}"
    );
    assert!(
        wrong.iter().all(|&s| s == 401 || s == 429) && wrong.contains(&429),
        "then the stranger's address is throttled: {wrong:?}"
    );
    let storm_throttled = answers
        .iter()
        .filter(|a| a.probe == "PUT storm" && a.status == 429)
        .count();
    assert!(storm_throttled > 0, "A's storm met its rate limit");
}

/// The probes' answer times, one row per probe (stderr; not asserted).
fn print_times(answers: &[Answer]) {
    let mut by_probe: std::collections::BTreeMap<&str, Vec<Duration>> = Default::default();
    for a in answers {
        by_probe.entry(a.probe).or_default().push(a.took);
    }
    eprintln!(
        "{:<20} {:>6} {:>9} {:>9}",
        "probe", "count", "p50 ms", "max ms"
    );
    for (probe, mut took) in by_probe {
        took.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (p50, max) = (took[took.len() / 2], took[took.len() - 1]);
        eprintln!(
            "{probe:<20} {:>6} {:>9.1} {:>9.1}",
            took.len(),
            ms(p50),
            ms(max)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_tenant_delays_no_one_else() {
    let data = tempfile::tempdir().unwrap();
    let key_a = create_tenant(data.path(), "tenant-a");
    let key_b = create_tenant(data.path(), "tenant-b");
    let (mut server, base, operator) = serve_operated(data.path(), |cmd| {
        // The default quota (the harness lifts it for the other tests).
        cmd.env("TOKI_API_RATE", "50")
            .env("TOKI_API_BURST", "100")
            .env("TOKI_API_CONCURRENCY", "16");
    });
    let http = client_from([127, 0, 0, 1]);
    let probes = Probes {
        http: http.clone(),
        stranger: client_from([127, 0, 0, 3]),
        base: base.clone(),
        key: key_a,
    };
    let http_b = client_from([127, 0, 0, 2]);
    // A valid daily series of A's, for the far listing.
    let daily = json!({
        "title": "Daily", "starts_at": common::pipeline::due_in(3600).to_rfc3339(),
        "participants": [], "reminders": [],
        "recurrence": {"rrule": "FREQ=DAILY"}
    });
    let r = http
        .put(probes.url("schedules/daily"))
        .bearer_auth(&probes.key)
        .json(&daily);
    assert_eq!(r.send().await.unwrap().status(), 200);
    // Before the storms leave A's rate spent.
    erase_a_person(&probes).await;
    let _slow = slow_clients(&base, 200);
    // A's probes run until B's reminders are all delivered (or B gives up).
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (answers, (due, seen)) = tokio::join!(probe_until(&probes, &stop), async {
        let due = register_b(&http_b, &base, &key_b).await;
        let seen = b_delivered(&http_b, &operator, Duration::from_secs(120)).await;
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        (due, seen)
    });
    let seen =
        seen.expect("B's reminders all delivered while A's probes ran (gave up after 120 s)");
    eprintln!(
        "B's reminders all delivered {} ms after their instant, A's probes still running",
        (seen - due).num_milliseconds()
    );
    // A's probes ran across B's instant, not only before it.
    assert!(
        answers.iter().any(|a| a.ended > due),
        "no probe answered after B's instant"
    );
    check_answers(&answers);
    print_times(&answers);
    recreate_under_a_running_server(&http, &base, data.path()).await;
    let peak = peak_rss_mb(server.pid());
    eprintln!("toki serve peak RSS: {peak:.0} MB");
    assert!(
        peak < 500.0,
        "the server's memory stays bounded: {peak:.0} MB"
    );
    server.signal("TERM");
    assert!(server.wait_exit(Duration::from_secs(30)).await.is_some());
    let report = std::process::Command::new(TOKI)
        .args(["report", "--json", "--data-dir"])
        .arg(data.path())
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    check_b_delivered(&report);
    assert!(assert_in_no_byte(&tenant_file(data.path(), "tenant-a"), &ERASED) > 0);
    check_recreated(data.path());
}

/// Every one of B's chat reminders delivered, none before its instant; how
/// late the latest went is printed (SECURITY.md has the release build's).
fn check_b_delivered(report: &Value) {
    let delivered: u64 = report["counts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["tenant"] == "tenant-b" && r["status"] == "delivered")
        .map(|r| r["count"].as_u64().unwrap())
        .sum();
    assert_eq!(delivered, B_USERS as u64, "{report}");
    let chat = report["lateness"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["channel"] == "chat")
        .expect("chat lateness");
    let max_ms = chat["max_ms"].as_i64().unwrap();
    // percentiles_ms[0]: the least late.
    let least = chat["percentiles_ms"][0].as_i64().unwrap();
    eprintln!("B's chat reminders: {delivered} delivered, latest {max_ms} ms after due");
    assert!(least >= 0, "B's reminders went early: {chat}");
}
