//! Idempotent writes: a route behind [`idempotent_write`] answers a repeat of a request under the same `Idempotency-Key` with the first answer, without running it again.
//!
//! Without the header a request goes through untouched. With it:
//! - a bad key (not 1..=255 printable ASCII, or given twice) is a 400
//!   `bad_header` naming `Idempotency-Key`;
//! - a new key (or one first used more than 24 h ago) runs the request and
//!   keeps its answer (status and body) in the tenant's database beside a
//!   SHA-256 digest of the method, path and body;
//! - a repeat (same key, same digest) gets that answer back with
//!   `Idempotent-Replayed: true`, and nothing runs;
//! - the same key for another request is a 422 `idempotency_key_reused`;
//! - a repeat while the first is still running is a 409 `in_progress` (after
//!   5 minutes in progress the first is taken to have died, and a repeat runs);
//! - an answer a retry should not get back (5xx, 429) is not kept: the key is
//!   released, and a repeat runs again.
//!
//! Keys are per tenant (each tenant's database holds its own). Each new key
//! purges up to [`PURGE_BATCH`] keys older than 24 h, so the table holds
//! about a day of keys.
//!
//! The body is read within the route's own limit ([`IdempotentWrite::body_limit`]):
//! a key never lets a route take more than it takes without one. A route
//! whose answer is a secret (a signing secret's rotation) takes no key at
//! all ([`refuse_idempotency_key`]): its answer is never kept, so no secret
//! is ever in an idempotency row nor replayed to another of the tenant's keys.
//!
//! # Adopting it on a route
//! In `router::tenant_routes`, one `route_layer` inside the quota's (so the
//! tenant is authenticated first), e.g.
//! `post(handler).route_layer(idempotent.clone()).route_layer(quota.clone())`,
//! where `idempotent` is `from_fn_with_state(IdempotentWrite { api, body_limit }, idempotent_write)`
//! with the route's body limit. The
//! handler needs nothing: it sees the same request. Its answers must be JSON
//! (or empty), as every answer of this API is.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use toki_core::registrar::RegistrarError;
use toki_model::idempotency::{
    abandoned_after, key_lifetime, IdempotencyKey, KeptAnswer, RequestDigest,
    IDEMPOTENCY_KEY_HEADER,
};
use toki_model::quota::Counted;
use toki_model::{Instant, TenantId};
use toki_ports::{IdempotentStart, KeyedRequest, TenantStore};

use super::auth::AuthedTenant;
use super::error::{ApiError, ErrorCode};
use super::input::MAX_BATCH_BODY_BYTES;
use super::state::ApiState;

/// The response header that marks a replayed answer.
pub const IDEMPOTENT_REPLAYED_HEADER: &str = "idempotent-replayed";

/// Expired keys each new key purges: more than one, so that the purge
/// outpaces the keys a tenant makes and the table shrinks after a busy day.
pub const PURGE_BATCH: u32 = 100;

/// The largest answer kept (a larger one is answered, not kept, and the key
/// released). A batch's answer repeats its items, which the batch body limit
/// bounds, with a few fields each: twice that limit is never reached.
pub const MAX_KEPT_ANSWER_BYTES: usize = 2 * MAX_BATCH_BODY_BYTES;

/// What the middleware is given: the API's state and the route's body limit.
#[derive(Clone)]
pub(crate) struct IdempotentWrite {
    pub(crate) api: ApiState,
    /// The route's own limit (its `DefaultBodyLimit`), which the body is read within.
    pub(crate) body_limit: usize,
}

