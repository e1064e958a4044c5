//! `toki demo` as a user runs it, with `--json`: on the embedded default and
//! against the AWS emulator (DynamoDB + SQS on moto, tenant databases on Postgres).

use crate::aws_support;
use crate::common;

use std::process::Command;

use serde_json::Value;

use common::bench;

const TOKI: &str = env!("CARGO_BIN_EXE_toki");

fn check(out: std::process::Output, deliveries: u64) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}): {stdout}"));
    assert_eq!(report["deliveries"], deliveries);
    assert_eq!(report["delivered"], deliveries);
    assert_eq!(report["missing"], 0);
    assert_eq!(report["duplicates"], 0);
    for k in ["p50", "p90", "p99", "max"] {
        assert!(
            report["lateness_ms"][k].is_i64(),
            "lateness_ms.{k} missing: {report}"
        );
    }
    assert!(report["elapsed_s"].as_f64().unwrap() > 0.0);
    report
}

#[test]
fn demo_on_the_embedded_default() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("demo");
    let out = Command::new(TOKI)
        .args([
            "demo",
            "--deliveries",
            "300",
            "--lead",
            "6",
            "--json",
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .unwrap();
    let report = check(out, 300);
    assert_eq!(
        report["channels"].as_array().unwrap().len(),
        3,
        "mixed channels: {report}"
    );
    // A second run replaces its own folder; a foreign folder is refused.
    let foreign = dir.path().join("mine");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("precious.txt"), "keep me").unwrap();
    let refused = Command::new(TOKI)
        .args(["demo", "--data-dir"])
        .arg(&foreign)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--data-dir"));
    assert!(foreign.join("precious.txt").exists());
}

/// On AWS-style storage, and with TLS to Postgres as RDS requires
/// (`sslmode=require`); the demo's tenants get `toki_test_<run>_demo_*` databases.
#[test]
#[ignore = "needs the AWS emulator (moto) and Postgres: scripts/test.sh runs it"]
fn demo_against_the_aws_emulator() {
    let dir = tempfile::tempdir().unwrap();
    let suffix = common::conformance::unique("");
    let server = common::services::postgres_url_for("postgres");
    let out = Command::new(TOKI)
        .args([
            "demo",
            "--backend",
            "aws",
            "--deliveries",
            "300",
            "--lead",
            "10",
            "--json",
            "--data-dir",
        ])
        .arg(dir.path().join("demo"))
        .envs(aws_support::endpoint_env())
        .env("TOKI_INDEX_TABLE", format!("demo-index-{suffix}"))
        .env("TOKI_DIRECTORY_TABLE", format!("demo-tenants-{suffix}"))
        .env("TOKI_QUEUE_NAME", format!("demo-q-{suffix}"))
        .env("TOKI_DLQ_NAME", format!("demo-dlq-{suffix}"))
        // Databases of this run's own (the LocalStack pass runs this test
        // at the same time as the main pass, on the same server).
        .env(
            "TOKI_DATABASE_URL_TEMPLATE",
            format!(
                "{}/toki_test_{suffix}_{{tenant}}?sslmode=require",
                server.rsplit_once('/').unwrap().0
            ),
        )
        .output()
        .unwrap();
    let report = check(out, 300);
    assert_eq!(report["backend"], "aws");
}

/// `toki bench --channel mail` as a user runs it: the daemon and the SMTP
/// stand-in each in their own process, lateness measured at the stand-in.
#[test]
fn bench_mail_through_the_smtp_standin() {
    // The stand-in is a sibling binary of `toki` (cargo builds both for the tests).
    assert!(std::path::Path::new(TOKI)
        .with_file_name("toki-smtp-standin")
        .exists());
    let run = bench(
        &[
            "--channel",
            "mail",
            "--deliveries",
            "120",
            "--workers",
            "2",
            "--lead",
            "4",
        ],
        &[("TOKI_SMTP_CONNECTIONS", "3")],
    );
    assert_eq!(run["measured_at"], "sink", "{run}");
    assert_eq!(run["missing"], 0, "{run}");
    assert_eq!(run["duplicates"], 0, "{run}");
    let sessions = run["smtp_sessions"].as_u64().unwrap();
    assert!(
        (1..=3).contains(&sessions),
        "at most the pool's sessions: {run}"
    );
}

/// `toki bench --daemons 2`: two daemon processes share the queue; every
/// delivery goes out once, and each daemon's share adds up to the whole.
#[test]
fn bench_with_a_fleet_of_two_daemons() {
    let run = bench(
        &[
            "--deliveries",
            "200",
            "--daemons",
            "2",
            "--workers",
            "2",
            "--lead",
            "5",
        ],
        &[],
    );
    assert_eq!(run["daemons"], 2, "{run}");
    assert_eq!(run["missing"], 0, "{run}");
    assert_eq!(run["duplicates"], 0, "{run}");
    let share: Vec<u64> = run["share"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert_eq!(share.len(), 2, "{run}");
    assert_eq!(
        share.iter().sum::<u64>(),
        200,
        "every delivered row names one of the two: {run}"
    );
}

/// Progress bars on a terminal (a pseudo-terminal from util-linux's
/// `script`), and none when stderr is a pipe or with `--json`: the bars'
/// stages and their escape codes appear in the first run only.
#[test]
fn progress_shows_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    let on_tty = dir.path().join("tty");
    let line = format!(
        "{TOKI} demo --deliveries 200 --lead 6 --data-dir {}",
        on_tty.display()
    );
    let tty = Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .env("TERM", "xterm")
        .output()
        .expect("script (util-linux) runs");
    let screen = String::from_utf8_lossy(&tty.stdout);
    assert!(tty.status.success(), "{screen}");
    // Not "delivering": 200 may all go out between two redraws.
    for stage in ["registering", "waiting", "delivered 200 of 200"] {
        assert!(
            screen.contains(stage),
            "no {stage:?} on the terminal: {screen}"
        );
    }
    assert!(
        screen.contains("\x1b[2K"),
        "lines redrawn in place: {screen}"
    );
    assert!(screen.contains("OK: 200 of 200 delivered"), "{screen}");

    let piped = Command::new(TOKI)
        .args(["demo", "--deliveries", "200", "--lead", "6", "--data-dir"])
        .arg(dir.path().join("pipe"))
        .output()
        .unwrap();
    assert!(piped.status.success());
    let stderr = String::from_utf8_lossy(&piped.stderr);
    for drawn in ["registering", "delivering", "\x1b["] {
        assert!(!stderr.contains(drawn), "{drawn:?} in a pipe: {stderr}");
    }
    assert!(String::from_utf8_lossy(&piped.stdout).contains("OK: 200 of 200 delivered"));

    // `toki migrate` over the same data: a bar on the terminal, JSON with --json.
    let line = format!("{TOKI} migrate --data-dir {}", on_tty.display());
    let tty = Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .env("TERM", "xterm")
        .output()
        .unwrap();
    let screen = String::from_utf8_lossy(&tty.stdout);
    assert!(tty.status.success(), "{screen}");
    assert!(screen.contains("migrating"), "{screen}");
    assert!(
        screen.contains("migrated the control store and 3 tenant databases"),
        "{screen}"
    );
    let json = Command::new(TOKI)
        .args(["migrate", "--json", "--data-dir"])
        .arg(&on_tty)
        .output()
        .unwrap();
    assert!(json.status.success());
    assert!(!String::from_utf8_lossy(&json.stderr).contains("migrating"));
    let report: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["tenants"].as_array().unwrap().len(), 3, "{report}");
}
