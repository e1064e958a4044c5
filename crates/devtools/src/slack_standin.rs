//! A stand-in for Slack's Web API, for tests and `toki bench`: the methods
//! Toki uses (`chat.postMessage`, `api.test`, `conversations.open`,
//! `conversations.history` with message metadata), answering as Slack
//! documents (`{"ok":true,...}`, `{"ok":false,"error":...}`, HTTP 429 with
//! `Retry-After`). It records when each delivery arrived, so missing and
//! duplicate deliveries can be counted, and can be told to fail (5xx,
//! `ok:false`) while it runs, in process or through `POST /control/mode`.
//!
//! With [`StandinOptions::rate_limit`] it also limits `chat.postMessage`
//! fleet-wide as Slack does, and counts the most deliveries it accepted in
//! any one second (`max_per_second`), so a test can check that a client kept
//! under the limit rather than leaning on the 429s.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use toki_ports::Clock;

/// How the stand-in behaves.
#[derive(Debug, Clone, Default)]
pub struct StandinOptions {
    /// Answer the first N requests with 429 and `Retry-After: retry_after_s`.
    pub throttle_first: u64,
    pub retry_after_s: u64,
    /// Slack's rate limit on `chat.postMessage`, across every client.
    pub rate_limit: Option<RateLimit>,
}

/// A limit on accepted `chat.postMessage` requests: at most
/// `per_second + burst` in any sliding window of 1,000 ms.
///
/// Precisely: a request arriving at `t` (ms, the stand-in's clock) is
/// accepted iff fewer than `per_second + burst` requests were accepted in
/// `(t - 1000, t]`; otherwise it is answered HTTP 429, `Retry-After: 1`,
/// `{"ok":false,"error":"ratelimited"}` and not recorded. So no 1,000 ms
/// window ever holds more than `per_second + burst` deliveries, and a client
/// whose requests never put more than that in one window (say a token bucket
/// of `burst` tokens refilled at `per_second`) is never throttled. A window
/// rather than a bucket of `per_second + burst` tokens: such a bucket, full,
/// lets through that many at once and then `per_second` more within the same
/// second. `Retry-After: 1` is always enough: by then every request in the
/// window that was full has left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub per_second: u32,
    pub burst: u32,
}

impl RateLimit {
    /// Most accepted requests in any 1,000 ms window.
    pub fn per_window(&self) -> u64 {
        u64::from(self.per_second) + u64::from(self.burst)
    }
}

/// How every Web API method answers, changeable while the stand-in runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode", content = "value")]
pub enum Behaviour {
    /// As Slack does when all is well.
    #[default]
    Ok,
    /// HTTP `status` with an HTML body (a load balancer in front of a dead service).
    HttpError(u16),
    /// HTTP 200 with `{"ok":false,"error":...}`.
    NotOk(String),
    /// HTTP 429 with `Retry-After` (seconds).
    Throttle(u64),
}

/// One posted message, for `conversations.history`.
#[derive(Debug, Clone)]
struct Posted {
    ts: String,
    text: String,
    /// As sent (none: the message had no metadata).
    metadata: Option<Box<RawValue>>,
}

#[derive(Default)]
struct Recorded {
    /// delivery (`tenant/key`) → arrival instants in ms since the epoch.
    arrivals: HashMap<String, Vec<i64>>,
    /// Direct-message channel (the user id) → messages posted to it, oldest first.
    history: HashMap<String, Vec<Posted>>,
    /// Accepted `chat.postMessage` arrivals (ms) in the last 1,000 ms, oldest
    /// first: the rate limit's window, and `max_per_second`'s.
    window: VecDeque<i64>,
    /// The latest arrival handed out, so arrivals never go back in time.
    last_ms: Option<i64>,
    /// Most accepted in any 1,000 ms window so far (`window`'s longest).
    max_per_second: u64,
    /// Second since the epoch → accepted `chat.postMessage` requests in it.
    per_second: BTreeMap<i64, u64>,
}

