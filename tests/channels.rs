//! Channels against real receivers: SMTP through lettre to a capture server,
//! Slack's Web API through a local stand-in (including 429 + Retry-After).

mod common;

use std::time::{Duration, Instant};

use chrono::Utc;
use common::pipeline::{due_in, meeting, Harness};
use common::services::{slack_standin, smtp};
use toki::slack_standin::StandinOptions;
use toki_channels::{MailChannel, SlackChannel};
use toki_core::channel::{ChannelSender, Notification, SendError};
use toki_core::*;

fn notification(i: usize, slack: &str) -> Notification {
    Notification {
        tenant: "acme".parse().unwrap(),
        key: DeliveryKey {
            schedule: format!("s{i}").parse().unwrap(),
            occurrence: Occurrence(from_millis("o", 1_800_000_000_000).unwrap()),
            minutes_before: 5,
            version: 1,
            recipient: format!("u{i}").parse().unwrap(),
            channel: Channel::Slack,
        },
        due_at: DueAt(Utc::now()),
        recipient: std::sync::Arc::new(User {
            id: format!("u{i}").parse().unwrap(),
            name: format!("User {i}"),
            email: Some(format!("u{i}@example.com")),
            slack_user_id: Some(slack.to_string()),
            time_zone: chrono_tz::UTC,
            locale: "en".into(),
        }),
        subject: "Reminder: review".into(),
        text: "review starts in 5 minutes".into(),
    }
}

async fn scratch_store() -> std::sync::Arc<dyn toki_core::ports::TenantStore> {
    common::services::sqlite_store().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_waits_out_a_short_retry_after() {
    let (standin, url) = slack_standin(StandinOptions {
        throttle_first: 2,
        retry_after_s: 1,
    })
    .await;
    let slack = SlackChannel::api(&url, "xoxb-test", 1).unwrap();
    let batch: Vec<_> = (0..3).map(|i| notification(i, &format!("U{i}"))).collect();
    let started = Instant::now();
    let results = slack.send(scratch_store().await.as_ref(), &batch).await;
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After was not honoured"
    );
    let stats = standin.stats();
    assert_eq!(stats.unique, 3);
    assert_eq!(stats.duplicates, 0);
    assert_eq!(stats.requests, 5, "2 throttled + 3 delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_long_retry_after_sends_the_message_back_later() {
    let (_standin, url) = slack_standin(StandinOptions {
        throttle_first: 100,
        retry_after_s: 30,
    })
    .await;
    let slack = SlackChannel::api(&url, "xoxb-test", 1).unwrap();
    let results = slack
        .send(scratch_store().await.as_ref(), &[notification(0, "U0")])
        .await;
    assert_eq!(
        results[0],
        Err(SendError::Transient {
            reason: "slack: rate limited (429)".into(),
            retry_after: Some(Duration::from_secs(30))
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_unknown_channel_is_permanent_and_bad_token_is_not() {
    let (_standin, url) = slack_standin(StandinOptions::default()).await;
    let slack = SlackChannel::api(&url, "xoxb-test", 1).unwrap();
    let r = slack
        .send(
            scratch_store().await.as_ref(),
            &[notification(0, "UNKNOWN1")],
        )
        .await;
    assert_eq!(
        r[0],
        Err(SendError::Permanent("slack: channel_not_found".into()))
    );
    let unauthed = SlackChannel::api(&url, "", 1).unwrap();
    let r = unauthed
        .send(scratch_store().await.as_ref(), &[notification(0, "U0")])
        .await;
    assert!(
        matches!(&r[0], Err(SendError::Transient { reason, .. }) if reason.contains("not_authed")),
        "{r:?}"
    );
}

fn maildir_files(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for sub in ["new", "cur"] {
        if let Ok(entries) = std::fs::read_dir(dir.join(sub)) {
            for e in entries.flatten() {
                out.push(std::fs::read_to_string(e.path()).unwrap());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_goes_through_smtp_with_its_delivery_header() {
    let (addr, maildir) = smtp();
    let mail = MailChannel::smtp(&format!("smtp://{addr}"), "Toki <toki@example.com>", 2).unwrap();
    let marker = common::conformance::unique("m");
    let mut batch: Vec<_> = (0..2).map(|i| notification(i, "U0")).collect();
    for n in &mut batch {
        n.key.channel = Channel::Mail;
        n.subject = format!("Reminder {marker}");
    }
    let results = mail.send(scratch_store().await.as_ref(), &batch).await;
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    let mine = loop {
        let mine: Vec<_> = maildir_files(&maildir)
            .into_iter()
            .filter(|m| m.contains(&marker))
            .collect();
        if mine.len() >= 2 || Instant::now() > deadline {
            break mine;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(mine.len(), 2, "mails not captured by the SMTP server");
    for n in &batch {
        let header = format!("X-Toki-Delivery: acme/{}", n.key);
        assert!(
            mine.iter().any(|m| m.contains(&header)),
            "no mail carries {header}"
        );
    }
    assert!(
        mine.iter().any(|m| m.lines().any(|l| l.starts_with("To: ")
            && l.contains("User 0")
            && l.contains("<u0@example.com>"))),
        "{mine:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_rides_out_slack_throttling_without_loss_or_duplicates() {
    let (standin, url) = slack_standin(StandinOptions {
        throttle_first: 6,
        retry_after_s: 1,
    })
    .await;
    let h = Harness::start(|c| {
        c.slack.token = Some("xoxb-test".into());
        c.slack.api_url = url.clone();
        c.slack.concurrency = 2;
    })
    .await;
    let t = h.tenant("acme", true).await;
    h.toki
        .registrar()
        .put_schedule(&t, "review", &meeting(due_in(3)))
        .await
        .unwrap();
    let delivered = h.wait_delivered(&t, 4, Duration::from_secs(30)).await;
    assert_eq!(delivered.len(), 4);
    let stats = standin.stats();
    assert_eq!(stats.unique, 2, "2 Slack deliveries");
    assert_eq!(stats.duplicates, 0);
    assert!(stats.requests >= 8);
    h.stop().await;
}
