//! The CLI's writes in the tenants' audit logs (docs/audit.md): the actor
//! is the operator running it, `operator:<name>`, named by `TOKI_OPERATOR`
//! or else by the OS user.

use toki_model::audit::{Actor, AuditAction, AuditEntry, OperatorName};
use toki_model::TenantId;
use toki_ports::TenantStores;

use crate::toki::Toki;

/// The environment variable that names the operator.
pub const OPERATOR_ENV: &str = "TOKI_OPERATOR";

/// The operator: `TOKI_OPERATOR`, else the OS user (`USER`, `LOGNAME`,
/// `USERNAME`), else `unknown`; escaped and bounded either way.
pub fn operator() -> OperatorName {
    [OPERATOR_ENV, "USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.trim().is_empty()))
        .map_or_else(|| OperatorName::new(""), |n| OperatorName::new(&n))
}

impl Toki {
    /// Appends an operator's write, made already, to the tenant's audit log.
    pub async fn record_operator_write(
        &self,
        tenant: &TenantId,
        action: AuditAction,
        resource: Option<&str>,
    ) -> anyhow::Result<()> {
        let entry = AuditEntry::new(
            self.clock.now(),
            Actor::Operator(operator()),
            action,
            resource,
        );
        let store = TenantStores::open(self.stores.as_ref(), tenant).await?;
        store.append_audit(&[entry]).await?;
        Ok(())
    }

    /// [`Toki::record_operator_write`], a failure told on stderr: the write
    /// stands (it was made), so the command still succeeds.
    pub async fn audit_operator_write(
        &self,
        tenant: &TenantId,
        action: AuditAction,
        resource: Option<&str>,
    ) {
        if let Err(e) = self.record_operator_write(tenant, action, resource).await {
            crate::metrics::AUDIT_APPEND_FAILURES.inc();
            eprintln!("warning: the write was made but not recorded in tenant {tenant}'s audit log: {e:#}");
        }
    }
}