impl Recorded {
    /// Now (ms) as arrivals see it, with the window moved up to it. Taken
    /// under the lock and never before the last one, so `window` stays sorted
    /// (a wall clock stepping back holds arrivals at the last instant).
    fn arrive(&mut self, clock_ms: i64) -> i64 {
        let now = self.last_ms.map_or(clock_ms, |last| last.max(clock_ms));
        self.last_ms = Some(now);
        while self.window.front().is_some_and(|&t| t <= now - 1000) {
            self.window.pop_front();
        }
        now
    }

    /// Counts an accepted `chat.postMessage` arriving at `now` (from `arrive`).
    fn accept(&mut self, now: i64) {
        self.window.push_back(now);
        // The busiest window ends at an arrival, so checking at each is enough.
        self.max_per_second = self.max_per_second.max(self.window.len() as u64);
        *self.per_second.entry(now.div_euclid(1000)).or_default() += 1;
    }
}

#[derive(Clone)]
pub struct Standin {
    options: StandinOptions,
    /// Arrival times (and the rate limit's window) come from here.
    clock: Arc<dyn Clock>,
    behaviour: Arc<Mutex<Behaviour>>,
    requests: Arc<AtomicU64>,
    /// Requests answered with a failure (any behaviour but `Ok`).
    failed: Arc<AtomicU64>,
    /// `chat.postMessage` requests that came over HTTP/2.
    http2: Arc<AtomicU64>,
    /// `chat.postMessage` requests answered 429 by `options.rate_limit`.
    rate_limited: Arc<AtomicU64>,
    recorded: Arc<Mutex<Recorded>>,
    /// Woken at every delivery that arrives.
    arrived: Arc<tokio::sync::Notify>,
}

/// What the stand-in saw, for `GET /stats`.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct StandinStats {
    pub requests: u64,
    /// Requests answered 429 by `throttle_first` (the rate limit's are `rate_limited`).
    pub throttled: u64,
    /// `chat.postMessage` requests answered 429 by the rate limit.
    #[serde(default)]
    pub rate_limited: u64,
    /// Most `chat.postMessage` deliveries accepted in any 1,000 ms sliding
    /// window (by arrival at the stand-in), whatever the rate limit.
    #[serde(default)]
    pub max_per_second: u64,
    /// Requests answered with a failure on purpose (`Behaviour` other than `Ok`).
    #[serde(default)]
    pub failed: u64,
    /// `chat.postMessage` requests over HTTP/2 (the rest came over HTTP/1.1).
    #[serde(default)]
    pub http2: u64,
    /// Distinct deliveries received.
    pub unique: u64,
    /// Deliveries received more than once (extra copies).
    pub duplicates: u64,
}

/// One delivery as the stand-in saw it first.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Arrival {
    pub delivery: String,
    pub due_at_ms: i64,
    pub arrived_ms: i64,
    pub copies: u64,
}

impl Standin {
    pub fn new(options: StandinOptions) -> Self {
        Self::with_clock(options, Arc::new(toki_ports::SystemClock))
    }

    /// A stand-in whose arrivals (and rate-limit window) follow `clock`, so a
    /// test can move time across the window without sleeping.
    pub fn with_clock(options: StandinOptions, clock: Arc<dyn Clock>) -> Self {
        Standin {
            options,
            clock,
            behaviour: Arc::default(),
            requests: Arc::default(),
            failed: Arc::default(),
            http2: Arc::default(),
            rate_limited: Arc::default(),
            recorded: Arc::default(),
            arrived: Arc::default(),
        }
    }

    pub fn router(&self) -> Router {
        Router::new()
            .route("/api/chat.postMessage", post(post_message))
            .route("/api/api.test", post(api_test).get(api_test))
            .route("/api/conversations.open", post(conversations_open))
            .route(
                "/api/conversations.history",
                get(conversations_history).post(conversations_history),
            )
            .route("/control/mode", post(set_mode))
            .route("/stats", get(stats))
            .route("/arrivals", get(arrivals))
            .route("/per_second", get(per_second))
            .with_state(self.clone())
    }

