//! `toki events`: a tenant's delivery-event endpoints and its event log, as
//! the API offers them (docs/webhooks.md), for operators.

use std::path::Path;
use std::sync::Arc;

use clap::{Args, Subcommand};
use toki_app::table::table;
use toki_app::Toki;
use toki_core::events::{EventEndpoints, Put, MAX_LISTED};
use toki_model::audit::AuditAction;
use toki_model::event::{
    EndpointSpec, EndpointStatus, EndpointUrl, EventEndpoint, EventKind, EventKinds, EventOrdering,
};
use toki_model::{EndpointId, Instant, TenantId};
use toki_ports::TenantStores;

use super::common::{config_with, Common};

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// Register an endpoint (prints its signing secret once) or change it.
    Put(PutArgs),
    /// The tenant's endpoints and where their sending stands.
    Endpoints(TenantArgs),
    /// Remove an endpoint.
    Delete(EndpointArgs),
    /// Send to an endpoint again after it was disabled.
    Enable(EndpointArgs),
    /// A new signing secret (printed once); the old one signs for 24 h more.
    RotateSecret(EndpointArgs),
    /// Send again every event from an instant on.
    Replay(ReplayArgs),
    /// The tenant's event log, oldest first.
    List(ListArgs),
}

impl EventsCommand {
    pub async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        match self {
            EventsCommand::Put(a) => a.run(file).await,
            EventsCommand::Endpoints(a) => a.run(file).await,
            EventsCommand::Delete(a) => a.delete(file).await,
            EventsCommand::Enable(a) => a.enable(file).await,
            EventsCommand::RotateSecret(a) => a.rotate(file).await,
            EventsCommand::Replay(a) => a.run(file).await,
            EventsCommand::List(a) => a.run(file).await,
        }
    }
}

#[derive(Debug, Args)]
pub struct TenantArgs {
    #[arg(long, value_parser = clap::value_parser!(TenantId))]
    tenant: TenantId,
    #[command(flatten)]
    common: Common,
}

impl TenantArgs {
    async fn service(&self, file: Option<&Path>) -> anyhow::Result<EventEndpoints> {
        let toki = Toki::open(config_with(file, &self.common)?).await?;
        toki.tenant_record(&self.tenant).await?;
        let stores: Arc<dyn TenantStores> = toki.stores.clone();
        Ok(
            EventEndpoints::new(stores, toki.marks.clone(), toki.clock.clone()).with_caps(
                toki_core::events::EndpointCaps {
                    directory: toki.directory.clone(),
                    caps: toki.config.caps,
                },
            ),
        )
    }

    async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let endpoints = self.service(file).await?.list(&self.tenant).await?;
        let rows: Vec<Vec<String>> = endpoints.iter().map(row).collect();
        println!(
            "{}",
            table(
                &[
                    "endpoint",
                    "url",
                    "types",
                    "status",
                    "failures",
                    "through",
                    "last error"
                ],
                &rows
            )
        );
        Ok(0)
    }
}

fn row(e: &EventEndpoint) -> Vec<String> {
    let status = match &e.progress.status {
        EndpointStatus::Enabled => "enabled".to_owned(),
        EndpointStatus::Disabled { reason } => format!("disabled: {reason}"),
    };
    vec![
        e.id.to_string(),
        e.spec.url.as_str().to_owned(),
        e.spec.kinds.iter().count().to_string(),
        status,
        e.progress.failures.to_string(),
        e.progress.cursor.to_string(),
        e.progress.last_error.clone().unwrap_or_default(),
    ]
}

#[derive(Debug, Args)]
pub struct EndpointArgs {
    #[command(flatten)]
    tenant: TenantArgs,
    #[arg(long, value_parser = clap::value_parser!(EndpointId))]
    endpoint: EndpointId,
}

impl EndpointArgs {
    /// Appends this command's write, made, to the tenant's audit log.
    async fn record(&self, file: Option<&Path>, action: AuditAction) -> anyhow::Result<()> {
        let toki = Toki::open(config_with(file, &self.tenant.common)?).await?;
        toki.audit_operator_write(&self.tenant.tenant, action, Some(self.endpoint.as_str()))
            .await;
        Ok(())
    }

