//! The report as one self-contained HTML page (`toki report --html FILE`,
//! `GET /report`): inline SVG charts drawn with plotters, no external assets.
//!
//! Every figure printed on the page is a field of the [`Report`] that
//! `toki report --json` serialises, and carries its name in a `data-figure`
//! attribute (`counts/acme/slack/delivered`, `lateness/slack/p99_ms`,
//! `per_second/<due_at>/deliveries`), so a test can hold the two side by side.

use std::fmt::Write as _;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::{self, ChannelLateness, DueSeconds, Report};
use crate::toki::Toki;

/// A chart could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("drawing a chart: {0}")]
pub struct ChartError(String);

impl<E: std::error::Error + Send + Sync> From<DrawingAreaErrorKind<E>> for ChartError {
    fn from(e: DrawingAreaErrorKind<E>) -> Self {
        ChartError(e.to_string())
    }
}

/// One line on a lateness CDF.
#[derive(Debug, Clone)]
pub struct CdfSeries {
    pub name: String,
    /// (lateness ms, percent of deliveries at most that late), in order.
    pub points: Vec<(i64, f64)>,
}

/// Series colours, in series order (colour-blind-safe Okabe–Ito hues).
const PALETTE: [RGBColor; 6] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
];

/// Axis and legend text: plotters' default (12 px at its 1.24 scale) is hard to read.
const LABELS: (&str, u32) = ("sans-serif", 16);

/// The page for what the tenant stores hold now.
pub async fn page(toki: &Toki) -> anyhow::Result<String> {
    Ok(render(&report::collect(toki).await?)?)
}

/// `GET /report`: the page, as text/html.
#[cfg(feature = "api")]
pub fn routes(toki: Toki) -> axum::Router {
    axum::Router::new()
        .route("/report", axum::routing::get(serve_page))
        .with_state(toki)
}

#[cfg(feature = "api")]
async fn serve_page(
    axum::extract::State(toki): axum::extract::State<Toki>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match page(&toki).await {
        Ok(html) => axum::response::Html(html).into_response(),
        Err(e) => {
            tracing::warn!(error = format!("{e:#}"), "report page failed");
            // The cause may name databases: it goes to the log, not the answer.
            (
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "the report could not be read; see the server's log\n",
            )
                .into_response()
        }
    }
}

/// The page for `report`.
pub fn render(report: &Report) -> Result<String, ChartError> {
    let mut html = String::from(HEAD);
    if report.tenants_not_read > 0 {
        let _ = writeln!(
            html,
            "<p class=\"note\">{} more tenants not read (a report reads the first {}).</p>",
            report.tenants_not_read,
            report::MAX_TENANTS
        );
    }
    if report.counts.is_empty() {
        html.push_str("<p>No deliveries recorded yet.</p>\n");
    } else {
        lateness_section(&mut html, &report.lateness)?;
        per_second_section(&mut html, report)?;
        counts_section(&mut html, report);
    }
    html.push_str("</body>\n</html>\n");
    Ok(html)
}