    /// From now on every method answers this way.
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        *self.behaviour.lock().expect("stand-in lock") = behaviour;
    }

    /// The failure to answer with now, if any (counts it).
    fn failure(&self) -> Option<Response> {
        let behaviour = self.behaviour.lock().expect("stand-in lock").clone();
        let answer = match behaviour {
            Behaviour::Ok => return None,
            Behaviour::HttpError(status) => (
                StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
                [("content-type", "text/html")],
                "<html><body>Service Unavailable</body></html>",
            )
                .into_response(),
            Behaviour::NotOk(error) => slack_error(&error),
            Behaviour::Throttle(after) => ratelimited(after),
        };
        self.failed.fetch_add(1, Ordering::Relaxed);
        Some(answer)
    }

    pub fn stats(&self) -> StandinStats {
        let requests = self.requests.load(Ordering::Relaxed);
        let rec = self.recorded.lock().expect("stand-in lock");
        StandinStats {
            requests,
            failed: self.failed.load(Ordering::Relaxed),
            http2: self.http2.load(Ordering::Relaxed),
            throttled: requests.min(self.options.throttle_first),
            rate_limited: self.rate_limited.load(Ordering::Relaxed),
            max_per_second: rec.max_per_second,
            unique: rec.arrivals.len() as u64,
            duplicates: rec
                .arrivals
                .values()
                // v = [due, arrival, arrival...]: copies beyond the first.
                .map(|v| v.len() as u64 - 2)
                .sum(),
        }
    }

    /// Waits until `n` distinct deliveries have arrived, or `timeout`; returns
    /// how many had.
    pub async fn wait_unique(&self, n: u64, timeout: std::time::Duration) -> u64 {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let next = self.arrived.notified();
            tokio::pin!(next);
            next.as_mut().enable();
            let unique = self.stats().unique;
            if unique >= n || tokio::time::timeout_at(deadline, next).await.is_err() {
                return self.stats().unique;
            }
        }
    }

    /// Accepted `chat.postMessage` requests per second since the epoch (by
    /// arrival), oldest first; seconds with none are left out.
    pub fn per_second(&self) -> Vec<(i64, u64)> {
        let rec = self.recorded.lock().expect("stand-in lock");
        rec.per_second.iter().map(|(&s, &n)| (s, n)).collect()
    }

    /// The texts posted to `channel` (a user id for a direct message), in order.
    pub fn texts(&self, channel: &str) -> Vec<String> {
        let rec = self.recorded.lock().expect("stand-in lock");
        rec.history
            .get(channel)
            .map(|h| h.iter().map(|p| p.text.clone()).collect())
            .unwrap_or_default()
    }

    /// Every delivery received, with its first arrival and the due instant it carried.
    pub fn arrivals(&self) -> Vec<Arrival> {
        let rec = self.recorded.lock().expect("stand-in lock");
        rec.arrivals
            .iter()
            .map(|(k, v)| Arrival {
                delivery: k.clone(),
                due_at_ms: v[0],
                arrived_ms: v[1..].iter().copied().min().unwrap_or(v[0]),
                copies: v.len() as u64 - 1,
            })
            .collect()
    }
}

fn slack_error(error: &str) -> Response {
    Json(json!({ "ok": false, "error": error })).into_response()
}

fn ratelimited(retry_after_s: u64) -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [("retry-after", retry_after_s.to_string())],
        Json(json!({ "ok": false, "error": "ratelimited" })),
    )
        .into_response()
}

/// The part of a `chat.postMessage` body the stand-in reads. Fields stay
/// raw until read, so a field of another type reads as absent (as Slack
/// reads it), and the metadata is kept as sent.
#[derive(serde::Deserialize)]
struct PostMessage<'a> {
    #[serde(default, borrow)]
    channel: Option<&'a RawValue>,
    #[serde(default, borrow)]
    text: Option<&'a RawValue>,
    #[serde(default, borrow)]
    metadata: Option<&'a RawValue>,
}

/// Toki's delivery in a message's metadata.
#[derive(serde::Deserialize)]
struct Metadata<'a> {
    #[serde(borrow)]
    event_payload: Option<EventPayload<'a>>,
}

#[derive(serde::Deserialize)]
struct EventPayload<'a> {
    #[serde(default, borrow)]
    tenant: Option<&'a RawValue>,
    #[serde(default, borrow)]
    delivery: Option<&'a RawValue>,
    #[serde(default, borrow)]
    due_at_ms: Option<&'a RawValue>,
}

