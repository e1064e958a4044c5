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

/// The same suite through the stores the services open, with sqlx's named
/// prepared statements off, as behind RDS Proxy (`StatementCache::Auto`
/// turns them off for a proxy endpoint).
mod without_statement_cache {
    use super::*;
    use toki_ports::TenantStores;
    use toki_sql::{Locator, SqlTenantStores, StatementCache};

    async fn store() -> Arc<dyn TenantStore> {
        let url = common::services::postgres_database().await;
        SqlTenantStores::with_locator(Locator::Template(url))
            .with_statement_cache(StatementCache::Off)
            .open(&"acme".parse().unwrap())
            .await
            .unwrap()
    }

    store_conformance!(
        #[ignore = "needs Postgres: scripts/test.sh runs it"]
        store
    );
}