const HEAD: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Toki: deliveries</title>
<style>
body { font-family: sans-serif; margin: 2em auto; max-width: 960px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { padding: 0.2em 0.8em; border-bottom: 1px solid #ddd; text-align: left; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 0.5em 0 1.5em; }
.note { color: #555; }
</style>
</head>
<body>
<h1>Toki: deliveries</h1>
<p class="note">From the delivery rows of every tenant, counted by each tenant's database.
Lateness = delivered_at − due_at, of the rows due in the last 7 days; a percentile is
exact below 100 ms and at most 10 % high above (the least and the most are exact).</p>
"#;

/// `<td class="n" data-figure="NAME">VALUE</td>`
fn figure(html: &mut String, name: &str, value: impl std::fmt::Display) {
    let _ = write!(
        html,
        r#"<td class="n" data-figure="{}">{value}</td>"#,
        escape(name)
    );
}

fn lateness_section(html: &mut String, lateness: &[ChannelLateness]) -> Result<(), ChartError> {
    html.push_str("<h2>Lateness per channel</h2>\n");
    if lateness.is_empty() {
        html.push_str("<p>Nothing delivered yet.</p>\n");
        return Ok(());
    }
    html.push_str(
        "<table>\n<tr><th>channel</th><th class=\"n\">delivered</th><th class=\"n\">p50 ms</th>\
         <th class=\"n\">p90 ms</th><th class=\"n\">p99 ms</th><th class=\"n\">max ms</th></tr>\n",
    );
    for l in lateness {
        let _ = write!(html, "<tr><td>{}</td>", escape(&l.channel));
        let name = |field: &str| format!("lateness/{}/{field}", l.channel);
        figure(html, &name("deliveries"), l.deliveries);
        figure(html, &name("p50_ms"), l.p50_ms);
        figure(html, &name("p90_ms"), l.p90_ms);
        figure(html, &name("p99_ms"), l.p99_ms);
        figure(html, &name("max_ms"), l.max_ms);
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    let series: Vec<CdfSeries> = lateness
        .iter()
        .map(|l| CdfSeries {
            name: l.channel.clone(),
            points: l
                .percentiles_ms
                .iter()
                .enumerate()
                .map(|(q, ms)| (*ms, q as f64))
                .collect(),
        })
        .collect();
    let _ = writeln!(
        html,
        "<figure>{}<figcaption class=\"note\">Share of each channel's deliveries at most \
         so late (the lateness at each whole percent).</figcaption></figure>",
        lateness_cdf("Lateness per channel", &series, (900, 420))?
    );
    Ok(())
}

fn per_second_section(html: &mut String, report: &Report) -> Result<(), ChartError> {
    html.push_str("<h2>Deliveries per second around each due instant</h2>\n<table><tr>");
    html.push_str("<td>due instants with deliveries</td>");
    figure(html, "due_instants", report.due_instants);
    let _ = writeln!(
        html,
        "</tr></table>\n<p class=\"note\">The busiest {} at most, in time order; from {} s \
         before the due instant to the last delivery, up to {} s.</p>",
        report::MAX_DUE_INSTANTS,
        report::LEAD_IN_S,
        report::MAX_SPAN_S
    );
    for s in &report.per_second {
        // The JSON's own spelling of the instant names its figures.
        let due = serde_json::to_value(s.due_at)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| s.due_at.to_rfc3339());
        let _ = write!(
            html,
            "<h3>Due at {}</h3>\n<table><tr><td>delivered</td>",
            escape(&due)
        );
        let name = |field: &str| format!("per_second/{due}/{field}");
        figure(html, &name("deliveries"), s.deliveries);
        html.push_str("<td>busiest second</td>");
        figure(html, &name("busiest_second"), s.busiest_second);
        html.push_str("<td>outside the chart</td>");
        figure(html, &name("outside"), s.outside);
        let _ = writeln!(
            html,
            "</tr></table>\n<figure>{}</figure>",
            per_second_chart(s, (900, 260))?
        );
    }
    Ok(())
}

fn counts_section(html: &mut String, report: &Report) {
    html.push_str(
        "<h2>Delivery rows by tenant × channel × status</h2>\n<table>\n\
         <tr><th>tenant</th><th>channel</th><th>status</th><th class=\"n\">count</th></tr>\n",
    );
    for r in &report.counts {
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td>",
            escape(&r.tenant),
            escape(&r.channel),
            escape(&r.status)
        );
        let name = format!("counts/{}/{}/{}", r.tenant, r.channel, r.status);
        figure(html, &name, r.count);
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
}

/// Deliveries per second around one due instant, as bars.
fn per_second_chart(s: &DueSeconds, size: (u32, u32)) -> Result<String, ChartError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)?;
        // plotters' integer ranges hold both ends: one segment per second shown.
        let last = s.from_s + s.counts.len().max(1) as i64 - 1;
        let top = (s.busiest_second + s.busiest_second / 10).max(1) + 1;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d((s.from_s..last).into_segmented(), 0u64..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("seconds from the due instant")
            .y_desc("deliveries")
            .label_style(LABELS)
            .axis_desc_style(LABELS)
            .x_labels(12)
            .x_label_formatter(&|v| match v {
                SegmentValue::Exact(x) | SegmentValue::CenterOf(x) => x.to_string(),
                SegmentValue::Last => String::new(),
            })
            .draw()?;
        // Bars in time order (plotters' Histogram sums through a HashMap and
        // writes them in a random order): the same report, the same page.
        let seconds = chart.as_coord_spec().x_spec().clone();
        let bars = s.counts.iter().enumerate().filter_map(|(i, n)| {
            let second = seconds.index_of(&SegmentValue::Exact(s.from_s + i as i64))?;
            let left = seconds.from_index(second)?;
            let right = seconds.from_index(second + 1)?;
            let mut bar = Rectangle::new([(left, *n), (right, 0)], PALETTE[0].filled());
            bar.set_margin(0, 0, 1, 1);
            Some(bar)
        });
        chart.draw_series(bars)?;
        root.present()?;
    }
    Ok(svg)
}

/// A lateness CDF: one line per series, lateness on a log axis (the
/// difference between 10 ms, 100 ms and 1 s is what matters), so a lateness
/// under 1 ms is drawn at 1 ms.
pub fn lateness_cdf(
    title: &str,
    series: &[CdfSeries],
    size: (u32, u32),
) -> Result<String, ChartError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)?;
        draw_cdf(&root, title, series)?;
        root.present()?;
    }
    Ok(svg)
}

