//! A tenant's webhook receiver, for tests and `toki bench`: verifies every request's Standard Webhooks signature with the tenant's secret, records each delivery's arrivals with the `Idempotency-Key` and `webhook-id` of every copy, and can be told to fail (5xx, 429) or stay down. It is also the tenants' delivery-events endpoint ([`events`]).

mod events;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use toki_model::webhook_signature::{
    verify, WebhookSecret, HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP,
};
use toki_ports::Clock;

pub use crate::slack_standin::{Arrival, StandinStats};
pub use events::{EventArrival, EventStats};

/// How the receiver answers, changeable while it runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode", content = "value")]
pub enum Behaviour {
    #[default]
    Ok,
    /// This HTTP status, an HTML body.
    HttpError(u16),
    /// HTTP 429 with `Retry-After` (seconds).
    Throttle(u64),
}

/// Every copy of one delivery.
#[derive(Debug, Clone, Default)]
struct Copies {
    due_at_ms: i64,
    arrived_ms: Vec<i64>,
    idempotency_keys: BTreeSet<String>,
    message_ids: BTreeSet<String>,
}

#[derive(Default)]
struct Recorded {
    /// `tenant/delivery` → its copies.
    deliveries: HashMap<String, Copies>,
    /// Text of the latest copy per recipient (`tenant/user`).
    texts: HashMap<String, Vec<String>>,
}

/// What the receiver counted beyond the deliveries.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ReceiverStats {
    pub requests: u64,
    /// Refused: no such tenant's secret, a signature that does not verify,
    /// a timestamp outside the tolerance, or a body that is not the JSON
    /// Toki sends.
    pub refused: u64,
    /// Answered with a failure on purpose.
    pub failed: u64,
}

#[derive(Clone)]
pub struct WebhookStandin {
    clock: Arc<dyn Clock>,
    /// tenant → the secrets its signatures may verify with.
    secrets: Arc<Mutex<HashMap<String, Vec<WebhookSecret>>>>,
    behaviour: Arc<Mutex<Behaviour>>,
    requests: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    recorded: Arc<Mutex<Recorded>>,
    arrived: Arc<tokio::sync::Notify>,
    events: Arc<Mutex<events::EventsRecorded>>,
}

impl Default for WebhookStandin {
    fn default() -> Self {
        Self::new()
    }
}

/// The body as the webhook channel sends it (docs/webhooks.md).
#[derive(Deserialize)]
struct Body {
    delivery: String,
    tenant: String,
    due_at: String,
    recipient: Recipient,
    text: String,
}

#[derive(Deserialize)]
struct Recipient {
    id: String,
}

/// `POST /control/secret`: the secret a tenant's requests verify with.
#[derive(Deserialize, Serialize)]
pub struct TenantSecret {
    pub tenant: String,
    pub secret: String,
}

