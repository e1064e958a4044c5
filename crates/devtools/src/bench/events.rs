//! `toki bench --events`: every tenant registers one event endpoint at the
//! webhook receiver stand-in before the burst; after it, each event's lag
//! (its arrival at the receiver − the outcome's `timestamp` in its body) and
//! the events logged against those received.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use futures::stream::{self, StreamExt, TryStreamExt};
use serde::Serialize;
use toki_app::{Config, Toki};
use toki_core::events::{EndpointCaps, EventEndpoints, EventsError, Put};
use toki_model::domain::EndpointId;
use toki_model::event::{EndpointSpec, EndpointUrl, EventKinds, EventOrdering};
use toki_model::lateness::Lateness;
use toki_model::TenantId;
use toki_ports::{TenantStores, WorkKind};

use crate::progress::Progress;
use crate::webhook_standin::{EventArrival, EventStats, TenantSecret};

/// Whether each tenant also registers an event endpoint (`--events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EventsMode {
    #[default]
    Off,
    /// One endpoint per tenant, every event type, in order.
    OneEndpointPerTenant,
}

/// The endpoint's id in every tenant.
const ENDPOINT_ID: &str = "bench";
/// Tenants registered at once (each one its database's writes): well
/// under the databases a process keeps open (32 by default).
const REGISTER_CONCURRENCY: usize = 8;
/// Attempts at one tenant's registration: a tenant database let go by the
/// process while in use fails the call ("a closed pool"), and the next
/// open gets it afresh.
const REGISTER_ATTEMPTS: u32 = 3;
/// Secrets told to the receiver per request.
const SECRETS_PER_REQUEST: usize = 1000;
/// Events read from a tenant's log per read.
const LOG_PAGE: usize = 1000;
/// How long the daemons may take for their first look at the new
/// endpoints (each registration marks its tenant; nothing is sent).
const FIRST_LOOK_LIMIT: Duration = Duration::from_secs(300);
/// How long events may still come after the last delivery, besides 1 s per
/// 1,000 deliveries: a missing event shows as missing, not as a hang.
const EVENTS_GRACE: Duration = Duration::from_secs(30);

/// What the events of a run came to (in the table and the JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EventFigures {
    /// Events logged in the tenants' databases: one per outcome of a type
    /// the endpoint wants, written with the outcome.
    pub expected: u64,
    /// Distinct events received (tenant and `webhook-id`).
    pub received: u64,
    /// Logged and never received.
    pub missing: u64,
    /// Copies received beyond the first.
    pub duplicated: u64,
    /// Received but not in any log (a receiver or bench fault).
    pub unexpected: u64,
    /// First arrival − the outcome's time (`timestamp`), per event received.
    pub lag_ms: Lateness,
    /// The receiver's CPU seconds over the run.
    pub receiver_cpu_s: f64,
}

/// An event as logged in its tenant's database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedEvent {
    pub tenant: String,
    /// `webhook-id`, as the receiver keys it.
    pub id: String,
}

/// Counts what was logged against what arrived, and each arrival's lag.
pub fn tally(logged: &[LoggedEvent], arrivals: &[EventArrival]) -> EventFigures {
    let by_id: HashMap<(&str, &str), &EventArrival> = arrivals
        .iter()
        .map(|a| ((a.tenant.as_str(), a.id.as_str()), a))
        .collect();
    let found = logged
        .iter()
        .filter(|e| by_id.contains_key(&(e.tenant.as_str(), e.id.as_str())))
        .count() as u64;
    let lags = arrivals
        .iter()
        .filter_map(|a| Some(a.arrived_ms.iter().min()? - a.occurred_ms))
        .collect();
    EventFigures {
        expected: logged.len() as u64,
        received: arrivals.len() as u64,
        missing: logged.len() as u64 - found,
        duplicated: arrivals
            .iter()
            .map(|a| a.arrived_ms.len().saturating_sub(1) as u64)
            .sum(),
        unexpected: arrivals.len() as u64 - found,
        lag_ms: Lateness::from_millis(lags),
        receiver_cpu_s: 0.0,
    }
}

