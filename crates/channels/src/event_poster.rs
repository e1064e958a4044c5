//! Posting delivery events to a tenant's endpoint over HTTP(S): the
//! Standard Webhooks headers, a bounded wait, and the reply's body ignored
//! (never buffered: a hostile endpoint cannot make the process hold megabytes).

use std::time::Duration;

use async_trait::async_trait;
use toki_model::event::EndpointUrl;
use toki_model::webhook_signature::{HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP};
use toki_ports::events::{EventPoster, PostError, SignedPost};

/// How long an endpoint has to answer.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Idle connections kept per endpoint host.
const IDLE_PER_HOST: usize = 8;

pub struct HttpEventPoster {
    client: reqwest::Client,
}

impl HttpEventPoster {
    /// Without an egress policy: every address may be reached.
    pub fn direct() -> Result<Self, reqwest::Error> {
        Self::new(reqwest::Client::builder())
    }

    /// `builder` carries the egress policy (which addresses may be reached).
    pub fn new(builder: reqwest::ClientBuilder) -> Result<Self, reqwest::Error> {
        let client = builder
            .timeout(TIMEOUT)
            .pool_max_idle_per_host(IDLE_PER_HOST)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self { client })
    }
}

#[async_trait]
impl EventPoster for HttpEventPoster {
    async fn post(&self, url: &EndpointUrl, request: &SignedPost) -> Result<(), PostError> {
        let response = self
            .client
            .post(url.as_str())
            .header(HEADER_ID, &request.webhook_id)
            .header(HEADER_TIMESTAMP, request.timestamp_s.to_string())
            .header(HEADER_SIGNATURE, &request.signature)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(request.body.clone())
            .send()
            .await
            .map_err(|e| PostError(describe(&e)))?;
        let status = response.status();
        // Dropped unread: the connection is not reused, and nothing is buffered.
        drop(response);
        if status.is_success() {
            Ok(())
        } else {
            Err(PostError(format!("HTTP {}", status.as_u16())))
        }
    }
}

/// What went wrong, without the URL (it may carry a tenant's token in its path).
fn describe(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "no answer in time"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    let mut source = std::error::Error::source(e);
    let mut detail = String::new();
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    if detail.is_empty() {
        what.to_owned()
    } else {
        format!("{what}: {detail}")
    }
}
