//! Messages of a deleted tenant (`toki tenant delete`). The queue cannot be
//! searched by tenant (SQS), so a deleted tenant's messages still arrive for
//! up to 15 minutes. The directory is asked only off the hot path: when the
//! tenant's database fails to open or read, or holds none of the schedules
//! a batch needs (a fenced database). A tenant without an entry is gone:
//! its messages are deleted, counted (`tenant_deleted`) and logged, not
//! retried until they dead-letter.

use tracing::warn;

use toki_model::domain::TenantId;
use toki_model::error::chain;
use toki_ports::ReceivedMessage;

use super::work::MessageFate;
use super::Daemon;

impl Daemon {
    /// Whether the directory says `tenant` does not exist. False without a
    /// directory, or when it cannot be read (the message then comes back).
    pub(super) async fn tenant_deleted(&self, tenant: &TenantId) -> bool {
        let Some(directory) = &self.directory else {
            return false;
        };
        match directory.get(tenant).await {
            Ok(record) => record.is_none(),
            Err(e) => {
                warn!(%tenant, error = %chain(&e), "tenant directory unreadable; not disposing of the tenant's messages");
                false
            }
        }
    }

    /// Deletes `messages` of the deleted `tenant` from the queue, counted and logged.
    pub(super) async fn dispose_deleted(&self, tenant: &TenantId, messages: Vec<ReceivedMessage>) {
        warn!(%tenant, messages = messages.len(), reason = "tenant deleted", "messages disposed of unsent");
        self.dispose(
            messages
                .into_iter()
                .map(|m| (m, MessageFate::TenantDeleted))
                .collect(),
        )
        .await;
    }
}