/// A raw JSON string's text, borrowed unless it holds escapes; none for
/// anything but a string. Escapes are looked for first: asking serde for a
/// borrowed `&str` of a string with escapes fails with an error message that
/// quotes the whole string (a twentieth of the stand-in's CPU at a burst).
fn string(raw: Option<&RawValue>) -> Option<Cow<'_, str>> {
    let raw = raw?.get();
    if raw.contains('\\') {
        serde_json::from_str::<String>(raw).map(Cow::Owned).ok()
    } else {
        serde_json::from_str::<&str>(raw).map(Cow::Borrowed).ok()
    }
}

/// The delivery (`tenant/key`) and its due instant (ms) in Toki's metadata.
fn delivery_of(metadata: Option<&RawValue>) -> Option<(String, i64)> {
    let payload = serde_json::from_str::<Metadata>(metadata?.get())
        .ok()?
        .event_payload?;
    let (tenant, delivery) = (string(payload.tenant)?, string(payload.delivery)?);
    let due = payload
        .due_at_ms
        .and_then(|d| serde_json::from_str::<i64>(d.get()).ok())
        .unwrap_or(0);
    Some((format!("{tenant}/{delivery}"), due))
}

/// `{"ok":true,"channel":...,"ts":...}`.
#[derive(Serialize)]
struct PostedReply<'a> {
    ok: bool,
    channel: &'a str,
    ts: &'a str,
}

async fn post_message(
    State(s): State<Standin>,
    version: axum::http::Version,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let n = s.requests.fetch_add(1, Ordering::Relaxed) + 1;
    if version == axum::http::Version::HTTP_2 {
        s.http2.fetch_add(1, Ordering::Relaxed);
    }
    if n <= s.options.throttle_first {
        return ratelimited(s.options.retry_after_s);
    }
    if let Some(failure) = s.failure() {
        return failure;
    }
    let body = serde_json::from_slice::<PostMessage>(&body);
    let (channel, text, metadata) = match &body {
        Ok(b) => (
            string(b.channel).unwrap_or_default(),
            string(b.text).unwrap_or_default(),
            b.metadata,
        ),
        Err(_) => (Cow::Borrowed(""), Cow::Borrowed(""), None),
    };
    let invalid = if !authorized(&headers) {
        Some("not_authed")
    } else if body.is_err() {
        // Slack answers a body it cannot read with HTTP 200 and `invalid_json`.
        Some("invalid_json")
    } else if channel.is_empty() || channel.starts_with("UNKNOWN") {
        Some("channel_not_found")
    } else if text.is_empty() {
        Some("no_text")
    } else {
        None
    };
    let delivery = delivery_of(metadata);
    // The sink's own clock: arrival as the receiver sees it, read under the
    // lock so the rate limit's window sees arrivals in order.
    let clock_ms = s.clock.now().timestamp_millis();
    let mut rec = s.recorded.lock().expect("stand-in lock");
    let arrived_ms = rec.arrive(clock_ms);
    // Slack throttles before it looks at the request; only accepted
    // deliveries fill the window, so it bounds exactly what was delivered.
    if let Some(limit) = s.options.rate_limit {
        if rec.window.len() as u64 >= limit.per_window() {
            drop(rec);
            s.rate_limited.fetch_add(1, Ordering::Relaxed);
            return ratelimited(1);
        }
    }
    if let Some(error) = invalid {
        return slack_error(error);
    }
    rec.accept(arrived_ms);
    let ts = format!(
        "{}.{:06}",
        arrived_ms / 1000,
        (arrived_ms % 1000) * 1000 + (n % 1000) as i64
    );
    if let Some((key, due)) = delivery {
        // First element: the due instant; then one arrival per copy.
        rec.arrivals
            .entry(key)
            .or_insert_with(|| vec![due])
            .push(arrived_ms);
    }
    rec.history
        .entry(channel.to_string())
        .or_default()
        .push(Posted {
            ts: ts.clone(),
            text: text.to_string(),
            metadata: metadata.map(RawValue::to_owned),
        });
    drop(rec);
    s.arrived.notify_waiters();
    Json(PostedReply {
        ok: true,
        channel: &channel,
        ts: &ts,
    })
    .into_response()
}