/// The middleware (see the module's documentation).
pub(crate) async fn idempotent_write(
    State(IdempotentWrite {
        api: state,
        body_limit,
    }): State<IdempotentWrite>,
    request: Request,
    next: Next,
) -> Response {
    let key = match request_key(request.headers()) {
        Ok(None) => return next.run(request).await,
        Ok(Some(key)) => key,
        Err(e) => return e.into_response(),
    };
    let (mut parts, body) = request.into_parts();
    let tenant = match AuthedTenant::from_request_parts(&mut parts, &state).await {
        Ok(AuthedTenant(t)) => t,
        Err(refused) => return refused,
    };
    let body = match read_body(body, body_limit).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let path = parts.uri.path_and_query().map_or("", |p| p.as_str());
    let digest = RequestDigest::of(parts.method.as_str(), path, &body);
    let run = match begin(&state, &tenant, key, &digest).await {
        Ok(Begun::Run(run)) => run,
        Ok(Begun::Replay(answer)) => return replay(answer),
        Err(e) => return e.into_response(),
    };
    let response = next.run(Request::from_parts(parts, Body::from(body))).await;
    run.finish(response).await
}

/// The middleware of a route whose answer is a secret: a request with an
/// `Idempotency-Key` is refused (400 `bad_header` naming it) before it runs,
/// so the answer is never kept nor replayed.
pub(crate) async fn refuse_idempotency_key(request: Request, next: Next) -> Response {
    if request.headers().contains_key(IDEMPOTENCY_KEY_HEADER) {
        return bad_key(
            "is not taken by this route: its answer is a new secret, which is never kept; \
             send the request without it (a retry rotates again, and the secret before \
             keeps signing for 24 h)",
        )
        .into_response();
    }
    next.run(request).await
}

/// The request's key: none without the header, 400 for a bad one.
fn request_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(bad_key("is given more than once"));
    }
    let text = value
        .to_str()
        .map_err(|_| bad_key("must be printable ASCII"))?;
    text.parse()
        .map(Some)
        .map_err(|e: toki_model::ValidationError| bad_key(&e.problem))
}

fn bad_key(problem: &str) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        ErrorCode::BadHeader,
        format!("{IDEMPOTENCY_KEY_HEADER}: {problem}"),
    )
    .with_field(Some(IDEMPOTENCY_KEY_HEADER.into()))
}

/// The body, whole (its digest needs it), within the route's own limit:
/// no more is read than the route reads without a key.
async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::TooLarge,
            format!("the request body exceeds {limit} bytes"),
        )),
        Err(_) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadJson,
            "the request body could not be read",
        )),
    }
}

/// What a key's request does: run (the key is now its), or replay.
enum Begun {
    Run(KeyedRun),
    Replay(KeptAnswer),
}

/// Takes the key for this request in the tenant's database, or answers
/// from what holds it: its kept answer, 409 while it runs, 422 if it was
/// another request.
async fn begin(
    state: &ApiState,
    tenant: &TenantId,
    key: IdempotencyKey,
    digest: &RequestDigest,
) -> Result<Begun, ApiError> {
    let store = state
        .registrar
        .stores
        .open(tenant)
        .await
        .map_err(RegistrarError::from)?;
    let now = state.registrar.clock.now();
    let start = IdempotentStart {
        key: &key,
        digest,
        now,
        expired_before: now - key_lifetime(),
        abandoned_before: now - abandoned_after(),
    };
    match store
        .start_idempotent(&start)
        .await
        .map_err(RegistrarError::from)?
    {
        KeyedRequest::Started => {
            let run = KeyedRun {
                store,
                key,
                started: now,
            };
            run.within_cap(state, tenant).await?;
            Ok(Begun::Run(run))
        }
        KeyedRequest::Existing { digest: first, .. } if &first != digest => Err(reused()),
        KeyedRequest::Existing { answer: None, .. } => Err(in_progress()),
        KeyedRequest::Existing {
            answer: Some(answer),
            ..
        } => Ok(Begun::Replay(answer)),
    }
}

fn reused() -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::IdempotencyKeyReused,
        format!("{IDEMPOTENCY_KEY_HEADER}: this key was used in the last 24 h for another request (method, path or body); send a new key with a new request"),
    )
    .with_field(Some(IDEMPOTENCY_KEY_HEADER.into()))
}

