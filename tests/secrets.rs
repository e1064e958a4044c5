//! No secret in a log line: `toki serve` at debug level, with an SMTP
//! password, a Slack token, a tenant database password and API keys, made to
//! fail on mail and Slack (so that every WARN path with a reason runs), and
//! asked with wrong and right keys. Its whole stderr, and what `toki tenant`
//! printed to stderr, must hold none of the secrets, plain or base64.

use crate::common;

use std::process::Command;
use std::time::Duration;

use chrono::{Duration as ChronoDuration, SubsecRound, Utc};
use serde_json::json;
use toki_devtools::slack_standin::{Behaviour, StandinOptions};
use toki_devtools::smtp_standin::SmtpBehaviour;

use common::process::{Process, TOKI};

const SMTP_PASSWORD: &str = "smtp-Pw-7Qx93kd";
const SLACK_TOKEN: &str = "xoxb-1234-5678-SlackT0kenQ9z";

fn base64(s: &str) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, &c| (n << 8) | c as u32) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Postgres: scripts/test.sh runs it"]
async fn no_secret_reaches_a_log_line() {
    // The tenant database: the test server's password if it has one, else one
    // added (a trust-auth server ignores it).
    let base = common::services::postgres_base_url();
    let (scheme_user, rest) = base.split_once('@').expect("user@host in the URL");
    let (db_password, template_base) = match scheme_user.rsplit_once(':') {
        Some((su, pw)) if su.contains("://") => (pw.to_owned(), format!("{su}:{pw}@{rest}")),
        _ => (
            "db-Pw-m4Zr81".to_owned(),
            format!("{scheme_user}:db-Pw-m4Zr81@{rest}"),
        ),
    };
    // A server's own password may be a common word ("postgres"): look for it
    // as it would appear in a URL; an added one is looked for anywhere.
    let db_secret = if db_password.len() < 10 {
        format!(":{db_password}@")
    } else {
        db_password.clone()
    };
    let tenant = format!("sec{}", std::process::id());
    let (server, query) = template_base.rsplit_once('/').unwrap();
    let query = query
        .split_once('?')
        .map(|(_, q)| format!("?{q}"))
        .unwrap_or_default();
    let template = format!("{server}/toki_test_secrets_{{tenant}}{query}");

    let (slack, slack_url) = common::services::slack_standin(StandinOptions::default()).await;
    slack.set_behaviour(Behaviour::HttpError(503));
    let (smtp, smtp_addr) = toki_devtools::smtp_standin::start().await.unwrap();
    smtp.set_behaviour(SmtpBehaviour::Reply("451 4.3.0 try again later".into()));

    let data = tempfile::tempdir().unwrap();
    let env = [
        ("RUST_LOG", "debug".to_owned()),
        ("TOKI_DATABASE_URL_TEMPLATE", template.clone()),
        (
            "TOKI_SMTP_URL",
            format!("smtp://mailer:{SMTP_PASSWORD}@{smtp_addr}"),
        ),
        ("TOKI_SLACK_TOKEN", SLACK_TOKEN.to_owned()),
        ("TOKI_SLACK_API_URL", slack_url.clone()),
        ("TOKI_RETRY_BASE_MS", "200".to_owned()),
    ];
    let toki = |args: &[&str]| {
        Command::new(TOKI)
            .args(args)
            .arg("--data-dir")
            .arg(data.path())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap()
    };
    let created = toki(&["tenant", "create", &tenant]);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let key = String::from_utf8(created.stdout).unwrap().trim().to_owned();
    let listed = toki(&["tenant", "list"]);
    let mut logs = String::from_utf8_lossy(&created.stderr).into_owned();
    logs += &String::from_utf8_lossy(&listed.stderr);
    // `tenant list` prints to stdout for people: no password there either.
    let listed_out = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(!listed_out.contains(&db_secret), "{listed_out}");
    assert!(!listed_out.contains(&key), "{listed_out}");

    let mut cmd = Command::new(TOKI);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    let (mut process, line) =
        Process::spawn(cmd, "registrar API on http://", Duration::from_secs(60));
    let base_url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_owned();
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{base_url}/v1/tenants/{tenant}/{p}");
    // A wrong key, a key of the wrong form, a right key in another case of the scheme.
    for (auth, status) in [
        (format!("Bearer {key}x"), 401),
        (format!("Basic {key}"), 401),
        (format!("bEaReR {key}"), 200),
    ] {
        let r = http
            .put(url("users/ana"))
            .header("authorization", &auth)
            .json(&json!({"name": "Ana", "email": "ana@example.com", "slack_user_id": "U1"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "{}", auth.split(' ').next().unwrap());
    }
    let due = (Utc::now() + ChronoDuration::seconds(4)).round_subsecs(0);
    let starts = (due + ChronoDuration::minutes(5)).to_rfc3339();
    let r = http
        .put(url("schedules/s1"))
        .bearer_auth(&key)
        .json(
            &json!({"title": "Sync", "starts_at": starts, "participants": ["ana"],
                      "reminders": [{"minutes_before": 5, "channels": ["mail", "slack", "chat"]}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // Both failing channels have been tried and logged with their reasons.
    let mut seen = (false, false);
    while seen != (true, true) {
        let line = process.wait_line(|l| l.contains("WARN"), Duration::from_secs(30));
        seen.0 |= line.contains("channel=mail") && line.contains("451");
        seen.1 |= line.contains("channel=slack") && line.contains("503");
    }
    process.signal("TERM");
    process.wait_exit(Duration::from_secs(30)).await;
    logs += &process.log();

    assert!(logs.contains("DEBUG"), "the log was at debug level");
    for (what, secret) in [
        ("SMTP password", SMTP_PASSWORD.to_owned()),
        ("Slack token", SLACK_TOKEN.to_owned()),
        ("API key", key.clone()),
        ("tenant database password", db_secret.clone()),
    ] {
        for form in [secret.clone(), base64(&secret)] {
            let hit = logs.lines().find(|l| l.contains(&form));
            assert!(hit.is_none(), "the {what} is in a log line: {hit:?}");
        }
    }
    // SMTP AUTH sends user\0user\0password in base64.
    let plain = base64(&format!("\0mailer\0{SMTP_PASSWORD}"));
    assert!(!logs.contains(&plain));
    let _ = toki_sql::drop_tenant_database(&common::services::postgres_url_for(&format!(
        "toki_test_secrets_{tenant}"
    )))
    .await;
}
