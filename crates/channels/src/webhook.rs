//! The webhook channel: a signed JSON POST (Standard Webhooks) to the recipient's or the tenant's endpoint, under the egress policy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use reqwest::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use sha2::{Digest, Sha256};
use toki_model::webhook_signature::{
    signature_header, HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP,
};
use toki_model::{Channel, Instant};
use toki_ports::channel::{ChannelSender, Notification, SendError, SendResult};
use toki_ports::Clock;
use tokio::sync::Semaphore;

use crate::egress::{self, EgressPolicy};

/// The most of an endpoint's reply read (then the connection is dropped):
/// a hostile endpoint cannot make the daemon buffer more.
pub const MAX_REPLY_BYTES: usize = 16 * 1024;
/// The longest `Retry-After` honoured: a hostile value cannot park a delivery for days.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// Hosts kept with their own request permits before idle ones are forgotten.
const MAX_TRACKED_HOSTS: usize = 4096;

/// How the channel talks to endpoints.
#[derive(Debug, Clone)]
pub struct WebhookOptions {
    /// Requests in flight across every endpoint (and pooled connections per host).
    pub concurrency: usize,
    /// Requests in flight to one host, and of one tenant: a slow endpoint
    /// (or a tenant's slow endpoints) holds at most these.
    pub per_host: usize,
    /// A request not answered within this is a transient failure.
    pub timeout: Duration,
    pub policy: EgressPolicy,
}

impl Default for WebhookOptions {
    fn default() -> Self {
        WebhookOptions {
            concurrency: 64,
            per_host: 16,
            timeout: Duration::from_secs(5),
            policy: EgressPolicy::default(),
        }
    }
}

pub struct WebhookChannel {
    client: reqwest::Client,
    policy: Arc<EgressPolicy>,
    requests: Semaphore,
    per_host: usize,
    hosts: Mutex<HashMap<String, Arc<Semaphore>>>,
    clock: Arc<dyn Clock>,
}

impl WebhookChannel {
    pub fn new(options: WebhookOptions, clock: Arc<dyn Clock>) -> Result<Self, reqwest::Error> {
        let policy = Arc::new(options.policy);
        let builder = reqwest::Client::builder()
            .pool_max_idle_per_host(options.per_host.max(1))
            .tcp_nodelay(true)
            .timeout(options.timeout)
            .user_agent(concat!("Toki-Webhooks/", env!("CARGO_PKG_VERSION")));
        let client = egress::client_builder(builder, policy.clone()).build()?;
        Ok(WebhookChannel {
            client,
            policy,
            requests: Semaphore::new(options.concurrency.max(1)),
            per_host: options.per_host.max(1),
            hosts: Mutex::default(),
            clock,
        })
    }

    /// The permits of one host's (or one tenant's) requests.
    fn host_permits(&self, host: &str) -> Arc<Semaphore> {
        let mut hosts = self.hosts.lock().expect("hosts lock");
        if hosts.len() >= MAX_TRACKED_HOSTS {
            let per_host = self.per_host;
            hosts.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < per_host);
        }
        hosts
            .entry(host.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_host)))
            .clone()
    }

    async fn send_one(&self, n: &Notification) -> SendResult {
        let target = n
            .webhook()
            .ok_or_else(|| SendError::Permanent("webhook: no endpoint".into()))?;
        let url = target.url.parsed();
        egress::check_url(&self.policy, &url)
            .map_err(|e| SendError::Permanent(format!("webhook: {e}")))?;
        // A tenant's requests, then its host's: a tenant whose endpoints
        // hang holds at most `per_host` of the channel's permits.
        let tenant = self.host_permits(&format!("tenant {}", n.tenant));
        let _tenant = tenant.acquire().await.expect("semaphore never closed");
        let host = self.host_permits(&target.url.host());
        let _host = host.acquire().await.expect("semaphore never closed");
        let _request = self
            .requests
            .acquire()
            .await
            .expect("semaphore never closed");
        // Made once the permits are held: a batch waiting for them holds no bodies.
        let body = body(n)?;
        let now = self.clock.now();
        let id = message_id(n);
        let signature = signature_header(
            target.settings.signing_secrets(now),
            &id,
            now.timestamp(),
            &body,
        );
        let request = self
            .client
            .post(url)
            .header(CONTENT_TYPE, "application/json")
            .header(HEADER_ID, &id)
            .header(HEADER_TIMESTAMP, now.timestamp().to_string())
            .header(HEADER_SIGNATURE, signature)
            .header(IDEMPOTENCY_KEY.clone(), idempotency_header(n)?)
            .body(body);
        let response = request.send().await.map_err(failed)?;
        self.answer(response).await
    }

    /// The verdict on an endpoint's reply, its body read bounded.
    async fn answer(&self, mut response: reqwest::Response) -> SendResult {
        let status = response.status();
        let at = self.clock.now();
        let retry_after = retry_after(response.headers().get(RETRY_AFTER));
        let mut read = 0;
        // Drained so the connection can be reused; cut off past the bound.
        while read <= MAX_REPLY_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                _ => break,
            }
        }
        verdict(status, retry_after, at)
    }
}

static IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// What a status says: 2xx sent; 429 throttled; 408 and 5xx transient;
/// any other (redirects, 4xx) permanent, the status as the reason.
fn verdict(status: reqwest::StatusCode, retry_after: Duration, at: Instant) -> SendResult {
    match status.as_u16() {
        200..=299 => Ok(at),
        429 => Err(SendError::Throttled { retry_after }),
        408 | 500..=599 => Err(SendError::Transient(format!("webhook: HTTP {status}"))),
        300..=399 => Err(SendError::Permanent(format!(
            "webhook: HTTP {status} (redirects are not followed)"
        ))),
        _ => Err(SendError::Permanent(format!("webhook: HTTP {status}"))),
    }
}

/// `Retry-After` in seconds, bounded; 1 s when absent or a date.
fn retry_after(value: Option<&HeaderValue>) -> Duration {
    value
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1))
        .min(MAX_RETRY_AFTER)
}

/// A failed request: refused by the policy (permanent, saying so), else transient.
fn failed(e: reqwest::Error) -> SendError {
    match egress::refusal(&e) {
        Some(refused) => SendError::Permanent(format!("webhook: {refused}")),
        // Worded as a refusal: which names exist inside is not the tenant's to learn.
        None if egress::unresolved(&e) => {
            SendError::Transient(format!("webhook: {}", egress::NO_ADDRESS))
        }
        // Without the URL: it may carry a token of the tenant's.
        None => SendError::Transient(format!("webhook: {}", e.without_url())),
    }
}

/// `Idempotency-Key`: `<tenant>:<delivery key>`, the same for every attempt
/// of a delivery and different across tenants (two tenants' deliveries
/// can have the same key, and a receiver may serve both). A tenant id has
/// no `:`, so the first one splits it off.
pub fn idempotency_key(n: &Notification) -> String {
    format!("{}:{}", n.tenant, n.key)
}

/// [`idempotency_key`] as a header value.
fn idempotency_header(n: &Notification) -> Result<HeaderValue, SendError> {
    HeaderValue::from_str(&idempotency_key(n))
        .map_err(|_| SendError::Permanent("webhook: the delivery key is not a header value".into()))
}

/// `webhook-id`: the same for every attempt of a delivery, different
/// across tenants (a digest of the tenant and the delivery key).
pub fn message_id(n: &Notification) -> String {
    let mut digest = Sha256::new();
    digest.update(n.tenant.as_str().as_bytes());
    digest.update(b"/");
    digest.update(n.key.to_string().as_bytes());
    format!("msg_{}", URL_SAFE_NO_PAD.encode(&digest.finalize()[..18]))
}

/// The JSON body (docs/webhooks.md).
pub fn body(n: &Notification) -> Result<Vec<u8>, SendError> {
    #[derive(serde::Serialize)]
    struct Body<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        delivery: String,
        tenant: &'a str,
        schedule: &'a str,
        occurrence: String,
        due_at: String,
        recipient: Recipient<'a>,
        subject: &'a str,
        text: &'a str,
    }
    #[derive(serde::Serialize)]
    struct Recipient<'a> {
        id: &'a str,
        name: &'a str,
    }
    let body = Body {
        kind: match n.key.is_change_notice() {
            true => "change_notice",
            false => "reminder",
        },
        delivery: n.key.to_string(),
        tenant: n.tenant.as_str(),
        schedule: n.key.schedule.as_str(),
        occurrence: n.key.occurrence.0.to_rfc3339(),
        due_at: n.due_at.0.to_rfc3339(),
        recipient: Recipient {
            id: n.key.recipient.as_str(),
            name: n.recipient_name(),
        },
        subject: n.subject(),
        text: &n.text,
    };
    serde_json::to_vec(&body).map_err(|e| SendError::Permanent(format!("webhook: body: {e}")))
}

#[async_trait]
impl ChannelSender for WebhookChannel {
    fn channel(&self) -> Channel {
        Channel::Webhook
    }

    /// Every notification at once, each within its host's and the channel's permits.
    async fn send(&self, batch: &[Notification]) -> Vec<SendResult> {
        futures::future::join_all(batch.iter().map(|n| self.send_one(n))).await
    }
}
