//! The retention purge's counters, read at each scrape.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus_client::encoding::DescriptorEncoder;
use toki_core::retention::PurgeStats;
use toki_model::retention::RetentionKind;

use super::collect::counter;

#[derive(Debug)]
pub struct RetentionCollector(pub Arc<PurgeStats>);

impl prometheus_client::collector::Collector for RetentionCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> std::fmt::Result {
        let s = &self.0;
        let by_kind: Vec<_> = RetentionKind::ALL
            .iter()
            .map(|k| (vec![("kind", k.as_str().to_owned())], s.purged(*k)))
            .collect();
        counter(
            &mut e,
            "toki_purged_rows",
            "Records deleted once older than their tenant's retention, by kind",
            &by_kind,
        )?;
        counter(
            &mut e,
            "toki_purged_index_rows",
            "Reminder index rows deleted once past their expiry (embedded backend)",
            &[(Vec::new(), s.expired_index_rows.load(Ordering::Relaxed))],
        )?;
        counter(
            &mut e,
            "toki_purge_passes",
            "Retention purge passes run",
            &[(Vec::new(), s.passes.load(Ordering::Relaxed))],
        )?;
        counter(
            &mut e,
            "toki_purge_failed_tenants",
            "Tenants a purge pass could not purge (their database failed)",
            &[(Vec::new(), s.failed_tenants.load(Ordering::Relaxed))],
        )
    }
}
