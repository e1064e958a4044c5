//! The audit log's side of the tenant routes: each write they answer 2xx is
//! appended to the tenant's audit log (docs/audit.md), by the admission
//! middleware after the handler ran. The actor is the key that
//! authenticated the request ([`AuthedKey`]); the action comes from the
//! route and method ([`action_of`]); the resource from the path, or from
//! what the handler says it wrote ([`Audited`], for versions and batches).
//! A replayed idempotent answer wrote nothing and is not recorded.

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams};
use axum::http::request::Parts;
use axum::http::Method;
use axum::response::Response;
use toki_model::audit::{schedule_versions, Actor, AuditAction, AuditEntry};
use toki_model::TenantId;

use super::auth::AuthedKey;
use super::idempotency::IDEMPOTENT_REPLAYED_HEADER;
use super::state::ApiState;

/// What a handler wrote, for its audit entries: one entry per target. A
/// handler that adds none gets one entry for the path's resource.
#[derive(Debug, Clone, Default)]
pub(crate) struct Audited(pub(crate) Vec<AuditTarget>);

#[derive(Debug, Clone)]
pub(crate) struct AuditTarget {
    pub(crate) resource: Option<String>,
    pub(crate) version_before: Option<i64>,
    pub(crate) version_after: Option<i64>,
}

impl Audited {
    /// A schedule written at `version` (the one before is one less).
    pub(crate) fn schedule(id: &str, version: i64) -> Self {
        Self(vec![AuditTarget::schedule(id, version)])
    }
}

impl AuditTarget {
    pub(crate) fn schedule(id: &str, version: i64) -> Self {
        let (before, after) = schedule_versions(version);
        Self {
            resource: Some(id.to_owned()),
            version_before: before,
            version_after: after,
        }
    }

    /// A schedule deleted by the write that took `version`: it had the one before.
    pub(crate) fn deleted_schedule(id: &str, version: i64) -> Self {
        Self {
            resource: Some(id.to_owned()),
            version_before: schedule_versions(version).0,
            version_after: None,
        }
    }
}

/// What the request said, kept before it goes to the handler.
pub(crate) struct WriteRequest {
    method: Method,
    route: Option<String>,
    erase: bool,
    params: Vec<(String, String)>,
}

impl WriteRequest {
    /// The request's facts, if it is a write (not a GET or HEAD).
    pub(crate) async fn of(parts: &mut Parts) -> Option<Self> {
        if matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return None;
        }
        let params = RawPathParams::from_request_parts(parts, &())
            .await
            .map(|p| {
                p.iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        let erase = crate::api::erase::erase_requested(&parts.uri);
        Some(Self {
            method: parts.method.clone(),
            route: parts
                .extensions
                .get::<MatchedPath>()
                .map(|p| p.as_str().to_owned()),
            erase,
            params,
        })
    }

    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The resource the path names: `{id}`, `{channel}/{locale}`, or none.
    fn resource(&self) -> Option<String> {
        if let (Some(c), Some(l)) = (self.param("channel"), self.param("locale")) {
            return Some(format!("{c}/{l}"));
        }
        self.param("id").map(str::to_owned)
    }
}

/// The action of a write to a tenant route (its pattern and method); None
/// for a route that is not a write.
pub(crate) fn action_of(method: &Method, route: &str, erase: bool) -> Option<AuditAction> {
    use AuditAction::*;
    let rest = route.strip_prefix("/v1/tenants/{tenant}/")?;
    Some(match (method.as_str(), rest) {
        ("PUT", "schedules/{id}") => SchedulePut,
        ("DELETE", "schedules/{id}") => ScheduleDelete,
        ("POST", "schedules:batch") => SchedulePut,
        ("PUT", "schedules/{id}/occurrences/{original}") => OccurrencePut,
        ("DELETE", "schedules/{id}/occurrences/{original}") => OccurrenceCancel,
        ("PUT", "schedules/{id}/occurrences/{original}/following") => SeriesSplit,
        ("PUT", "users/{id}") => UserPut,
        ("DELETE", "users/{id}") if erase => UserErase,
        ("DELETE", "users/{id}") => UserDelete,
        ("PUT", "templates/{channel}/{locale}") => TemplatePut,
        ("DELETE", "templates/{channel}/{locale}") => TemplateDelete,
        ("PUT", "webhook") => WebhookPut,
        ("POST", "webhook/secret:rotate") => WebhookRotateSecret,
        ("PUT", "event-endpoints/{id}") => EventEndpointPut,
        ("DELETE", "event-endpoints/{id}") => EventEndpointDelete,
        ("POST", "event-endpoints/{id}/secret:rotate") => EventEndpointRotateSecret,
        ("POST", "event-endpoints/{id}/enable") => EventEndpointEnable,
        ("POST", "event-endpoints/{id}/replay") => EventEndpointReplay,
        ("PUT", "suppressions/{address}") => SuppressionPut,
        ("DELETE", "suppressions/{address}") => SuppressionDelete,
        ("PUT", "mail") => MailSettingsPut,
        _ => return None,
    })
}

/// The entries a write answered `response` makes (none for a refusal or a replay).
fn entries(
    request: &WriteRequest,
    actor: Actor,
    at: toki_model::Instant,
    response: &Response,
) -> Result<Vec<AuditEntry>, &'static str> {
    if !response.status().is_success()
        || response.headers().contains_key(IDEMPOTENT_REPLAYED_HEADER)
    {
        return Ok(Vec::new());
    }
    let route = request.route.as_deref().ok_or("no matched route")?;
    let action = action_of(&request.method, route, request.erase)
        .ok_or("a write route without an audit action")?;
    let entry = |t: AuditTarget| {
        AuditEntry::new(at, actor.clone(), action, t.resource.as_deref())
            .with_versions(t.version_before, t.version_after)
    };
    Ok(match response.extensions().get::<Audited>() {
        Some(Audited(targets)) => targets.iter().cloned().map(entry).collect(),
        // An erasure's own entry does not name whom it erased.
        None if action == AuditAction::UserErase => vec![entry(AuditTarget {
            resource: None,
            version_before: None,
            version_after: None,
        })],
        None => vec![entry(AuditTarget {
            resource: request.resource(),
            version_before: None,
            version_after: None,
        })],
    })
}

