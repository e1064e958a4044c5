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
}
