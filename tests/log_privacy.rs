//! Logs without personal data: `toki serve` at TRACE, with traces on, sends
//! reminders on Slack and by mail (the mail server refuses them with a reply
//! that quotes the address, as real ones do) and takes a user the API
//! refuses; then its whole stderr is searched for every name, address, Slack
//! id and user id the run handled (docs/privacy.md).

use crate::common;

use std::time::Duration;

use serde_json::{json, Value};

use common::pipeline::due_in;
use toki_devtools::smtp_standin::SmtpBehaviour;

/// A person as the tenant registers them; every field is distinctive, so a
/// hit in the logs is this person and nothing else.
struct Person {
    id: &'static str,
    name: &'static str,
    email: &'static str,
    slack: &'static str,
}

const PEOPLE: [Person; 2] = [
    Person {
        id: "ana-quintana-7f3a",
        name: "Ana Quintana Loggable",
        email: "ana.quintana.7f3a@mail.example.com",
        slack: "U07LOGPRIV1",
    },
    Person {
        id: "ben-okafor-91c2",
        name: "Ben Okafor Loggable",
        email: "ben.okafor.91c2@mail.example.com",
        slack: "U07LOGPRIV2",
    },
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_at_trace_level_logs_no_personal_data() {
    let (slack, slack_url) = common::services::slack_standin(Default::default()).await;
    let (smtp, smtp_addr) = toki_devtools::smtp_standin::start().await.unwrap();
    // A permanent refusal that quotes the recipient, as many servers word it.
    smtp.set_behaviour(SmtpBehaviour::Reply(format!(
        "550 5.1.1 <{}>: Recipient address rejected",
        PEOPLE[0].email
    )));
    let data = tempfile::tempdir().unwrap();
    let key = common::process::create_tenant(data.path(), "acme");
    let smtp_url = format!("smtp://{smtp_addr}");
    // Traces on (to a port nothing listens on): the spans' fields are in
    // the log lines too.
    let (mut server, base) = common::process::serve(data.path(), |cmd| {
        cmd.env("RUST_LOG", "trace")
            .env("TOKI_SLACK_TOKEN", "xoxb-test")
            .env("TOKI_SLACK_API_URL", &slack_url)
            .env("TOKI_SMTP_URL", &smtp_url)
            .env("TOKI_MAIL_TRANSPORT", "smtp")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
    });
    let http = reqwest::Client::new();
    let put = |path: String, body: Value| {
        let request = http
            .put(format!("{base}/v1/tenants/acme/{path}"))
            .bearer_auth(&key)
            .json(&body)
            .send();
        async move {
            let r = request.await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    for p in &PEOPLE {
        let body = json!({"name": p.name, "email": p.email, "slack_user_id": p.slack});
        let (status, answer) = put(format!("users/{}", p.id), body).await;
        assert_eq!(status, 200, "{answer}");
    }
    // A refused write echoes nothing into the logs either.
    let (status, _) = put(
        "users/carla-refused-55e1".into(),
        json!({"name": "Carla Refused Loggable", "email": "carla.refused.55e1@", "time_zone": "Nowhere/Land"}),
    )
    .await;
    assert_eq!(status, 422);
    let due = due_in(3);
    let (status, answer) = put(
        "schedules/privacy-review".into(),
        json!({
            "title": "Privacy review", "starts_at": (due + chrono::Duration::minutes(1)).to_rfc3339(),
            "time_zone": "UTC", "participants": [PEOPLE[0].id, PEOPLE[1].id],
            "reminders": [{"minutes_before": 1, "channels": ["slack", "mail"]}]
        }),
    )
    .await;
    assert_eq!(status, 200, "{answer}");

    // Both Slack messages sent, and a refused mail logged at DEBUG.
    assert_eq!(slack.wait_unique(2, Duration::from_secs(60)).await, 2);
    server.wait_line(|l| l.contains("mail not sent"), Duration::from_secs(60));
    server.signal("TERM");
    let stopped = server.wait_exit(Duration::from_secs(30)).await;
    assert!(
        stopped.is_some_and(|s| s.success()),
        "toki serve did not stop on SIGTERM"
    );

    let log = server.log();
    assert!(
        log.lines().count() > 100 && log.contains("TRACE"),
        "the run logged at TRACE"
    );
    let carla = [
        "carla-refused-55e1",
        "Carla Refused Loggable",
        "carla.refused.55e1@",
    ];
    let leaks: Vec<(&str, &str)> = PEOPLE
        .iter()
        .flat_map(|p| [p.id, p.name, p.email, p.slack])
        .chain(carla)
        .flat_map(|value| {
            log.lines()
                .filter(move |line| line.contains(value))
                .map(move |line| (value, line))
        })
        .collect();
    assert!(leaks.is_empty(), "personal data in the logs: {leaks:#?}");
}
