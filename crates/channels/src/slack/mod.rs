//! Slack through the Web API (`chat.postMessage`), honouring 429 + Retry-After;
//! without a token, a JSON-lines outbox file. Every message carries its
//! delivery key in Slack message metadata, so a delivery taken over from a
//! daemon that died is looked up in the recipient's recent history before it
//! is sent again.

mod connections;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderValue;

use async_trait::async_trait;
use serde_json::json;
use toki_model::error::chain;
use toki_model::slack::SlackUserId;
use toki_model::{Channel, Instant};
use toki_ports::channel::{ChannelSender, Notification, SendError, SendResult};
use toki_ports::Clock;
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;
use tracing::debug;

use connections::{Answer, Connections, OriginError};

/// Why a Web API channel could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SlackSetupError {
    #[error("slack: the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
    #[error("slack: {0}")]
    Origin(#[from] OriginError),
    #[error("slack: the Web API URL {url:?}: {source}")]
    Url {
        url: String,
        #[source]
        source: url::ParseError,
    },
    #[error("slack: the token is not a valid header value")]
    Token,
}

/// A request's timeout, connecting included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Who makes the `chat.postMessage` requests.
enum Poster {
    /// The channel's own keep-alive connections (the default).
    Own(Connections),
    /// reqwest: over HTTP/2 without negotiation, or through a proxy the
    /// environment names.
    Reqwest { url: reqwest::Url },
}

/// The part of a Web API reply Toki reads.
#[derive(serde::Deserialize)]
struct SlackReply {
    ok: bool,
    #[serde(default)]
    error: Option<String>,
}

/// The Web API's requests in flight, shared by every batch.
struct Permits {
    requests: tokio::sync::Semaphore,
    /// Batches take the permits in the order they come, one batch's
    /// requests before the next one's (tokio's mutex is fair).
    turn: Mutex<()>,
}

/// The Web API and how to reach it.
struct WebApi {
    /// For everything but `chat.postMessage` on its own connections.
    client: reqwest::Client,
    base_url: String,
    /// `Bearer <token>`, marked sensitive.
    authorization: HeaderValue,
    poster: Poster,
    /// Requests in flight across every batch: reuses a bounded pool of
    /// keep-alive connections instead of opening one per request at the due instant.
    permits: Permits,
}

enum Mode {
    Api(Box<WebApi>),
    Outbox(Arc<Mutex<tokio::fs::File>>),
}

pub struct SlackChannel {
    mode: Mode,
    concurrency: usize,
    clock: Arc<dyn Clock>,
}

