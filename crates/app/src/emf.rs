//! CloudWatch embedded metric format: one JSON log line that CloudWatch turns
//! into metrics (namespace `Toki`, dimensions `Environment` and `Function`),
//! for the Lambdas, whose stdout goes to CloudWatch Logs. The environment
//! (`TOKI_ENVIRONMENT`) keeps two stacks in one account from sharing metrics.

use serde_json::{json, Map, Value};

/// The line for `metrics` (name, count) of `function` in `environment` at `timestamp_ms`.
pub fn line(
    environment: &str,
    function: &str,
    timestamp_ms: i64,
    metrics: &[(&str, f64)],
) -> String {
    let mut root = Map::new();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": "Toki",
                "Dimensions": [["Environment", "Function"]],
                "Metrics": metrics.iter().map(|(name, _)| json!({"Name": name, "Unit": "Count"})).collect::<Vec<_>>(),
            }],
        }),
    );
    root.insert("Environment".into(), Value::String(environment.into()));
    root.insert("Function".into(), Value::String(function.into()));
    for (name, value) in metrics {
        root.insert((*name).into(), json!(value));
    }
    Value::Object(root).to_string()
}

/// The daemon's lateness as EMF lines, one per channel per period: the
/// deliveries since the last period, as bucket upper bounds (ms) and counts,
/// so that CloudWatch can compute p50/p99 (`LatenessMs`, dimensions
/// `[Environment]` and `[Environment, Channel]`) and alarm on them. Read from
/// the process's `/metrics` histogram: nothing more is recorded per delivery.
#[derive(Debug, Default)]
pub struct LatenessPeriods {
    /// (channel, upper bound in seconds) → cumulative count at the last period.
    last: std::collections::HashMap<(String, String), u64>,
}

/// What the +Inf bucket stands for, in ms (the last finite bound is 900 s).
const BEYOND_MS: f64 = 1_800_000.0;

impl LatenessPeriods {
    /// Lines for the deliveries counted in `metrics_text` (OpenMetrics) since
    /// the last call; none for a channel without deliveries.
    pub fn lines(
        &mut self,
        metrics_text: &str,
        environment: &str,
        timestamp_ms: i64,
    ) -> Vec<String> {
        // channel → [(upper bound, cumulative count)] as the text lists them.
        let mut by_channel: std::collections::BTreeMap<String, Vec<(String, u64)>> =
            Default::default();
        for line in metrics_text.lines() {
            let Some(rest) = line.strip_prefix("toki_delivery_lateness_seconds_bucket{") else {
                continue;
            };
            let Some((labels, value)) = rest.split_once("} ") else {
                continue;
            };
            let label = |name: &str| {
                labels
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                    .map(|v| v.trim_end_matches('"').to_owned())
            };
            let (Some(le), Some(channel), Ok(count)) =
                (label("le"), label("channel"), value.trim().parse::<u64>())
            else {
                continue;
            };
            by_channel.entry(channel).or_default().push((le, count));
        }
        let mut out = Vec::new();
        for (channel, buckets) in by_channel {
            let (mut values, mut counts) = (Vec::new(), Vec::new());
            let mut below = 0u64;
            for (le, cumulative) in buckets {
                let before = self
                    .last
                    .insert((channel.clone(), le.clone()), cumulative)
                    .unwrap_or(0);
                let new_cumulative = cumulative.saturating_sub(before);
                let in_bucket = new_cumulative.saturating_sub(below);
                below = new_cumulative;
                if in_bucket > 0 {
                    let ms = if le == "+Inf" {
                        BEYOND_MS
                    } else {
                        le.parse::<f64>().unwrap_or(0.0) * 1000.0
                    };
                    values.push(ms);
                    counts.push(in_bucket);
                }
            }
            if values.is_empty() {
                continue;
            }
            out.push(
                json!({
                    "_aws": {
                        "Timestamp": timestamp_ms,
                        "CloudWatchMetrics": [{
                            "Namespace": "Toki",
                            "Dimensions": [["Environment"], ["Environment", "Channel"]],
                            "Metrics": [{"Name": "LatenessMs", "Unit": "Milliseconds"}],
                        }],
                    },
                    "Environment": environment,
                    "Channel": channel,
                    "LatenessMs": {"Values": values, "Counts": counts},
                })
                .to_string(),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_line_names_its_metrics_and_values() {
        let l = super::line(
            "prod",
            "scanner",
            1_800_000_000_000,
            &[("Enqueued", 3.0), ("FailedPartitions", 0.0)],
        );
        let v: serde_json::Value = serde_json::from_str(&l).unwrap();
        assert_eq!(
            (v["Environment"].as_str(), v["Function"].as_str()),
            (Some("prod"), Some("scanner"))
        );
        assert_eq!(v["Enqueued"], 3.0);
        assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Toki");
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Metrics"][1]["Name"],
            "FailedPartitions"
        );
    }

    #[test]
    fn lateness_periods_count_only_what_is_new_per_bucket() {
        let text = |a: u64, b: u64, c: u64| {
            format!(
                "toki_delivery_lateness_seconds_bucket{{le=\"0.01\",channel=\"slack\"}} {a}\n\
                 toki_delivery_lateness_seconds_bucket{{le=\"0.1\",channel=\"slack\"}} {b}\n\
                 toki_delivery_lateness_seconds_bucket{{le=\"+Inf\",channel=\"slack\"}} {c}\n"
            )
        };
        let mut p = super::LatenessPeriods::default();
        let lines = p.lines(&text(2, 5, 6), "prod", 1);
        assert_eq!(lines.len(), 1);
        let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(
            v["LatenessMs"]["Values"],
            serde_json::json!([10.0, 100.0, 1_800_000.0])
        );
        assert_eq!(v["LatenessMs"]["Counts"], serde_json::json!([2, 3, 1]));
        assert_eq!(v["Channel"], "slack");
        // Nothing new: no line; then only the new ones.
        assert!(p.lines(&text(2, 5, 6), "prod", 2).is_empty());
        let v: serde_json::Value =
            serde_json::from_str(&p.lines(&text(2, 9, 9), "prod", 3)[0]).unwrap();
        assert_eq!(v["LatenessMs"]["Values"], serde_json::json!([100.0]));
        assert_eq!(v["LatenessMs"]["Counts"], serde_json::json!([4]));
    }
}
