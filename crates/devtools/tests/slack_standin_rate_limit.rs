//! The Slack stand-in's fleet-wide rate limit and the figures that show a
//! client kept under it (`rate_limited`, `max_per_second`, `/per_second`),
//! over real HTTP, with the stand-in's clock moved by hand instead of sleeping.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};
use toki_devtools::slack_standin::{RateLimit, Standin, StandinOptions, StandinStats};
use toki_ports::Clock;

/// A clock that stands still until told, in ms since the epoch.
struct HandClock(AtomicI64);

impl HandClock {
    fn set(&self, ms: i64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for HandClock {
    fn now(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.0.load(Ordering::SeqCst)).expect("in range")
    }
}

struct Served {
    standin: Standin,
    clock: Arc<HandClock>,
    base: String,
    http: reqwest::Client,
}

async fn serve(rate_limit: Option<RateLimit>, start_ms: i64) -> Served {
    let clock = Arc::new(HandClock(AtomicI64::new(start_ms)));
    let standin = Standin::with_clock(
        StandinOptions {
            rate_limit,
            ..Default::default()
        },
        clock.clone(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(toki_devtools::slack_standin::serve(
        standin.clone(),
        listener,
    ));
    Served {
        standin,
        clock,
        base,
        http: reqwest::Client::new(),
    }
}

struct Answer {
    status: StatusCode,
    retry_after: Option<String>,
    body: Value,
}

impl Served {
    /// One `chat.postMessage` carrying delivery `d{i}`.
    async fn post(&self, i: usize) -> Answer {
        let r = self
            .http
            .post(format!("{}/api/chat.postMessage", self.base))
            .header("authorization", "Bearer xoxb-test")
            .json(&json!({
                "channel": "U123",
                "text": "hi",
                "metadata": {
                    "event_type": "toki_reminder",
                    "event_payload": { "tenant": "t1", "delivery": format!("d{i}"), "due_at_ms": 0 }
                }
            }))
            .send()
            .await
            .unwrap();
        Answer {
            status: r.status(),
            retry_after: r
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned()),
            body: r.json().await.unwrap(),
        }
    }

    /// `n` requests at once, numbered from `first`; how many were accepted.
    async fn burst(&self, first: usize, n: usize) -> usize {
        let answers = futures::future::join_all((first..first + n).map(|i| self.post(i))).await;
        answers
            .iter()
            .filter(|a| a.status == StatusCode::OK && a.body["ok"] == true)
            .count()
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        self.http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// Most of `times` (ms) in any window `(t - 1000, t]`, the slow way.
fn busiest_window(times: &[i64]) -> u64 {
    times
        .iter()
        .map(|&t| times.iter().filter(|&&s| s > t - 1000 && s <= t).count() as u64)
        .max()
        .unwrap_or(0)
}

const LIMIT: RateLimit = RateLimit {
    per_second: 5,
    burst: 2,
};

#[tokio::test]
async fn ten_at_once_against_five_a_second_plus_two_gets_seven_through() {
    let start = 1_700_000_000_250;
    let s = serve(Some(LIMIT), start).await;
    let answers = futures::future::join_all((0..10).map(|i| s.post(i))).await;

    let (ok, throttled): (Vec<_>, Vec<_>) = answers.iter().partition(|a| a.status.is_success());
    assert_eq!(ok.len(), 7);
    assert!(
        ok.iter().all(|a| a.body["ok"] == true),
        "accepted as Slack does"
    );
    assert_eq!(throttled.len(), 3);
    for a in throttled {
        assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(a.retry_after.as_deref(), Some("1"));
        assert_eq!(a.body, json!({ "ok": false, "error": "ratelimited" }));
    }

    let stats: StandinStats = s.get("/stats").await;
    assert_eq!(stats, s.standin.stats());
    assert_eq!(stats.requests, 10);
    assert_eq!(stats.rate_limited, 3);
    assert_eq!(stats.throttled, 0, "throttle_first is off");
    assert_eq!(stats.max_per_second, 7);
    assert_eq!(stats.unique, 7, "a 429 is not a delivery");
    assert_eq!(stats.duplicates, 0);
    assert_eq!(s.standin.arrivals().len(), 7);

    let per_second: Vec<(i64, u64)> = s.get("/per_second").await;
    assert_eq!(per_second, vec![(start / 1000, 7)]);
    assert_eq!(per_second, s.standin.per_second());
}

#[tokio::test]
async fn the_window_slides_with_each_arrival_not_by_calendar_second() {
    let t0 = 1_700_000_000_500;
    let s = serve(Some(LIMIT), t0).await;
    let at = |ms: i64| s.clock.set(t0 + ms);

    at(0);
    assert_eq!(s.burst(0, 4).await, 4);
    at(500);
    assert_eq!(s.burst(10, 4).await, 3, "7 in (-500, 500]");
    at(999);
    assert_eq!(s.burst(20, 1).await, 0, "still 7 in (-1, 999]");
    at(1000);
    assert_eq!(s.burst(30, 5).await, 4, "the 4 from 0 have left (0, 1000]");
    at(1499);
    assert_eq!(s.burst(40, 1).await, 0, "3 + 4 in (499, 1499]");
    at(1500);
    assert_eq!(s.burst(50, 3).await, 3, "the 3 from 500 have left");

    let stats = s.standin.stats();
    assert_eq!(stats.unique, 14);
    assert_eq!(stats.rate_limited, 4);
    assert_eq!(stats.max_per_second, 7);
    let second = t0 / 1000;
    assert_eq!(
        s.standin.per_second(),
        vec![(second, 4), (second + 1, 7), (second + 2, 3)],
        "calendar seconds are a histogram, not the limit's window"
    );
}

#[tokio::test]
async fn a_client_within_the_limit_is_never_throttled() {
    let t0 = 1_700_000_000_000;
    let s = serve(Some(LIMIT), t0).await;
    // Exactly per_second + burst every 1,000 ms: each window holds one lot.
    for k in 0..3 {
        s.clock.set(t0 + 1000 * k);
        assert_eq!(s.burst(10 * k as usize, 7).await, 7, "lot {k}");
    }
    // Then a token bucket of `burst` tokens refilled at `per_second` (in
    // thousandths of a token), sending a pseudo-random share of what it holds.
    let (capacity, refill_per_ms) = (1000 * i64::from(LIMIT.burst), i64::from(LIMIT.per_second));
    let (mut now, mut tokens, mut rng, mut sent) = (t0 + 3000, capacity, 0x2545_f491_u64, 0);
    for i in 100..400 {
        rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let step = 1 + (rng >> 33) as i64 % 150;
        now += step;
        tokens = (tokens + step * refill_per_ms).min(capacity);
        let n = (rng >> 20) as i64 % (tokens / 1000 + 1);
        tokens -= 1000 * n;
        s.clock.set(now);
        assert_eq!(s.burst(10 * i, n as usize).await, n as usize, "at {now}");
        sent += n as u64;
    }
    let stats = s.standin.stats();
    assert_eq!(stats.rate_limited, 0);
    assert_eq!(stats.unique, 21 + sent);
    assert!(stats.max_per_second <= LIMIT.per_window());
}

/// Irregular arrivals, some in the same ms: the stand-in never lets more than
/// the limit into any window (checked the slow way from what it accepted), and
/// `max_per_second` is that busiest window, with or without a limit.
#[tokio::test]
async fn max_per_second_is_the_busiest_window_of_what_was_accepted() {
    for limit in [Some(LIMIT), None] {
        let t0 = 1_700_000_000_000;
        let s = serve(limit, t0).await;
        let (mut now, mut rng, mut accepted_at) = (t0, 7_u64, Vec::new());
        let mut refused = 0;
        for i in 0..250 {
            rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            // Mostly close together, now and then a long gap.
            now += match (rng >> 33) % 10 {
                0..=3 => 0,
                4..=8 => (rng >> 40) as i64 % 200,
                _ => 1000,
            };
            s.clock.set(now);
            let a = s.post(i).await;
            if a.status.is_success() {
                accepted_at.push(now);
            } else {
                assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
                refused += 1;
            }
        }
        let stats = s.standin.stats();
        assert_eq!(stats.unique, accepted_at.len() as u64);
        assert_eq!(stats.rate_limited, refused);
        assert_eq!(stats.max_per_second, busiest_window(&accepted_at));
        let per_second_total: u64 = s.standin.per_second().iter().map(|(_, n)| n).sum();
        assert_eq!(per_second_total, accepted_at.len() as u64);
        match limit {
            Some(l) => {
                assert_eq!(
                    stats.max_per_second,
                    l.per_window(),
                    "the limit was reached"
                );
                assert!(refused > 0);
            }
            None => {
                assert_eq!(refused, 0);
                assert!(
                    stats.max_per_second > LIMIT.per_window(),
                    "the test is busy enough"
                );
            }
        }
    }
}

#[tokio::test]
async fn invalid_requests_over_the_limit_are_throttled_and_under_it_fill_nothing() {
    let t0 = 1_700_000_000_000;
    let s = serve(
        Some(RateLimit {
            per_second: 1,
            burst: 0,
        }),
        t0,
    )
    .await;
    let unauthorised = || {
        s.http
            .post(format!("{}/api/chat.postMessage", s.base))
            .json(&json!({ "channel": "U1", "text": "hi" }))
            .send()
    };
    let r = unauthorised().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "not_authed");
    assert_eq!(s.burst(0, 1).await, 1, "a refused request takes no place");
    let r = unauthorised().await.unwrap();
    assert_eq!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "Slack throttles first"
    );
    let stats = s.standin.stats();
    assert_eq!(
        (stats.unique, stats.rate_limited, stats.max_per_second),
        (1, 1, 1)
    );
}

#[test]
fn stats_from_before_the_rate_limit_still_parse() {
    let old = json!({ "requests": 3, "throttled": 1, "unique": 2, "duplicates": 0 });
    let stats: StandinStats = serde_json::from_value(old).unwrap();
    assert_eq!((stats.rate_limited, stats.max_per_second), (0, 0));
}

/// Fields with JSON escapes are decoded, those without are read as they
/// stand: the same text and delivery either way.
#[tokio::test]
async fn escaped_and_plain_fields_read_the_same() {
    let s = serve(None, 1_800_000_000_000).await;
    let bodies = [
        r#"{"channel":"U1","text":"line one\nline \"two\"","metadata":{"event_type":"toki_reminder","event_payload":{"tenant":"t\u0031","delivery":"d\/1","due_at_ms":5}}}"#,
        r#"{"channel":"U2","text":"plain","metadata":{"event_type":"toki_reminder","event_payload":{"tenant":"t1","delivery":"d/2","due_at_ms":6}}}"#,
    ];
    for body in bodies {
        let r = s
            .http
            .post(format!("{}/api/chat.postMessage", s.base))
            .header("authorization", "Bearer xoxb-test")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let answer: Value = r.json().await.unwrap();
        assert_eq!(answer["ok"], true, "{answer}");
    }
    assert_eq!(s.standin.texts("U1"), ["line one\nline \"two\""]);
    assert_eq!(s.standin.texts("U2"), ["plain"]);
    let mut deliveries: Vec<_> = s
        .standin
        .arrivals()
        .into_iter()
        .map(|a| (a.delivery, a.due_at_ms))
        .collect();
    deliveries.sort();
    assert_eq!(
        deliveries,
        [("t1/d/1".to_owned(), 5), ("t1/d/2".to_owned(), 6)]
    );
}