/// The entries a write answered `response` makes, by the request's key
/// (none for a refusal, a replay or a read). Taken before anything is
/// awaited: a response is not `Sync`, so no reference to it may be held
/// across an await.
pub(crate) fn write_entries(
    state: &ApiState,
    tenant: &TenantId,
    AuthedKey(key): &AuthedKey,
    request: &WriteRequest,
    response: &Response,
) -> Vec<AuditEntry> {
    let at = state.registrar.clock.now();
    match entries(request, Actor::Key(key.clone()), at, response) {
        Ok(e) => e,
        Err(why) => {
            failed(tenant, why, request.route.as_deref().unwrap_or(""));
            Vec::new()
        }
    }
}

/// Appends a write's entries to the tenant's audit log. After the write
/// (which has happened): a failure to append cannot undo it, so it is
/// logged and counted (`toki_audit_append_failures_total`), and the caller
/// gets the write's answer.
pub(crate) async fn record_write(state: &ApiState, tenant: &TenantId, entries: Vec<AuditEntry>) {
    if entries.is_empty() {
        return;
    }
    // Audit rows age and have a cap: the retention pass comes for them
    // (marked first, so a crash after the rows leaves the mark).
    state.registrar.marker.activity(tenant).await;
    let appended = match state.registrar.stores.open(tenant).await {
        Ok(store) => store.append_audit(&entries).await,
        Err(e) => Err(e),
    };
    if let Err(e) = appended {
        failed(tenant, &toki_model::error::chain(&e), "");
    }
}

fn failed(tenant: &TenantId, why: &str, route: &str) {
    crate::metrics::AUDIT_APPEND_FAILURES.inc();
    tracing::error!(%tenant, route, error = why, "a write was not recorded in the audit log");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every write route the API documents is recorded: a route added
    /// without an action here fails this test, not the audit log silently.
    #[test]
    fn every_documented_write_route_has_an_action() {
        let doc: serde_json::Value = serde_json::from_slice(&crate::openapi::json()).unwrap();
        let mut writes = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                let writes_with = ["put", "post", "delete", "patch"];
                if !writes_with.contains(&method.as_str()) || !path.starts_with("/v1/tenants/") {
                    continue;
                }
                let method: Method = method.to_uppercase().parse().unwrap();
                writes += 1;
                assert!(action_of(&method, path, false).is_some(), "{method} {path}");
            }
        }
        assert!(writes >= 16, "{writes} write routes found");
    }

    #[test]
    fn each_write_route_has_its_action() {
        let put = Method::PUT;
        let r = |p: &str| format!("/v1/tenants/{{tenant}}/{p}");
        assert_eq!(
            action_of(&put, &r("schedules/{id}"), false),
            Some(AuditAction::SchedulePut)
        );
        assert_eq!(
            action_of(&Method::DELETE, &r("users/{id}"), true),
            Some(AuditAction::UserErase)
        );
        assert_eq!(
            action_of(&Method::POST, &r("webhook/secret:rotate"), false),
            Some(AuditAction::WebhookRotateSecret)
        );
        assert_eq!(action_of(&put, &r("audit"), false), None);
        assert_eq!(
            action_of(&put, "/v1/templates/{channel}/{locale}", false),
            None
        );
    }
}
