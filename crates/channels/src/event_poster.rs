//! Posting delivery events to a tenant's endpoint over HTTP(S): the
//! Standard Webhooks headers, a bounded wait, and the reply's body ignored
//! (never buffered: a hostile endpoint cannot make the process hold megabytes),
//! under the egress policy of [`crate::egress`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use toki_model::event::EndpointUrl;
use toki_model::webhook_signature::{HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP};
use toki_ports::events::{EventPoster, PostError, SignedPost};

use crate::egress::{self, EgressPolicy};

/// How long an endpoint has to answer.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Idle connections kept per endpoint host.
const IDLE_PER_HOST: usize = 8;

pub struct HttpEventPoster {
    client: reqwest::Client,
    policy: Arc<EgressPolicy>,
}

impl HttpEventPoster {
    /// Posts only where the operator's egress policy allows (the webhook
    /// channel's: no private, loopback, link-local or metadata address
    /// unless allowed).
    pub fn new(policy: EgressPolicy) -> Result<Self, reqwest::Error> {
        let policy = Arc::new(policy);
        let client = egress::client_builder(reqwest::Client::builder(), policy.clone())
            .timeout(TIMEOUT)
            .pool_max_idle_per_host(IDLE_PER_HOST)
            .build()?;
        Ok(Self { client, policy })
    }
}

#[async_trait]
impl EventPoster for HttpEventPoster {
    async fn post(&self, url: &EndpointUrl, request: &SignedPost) -> Result<(), PostError> {
        let parsed = url.parsed();
        egress::check_url(&self.policy, &parsed).map_err(|e| PostError(e.to_string()))?;
        let response = self
            .client
            .post(parsed)
            .header(HEADER_ID, &request.webhook_id)
            .header(HEADER_TIMESTAMP, request.timestamp_s.to_string())
            .header(HEADER_SIGNATURE, &request.signature)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(request.body.clone())
            .send()
            .await
            .map_err(|e| match egress::refusal(&e) {
                Some(refused) => PostError(refused.to_string()),
                None if egress::unresolved(&e) => PostError(egress::NO_ADDRESS.into()),
                None => PostError(describe(&e)),
            })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> SignedPost {
        SignedPost {
            webhook_id: "evt_1".into(),
            timestamp_s: 0,
            signature: "v1,AAAA".into(),
            body: b"{}".to_vec(),
        }
    }

    /// A name that resolves to loopback is refused when connecting, not
    /// only an address written in the URL (a tenant's DNS can point anywhere).
    #[tokio::test]
    async fn a_name_resolving_to_a_refused_address_is_not_posted_to() {
        let poster = HttpEventPoster::new(EgressPolicy::default()).unwrap();
        for url in ["https://localhost/hook", "https://127.0.0.1/hook"] {
            let url = EndpointUrl::parse("url", url).unwrap();
            let err = poster.post(&url, &request()).await.unwrap_err();
            assert!(err.0.contains("SSRF"), "{url:?}: {err}");
        }
    }

    #[tokio::test]
    async fn an_allowed_address_is_posted_to_and_a_non_2xx_is_a_failure() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let _ = socket.read(&mut buf).await.unwrap();
            let reply = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n";
            socket.write_all(reply).await.unwrap();
        });
        let policy = EgressPolicy {
            allow: vec!["127.0.0.1/32".parse().unwrap()],
            schemes: toki_model::egress::Schemes::HttpAllowed,
            ports: vec![egress::PortRange::ALL],
        };
        let poster = HttpEventPoster::new(policy).unwrap();
        let url = EndpointUrl::parse("url", &format!("http://{addr}/hook")).unwrap();
        let err = poster.post(&url, &request()).await.unwrap_err();
        assert_eq!(err.0, "HTTP 503");
    }
}
