//! The receiver's delivery-events side (`POST /events/{tenant}`): each
//! tenant's event endpoint points at its own path, every request's
//! signature is verified with the tenant's secrets, and every copy of each
//! event (by `webhook-id`) is recorded with its arrival, for `toki bench
//! --events`.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use toki_model::webhook_signature::HEADER_ID;

use super::WebhookStandin;

/// One event as the receiver got it (`GET /events/arrivals`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventArrival {
    pub tenant: String,
    /// The `webhook-id` (`evt_<seq>`): an event's identity within its tenant.
    pub id: String,
    /// The event's `type`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The body's `timestamp` (when the outcome occurred), in ms.
    pub occurred_ms: i64,
    /// Every copy's arrival, in ms, in the order they came.
    pub arrived_ms: Vec<i64>,
}

/// What the receiver counted of events (`GET /events/stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventStats {
    /// Distinct events (tenant and `webhook-id`).
    pub unique: u64,
    /// Copies beyond the first.
    pub duplicates: u64,
}

/// `tenant/webhook-id` → the event and its copies.
#[derive(Default)]
pub(super) struct EventsRecorded(HashMap<String, EventArrival>);

/// The body of an event request, as far as the receiver reads it.
#[derive(Deserialize)]
struct EventBody {
    #[serde(rename = "type")]
    kind: String,
    timestamp: chrono::DateTime<chrono::Utc>,
}

impl EventsRecorded {
    fn record(&mut self, tenant: &str, id: &str, body: EventBody, arrived_ms: i64) {
        self.0
            .entry(format!("{tenant}/{id}"))
            .or_insert_with(|| EventArrival {
                tenant: tenant.to_owned(),
                id: id.to_owned(),
                kind: body.kind,
                occurred_ms: body.timestamp.timestamp_millis(),
                arrived_ms: Vec::new(),
            })
            .arrived_ms
            .push(arrived_ms);
    }

    fn stats(&self) -> EventStats {
        EventStats {
            unique: self.0.len() as u64,
            duplicates: self
                .0
                .values()
                .map(|e| e.arrived_ms.len().saturating_sub(1) as u64)
                .sum(),
        }
    }
}

impl WebhookStandin {
    pub fn event_stats(&self) -> EventStats {
        self.events.lock().expect("stand-in lock").stats()
    }

    pub fn event_arrivals(&self) -> Vec<EventArrival> {
        let rec = self.events.lock().expect("stand-in lock");
        rec.0.values().cloned().collect()
    }
}

pub(super) async fn receive(
    State(s): State<WebhookStandin>,
    Path(tenant): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    s.requests.fetch_add(1, Ordering::Relaxed);
    if let Some(failure) = s.failure() {
        return failure;
    }
    let parsed = serde_json::from_slice::<EventBody>(&body).ok();
    let (Some(parsed), true) = (parsed, s.signed_by(&tenant, &headers, &body)) else {
        s.refused.fetch_add(1, Ordering::Relaxed);
        return (StatusCode::UNAUTHORIZED, "signature does not verify").into_response();
    };
    let id = headers
        .get(HEADER_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let arrived_ms = s.clock.now().timestamp_millis();
    s.events
        .lock()
        .expect("stand-in lock")
        .record(&tenant, id, parsed, arrived_ms);
    StatusCode::NO_CONTENT.into_response()
}

pub(super) async fn stats(State(s): State<WebhookStandin>) -> Json<EventStats> {
    Json(s.event_stats())
}

pub(super) async fn arrivals(State(s): State<WebhookStandin>) -> Json<Vec<EventArrival>> {
    Json(s.event_arrivals())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(kind: &str, at: &str) -> EventBody {
        serde_json::from_str(&format!(
            r#"{{"id":"x","type":"{kind}","timestamp":"{at}","data":{{}}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn copies_of_one_event_count_once_and_as_duplicates() {
        let mut rec = EventsRecorded::default();
        let at = "2026-11-30T09:00:00.250Z";
        rec.record("t1", "evt_1", body("delivery.delivered", at), 1_000);
        rec.record("t1", "evt_1", body("delivery.delivered", at), 1_400);
        // The same id at another tenant is another event.
        rec.record("t2", "evt_1", body("delivery.failed", at), 1_100);
        assert_eq!(
            rec.stats(),
            EventStats {
                unique: 2,
                duplicates: 1
            }
        );
        let t1 = &rec.0["t1/evt_1"];
        assert_eq!(t1.arrived_ms, [1_000, 1_400]);
        assert_eq!(t1.occurred_ms, 1_796_029_200_250);
        assert_eq!(rec.0["t2/evt_1"].kind, "delivery.failed");
    }
}
