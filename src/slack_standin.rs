//! A stand-in for Slack's Web API `chat.postMessage`, for tests and `toki bench`:
//! answers as Slack documents (`{"ok":true,...}`, `{"ok":false,"error":...}`,
//! HTTP 429 with `Retry-After`), and records when each delivery arrived so
//! missing and duplicate deliveries can be counted.

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

/// How the stand-in behaves.
#[derive(Debug, Clone, Default)]
pub struct StandinOptions {
    /// Answer the first N requests with 429 and `Retry-After: retry_after_s`.
    pub throttle_first: u64,
    pub retry_after_s: u64,
}

#[derive(Default)]
struct Recorded {
    /// delivery (`tenant/key`) → arrival instants in ms since the epoch.
    arrivals: HashMap<String, Vec<i64>>,
}

#[derive(Clone)]
pub struct Standin {
    options: StandinOptions,
    requests: Arc<AtomicU64>,
    recorded: Arc<Mutex<Recorded>>,
}

/// What the stand-in saw, for `GET /stats`.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct StandinStats {
    pub requests: u64,
    pub throttled: u64,
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
            requests: Arc::default(),
            recorded: Arc::default(),
        }
    }

    pub fn router(&self) -> Router {
        Router::new()
            .route("/api/chat.postMessage", post(post_message))
            .route(
                "/api/api.test",
                post(|| async { Json(json!({ "ok": true })) }),
            )
            .route("/stats", get(stats))
            .route("/arrivals", get(arrivals))
            .with_state(self.clone())
    }

    pub fn stats(&self) -> StandinStats {
        let requests = self.requests.load(Ordering::Relaxed);
        let rec = self.recorded.lock().expect("stand-in lock");
        StandinStats {
            requests,
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

async fn post_message(State(s): State<Standin>, headers: HeaderMap, body: Json<Value>) -> Response {
    let arrived_ms = chrono::Utc::now().timestamp_millis();
    let n = s.requests.fetch_add(1, Ordering::Relaxed) + 1;
    if n <= s.options.throttle_first {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", s.options.retry_after_s.to_string())],
            Json(json!({ "ok": false, "error": "ratelimited" })),
        )
            .into_response();
    }
    let authorized = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("Bearer ") && v.len() > 7);
    if !authorized {
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
    let payload = &body["metadata"]["event_payload"];
    if let (Some(t), Some(d)) = (payload["tenant"].as_str(), payload["delivery"].as_str()) {
        let due = payload["due_at_ms"].as_i64().unwrap_or(0);
        let mut rec = s.recorded.lock().expect("stand-in lock");
        // First element: the due instant; then one arrival per copy.
        rec.arrivals
            .entry(format!("{t}/{d}"))
            .or_insert_with(|| vec![due])
            .push(arrived_ms);
    }
    Json(json!({ "ok": true, "channel": channel, "ts": format!("{}.{:06}", arrived_ms / 1000, n) }))
        .into_response()
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
