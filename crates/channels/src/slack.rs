//! Slack through the Web API (`chat.postMessage`), honouring 429 + Retry-After;
//! without a token, a JSON-lines outbox file.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use serde_json::json;
use toki_core::channel::{ChannelSender, Notification, SendError};
use toki_core::ports::TenantStore;
use toki_core::{Channel, Instant};
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;
use tracing::debug;

/// A 429 asking for at most this long is waited out in place; longer, the message comes back later.
const INLINE_RETRY_LIMIT: Duration = Duration::from_secs(5);
const MAX_ATTEMPTS: u32 = 3;

/// The part of a Web API reply Toki reads.
#[derive(serde::Deserialize)]
struct SlackReply {
    ok: bool,
    #[serde(default)]
    error: Option<String>,
}

enum Mode {
    Api {
        client: reqwest::Client,
        base_url: String,
        token: String,
        /// Requests in flight across every batch: reuses a bounded pool of
        /// keep-alive connections instead of opening one per request at the due instant.
        permits: Arc<tokio::sync::Semaphore>,
    },
    Outbox(Arc<Mutex<tokio::fs::File>>),
}

pub struct SlackChannel {
    mode: Mode,
    concurrency: usize,
}

impl SlackChannel {
    /// The Web API at `base_url` (`https://slack.com/api`, or a stand-in).
    pub fn api(base_url: &str, token: &str, concurrency: usize) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(concurrency)
            .tcp_nodelay(true)
            .timeout(Duration::from_secs(10))
            .build()?;
        Ok(Self {
            mode: Mode::Api {
                client,
                base_url: base_url.trim_end_matches('/').to_owned(),
                token: token.to_owned(),
                permits: Arc::new(tokio::sync::Semaphore::new(concurrency.max(1))),
            },
            concurrency: concurrency.max(1),
        })
    }

    /// Appends one JSON line per message to `path`.
    pub async fn outbox(path: PathBuf) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir).await?;
        }
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .await?;
        Ok(Self {
            mode: Mode::Outbox(Arc::new(Mutex::new(file))),
            concurrency: 1,
        })
    }

    fn payload(n: &Notification) -> Result<serde_json::Value, SendError> {
        let channel = n
            .recipient
            .slack_user_id
            .as_deref()
            .ok_or_else(|| SendError::Permanent("recipient has no Slack user id".into()))?;
        Ok(json!({
            "channel": channel,
            "text": n.text,
            "metadata": {
                "event_type": "toki_reminder",
                "event_payload": {
                    "tenant": n.tenant.as_str(),
                    "delivery": n.key.to_string(),
                    "due_at_ms": n.due_at.millis(),
                }
            }
        }))
    }

    async fn post(
        client: &reqwest::Client,
        url: &reqwest::Url,
        token: &reqwest::header::HeaderValue,
        body: bytes::Bytes,
    ) -> Result<Instant, SendError> {
        let transient = |reason: String, retry_after| SendError::Transient {
            reason,
            retry_after,
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let response = client
                .post(url.clone())
                .header(reqwest::header::AUTHORIZATION, token)
                .header(
                    reqwest::header::CONTENT_TYPE,
                    "application/json; charset=utf-8",
                )
                .body(body.clone())
                .send()
                .await
                .map_err(|e| transient(format!("slack: {e}"), None))?;
            let status = response.status();
            if status.as_u16() == 429 {
                let wait = response
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs)
                    .unwrap_or(Duration::from_secs(1));
                if wait <= INLINE_RETRY_LIMIT && attempt < MAX_ATTEMPTS {
                    debug!(?wait, "slack rate limited; waiting as asked");
                    tokio::time::sleep(wait).await;
                    continue;
                }
                return Err(transient("slack: rate limited (429)".into(), Some(wait)));
            }
            if status.is_server_error() {
                return Err(transient(format!("slack: HTTP {status}"), None));
            }
            let at = Utc::now();
            let bytes = response
                .bytes()
                .await
                .map_err(|e| transient(format!("slack: unreadable reply: {e}"), None))?;
            let reply: SlackReply = serde_json::from_slice(&bytes)
                .map_err(|e| transient(format!("slack: unreadable reply: {e}"), None))?;
            if reply.ok {
                return Ok(at);
            }
            let error = reply.error.unwrap_or_else(|| "unknown_error".into());
            return Err(match error.as_str() {
                // The recipient cannot be reached this way: retrying will not help.
                "channel_not_found" | "user_not_found" | "is_archived" | "not_in_channel"
                | "msg_too_long" | "no_text" | "cannot_dm_bot" | "user_disabled" => {
                    SendError::Permanent(format!("slack: {error}"))
                }
                // Token and service problems are fixed by operators; keep the message.
                _ => transient(format!("slack: {error}"), None),
            });
        }
    }
}