fn draw_cdf(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    series: &[CdfSeries],
) -> Result<(), ChartError> {
    let latest = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .max()
        .unwrap_or(1);
    // Up to the next power of ten: whole decades read best on a log axis.
    let right = 10f64.powi((latest.max(10) as f64).log10().ceil() as i32);
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 24))
        .margin(12)
        // Room for the last decade's label ("1000"), centred on the edge.
        .margin_right(28)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d((1f64..right).log_scale(), 0f64..100.5)?;
    chart
        .configure_mesh()
        .x_desc("lateness, ms (log scale; under 1 ms drawn at 1)")
        .y_desc("% of deliveries at most so late")
        .label_style(LABELS)
        .axis_desc_style(LABELS)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(steps(&s.points), colour.stroke_width(2)))?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .label_font(LABELS)
        .draw()?;
    Ok(())
}

/// A CDF's points as a staircase (the share jumps at each lateness), on the
/// log axis's domain.
fn steps(points: &[(i64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2);
    let mut below = 0.0;
    for &(ms, share) in points {
        let x = (ms as f64).max(1.0);
        out.push((x, below));
        out.push((x, share));
        below = share;
    }
    out
}

/// The empirical CDF of sorted lateness values, at most about a thousand
/// points (a step per delivery up to that, per 0.1 % beyond), so that a
/// 100,000-delivery run still makes a small file.
pub fn cdf_points(sorted_ms: &[i64]) -> Vec<(i64, f64)> {
    const MAX_POINTS: usize = 1000;
    let n = sorted_ms.len();
    if n <= MAX_POINTS {
        return sorted_ms
            .iter()
            .enumerate()
            .map(|(i, ms)| (*ms, (i + 1) as f64 * 100.0 / n as f64))
            .collect();
    }
    (1..=MAX_POINTS)
        .map(|k| {
            let q = k as f64 * 100.0 / MAX_POINTS as f64;
            (toki_model::lateness::percentile(sorted_ms, q), q)
        })
        .collect()
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{summarise, Delivered, ReportRow};
    use chrono::{TimeZone, Utc};
    use toki_model::Channel;

    fn sample() -> Report {
        let due = Utc.with_ymd_and_hms(2030, 1, 7, 8, 55, 0).unwrap();
        let delivered: Vec<Delivered> = (0..50)
            .map(|i| Delivered {
                channel: if i % 2 == 0 {
                    Channel::Slack
                } else {
                    Channel::Mail
                },
                due_at: due,
                at: due + chrono::Duration::milliseconds(i * 37),
            })
            .collect();
        let counts = vec![
            ReportRow {
                tenant: "acme".into(),
                channel: "slack".into(),
                status: "delivered".into(),
                count: 25,
            },
            ReportRow {
                tenant: "a<b".into(),
                channel: "mail".into(),
                status: "delivered".into(),
                count: 25,
            },
        ];
        summarise(counts, &delivered)
    }

    /// (name, value) of each `data-figure` cell.
    fn figures(html: &str) -> Vec<(String, String)> {
        html.split("data-figure=\"")
            .skip(1)
            .map(|rest| {
                let (name, rest) = rest.split_once('"').unwrap();
                let value = rest[1..].split_once('<').unwrap().0;
                (name.to_owned(), value.to_owned())
            })
            .collect()
    }

    #[test]
    fn the_page_marks_every_figure_of_the_report() {
        let report = sample();
        let html = render(&report).unwrap();
        let figs = figures(&html);
        let get = |name: &str| {
            figs.iter()
                .find(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("no {name} on the page"))
                .1
                .clone()
        };
        assert_eq!(get("counts/acme/slack/delivered"), "25");
        assert_eq!(
            get("counts/a&lt;b/mail/delivered"),
            "25",
            "names are escaped"
        );
        let slack = report
            .lateness
            .iter()
            .find(|l| l.channel == "slack")
            .unwrap();
        assert_eq!(get("lateness/slack/p99_ms"), slack.p99_ms.to_string());
        assert_eq!(get("lateness/slack/deliveries"), "25");
        assert_eq!(get("per_second/2030-01-07T08:55:00Z/deliveries"), "50");
        assert_eq!(get("due_instants"), "1");
        // 2 counts + 2 channels × 5 + 1 + 3 for the one due instant.
        assert_eq!(figs.len(), 2 + 10 + 1 + 3, "{figs:?}");
        assert!(
            !html.contains("<b/mail"),
            "a tenant's name is text, not markup"
        );
    }

    #[test]
    fn the_charts_are_inline_svg_with_no_external_asset() {
        let html = render(&sample()).unwrap();
        assert_eq!(
            html.matches("<svg").count(),
            2,
            "one CDF, one per-second chart"
        );
        assert!(html.contains("<text"), "axis labels are SVG text");
        // plotters writes a text element's content on a line of its own.
        assert!(
            html.contains(">\nslack\n</text>"),
            "the legend names each channel"
        );
        for external in ["http://", "https://", "src=", "<link"] {
            let outside_svg_namespace = html.replace("http://www.w3.org/2000/svg", "");
            assert!(
                !outside_svg_namespace.contains(external),
                "{external} on the page"
            );
        }
    }

    #[test]
    fn an_empty_report_says_so() {
        let html = render(&summarise(Vec::new(), &[])).unwrap();
        assert!(html.contains("No deliveries recorded yet"));
        assert!(!html.contains("data-figure"));
    }

    #[test]
    fn cdf_points_end_at_the_whole_and_stay_small() {
        let few: Vec<i64> = (1..=10).collect();
        let points = cdf_points(&few);
        assert_eq!(points.len(), 10);
        assert_eq!(points[9], (10, 100.0));
        let many: Vec<i64> = (0..100_000).collect();
        let points = cdf_points(&many);
        assert_eq!(points.len(), 1000);
        assert_eq!(points.last().unwrap(), &(99_999, 100.0));
        assert!(points
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1));
    }
}
