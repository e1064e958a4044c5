//! The daemon's figures read at each scrape: its counters, the messages it
//! holds and its flow's keys.

use std::sync::atomic::Ordering;

use prometheus_client::encoding::DescriptorEncoder;
use toki_core::daemon::DaemonGauges;
use toki_flow::KeyStats;

use super::collect::{counter, gauge};

/// The daemon's counters, its in-flight messages and its flow's keys, read
/// at each scrape of `/metrics`.
pub struct DaemonCollector(pub DaemonGauges);

impl std::fmt::Debug for DaemonCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonCollector").finish_non_exhaustive()
    }
}

impl prometheus_client::collector::Collector for DaemonCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        self.encode_messages(&mut encoder)?;
        if let Some(flow) = &self.0.flow {
            encode_flow(&mut encoder, &flow.stats())?;
        }
        Ok(())
    }
}

impl DaemonCollector {
    /// The daemon's message counters and what it holds now.
    fn encode_messages(&self, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let s = self.0.stats.snapshot();
        let none = Vec::new;
        let reason = |r: &str| vec![("reason", r.to_owned())];
        counter(
            e,
            "toki_messages_received",
            "Messages the daemon received",
            &[(none(), s.received)],
        )?;
        counter(
            e,
            "toki_messages_acked",
            "Messages done with and deleted",
            &[(none(), s.acked)],
        )?;
        counter(
            e,
            "toki_message_retries",
            "Messages put back on the queue, by reason: failure (a send failed), throttled (a service or a limit said wait), busy (another holder is still sending), parked (behind an open circuit)",
            &[
                (reason("failure"), s.retried),
                (reason("throttled"), s.throttled),
                (reason("busy"), s.busy),
                (reason("parked"), s.parked),
            ],
        )?;
        counter(
            e,
            "toki_messages_renewed",
            "Waiting messages (throttled, parked, early, busy) put back as new because their receives neared the queue's own limit (SQS's maxReceiveCount), so that only failures reach the dead-letter queue",
            &[(none(), s.renewed)],
        )?;
        counter(
            e,
            "toki_messages_lapsed",
            "Held messages whose visibility ran out before the heartbeat extended them, so that the queue may give them to another worker while their holder is alive (a late heartbeat: an overloaded process or a slow queue); the claims keep them from being sent twice",
            &[(none(), s.lapsed)],
        )?;
        counter(
            e,
            "toki_messages_dead_lettered",
            "Messages moved to the dead-letter queue",
            &[(none(), s.dead_lettered)],
        )?;
        counter(
            e,
            "toki_messages_stale",
            "Messages dropped because their schedule changed or went away",
            &[(none(), s.stale_messages)],
        )?;
        counter(
            e,
            "toki_deliveries_skipped",
            "Deliveries not sent again: another claim holds them or they were already sent (duplicates)",
            &[(reason("duplicate"), s.duplicates_skipped)],
        )?;
        counter(
            e,
            "toki_circuits_opened",
            "Times a channel's circuit opened",
            &[(none(), s.circuits_opened)],
        )?;
        counter(
            e,
            "toki_change_notices_delivered",
            "Change notices sent",
            &[(none(), s.notices_delivered)],
        )?;
        counter(
            e,
            "toki_messages_disposed",
            "Queue messages deleted unsent for a reason that no retry can change",
            &[(reason("tenant deleted"), s.tenant_deleted)],
        )?;
        gauge(
            e,
            "toki_messages_in_flight",
            "Messages this daemon holds now",
            &[(none(), self.0.in_flight.load(Ordering::Relaxed) as f64)],
        )?;
        Ok(())
    }
}

/// The flow's keys. Per-recipient keys (a Slack channel or DM) come and go
/// by the thousand: the workspace, account, database and tenant keys say
/// enough and keep the series few.
fn encode_flow(e: &mut DescriptorEncoder<'_>, stats: &[KeyStats]) -> std::fmt::Result {
    let keys: Vec<&KeyStats> = stats.iter().filter(|k| !k.key.is_per_recipient()).collect();
    let by_key = |f: &dyn Fn(&KeyStats) -> f64| -> Vec<(Vec<(&str, String)>, f64)> {
        keys.iter()
            .map(|k| (vec![("key", k.key.to_string())], f(k)))
            .collect()
    };
    let counts = |f: &dyn Fn(&KeyStats) -> u64| -> Vec<(Vec<(&str, String)>, u64)> {
        keys.iter()
            .map(|k| (vec![("key", k.key.to_string())], f(k)))
            .collect()
    };
    gauge(
        e,
        "toki_flow_granted_rate",
        "What this instance may spend per second now, by key (its leased share)",
        &by_key(&|k| k.granted_rate),
    )?;
    gauge(
        e,
        "toki_flow_leases",
        "Partitions of the key's fleet-wide rate this instance leases",
        &by_key(&|k| f64::from(k.leases)),
    )?;
    gauge(
        e,
        "toki_flow_waiting",
        "Deliveries waiting at the key's gate now",
        &by_key(&|k| k.waiting as f64),
    )?;
    counter(
        e,
        "toki_flow_granted",
        "Deliveries the key's gate let through",
        &counts(&|k| k.granted),
    )?;
    counter(
        e,
        "toki_flow_refused",
        "Deliveries sent back to the queue for want of capacity",
        &counts(&|k| k.refused),
    )?;
    counter(
        e,
        "toki_throttle_answers",
        "429 / Retry-After answers from the service behind the key",
        &counts(&|k| k.throttle_answers),
    )?;
    counter(
        e,
        "toki_flow_revoked",
        "Permits revoked from holders stuck past the deadline",
        &counts(&|k| k.revoked),
    )?;
    Ok(())
}
