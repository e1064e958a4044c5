//! A stand-in for Slack's Web API, for tests and `toki bench`: the methods
//! Toki uses (`chat.postMessage`, `api.test`, `conversations.open`,
//! `conversations.history` with message metadata), answering as Slack
//! documents (`{"ok":true,...}`, `{"ok":false,"error":...}`, HTTP 429 with
//! `Retry-After`). It records when each delivery arrived, so missing and
//! duplicate deliveries can be counted, and can be told to fail (5xx,
//! `ok:false`) while it runs, in process or through `POST /control/mode`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{json, Value};
use toki_core::ports::Clock;

/// How the stand-in behaves.
#[derive(Debug, Clone, Default)]
pub struct StandinOptions {
    /// Answer the first N requests with 429 and `Retry-After: retry_after_s`.
    pub throttle_first: u64,
    pub retry_after_s: u64,
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
    metadata: Value,
}

#[derive(Default)]
struct Recorded {
    /// delivery (`tenant/key`) → arrival instants in ms since the epoch.
    arrivals: HashMap<String, Vec<i64>>,
    /// Direct-message channel (the user id) → messages posted to it, oldest first.
    history: HashMap<String, Vec<Posted>>,
}

#[derive(Clone)]
pub struct Standin {
    options: StandinOptions,
    behaviour: Arc<Mutex<Behaviour>>,
    requests: Arc<AtomicU64>,
    /// Requests answered with a failure (any behaviour but `Ok`).
    failed: Arc<AtomicU64>,
    /// `chat.postMessage` requests that came over HTTP/2.
    http2: Arc<AtomicU64>,
    recorded: Arc<Mutex<Recorded>>,
    /// Woken at every delivery that arrives.
    arrived: Arc<tokio::sync::Notify>,
}

/// What the stand-in saw, for `GET /stats`.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct StandinStats {
    pub requests: u64,
    pub throttled: u64,
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
        Standin {
            options,
            behaviour: Arc::default(),
            requests: Arc::default(),
            failed: Arc::default(),
            http2: Arc::default(),
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
            Behaviour::Throttle(after) => (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", after.to_string())],
                Json(json!({ "ok": false, "error": "ratelimited" })),
            )
                .into_response(),
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

async fn post_message(
    State(s): State<Standin>,
    version: axum::http::Version,
    headers: HeaderMap,
    body: Json<Value>,
) -> Response {
    // The sink's own clock: arrival as the receiver sees it.
    let arrived_ms = toki_core::ports::SystemClock.now().timestamp_millis();
    let n = s.requests.fetch_add(1, Ordering::Relaxed) + 1;
    if version == axum::http::Version::HTTP_2 {
        s.http2.fetch_add(1, Ordering::Relaxed);
    }
    if n <= s.options.throttle_first {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", s.options.retry_after_s.to_string())],
            Json(json!({ "ok": false, "error": "ratelimited" })),
        )
            .into_response();
    }
    if let Some(failure) = s.failure() {
        return failure;
    }
    if !authorized(&headers) {
        return slack_error("not_authed");
    }
    let channel = body["channel"].as_str().unwrap_or_default();
    if channel.is_empty() {
        return slack_error("channel_not_found");
    }
    if channel.starts_with("UNKNOWN") {
        return slack_error("channel_not_found");
    }
    if body["text"].as_str().unwrap_or_default().is_empty() {
        return slack_error("no_text");
    }
    let ts = format!(
        "{}.{:06}",
        arrived_ms / 1000,
        (arrived_ms % 1000) * 1000 + (n % 1000) as i64
    );
    let payload = &body["metadata"]["event_payload"];
    let mut rec = s.recorded.lock().expect("stand-in lock");
    if let (Some(t), Some(d)) = (payload["tenant"].as_str(), payload["delivery"].as_str()) {
        let due = payload["due_at_ms"].as_i64().unwrap_or(0);
        // First element: the due instant; then one arrival per copy.
        rec.arrivals
            .entry(format!("{t}/{d}"))
            .or_insert_with(|| vec![due])
            .push(arrived_ms);
    }
    rec.history
        .entry(channel.to_owned())
        .or_default()
        .push(Posted {
            ts: ts.clone(),
            text: body["text"].as_str().unwrap_or_default().to_owned(),
            metadata: body["metadata"].clone(),
        });
    drop(rec);
    s.arrived.notify_waiters();
    Json(json!({ "ok": true, "channel": channel, "ts": ts })).into_response()
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
    let messages: Vec<Value> = rec
        .history
        .get(&q.channel)
        .map(|h| {
            h.iter()
                .rev()
                .filter(|m| m.ts.parse::<f64>().unwrap_or(0.0) >= oldest)
                .take(limit)
                .map(|m| {
                    let mut v = json!({ "type": "message", "ts": m.ts, "text": m.text });
                    if with_metadata && !m.metadata.is_null() {
                        v["metadata"] = m.metadata.clone();
                    }
                    v
                })
                .collect()
        })
        .unwrap_or_default();
    Json(json!({ "ok": true, "messages": messages, "has_more": false })).into_response()
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

/// Serves the stand-in on `listener` until the future is dropped.
pub async fn serve(standin: Standin, listener: tokio::net::TcpListener) -> std::io::Result<()> {
    axum::serve(listener, standin.router()).await
}