/// The receiver's own allowance: the daemons may post to this machine, as
/// an operator allows a receiver inside its network.
pub(super) fn allow_local_receiver(config: &mut Config) -> anyhow::Result<()> {
    config.webhook.allow_addresses = vec!["127.0.0.1/32".parse().map_err(anyhow::Error::msg)?];
    config.webhook.allow_http = true;
    config.webhook.allow_ports = vec![toki_model::egress::PortRange::ALL];
    Ok(())
}

/// Registers one endpoint per tenant at `{receiver}/events/{tenant}` as
/// the API does (the egress check, then the tenant's cap), and tells the
/// receiver the secrets.
pub(super) async fn register_endpoints(
    toki: &Toki,
    tenants: &[TenantId],
    receiver: &str,
    progress: &Progress,
) -> anyhow::Result<()> {
    let service = EventEndpoints::new(toki.stores.clone(), toki.marks.clone(), toki.clock.clone())
        .with_caps(EndpointCaps {
            directory: toki.directory.clone(),
            caps: toki.config.caps,
        });
    let (service, policy) = (&service, &toki.config.webhook.egress_policy());
    let id: EndpointId = ENDPOINT_ID.parse().map_err(anyhow::Error::msg)?;
    let (id, done) = (&id, &AtomicU64::new(0));
    progress.stage("endpoints", Some(tenants.len() as u64));
    let secrets: Vec<TenantSecret> = stream::iter(tenants)
        .map(|t| async move {
            let url = EndpointUrl::parse("url", &format!("{receiver}/events/{t}"))?;
            policy.check("url", &url)?;
            let spec = EndpointSpec {
                url,
                kinds: EventKinds::all(),
                ordering: EventOrdering::InOrder,
            };
            let Put::Created { secret, .. } = put(service, t, id, spec).await? else {
                anyhow::bail!("{t}: the run's tenants are new, yet it had an event endpoint");
            };
            progress.set(done.fetch_add(1, Ordering::Relaxed) + 1);
            Ok(TenantSecret {
                tenant: t.to_string(),
                secret: secret.expose().to_owned(),
            })
        })
        .buffer_unordered(REGISTER_CONCURRENCY)
        .try_collect()
        .await?;
    let http = reqwest::Client::new();
    for chunk in secrets.chunks(SECRETS_PER_REQUEST) {
        http.post(format!("{receiver}/control/secrets"))
            .json(chunk)
            .send()
            .await?
            .error_for_status()?;
    }
    progress.finish(&format!("{} event endpoints registered", tenants.len()));
    Ok(())
}

