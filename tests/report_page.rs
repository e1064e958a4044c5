//! `toki report --html` after a demo, as a browser shows it: headless
//! Chromium takes a screenshot and dumps the DOM, and every figure marked on
//! the page (`data-figure`) equals the same figure in `toki report --json`.
//! Also `GET /report` (`toki_app::report_page::routes`, on `toki serve`'s
//! operator listener) serves that page.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

const TOKI: &str = env!("CARGO_BIN_EXE_toki");
const DELIVERIES: u64 = 300;
/// A browser that has not answered by then is stuck (it takes a few seconds).
const BROWSER_TIMEOUT: Duration = Duration::from_secs(120);

/// `toki ARGS`, once it succeeded: its stdout.
fn toki(args: &[&str], data: &Path) -> String {
    let out = Command::new(TOKI)
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "toki {args:?} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Chromium: `TOKI_CHROMIUM` or Debian's `/usr/bin/chromium`; None only when
/// `TOKI_SKIP_BROWSER=1` says to do without.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("TOKI_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if path.exists() {
        return Some(path);
    }
    if std::env::var("TOKI_SKIP_BROWSER").as_deref() == Ok("1") {
        eprintln!(
            "SKIPPED: the browser part (no {}; TOKI_SKIP_BROWSER=1)",
            path.display()
        );
        return None;
    }
    panic!(
        "no Chromium at {}: install Debian's `chromium` package \
         (apt-get install chromium), point TOKI_CHROMIUM at one, \
         or set TOKI_SKIP_BROWSER=1 to check the page without a browser",
        path.display()
    );
}

/// `chromium --headless=new ... ARGS file://PAGE`: its stdout.
async fn headless(browser: &Path, profile: &Path, args: &[String], page: &Path) -> String {
    let run = tokio::process::Command::new(browser)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        // Its own profile: no state from, or lock on, anyone's ~/.config/chromium.
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(BROWSER_TIMEOUT, run)
        .await
        .unwrap_or_else(|_| panic!("chromium {args:?} did not finish in {BROWSER_TIMEOUT:?}"))
        .unwrap();
    assert!(
        out.status.success(),
        "chromium {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// (name, text) of each element with a `data-figure` attribute.
fn figures(html: &str) -> Vec<(String, String)> {
    html.split("data-figure=\"")
        .skip(1)
        .map(|rest| {
            let (name, rest) = rest.split_once('"').expect("a closed attribute");
            let text = rest
                .split_once('>')
                .and_then(|(_, r)| r.split_once('<'))
                .expect("the element's text")
                .0;
            (unescape(name), unescape(text.trim()))
        })
        .collect()
}

/// The figure a `data-figure` name stands for, in the report's JSON.
fn json_figure<'a>(report: &'a Value, name: &str) -> Option<&'a Value> {
    let find = |list: &'a Value, key: &str, value: &str| {
        list.as_array()?
            .iter()
            .find(|item| item[key].as_str() == Some(value))
    };
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        ["counts", tenant, channel, status] => report["counts"]
            .as_array()?
            .iter()
            .find(|r| r["tenant"] == *tenant && r["channel"] == *channel && r["status"] == *status)
            .map(|r| &r["count"]),
        ["lateness", channel, field] => find(&report["lateness"], "channel", channel)?.get(*field),
        ["per_second", due, field] => find(&report["per_second"], "due_at", due)?.get(*field),
        ["due_instants"] => report.get("due_instants"),
        _ => None,
    }
}

/// Every figure name the JSON says the page must show.
fn expected_figures(report: &Value) -> BTreeSet<String> {
    let mut names = BTreeSet::from(["due_instants".to_owned()]);
    for r in report["counts"].as_array().unwrap() {
        names.insert(format!(
            "counts/{}/{}/{}",
            r["tenant"].as_str().unwrap(),
            r["channel"].as_str().unwrap(),
            r["status"].as_str().unwrap()
        ));
    }
    for l in report["lateness"].as_array().unwrap() {
        for field in ["deliveries", "p50_ms", "p90_ms", "p99_ms", "max_ms"] {
            names.insert(format!(
                "lateness/{}/{field}",
                l["channel"].as_str().unwrap()
            ));
        }
    }
    for s in report["per_second"].as_array().unwrap() {
        for field in ["deliveries", "busiest_second", "outside"] {
            names.insert(format!(
                "per_second/{}/{field}",
                s["due_at"].as_str().unwrap()
            ));
        }
    }
    names
}