impl SlackChannel {
    /// The Web API at `base_url` (`https://slack.com/api`, or a stand-in).
    pub fn api(
        base_url: &str,
        token: &str,
        concurrency: usize,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, SlackSetupError> {
        Self::api_over(base_url, token, concurrency, false, clock)
    }

    /// As [`api`](Self::api). By default `chat.postMessage` goes over
    /// HTTP/1.1 keep-alive connections of the channel's own (up to
    /// `concurrency`, [`connections`]), over https too, unless the
    /// environment names a proxy (then reqwest, which honours it). With
    /// `http2_prior_knowledge` reqwest posts over HTTP/2 only (over https
    /// offered alone in ALPN), every request in flight on one connection.
    /// The token must be a valid header value: a daemon with one that is
    /// not does not start.
    pub fn api_over(
        base_url: &str,
        token: &str,
        concurrency: usize,
        http2_prior_knowledge: bool,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, SlackSetupError> {
        let mut builder = reqwest::Client::builder()
            .pool_max_idle_per_host(concurrency)
            .tcp_nodelay(true)
            .timeout(REQUEST_TIMEOUT);
        if http2_prior_knowledge {
            builder = builder.http2_prior_knowledge();
        }
        let client = builder.build()?;
        let base_url = base_url.trim_end_matches('/').to_owned();
        let post_url = format!("{base_url}/chat.postMessage");
        let url = reqwest::Url::parse(&post_url).map_err(|source| SlackSetupError::Url {
            url: post_url.clone(),
            source,
        })?;
        let poster = if http2_prior_knowledge || connections::proxied(url.scheme()) {
            Poster::Reqwest { url }
        } else {
            Poster::Own(Connections::new(&url, concurrency.max(1), REQUEST_TIMEOUT)?)
        };
        let mut authorization = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| SlackSetupError::Token)?;
        authorization.set_sensitive(true);
        Ok(Self {
            mode: Mode::Api(Box::new(WebApi {
                client,
                base_url,
                authorization,
                poster,
                permits: Permits {
                    requests: tokio::sync::Semaphore::new(concurrency.max(1)),
                    turn: Mutex::new(()),
                },
            })),
            concurrency: concurrency.max(1),
            clock,
        })
    }

    /// Appends one JSON line per message to `path`.
    pub async fn outbox(path: PathBuf, clock: Arc<dyn Clock>) -> std::io::Result<Self> {
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
            clock,
        })
    }

    /// The `chat.postMessage` body, serialised straight from the
    /// notification; the outbox writes the same object with `sent_at`.
    fn body(n: &Notification, sent_at: Option<&str>) -> Result<Vec<u8>, SendError> {
        #[derive(serde::Serialize)]
        struct Body<'a> {
            channel: &'a str,
            text: &'a str,
            metadata: Metadata<'a>,
            #[serde(skip_serializing_if = "Option::is_none")]
            sent_at: Option<&'a str>,
        }
        #[derive(serde::Serialize)]
        struct Metadata<'a> {
            event_type: &'static str,
            event_payload: EventPayload<'a>,
        }
        #[derive(serde::Serialize)]
        struct EventPayload<'a> {
            tenant: &'a str,
            delivery: String,
            due_at_ms: i64,
        }
        let user = recipient(n)?;
        let body = Body {
            channel: user.as_str(),
            text: &n.text,
            metadata: Metadata {
                event_type: "toki_reminder",
                event_payload: EventPayload {
                    tenant: n.tenant.as_str(),
                    delivery: n.key.to_string(),
                    due_at_ms: n.due_at.millis(),
                },
            },
            sent_at,
        };
        let mut out = Vec::with_capacity(160 + n.text.len());
        serde_json::to_writer(&mut out, &body)
            .map_err(|e| SendError::Permanent(format!("slack: body: {e}")))?;
        Ok(out)
    }

    /// Sends a batch with at most one request per free permit. A request's
    /// body and future are made only once its permit is taken: a batch
    /// waiting for permits holds one waiter, not a future and a serialised
    /// body per notification (23 MB of the daemon's heap at 30,000 Slack
    /// notifications due at once: BENCHMARKS.md). Batches take the permits
    /// one batch after another, in the order they come: served in turn, one
    /// request each, they all ended together, so a daemon at its
    /// `max_in_flight` took new messages later (the last of 100,000 about a
    /// second later: BENCHMARKS.md).
    async fn send_with_permits(
        clock: &dyn Clock,
        api: &WebApi,
        batch: &[Notification],
    ) -> Vec<SendResult> {
        use futures::stream::{FuturesUnordered, StreamExt};
        let permits = &api.permits;
        // Made once it is this batch's turn: at a burst, every batch of the
        // instant waits here, and what each allocated before it waited was
        // held all that time (docs/bench/history.md, issue 38, sixth part).
        let turn = permits.turn.lock().await;
        let mut results: Vec<Option<SendResult>> = vec![None; batch.len()];
        let mut in_flight = FuturesUnordered::new();
        for (i, n) in batch.iter().enumerate() {
            // Pinned once: its place in the semaphore's queue is kept while
            // the requests already in flight are driven.
            let acquire = permits.requests.acquire();
            tokio::pin!(acquire);
            let permit = loop {
                tokio::select! {
                    biased;
                    permit = &mut acquire => break permit.expect("semaphore never closed"),
                    Some((j, r)) = in_flight.next() => results[j] = Some(r),
                }
            };
            match Self::body(n, None) {
                Ok(body) => in_flight.push(async move {
                    let _permit = permit;
                    (i, api.post(clock, body.into()).await)
                }),
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        drop(turn);
        while let Some((j, r)) = in_flight.next().await {
            results[j] = Some(r);
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(SendError::transient("slack: no answer"))))
            .collect()
    }
}

impl WebApi {
    /// One `chat.postMessage`: the instant Slack took it, or why not.
    async fn post(&self, clock: &dyn Clock, body: bytes::Bytes) -> Result<Instant, SendError> {
        const JSON: &str = "application/json; charset=utf-8";
        let transient = |reason: String| SendError::Transient(reason);
        let answer = match &self.poster {
            Poster::Own(connections) => connections
                .post(&self.authorization, JSON, body)
                .await
                .map_err(|e| transient(format!("slack: {}", chain(&e))))?,
            Poster::Reqwest { url } => self.post_reqwest(url, JSON, body).await?,
        };
        let at = clock.now();
        Self::read_answer(answer).map(|()| at)
    }

