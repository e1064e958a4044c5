//! The state of a tenant's event log in memory (the store and the
//! [`EventLog`](crate::events::EventLog) implementation share it).

use std::collections::BTreeMap;

use toki_model::domain::{EndpointId, Instant};
use toki_model::event::{EndpointStatus, EventEndpoint, EventKinds, NewEvent, StoredEvent};

#[derive(Debug, Default)]
pub(super) struct MemoryEvents {
    pub(super) log: BTreeMap<u64, StoredEvent>,
    pub(super) next_seq: u64,
    pub(super) endpoints: BTreeMap<EndpointId, Endpoint>,
}

#[derive(Debug)]
pub(super) struct Endpoint {
    pub(super) endpoint: EventEndpoint,
    pub(super) revision: u64,
    pub(super) held: Option<(String, Instant)>,
}

impl MemoryEvents {
    /// What some enabled endpoint subscribes to.
    fn subscribed(&self) -> EventKinds {
        self.endpoints
            .values()
            .filter(|e| e.endpoint.progress.status == EndpointStatus::Enabled)
            .fold(EventKinds::NONE, |all, e| all.union(e.endpoint.spec.kinds))
    }

    pub(super) fn append(&mut self, events: impl IntoIterator<Item = NewEvent>) -> usize {
        let subscribed = self.subscribed();
        let mut kept = 0;
        for e in events.into_iter().filter(|e| subscribed.contains(e.kind)) {
            self.next_seq += 1;
            let seq = self.next_seq;
            self.log.insert(
                seq,
                StoredEvent {
                    seq,
                    kind: e.kind,
                    occurred_at: e.occurred_at,
                    data: e.data,
                },
            );
            kept += 1;
        }
        kept
    }
}