fn authorized(headers: &HeaderMap) -> bool {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer "))
}

async fn api_test(State(s): State<Standin>) -> Response {
    s.requests.fetch_add(1, Ordering::Relaxed);
    if let Some(failure) = s.failure() {
        return failure;
    }
    Json(json!({ "ok": true })).into_response()
}

/// `conversations.open` with `users`: the direct-message channel with that
/// user (here the user id itself, which `chat.postMessage` also accepts).
async fn conversations_open(
    State(s): State<Standin>,
    headers: HeaderMap,
    body: Json<Value>,
) -> Response {
    s.requests.fetch_add(1, Ordering::Relaxed);
    if let Some(failure) = s.failure() {
        return failure;
    }
    if !authorized(&headers) {
        return slack_error("not_authed");
    }
    match body["users"].as_str() {
        Some(u) if !u.is_empty() && !u.contains(',') => {
            Json(json!({ "ok": true, "channel": { "id": u } })).into_response()
        }
        _ => slack_error("users_not_found"),
    }
}

#[derive(serde::Deserialize)]
struct HistoryQuery {
    channel: String,
    #[serde(default)]
    oldest: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    include_all_metadata: Option<bool>,
}

/// One message of `conversations.history`, its metadata as it was posted.
#[derive(Serialize)]
struct HistoryMessage<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    ts: &'a str,
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a RawValue>,
}

#[derive(Serialize)]
struct History<'a> {
    ok: bool,
    messages: Vec<HistoryMessage<'a>>,
    has_more: bool,
}

/// `conversations.history`: newest first, from `oldest` on, with metadata
/// when `include_all_metadata` is set.
async fn conversations_history(
    State(s): State<Standin>,
    headers: HeaderMap,
    axum::extract::Query(q): axum::extract::Query<HistoryQuery>,
) -> Response {
    s.requests.fetch_add(1, Ordering::Relaxed);
    if let Some(failure) = s.failure() {
        return failure;
    }
    if !authorized(&headers) {
        return slack_error("not_authed");
    }
    let oldest: f64 = q
        .oldest
        .as_deref()
        .and_then(|o| o.parse().ok())
        .unwrap_or(0.0);
    let limit = q.limit.unwrap_or(100).clamp(1, 999);
    let with_metadata = q.include_all_metadata.unwrap_or(false);
    let rec = s.recorded.lock().expect("stand-in lock");
    let messages: Vec<HistoryMessage> = rec
        .history
        .get(&q.channel)
        .map(|h| {
            h.iter()
                .rev()
                .filter(|m| m.ts.parse::<f64>().unwrap_or(0.0) >= oldest)
                .take(limit)
                .map(|m| HistoryMessage {
                    kind: "message",
                    ts: &m.ts,
                    text: &m.text,
                    metadata: m.metadata.as_deref().filter(|_| with_metadata),
                })
                .collect()
        })
        .unwrap_or_default();
    Json(History {
        ok: true,
        messages,
        has_more: false,
    })
    .into_response()
}

/// `POST /control/mode` with a [`Behaviour`] as JSON: how to answer from now on.
async fn set_mode(State(s): State<Standin>, body: Json<Behaviour>) -> StatusCode {
    s.set_behaviour(body.0);
    StatusCode::NO_CONTENT
}

async fn stats(State(s): State<Standin>) -> Json<StandinStats> {
    Json(s.stats())
}

async fn arrivals(State(s): State<Standin>) -> Json<Vec<Arrival>> {
    Json(s.arrivals())
}

/// `GET /per_second`: `[[second since the epoch, accepted], ...]`.
async fn per_second(State(s): State<Standin>) -> Json<Vec<(i64, u64)>> {
    Json(s.per_second())
}

/// Serves the stand-in on `listener` until the future is dropped.
pub async fn serve(standin: Standin, listener: tokio::net::TcpListener) -> std::io::Result<()> {
    axum::serve(listener, standin.router()).await
}
