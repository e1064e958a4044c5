//! The tenant-store conformance suite on Postgres (one database per test).

use crate::common;

use std::sync::Arc;

use toki_ports::TenantStore;

async fn store() -> Arc<dyn TenantStore> {
    common::services::postgres_store().await
}

store_conformance!(
    #[ignore = "needs Postgres: scripts/test.sh runs it"]
    store
);
