//! The delivery-event dispatcher's counters, read at each scrape.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus_client::encoding::DescriptorEncoder;
use toki_core::events::dispatch::Dispatcher;

use super::collect::counter;

pub struct EventsCollector(pub Arc<Dispatcher>);

impl std::fmt::Debug for EventsCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventsCollector").finish_non_exhaustive()
    }
}

impl prometheus_client::collector::Collector for EventsCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> std::fmt::Result {
        let s = &self.0.stats;
        let read = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        let outcome = |o: &str| vec![("outcome", o.to_owned())];
        counter(
            &mut e,
            "toki_events_posted",
            "Delivery events posted to tenants' endpoints, by outcome: sent (2xx) or failed (tried again with backoff)",
            &[(outcome("sent"), read(&s.sent)), (outcome("failed"), read(&s.failed))],
        )?;
        counter(
            &mut e,
            "toki_event_endpoints_disabled",
            "Event endpoints turned off after repeated failures",
            &[(Vec::new(), read(&s.endpoints_disabled))],
        )
    }
}
