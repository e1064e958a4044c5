//! `toki bench --plot DIR`: each run's lateness CDF as an SVG file named after
//! the run, with a line per series and the run's own figures in its title.

use crate::common;

use std::path::Path;

use serde_json::Value;

/// The SVG a run names, once it is there where `--plot` was told.
fn plot_of(run: &Value, dir: &Path, name: &str) -> String {
    let path = run["plot"]
        .as_str()
        .unwrap_or_else(|| panic!("no plot: {run}"));
    assert_eq!(Path::new(path), dir.join(name), "{run}");
    std::fs::read_to_string(path).unwrap()
}

/// The legend's text of each series (plotters writes a text element's
/// content on a line of its own).
fn labels(svg: &str) -> Vec<&str> {
    svg.split("text-anchor=\"start\"")
        .skip(1)
        .filter_map(|t| t.split_once(">\n").map(|(_, rest)| rest))
        .filter_map(|rest| rest.split_once('\n').map(|(label, _)| label))
        .collect()
}

/// A series' line: a polyline with at least `points` points.
fn lines_with_at_least(svg: &str, points: usize) -> usize {
    svg.split("<polyline")
        .skip(1)
        .filter_map(|p| p.split_once("points=\"").map(|(_, rest)| rest))
        .filter_map(|rest| rest.split_once('"').map(|(pts, _)| pts))
        .filter(|pts| pts.split_whitespace().count() >= points)
        .count()
}

#[test]
fn a_slack_run_is_plotted_from_the_stand_ins_arrivals() {
    let plots = tempfile::tempdir().unwrap();
    let dir = plots.path().join("plots");
    let run = common::bench(
        &[
            "--deliveries",
            "200",
            "--lead",
            "5",
            "--plot",
            dir.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(run["missing"], 0, "{run}");
    let svg = plot_of(&run, &dir, "lateness-slack-embedded-n200-d1-w8.svg");
    assert!(svg.starts_with("<svg"), "{svg:.200}");
    assert_eq!(labels(&svg), ["all deliveries (200)"]);
    // Two points a step, one step a delivery.
    assert_eq!(lines_with_at_least(&svg, 2 * 200), 1, "one CDF line");
    let l = &run["lateness_ms"];
    let title = format!(
        "p50 {} ms, p99 {} ms, max {} ms",
        l["p50"], l["p99"], l["max"]
    );
    assert!(
        svg.contains(&title),
        "the run's figures ({title}) head the plot"
    );
}

#[test]
fn a_sweep_writes_one_plot_a_run_from_the_delivery_rows() {
    let plots = tempfile::tempdir().unwrap();
    let dir = plots.path();
    let runs = common::bench_runs(&[
        "--channel",
        "chat",
        "--deliveries",
        "150",
        "--workers",
        "2,4",
        "--lead",
        "5",
        "--plot",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(runs.len(), 2);
    for (run, workers) in runs.iter().zip([2, 4]) {
        assert_eq!(run["measured_at"], "rows", "{run}");
        let svg = plot_of(
            run,
            dir,
            &format!("lateness-chat-embedded-n150-d1-w{workers}.svg"),
        );
        assert_eq!(labels(&svg), ["all deliveries (150)"]);
        assert_eq!(lines_with_at_least(&svg, 2 * 150), 1);
    }
    assert_eq!(std::fs::read_dir(dir).unwrap().count(), 2, "one file a run");
}