/// Each figure on the page equals its figure in the JSON, and none is missing.
fn assert_figures_match(html: &str, report: &Value, whence: &str) {
    let shown = figures(html);
    for (name, text) in &shown {
        let want = json_figure(report, name)
            .unwrap_or_else(|| panic!("{whence}: {name} is not in the JSON: {report}"));
        assert_eq!(text, &want.to_string(), "{whence}: {name}");
    }
    let names: BTreeSet<String> = shown.into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        expected_figures(report),
        "{whence}: the figures shown"
    );
}

fn sum(list: &Value, field: &str, keep: impl Fn(&Value) -> bool) -> u64 {
    list.as_array()
        .unwrap()
        .iter()
        .filter(|v| keep(v))
        .map(|v| v[field].as_u64().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium: scripts/test.sh runs it"]
async fn the_report_page_renders_in_chromium_with_the_figures_of_report_json() {
    let browser = chromium();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("demo");
    let demo: Value = serde_json::from_str(&toki(
        &[
            "demo",
            "--deliveries",
            &DELIVERIES.to_string(),
            "--lead",
            "6",
            "--json",
        ],
        &data,
    ))
    .unwrap();
    assert_eq!(demo["delivered"], DELIVERIES, "{demo}");

    let report: Value = serde_json::from_str(&toki(&["report", "--json"], &data)).unwrap();
    let page = dir.path().join("report.html");
    toki(&["report", "--html", page.to_str().unwrap()], &data);
    let html = std::fs::read_to_string(&page).unwrap();

    // The JSON's own figures agree with the demo's.
    let delivered = |r: &Value| r["status"] == "delivered";
    assert_eq!(sum(&report["counts"], "count", delivered), DELIVERIES);
    assert_eq!(sum(&report["lateness"], "deliveries", |_| true), DELIVERIES);
    let due: Vec<&Value> = report["per_second"].as_array().unwrap().iter().collect();
    assert_eq!(
        due.len(),
        1,
        "the demo's deliveries are due at one instant: {report}"
    );
    assert_eq!(due[0]["deliveries"], DELIVERIES);
    let drawn: u64 = due[0]["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .sum();
    assert_eq!(drawn + due[0]["outside"].as_u64().unwrap(), DELIVERIES);
    for figures in demo["channels"].as_array().unwrap() {
        let channel = figures["channel"].as_str().unwrap();
        let l = report["lateness"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["channel"] == channel)
            .unwrap_or_else(|| panic!("no lateness for {channel}: {report}"));
        assert_eq!(l["deliveries"], figures["delivered"], "{channel}");
        for q in ["p50", "p90", "p99", "max"] {
            assert_eq!(
                l[format!("{q}_ms")],
                figures["lateness_ms"][q],
                "{channel} {q}"
            );
        }
    }
    assert_figures_match(&html, &report, "the page's file");
    assert!(
        !html.contains("https://") && !html.contains("<script"),
        "self-contained"
    );

    let Some(browser) = browser else { return };
    let profile = dir.path().join("chromium-profile");
    let shot = dir.path().join("report.png");
    headless(
        &browser,
        &profile,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,2000".into(),
        ],
        &page,
    )
    .await;
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    let size = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    assert_eq!(
        (size(16), size(20)),
        (1280, 2000),
        "the window's size (IHDR)"
    );
    // A blank 1280×2000 page compresses to a few KB; bars, lines and text do not.
    assert!(
        png.len() > 40_000,
        "a screenshot of {} bytes is next to blank",
        png.len()
    );

    let dom = headless(&browser, &profile, &["--dump-dom".into()], &page).await;
    assert!(
        dom.matches("<svg").count() >= 2,
        "the charts are in the DOM"
    );
    assert_figures_match(&dom, &report, "the page as Chromium built it");
}

/// `GET /report` answers the same page `toki report --html` writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_report_serves_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("demo");
    toki(
        &["demo", "--deliveries", "30", "--lead", "5", "--json"],
        &data,
    );
    let page = dir.path().join("report.html");
    toki(&["report", "--html", page.to_str().unwrap()], &data);

    let config = toki_app::Config {
        data_dir: data.clone(),
        ..toki_app::Config::default()
    };
    let toki = toki_app::Toki::open(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(listener, toki_app::report_page::routes(toki))
            .await
            .unwrap()
    });
    let answer = reqwest::get(format!("http://{addr}/report")).await.unwrap();
    assert_eq!(answer.status(), 200);
    let content_type = answer.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(content_type.starts_with("text/html"), "{content_type}");
    let body = answer.text().await.unwrap();
    let written = std::fs::read_to_string(&page).unwrap();
    // Not assert_eq!: a page is too long to read in a failure message.
    assert!(
        body == written,
        "GET /report and `toki report --html` differ; figures {:?} and {:?}",
        figures(&body),
        figures(&written)
    );
    assert!(figures(&body)
        .iter()
        .any(|(n, v)| n.starts_with("counts/") && v != "0"));
    server.abort();
}