impl WebhookStandin {
    pub fn new() -> Self {
        Self::with_clock(Arc::new(toki_ports::SystemClock))
    }

    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        WebhookStandin {
            clock,
            secrets: Arc::default(),
            behaviour: Arc::default(),
            requests: Arc::default(),
            refused: Arc::default(),
            failed: Arc::default(),
            recorded: Arc::default(),
            arrived: Arc::default(),
            events: Arc::default(),
        }
    }

    pub fn router(&self) -> Router {
        Router::new()
            .route("/hook", post(receive))
            .route("/control/mode", post(set_mode))
            .route("/control/secret", post(add_secret))
            .route("/control/secrets", post(add_secrets))
            .route("/stats", get(stats))
            .route("/arrivals", get(arrivals))
            .route("/events/{tenant}", post(events::receive))
            .route("/events-stats", get(events::stats))
            .route("/events-arrivals", get(events::arrivals))
            .with_state(self.clone())
    }

    /// Requests of `tenant` verify with `secret` (as well as those added before).
    pub fn add_secret(&self, tenant: &str, secret: WebhookSecret) {
        let mut secrets = self.secrets.lock().expect("stand-in lock");
        secrets.entry(tenant.to_owned()).or_default().push(secret);
    }

    pub fn set_behaviour(&self, behaviour: Behaviour) {
        *self.behaviour.lock().expect("stand-in lock") = behaviour;
    }

    pub fn receiver_stats(&self) -> ReceiverStats {
        ReceiverStats {
            requests: self.requests.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }

    /// In the Slack stand-in's shape, so the bench and the fault suite count both alike.
    pub fn stats(&self) -> StandinStats {
        let rec = self.recorded.lock().expect("stand-in lock");
        StandinStats {
            requests: self.requests.load(Ordering::Relaxed),
            throttled: 0,
            rate_limited: 0,
            max_per_second: 0,
            failed: self.failed.load(Ordering::Relaxed),
            http2: 0,
            unique: rec.deliveries.len() as u64,
            duplicates: rec
                .deliveries
                .values()
                .map(|c| c.arrived_ms.len() as u64 - 1)
                .sum(),
        }
    }

    pub fn arrivals(&self) -> Vec<Arrival> {
        let rec = self.recorded.lock().expect("stand-in lock");
        rec.deliveries
            .iter()
            .map(|(k, c)| Arrival {
                delivery: k.clone(),
                due_at_ms: c.due_at_ms,
                arrived_ms: c.arrived_ms.iter().copied().min().unwrap_or(c.due_at_ms),
                copies: c.arrived_ms.len() as u64,
            })
            .collect()
    }

    /// Per delivery with more than one copy: the distinct `Idempotency-Key`
    /// and `webhook-id` values its copies carried (one each when retries
    /// kept them).
    pub fn duplicate_ids(&self) -> Vec<(String, usize, usize)> {
        let rec = self.recorded.lock().expect("stand-in lock");
        rec.deliveries
            .iter()
            .filter(|(_, c)| c.arrived_ms.len() > 1)
            .map(|(k, c)| (k.clone(), c.idempotency_keys.len(), c.message_ids.len()))
            .collect()
    }

    /// The distinct `Idempotency-Key` values the copies of `delivery` of
    /// `tenant` carried.
    pub fn idempotency_keys(&self, tenant: &str, delivery: &str) -> Vec<String> {
        let rec = self.recorded.lock().expect("stand-in lock");
        rec.deliveries
            .get(&format!("{tenant}/{delivery}"))
            .map(|c| c.idempotency_keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The texts received for `user` of `tenant`, in order.
    pub fn texts(&self, tenant: &str, user: &str) -> Vec<String> {
        let rec = self.recorded.lock().expect("stand-in lock");
        rec.texts
            .get(&format!("{tenant}/{user}"))
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until `n` distinct deliveries have arrived, or `timeout`.
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

    /// The failure to answer with now, if any (counted).
    fn failure(&self) -> Option<Response> {
        let answer = match self.behaviour.lock().expect("stand-in lock").clone() {
            Behaviour::Ok => return None,
            Behaviour::HttpError(status) => (
                StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
                "<html><body>Service Unavailable</body></html>",
            )
                .into_response(),
            Behaviour::Throttle(after) => (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", after.to_string())],
                "slow down",
            )
                .into_response(),
        };
        self.failed.fetch_add(1, Ordering::Relaxed);
        Some(answer)
    }

    /// Whether the request is signed by its tenant's secret, and its body.
    fn verified(&self, headers: &HeaderMap, body: &[u8]) -> Option<Body> {
        let parsed: Body = serde_json::from_slice(body).ok()?;
        self.signed_by(&parsed.tenant, headers, body)
            .then_some(parsed)
    }

    /// Whether the request's signature verifies with one of `tenant`'s secrets.
    fn signed_by(&self, tenant: &str, headers: &HeaderMap, body: &[u8]) -> bool {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let (Some(id), Some(ts), Some(sig)) = (
            header(HEADER_ID),
            header(HEADER_TIMESTAMP),
            header(HEADER_SIGNATURE),
        ) else {
            return false;
        };
        let now_s = self.clock.now().timestamp();
        let secrets = self.secrets.lock().expect("stand-in lock");
        secrets.get(tenant).is_some_and(|known| {
            known
                .iter()
                .any(|s| verify(s, id, ts, sig, body, now_s).is_ok())
        })
    }

    fn record(&self, headers: &HeaderMap, body: Body) {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let due_at_ms = chrono::DateTime::parse_from_rfc3339(&body.due_at)
            .map(|d| d.timestamp_millis())
            .unwrap_or(0);
        let arrived_ms = self.clock.now().timestamp_millis();
        let mut rec = self.recorded.lock().expect("stand-in lock");
        let copies = rec
            .deliveries
            .entry(format!("{}/{}", body.tenant, body.delivery))
            .or_default();
        copies.due_at_ms = due_at_ms;
        copies.arrived_ms.push(arrived_ms);
        copies.idempotency_keys.insert(header("idempotency-key"));
        copies.message_ids.insert(header(HEADER_ID));
        rec.texts
            .entry(format!("{}/{}", body.tenant, body.recipient.id))
            .or_default()
            .push(body.text);
    }
}

async fn receive(State(s): State<WebhookStandin>, headers: HeaderMap, body: Bytes) -> Response {
    s.requests.fetch_add(1, Ordering::Relaxed);
    if let Some(failure) = s.failure() {
        return failure;
    }
    let Some(parsed) = s.verified(&headers, &body) else {
        s.refused.fetch_add(1, Ordering::Relaxed);
        return (StatusCode::UNAUTHORIZED, "signature does not verify").into_response();
    };
    s.record(&headers, parsed);
    s.arrived.notify_waiters();
    StatusCode::NO_CONTENT.into_response()
}

async fn set_mode(State(s): State<WebhookStandin>, body: Json<Behaviour>) -> StatusCode {
    s.set_behaviour(body.0);
    StatusCode::NO_CONTENT
}

async fn add_secret(State(s): State<WebhookStandin>, body: Json<TenantSecret>) -> Response {
    match body.secret.parse::<WebhookSecret>() {
        Ok(secret) => {
            s.add_secret(&body.tenant, secret);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => (StatusCode::UNPROCESSABLE_ENTITY, e.to_string()).into_response(),
    }
}

/// `POST /control/secrets`: many tenants' secrets at once (a bench of
/// 10,000 tenants would otherwise make as many requests).
async fn add_secrets(State(s): State<WebhookStandin>, body: Json<Vec<TenantSecret>>) -> Response {
    for t in body.0 {
        match t.secret.parse::<WebhookSecret>() {
            Ok(secret) => s.add_secret(&t.tenant, secret),
            Err(e) => {
                let why = format!("{}: {e}", t.tenant);
                return (StatusCode::UNPROCESSABLE_ENTITY, why).into_response();
            }
        }
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn stats(State(s): State<WebhookStandin>) -> Json<StandinStats> {
    Json(s.stats())
}

async fn arrivals(State(s): State<WebhookStandin>) -> Json<Vec<Arrival>> {
    Json(s.arrivals())
}

/// Serves the receiver on `listener` until the future is dropped.
pub async fn serve(
    standin: WebhookStandin,
    listener: tokio::net::TcpListener,
) -> std::io::Result<()> {
    axum::serve(listener, standin.router()).await
}
