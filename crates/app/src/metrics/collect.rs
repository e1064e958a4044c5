//! Counters and gauges read at scrape time, encoded as `(labels, value)` series.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Labels → value.
pub type Series<'a, V> = [(Vec<(&'a str, String)>, V)];

pub fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: &Series<'_, u64>,
) -> std::fmt::Result {
    let probe = ConstCounter::new(0u64);
    let mut family = encoder.encode_descriptor(name, help, None, probe.metric_type())?;
    for (labels, value) in series {
        if labels.is_empty() {
            // `name value`, not `name{} value`.
            return ConstCounter::new(*value).encode(family);
        }
        ConstCounter::new(*value).encode(family.encode_family(&owned(labels))?)?;
    }
    Ok(())
}

pub fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: &Series<'_, f64>,
) -> std::fmt::Result {
    let probe = ConstGauge::new(0.0f64);
    let mut family = encoder.encode_descriptor(name, help, None, probe.metric_type())?;
    for (labels, value) in series {
        if labels.is_empty() {
            return ConstGauge::new(*value).encode(family);
        }
        ConstGauge::new(*value).encode(family.encode_family(&owned(labels))?)?;
    }
    Ok(())
}

fn owned(labels: &[(&str, String)]) -> Vec<(String, String)> {
    labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}