#[async_trait]
impl ChannelSender for SlackChannel {
    fn channel(&self) -> Channel {
        Channel::Slack
    }

    /// Opens the pool's connections with Slack's `api.test`, one per permit.
    async fn warm_up(&self) {
        if let Mode::Api {
            client,
            base_url,
            token,
            ..
        } = &self.mode
        {
            let url = format!("{base_url}/api.test");
            let tests: Vec<_> = (0..self.concurrency)
                .map(|_| client.post(&url).bearer_auth(token).send())
                .collect();
            let ok = futures::future::join_all(tests)
                .await
                .iter()
                .filter(|r| r.is_ok())
                .count();
            debug!(connections = ok, "slack connections warmed");
        }
    }

    async fn send(
        &self,
        _store: &dyn TenantStore,
        batch: &[Notification],
    ) -> Vec<Result<Instant, SendError>> {
        match &self.mode {
            Mode::Api {
                client,
                base_url,
                token,
                permits,
            } => {
                let url = match reqwest::Url::parse(&format!("{base_url}/chat.postMessage")) {
                    Ok(u) => u,
                    Err(e) => {
                        let err = SendError::Transient {
                            reason: format!("slack: api url: {e}"),
                            retry_after: None,
                        };
                        return vec![Err(err); batch.len()];
                    }
                };
                let url = &url;
                let token =
                    &match reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")) {
                        Ok(t) => t,
                        Err(_) => {
                            let err = SendError::Transient {
                                reason: "slack: the token is not a valid header value".into(),
                                retry_after: None,
                            };
                            return vec![Err(err); batch.len()];
                        }
                    };
                // Bodies are serialised before any permit is taken.
                let sends: Vec<_> = batch
                    .iter()
                    .map(|n| {
                        let body = Self::payload(n).map(|p| bytes::Bytes::from(p.to_string()));
                        async move {
                            let body = body?;
                            let _permit = permits.acquire().await.expect("semaphore never closed");
                            Self::post(client, url, token, body).await
                        }
                    })
                    .collect();
                futures::future::join_all(sends).await
            }
            Mode::Outbox(file) => {
                let mut lines = String::new();
                let mut results = Vec::with_capacity(batch.len());
                let at = Utc::now();
                for n in batch {
                    match Self::payload(n) {
                        Ok(mut p) => {
                            p["sent_at"] = json!(at.to_rfc3339());
                            lines.push_str(&p.to_string());
                            lines.push('\n');
                            results.push(Ok(at));
                        }
                        Err(e) => results.push(Err(e)),
                    }
                }
                let mut f = file.lock().await;
                if let Err(e) = f.write_all(lines.as_bytes()).await {
                    let err = SendError::Transient {
                        reason: format!("slack outbox: {e}"),
                        retry_after: None,
                    };
                    return results
                        .into_iter()
                        .map(|r| r.and(Err(err.clone())))
                        .collect();
                }
                let _ = f.flush().await;
                results
            }
        }
    }
}