/// `service.put`, again after a store error (nothing was written: the
/// endpoint is one statement).
async fn put(
    service: &EventEndpoints,
    tenant: &TenantId,
    id: &EndpointId,
    spec: EndpointSpec,
) -> anyhow::Result<Put> {
    let mut attempt = 1;
    loop {
        match service.put(tenant, id, spec.clone()).await {
            Err(EventsError::Store(e)) if attempt < REGISTER_ATTEMPTS => {
                tracing::debug!(%tenant, error = %e, "registering the endpoint again");
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            result => return Ok(result?),
        }
    }
}

/// Waits for the daemons' first look at the new endpoints (every tenant's
/// events mark settled), so that it is neither mixed with the meetings'
/// registration nor with the burst.
pub(super) async fn wait_first_look(toki: &Toki, progress: &Progress) -> anyhow::Result<()> {
    progress.stage("first look", None);
    let deadline = tokio::time::Instant::now() + FIRST_LOOK_LIMIT;
    loop {
        let marked = toki.marks.marked(WorkKind::Events).await?.len();
        if marked == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!(
                "the daemons' first look at the event endpoints took over {} s ({marked} tenants left)",
                FIRST_LOOK_LIMIT.as_secs()
            );
        }
        progress.message(format!("{marked} tenants' new endpoints to look at"));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until `at_least` distinct events have arrived (one per delivery at
/// least), or the grace is over; shows where it is on `progress`.
pub(super) async fn wait(
    http: &reqwest::Client,
    receiver: &str,
    at_least: u64,
    progress: &Progress,
) -> anyhow::Result<()> {
    let grace = EVENTS_GRACE + Duration::from_secs(at_least / 1000);
    let deadline = tokio::time::Instant::now() + grace;
    progress.stage("events", Some(at_least));
    loop {
        let stats = stats(http, receiver).await?;
        progress.set(stats.unique);
        if stats.unique >= at_least || tokio::time::Instant::now() > deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn stats(http: &reqwest::Client, receiver: &str) -> anyhow::Result<EventStats> {
    Ok(http
        .get(format!("{receiver}/events-stats"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}

/// The run's figures: the tenants' logs against the receiver's arrivals.
pub(super) async fn measure(
    toki: &Toki,
    http: &reqwest::Client,
    receiver: &str,
    tenants: &[TenantId],
) -> anyhow::Result<EventFigures> {
    let logged = logged(toki, tenants).await?;
    let arrivals: Vec<EventArrival> = http
        .get(format!("{receiver}/events-arrivals"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await
        .context("the receiver's event arrivals")?;
    Ok(tally(&logged, &arrivals))
}

/// Every event in the tenants' logs (the run's data folder is new, so all
/// of them came after the endpoints were registered).
async fn logged(toki: &Toki, tenants: &[TenantId]) -> anyhow::Result<Vec<LoggedEvent>> {
    let mut all = Vec::new();
    for t in tenants {
        let store = toki.stores.open(t).await?;
        let mut after = 0;
        loop {
            let page = store.events_after(after, LOG_PAGE).await?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            all.extend(page.iter().map(|e| LoggedEvent {
                tenant: t.to_string(),
                id: e.webhook_id(),
            }));
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logged(tenant: &str, seq: u64) -> LoggedEvent {
        LoggedEvent {
            tenant: tenant.into(),
            id: format!("evt_{seq}"),
        }
    }

    fn arrival(tenant: &str, seq: u64, occurred_ms: i64, arrived_ms: &[i64]) -> EventArrival {
        EventArrival {
            tenant: tenant.into(),
            id: format!("evt_{seq}"),
            kind: "delivery.delivered".into(),
            occurred_ms,
            arrived_ms: arrived_ms.to_vec(),
        }
    }

    #[test]
    fn lag_is_from_the_outcome_to_the_first_copy_and_the_gaps_are_counted() {
        let logged = [
            logged("a", 1),
            logged("a", 2),
            logged("b", 1),
            logged("b", 2),
        ];
        let arrivals = [
            // A second copy 5 s later does not make the lag 5 s.
            arrival("a", 1, 10_000, &[10_300, 15_300]),
            arrival("a", 2, 10_000, &[11_200]),
            // `b`'s evt_1 is not `a`'s: b/evt_2 is the one missing.
            arrival("b", 1, 10_000, &[10_100]),
            // Not in any log.
            arrival("c", 9, 10_000, &[10_050]),
        ];
        let f = tally(&logged, &arrivals);
        assert_eq!(
            (
                f.expected,
                f.received,
                f.missing,
                f.duplicated,
                f.unexpected
            ),
            (4, 4, 1, 1, 1)
        );
        assert_eq!((f.lag_ms.p50, f.lag_ms.max), (100, 1_200));
    }

    #[test]
    fn nothing_received_is_all_missing() {
        let f = tally(&[logged("a", 1), logged("a", 2)], &[]);
        assert_eq!((f.expected, f.received, f.missing), (2, 0, 2));
        assert_eq!(f.lag_ms, Lateness::default());
    }
}