    async fn post_reqwest(
        &self,
        url: &reqwest::Url,
        content_type: &'static str,
        body: bytes::Bytes,
    ) -> Result<Answer, SendError> {
        let failed = |e: reqwest::Error| SendError::Transient(format!("slack: {}", chain(&e)));
        let response = self
            .client
            .post(url.clone())
            .header(reqwest::header::AUTHORIZATION, &self.authorization)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body)
            .send()
            .await
            .map_err(failed)?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .cloned();
        let body = capped_body(response, connections::MAX_ANSWER_BYTES)
            .await
            .map_err(|e| SendError::Transient(format!("slack: {e}")))?;
        Ok(Answer {
            status,
            retry_after,
            body,
        })
    }

    /// Slack's answer, read as its documentation says: 429 with
    /// Retry-After, `ok`, or an `error` that says whether to retry.
    fn read_answer(answer: Answer) -> Result<(), SendError> {
        let transient = |reason: String| SendError::Transient(reason);
        let status = answer.status;
        if status.as_u16() == 429 {
            let wait = answer
                .retry_after
                .as_ref()
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs)
                .unwrap_or(Duration::from_secs(1));
            // Not waited out here: the daemon's flow control pauses the
            // key and the message returns to the queue for that long.
            return Err(SendError::Throttled { retry_after: wait });
        }
        if status.is_server_error() {
            return Err(transient(format!("slack: HTTP {status}")));
        }
        if status.is_redirection() {
            return Err(transient(format!(
                "slack: HTTP {status} (redirects are not followed)"
            )));
        }
        let reply: SlackReply = serde_json::from_slice(&answer.body)
            .map_err(|e| transient(format!("slack: unreadable reply: {e}")))?;
        if reply.ok {
            return Ok(());
        }
        let error = reply.error.unwrap_or_else(|| "unknown_error".into());
        Err(match error.as_str() {
            // The recipient cannot be reached this way: retrying will not help.
            "channel_not_found" | "user_not_found" | "is_archived" | "not_in_channel"
            | "msg_too_long" | "no_text" | "cannot_dm_bot" | "user_disabled" => {
                SendError::Permanent(format!("slack: {error}"))
            }
            "ratelimited" => SendError::Throttled {
                retry_after: Duration::from_secs(1),
            },
            // Token and service problems are fixed by operators; keep the message.
            _ => transient(format!("slack: {error}")),
        })
    }
}

/// The notification's recipient, a Slack user id. A conversation's id
/// (stored before the API refused one) would post into that conversation:
/// refused, permanently, without quoting the value.
fn recipient(n: &Notification) -> Result<SlackUserId, SendError> {
    let address = n
        .address
        .as_deref()
        .ok_or_else(|| SendError::Permanent("recipient has no Slack user id".into()))?;
    SlackUserId::parse(address).map_err(|_| SendError::Permanent(NOT_A_USER_ID.into()))
}

/// The reason a delivery to a stored non-user id ends with.
pub const NOT_A_USER_ID: &str = "slack: the recipient is not a Slack user id";

/// The most of a Web API answer read (a history of 200 messages with their
/// metadata is well under it).
const MAX_WEB_API_ANSWER_BYTES: usize = 16 << 20;

/// A Web API request's answer, read as `T`.
async fn answer_of<T: serde::de::DeserializeOwned>(
    request: reqwest::RequestBuilder,
) -> Result<T, String> {
    let response = request.send().await.map_err(|e| chain(&e))?;
    let body = capped_body(response, MAX_WEB_API_ANSWER_BYTES).await?;
    serde_json::from_slice(&body).map_err(|e| format!("unreadable answer: {e}"))
}