    async fn delete(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let service = self.tenant.service(file).await?;
        if service.delete(&self.tenant.tenant, &self.endpoint).await? {
            self.record(file, AuditAction::EventEndpointDelete).await?;
            eprintln!("endpoint {} removed", self.endpoint);
            Ok(0)
        } else {
            eprintln!("no endpoint {}", self.endpoint);
            Ok(1)
        }
    }

    async fn enable(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let service = self.tenant.service(file).await?;
        let e = service.enable(&self.tenant.tenant, &self.endpoint).await?;
        self.record(file, AuditAction::EventEndpointEnable).await?;
        eprintln!(
            "endpoint {} enabled; it gets the events after {}",
            e.id, e.progress.cursor
        );
        Ok(0)
    }

    async fn rotate(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let service = self.tenant.service(file).await?;
        let (_, secret) = service
            .rotate_secret(&self.tenant.tenant, &self.endpoint)
            .await?;
        self.record(file, AuditAction::EventEndpointRotateSecret)
            .await?;
        eprintln!("new signing secret (shown once; the old one signs for 24 h more):");
        println!("{}", secret.expose());
        Ok(0)
    }
}

#[derive(Debug, Args)]
pub struct PutArgs {
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// `https://…` (at most 2,048 bytes).
    #[arg(long)]
    url: String,
    /// Event types, comma-separated (default: all): delivery.delivered,
    /// delivery.failed, delivery.undeliverable, delivery.stale,
    /// delivery.dead_lettered, delivery.redriven.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(EventKind))]
    types: Vec<EventKind>,
    /// Several at once, order not kept (default: one at a time, in order).
    #[arg(long)]
    unordered: bool,
}

impl PutArgs {
    async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let kinds: EventKinds = if self.types.is_empty() {
            EventKinds::all()
        } else {
            self.types.into_iter().collect()
        };
        let spec = EndpointSpec {
            url: EndpointUrl::parse("--url", &self.url)?,
            kinds,
            ordering: if self.unordered {
                EventOrdering::Unordered
            } else {
                EventOrdering::InOrder
            },
        };
        let t = &self.endpoint.tenant;
        let service = t.service(file).await?;
        let put = service
            .put(&t.tenant, &self.endpoint.endpoint, spec)
            .await?;
        self.endpoint
            .record(file, AuditAction::EventEndpointPut)
            .await?;
        match put {
            Put::Created { endpoint, secret } => {
                eprintln!(
                    "endpoint {} registered; its signing secret (shown once):",
                    endpoint.id
                );
                println!("{}", secret.expose());
            }
            Put::Updated(endpoint) => eprintln!("endpoint {} changed", endpoint.id),
        }
        Ok(0)
    }
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// RFC 3339 instant: every event from then on is sent again.
    #[arg(long)]
    since: Instant,
}

impl ReplayArgs {
    async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let t = &self.endpoint.tenant;
        let service = t.service(file).await?;
        let e = service
            .replay(&t.tenant, &self.endpoint.endpoint, self.since)
            .await?;
        self.endpoint
            .record(file, AuditAction::EventEndpointReplay)
            .await?;
        eprintln!(
            "endpoint {} rewound: it gets the events after {} again",
            e.id, e.progress.cursor
        );
        Ok(0)
    }
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    tenant: TenantArgs,
    /// Events after this sequence number.
    #[arg(long, default_value_t = 0)]
    after: u64,
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=MAX_LISTED as u64))]
    limit: u64,
    /// One JSON object per line, as the endpoints receive them.
    #[arg(long)]
    json: bool,
}

impl ListArgs {
    async fn run(self, file: Option<&Path>) -> anyhow::Result<i32> {
        let service = self.tenant.service(file).await?;
        let events = service
            .events(&self.tenant.tenant, self.after, self.limit as usize)
            .await?;
        if self.json {
            for e in &events {
                println!("{}", String::from_utf8_lossy(&e.body()));
            }
            return Ok(0);
        }
        let rows: Vec<Vec<String>> = events
            .iter()
            .map(|e| {
                vec![
                    e.seq.to_string(),
                    e.kind.as_str().to_owned(),
                    e.occurred_at.to_rfc3339(),
                    e.data
                        .delivery
                        .clone()
                        .unwrap_or_else(|| e.data.schedule_id.clone()),
                    e.data.reason.clone().unwrap_or_default(),
                ]
            })
            .collect();
        println!(
            "{}",
            table(&["seq", "type", "occurred", "delivery", "reason"], &rows)
        );
        Ok(0)
    }
}