fn in_progress() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        ErrorCode::InProgress,
        format!("{IDEMPOTENCY_KEY_HEADER}: a request with this key is still in progress; retry once it has finished"),
    )
    .with_field(Some(IDEMPOTENCY_KEY_HEADER.into()))
}

/// A kept answer as it was, marked replayed.
fn replay(answer: KeptAnswer) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let json = !answer.body.is_empty();
    let mut response = (status, answer.body).into_response();
    let headers = response.headers_mut();
    headers.remove(header::CONTENT_TYPE);
    if json {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    headers.insert(IDEMPOTENT_REPLAYED_HEADER, HeaderValue::from_static("true"));
    response
}

/// A request running under its key, which it must finish or release.
struct KeyedRun {
    store: Arc<dyn TenantStore>,
    key: IdempotencyKey,
    started: Instant,
}

impl KeyedRun {
    /// Keeps the answer (or releases the key if it is not one to keep),
    /// purges some expired keys, and hands the answer back.
    async fn finish(self, response: Response) -> Response {
        let (parts, body) = response.into_parts();
        // The handlers' answers are in memory already (JSON): no limit here.
        let bytes = match axum::body::to_bytes(body, usize::MAX).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "an idempotent request's answer could not be read");
                self.release().await;
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            }
        };
        match kept(parts.status, &bytes) {
            Some(answer) => {
                let done = self
                    .store
                    .finish_idempotent(&self.key, self.started, &answer)
                    .await;
                if let Err(e) = done {
                    // The key stays in progress until it counts as abandoned.
                    tracing::warn!(error = %toki_model::error::chain(&e), "an idempotent answer was not kept");
                }
            }
            None => self.release().await,
        }
        self.purge().await;
        Response::from_parts(parts, Body::from(bytes))
    }

    async fn release(&self) {
        if let Err(e) = self.store.release_idempotent(&self.key, self.started).await {
            tracing::warn!(error = %toki_model::error::chain(&e), "an idempotency key was not released");
        }
    }

    /// Some keys older than a day gone (opportunistic: a failure waits for
    /// the next new key).
    async fn purge(&self) {
        let before = self.started - key_lifetime();
        if let Err(e) = self.store.purge_idempotency_keys(before, PURGE_BATCH).await {
            tracing::warn!(error = %toki_model::error::chain(&e), "expired idempotency keys were not purged");
        }
    }
}

impl KeyedRun {
    /// The tenant's cap on keys kept (`max_idempotency_keys`): a new key
    /// that takes it past the cap is given back and the request refused
    /// (422 naming the cap, nothing done), once expired keys have been
    /// purged to make room. One COUNT per new key.
    async fn within_cap(&self, state: &ApiState, tenant: &TenantId) -> Result<(), ApiError> {
        let what = Counted::IdempotencyKeys;
        let record = state.registrar.tenant(tenant).await?;
        let cap = state
            .registrar
            .settings
            .caps
            .with(&record.limits.quota)
            .get(what);
        let count = || async { self.store.count(what).await.map_err(RegistrarError::from) };
        let mut have = count().await?;
        if have > cap.0 {
            self.purge().await;
            have = count().await?;
        }
        if have <= cap.0 {
            return Ok(());
        }
        self.release().await;
        Err(RegistrarError::CapReached {
            what,
            cap,
            have: have - 1,
            adding: 1,
        }
        .into())
    }
}

/// The answer to keep, if it is one: not a failure worth retrying (5xx,
/// 429), within [`MAX_KEPT_ANSWER_BYTES`], and text (JSON).
fn kept(status: StatusCode, body: &Bytes) -> Option<KeptAnswer> {
    let retry = status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS;
    if retry || body.len() > MAX_KEPT_ANSWER_BYTES {
        return None;
    }
    let body = String::from_utf8(body.to_vec()).ok()?;
    Some(KeptAnswer {
        status: status.as_u16(),
        body,
    })
}