/// An answer's body, read up to `limit` bytes: a server that answers
/// without end is cut off, not buffered (worded as the own connections'
/// `PostError::TooLarge`).
async fn capped_body(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<bytes::Bytes, String> {
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| chain(&e))? {
        if body.len() + chunk.len() > limit {
            return Err(format!("the answer is over {limit} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// How far before the due instant a takeover looks in the history (a daemon
/// may send up to its lead early, never earlier).
const HISTORY_MARGIN_S: i64 = 60;

/// `conversations.open` for the recipient's direct-message channel, then
/// `conversations.history` with metadata from shortly before the due instant:
/// the instant the delivery was posted, if it was.
async fn lookup_sent(
    client: &reqwest::Client,
    base_url: &str,
    authorization: &HeaderValue,
    user: &str,
    n: &Notification,
) -> Result<Option<Instant>, String> {
    #[derive(serde::Deserialize)]
    struct Opened {
        ok: bool,
        error: Option<String>,
        channel: Option<serde_json::Value>,
    }
    #[derive(serde::Deserialize)]
    struct History {
        ok: bool,
        error: Option<String>,
        #[serde(default)]
        messages: Vec<serde_json::Value>,
    }
    let opened: Opened = answer_of(
        client
            .post(format!("{base_url}/conversations.open"))
            .header(reqwest::header::AUTHORIZATION, authorization)
            .json(&json!({ "users": user })),
    )
    .await?;
    let channel = match (opened.ok, &opened.channel) {
        (true, Some(c)) => c["id"].as_str().unwrap_or(user).to_owned(),
        _ => {
            return Err(format!(
                "conversations.open: {}",
                opened.error.unwrap_or_default()
            ))
        }
    };
    let oldest = n.due_at.0.timestamp() - HISTORY_MARGIN_S;
    let history: History = answer_of(
        client
            .get(format!("{base_url}/conversations.history"))
            .header(reqwest::header::AUTHORIZATION, authorization)
            .query(&[
                ("channel", channel.as_str()),
                ("oldest", &oldest.to_string()),
                ("limit", "200"),
                ("include_all_metadata", "true"),
            ]),
    )
    .await?;
    if !history.ok {
        return Err(format!(
            "conversations.history: {}",
            history.error.unwrap_or_default()
        ));
    }
    let key = n.key.to_string();
    let posted = history.messages.iter().find(|m| {
        let p = &m["metadata"]["event_payload"];
        p["delivery"].as_str() == Some(key.as_str())
            && p["tenant"].as_str() == Some(n.tenant.as_str())
    });
    Ok(posted.map(|m| {
        m["ts"]
            .as_str()
            .and_then(|ts| ts.parse::<f64>().ok())
            .and_then(|secs| chrono::DateTime::from_timestamp_millis((secs * 1000.0) as i64))
            .unwrap_or(n.due_at.0)
    }))
}

#[async_trait]
impl ChannelSender for SlackChannel {
    fn channel(&self) -> Channel {
        Channel::Slack
    }

    /// Opens the pool's connections, one per permit: its own, or
    /// reqwest's with Slack's `api.test`.
    async fn warm_up(&self) {
        let Mode::Api(api) = &self.mode else {
            return;
        };
        if let Poster::Own(connections) = &api.poster {
            let opened = connections.warm().await;
            debug!(connections = opened, "slack connections opened");
            return;
        }
        let url = format!("{}/api.test", api.base_url);
        let tests: Vec<_> = (0..self.concurrency)
            .map(|_| {
                api.client
                    .post(&url)
                    .header(reqwest::header::AUTHORIZATION, &api.authorization)
                    .send()
            })
            .collect();
        let ok = futures::future::join_all(tests)
            .await
            .iter()
            .filter(|r| r.is_ok())
            .count();
        debug!(connections = ok, "slack connections warmed");
    }

    /// `api.test`: answers `ok` when the Web API is up.
    async fn probe(&self) -> Result<(), SendError> {
        let Mode::Api(api) = &self.mode else {
            return Ok(());
        };
        let WebApi {
            client, base_url, ..
        } = &**api;
        let response = client
            .post(format!("{base_url}/api.test"))
            .send()
            .await
            .map_err(|e| SendError::transient(format!("slack: {}", chain(&e))))?;
        let status = response.status();
        if !status.is_success() {
            return Err(SendError::transient(format!("slack: HTTP {status}")));
        }
        let body = capped_body(response, connections::MAX_ANSWER_BYTES)
            .await
            .map_err(|e| SendError::transient(format!("slack: {e}")))?;
        let reply: SlackReply = serde_json::from_slice(&body)
            .map_err(|e| SendError::transient(format!("slack: unreadable reply: {e}")))?;
        match reply.ok {
            true => Ok(()),
            false => Err(SendError::transient(format!(
                "slack: {}",
                reply.error.unwrap_or_else(|| "unknown_error".into())
            ))),
        }
    }

    /// Looks for the delivery key in the metadata of the messages posted to
    /// the recipient since shortly before the due instant.
    async fn already_sent(&self, n: &Notification) -> Option<Instant> {
        let Mode::Api(api) = &self.mode else {
            return None;
        };
        let WebApi {
            client,
            base_url,
            authorization,
            ..
        } = &**api;
        let user = recipient(n).ok()?;
        let found = lookup_sent(client, base_url, authorization, user.as_str(), n).await;
        match found {
            Ok(found) => found,
            Err(e) => {
                // Cannot tell: send (at least once beats never).
                debug!(error = %e, "slack history lookup failed; sending");
                None
            }
        }
    }

    async fn send(&self, batch: &[Notification]) -> Vec<SendResult> {
        match &self.mode {
            Mode::Api(api) => Self::send_with_permits(self.clock.as_ref(), api, batch).await,
            Mode::Outbox(file) => {
                let mut lines = Vec::new();
                let mut results = Vec::with_capacity(batch.len());
                let at = self.clock.now();
                let sent_at = at.to_rfc3339();
                for n in batch {
                    match Self::body(n, Some(&sent_at)) {
                        Ok(line) => {
                            lines.extend_from_slice(&line);
                            lines.push(b'\n');
                            results.push(Ok(at));
                        }
                        Err(e) => results.push(Err(e)),
                    }
                }
                let mut f = file.lock().await;
                if let Err(e) = f.write_all(&lines).await {
                    let err = SendError::transient(format!("slack outbox: {e}"));
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
