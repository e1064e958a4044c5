//! Shared helpers for the integration tests: the conformance suite and the
//! services tests need (Postgres, SMTP capture), each test with unique names.
#![allow(dead_code, unused_macros, unused_imports)]

#[macro_use]
pub mod conformance;
pub mod audit;
pub mod clock;
pub mod debounce;
#[macro_use]
pub mod erasure;
pub mod faults;
pub mod pipeline;
pub mod process;
pub mod proxy;
#[macro_use]
pub mod retention;
pub mod services;

/// `toki bench ARGS --json` in a fresh folder (with `env` set): its run,
/// once it succeeded.
pub fn bench(args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let stdout = bench_stdout(args, env);
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}): {stdout}"))
}

/// What `toki bench ARGS --json` printed in a fresh folder, once it succeeded.
fn bench_stdout(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toki"))
        .arg("bench")
        .args(args)
        .args(["--json", "--data-dir"])
        .arg(dir.path().join("bench"))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "bench failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `toki bench ARGS --json` in a fresh folder, for a sweep: each run (one
/// JSON object a line), once the bench succeeded.
pub fn bench_runs(args: &[&str]) -> Vec<serde_json::Value> {
    let stdout = bench_stdout(args, &[]);
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// A notification to recipient `u{i}` (mail `u{i}@example.com`, Slack user
/// `slack`) about meeting `s{i}`, as the daemon hands it to a channel.
#[allow(dead_code)]
pub fn notification(i: usize, slack: &str) -> toki_ports::channel::Notification {
    notification_on(i, slack, toki_model::Channel::Slack)
}

/// [`notification`] on `channel`.
#[allow(dead_code)]
pub fn notification_on(
    i: usize,
    slack: &str,
    channel: toki_model::Channel,
) -> toki_ports::channel::Notification {
    use toki_model::*;
    use toki_ports::channel::{ChannelParts, Notification};
    let user = User {
        id: format!("u{i}").parse().unwrap(),
        name: format!("User {i}"),
        email: Some(format!("u{i}@example.com")),
        slack_user_id: Some(slack.to_string()),
        time_zone: chrono_tz::UTC,
        locale: "en".into(),
        channels_off: Default::default(),
        webhook_url: None,
    };
    let (address, recipient_name) = Notification::reach(channel, &user);
    Notification {
        tenant: "acme".parse().unwrap(),
        key: DeliveryKey {
            schedule: format!("s{i}").parse().unwrap(),
            occurrence: Occurrence(from_millis("o", 1_800_000_000_000).unwrap()),
            purpose: DeliveryPurpose::Reminder { minutes_before: 5 },
            recipient: user.id.clone(),
            channel,
        },
        version: 1,
        due_at: DueAt(chrono::Utc::now()),
        address,
        text: "review starts in 5 minutes".into(),
        parts: ChannelParts {
            recipient_name,
            subject: "Reminder: review".into(),
            ..Default::default()
        }
        .boxed(),
    }
}
