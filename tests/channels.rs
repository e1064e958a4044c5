//! Channels against real receivers: SMTP to a capture server and to the SMTP stand-in,
//! Slack's Web API through a local stand-in (including 429 + Retry-After).

use crate::common;

use std::time::Duration;

use chrono::Utc;
use common::pipeline::{due_in, meeting, Harness};
use common::services::{slack_standin, smtp};
use common::{notification, notification_on};
use toki_channels::{MailChannel, SlackChannel};
use toki_devtools::slack_standin::StandinOptions;
use toki_model::*;
use toki_ports::channel::{ChannelSender, Notification, SendError};

fn clock() -> std::sync::Arc<dyn toki_ports::Clock> {
    std::sync::Arc::new(toki_ports::SystemClock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_answers_a_throttle_at_once_instead_of_waiting_in_memory() {
    let (standin, url) = slack_standin(StandinOptions {
        throttle_first: 2,
        retry_after_s: 1,
        ..Default::default()
    })
    .await;
    // One request at a time: the first two meet the 429s.
    let slack = SlackChannel::api(&url, "xoxb-test", 1, clock()).unwrap();
    let batch: Vec<_> = (0..3).map(|i| notification(i, &format!("U{i}"))).collect();
    let results = slack.send(&batch).await;
    let throttled = SendError::Throttled {
        retry_after: Duration::from_secs(1),
    };
    assert_eq!(results[0], Err(throttled.clone()), "{results:?}");
    assert_eq!(results[1], Err(throttled), "{results:?}");
    assert!(results[2].is_ok(), "{results:?}");
    let stats = standin.stats();
    assert_eq!(stats.unique, 1);
    assert_eq!(stats.requests, 3, "no request repeated in place");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_long_retry_after_sends_the_message_back_later() {
    let (_standin, url) = slack_standin(StandinOptions {
        throttle_first: 100,
        retry_after_s: 30,
        ..Default::default()
    })
    .await;
    let slack = SlackChannel::api(&url, "xoxb-test", 1, clock()).unwrap();
    let results = slack.send(&[notification(0, "U0")]).await;
    assert_eq!(
        results[0],
        Err(SendError::Throttled {
            retry_after: Duration::from_secs(30)
        }),
        "a throttle, not a failure"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_unknown_channel_is_permanent_and_bad_token_is_not() {
    let (_standin, url) = slack_standin(StandinOptions::default()).await;
    let slack = SlackChannel::api(&url, "xoxb-test", 1, clock()).unwrap();
    let r = slack.send(&[notification(0, "UNKNOWN1")]).await;
    assert_eq!(
        r[0],
        Err(SendError::Permanent("slack: channel_not_found".into()))
    );
    let unauthed = SlackChannel::api(&url, "", 1, clock()).unwrap();
    let r = unauthed.send(&[notification(0, "U0")]).await;
    assert!(
        matches!(&r[0], Err(SendError::Transient(reason)) if reason.contains("not_authed")),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the SMTP capture server (aiosmtpd): scripts/test.sh runs it"]
async fn mail_goes_through_smtp_with_its_delivery_header() {
    let (addr, maildir) = smtp();
    let mail = MailChannel::smtp(
        &format!("smtp://{addr}"),
        "Toki <toki@example.com>",
        2,
        Duration::from_secs(10),
        clock(),
    )
    .unwrap();
    let marker = common::conformance::unique("m");
    let mut batch: Vec<_> = (0..2)
        .map(|i| notification_on(i, "U0", Channel::Mail))
        .collect();
    for n in &mut batch {
        n.parts.get_or_insert_default().subject = format!("Reminder {marker}");
    }
    let results = mail.send(&batch).await;
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    // The capture server stores a mail before it answers 250: it is there.
    let mine: Vec<_> = common::services::maildir_files(&maildir)
        .into_iter()
        .filter(|m| m.contains(&marker))
        .collect();
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
        ..Default::default()
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
        .put_schedule(&t, &common::pipeline::sid("review"), &meeting(due_in(3)))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_copy_of_a_mail_has_the_same_message_id() {
    let (smtp, addr) = toki_devtools::smtp_standin::start().await.unwrap();
    let mail = MailChannel::smtp(
        &format!("smtp://{addr}"),
        "Toki <toki@example.com>",
        1,
        Duration::from_secs(5),
        clock(),
    )
    .unwrap();
    let n = notification_on(7, "U7", Channel::Mail);
    for _ in 0..2 {
        let r = mail.send(std::slice::from_ref(&n)).await;
        assert!(r[0].is_ok(), "{r:?}");
    }
    let mails = smtp.mails();
    assert_eq!(mails.len(), 2);
    let id = mails[0].message_id.clone().expect("a Message-ID");
    assert_eq!(mails[1].message_id.as_ref(), Some(&id));
    assert_eq!(id, toki_channels::mail::message_id(&n));
    assert_eq!(smtp.stats().duplicates, 1, "counted by delivery");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtp_replies_decide_between_trying_again_and_giving_up() {
    let (smtp, addr) = toki_devtools::smtp_standin::start().await.unwrap();
    let mail = MailChannel::smtp(
        &format!("smtp://{addr}"),
        "Toki <toki@example.com>",
        1,
        Duration::from_secs(1),
        clock(),
    )
    .unwrap();
    let n = notification_on(1, "U1", Channel::Mail);
    use toki_devtools::smtp_standin::SmtpBehaviour;
    let cases = [
        (
            SmtpBehaviour::Reply("451 4.3.0 try again later".into()),
            "transient",
        ),
        (
            SmtpBehaviour::Reply("554 5.3.0 system failure".into()),
            "transient",
        ),
        (
            SmtpBehaviour::Reply("550 5.1.1 no such user".into()),
            "permanent",
        ),
        (SmtpBehaviour::Hang, "transient"),
    ];
    for (behaviour, expected) in cases {
        smtp.set_behaviour(behaviour.clone());
        let r = mail.send(std::slice::from_ref(&n)).await;
        let got = match &r[0] {
            Err(SendError::Transient(_)) => "transient",
            Err(SendError::Permanent(_)) => "permanent",
            other => panic!("{behaviour:?}: {other:?}"),
        };
        assert_eq!(got, expected, "{behaviour:?}: {r:?}");
        if behaviour == SmtpBehaviour::Hang {
            // Given up by the channel's own timeout, not waited out.
            let error = format!("{:?}", r[0]);
            assert!(error.contains("no answer within 1 s"), "{error}");
        }
        assert!(
            mail.probe().await.is_err(),
            "{behaviour:?}: the probe sees it too"
        );
    }
    smtp.set_behaviour(SmtpBehaviour::Accept);
    assert!(mail.probe().await.is_ok());
    assert!(mail.send(std::slice::from_ref(&n)).await[0].is_ok());
    assert_eq!(smtp.stats().unique, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_to_a_closed_port_is_transient_and_the_probe_says_so() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mail = MailChannel::smtp(
        &format!("smtp://127.0.0.1:{port}"),
        "Toki <toki@example.com>",
        1,
        Duration::from_secs(2),
        clock(),
    )
    .unwrap();
    let n = notification_on(1, "U1", Channel::Mail);
    let r = mail.send(std::slice::from_ref(&n)).await;
    assert!(matches!(&r[0], Err(SendError::Transient(_))), "{r:?}");
    assert!(matches!(mail.probe().await, Err(SendError::Transient(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_failures_are_told_apart_and_the_probe_follows_the_service() {
    use toki_devtools::slack_standin::Behaviour;
    let (standin, url) = slack_standin(StandinOptions::default()).await;
    let slack = SlackChannel::api(&url, "xoxb-test", 1, clock()).unwrap();
    let n = notification(0, "U0");
    let cases = [
        (Behaviour::HttpError(503), "transient"),
        (Behaviour::HttpError(500), "transient"),
        (Behaviour::NotOk("internal_error".into()), "transient"),
        (Behaviour::NotOk("fatal_error".into()), "transient"),
        (Behaviour::Throttle(120), "throttled"),
    ];
    for (behaviour, expected) in cases {
        standin.set_behaviour(behaviour.clone());
        let r = slack.send(std::slice::from_ref(&n)).await;
        let got = match &r[0] {
            Err(SendError::Transient(_)) => "transient",
            Err(SendError::Throttled { retry_after }) => {
                assert_eq!(*retry_after, Duration::from_secs(120));
                "throttled"
            }
            other => panic!("{behaviour:?}: {other:?}"),
        };
        assert_eq!(got, expected, "{behaviour:?}");
        if expected == "transient" {
            assert!(slack.probe().await.is_err(), "{behaviour:?}: probe");
        }
    }
    standin.set_behaviour(Behaviour::Ok);
    assert!(slack.probe().await.is_ok());
    assert_eq!(
        standin.stats().unique,
        0,
        "nothing got through while failing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_history_tells_whether_a_delivery_was_posted() {
    let (standin, url) = slack_standin(StandinOptions::default()).await;
    let slack = SlackChannel::api(&url, "xoxb-test", 1, clock()).unwrap();
    let posted = notification(1, "U1");
    let other = notification(2, "U1");
    assert_eq!(slack.already_sent(&posted).await, None);
    let before = Utc::now();
    let r = slack.send(std::slice::from_ref(&posted)).await;
    let after = Utc::now();
    r[0].clone().unwrap();
    // The posted message's own time: during the send (the history's
    // timestamps are whole milliseconds).
    let found = slack.already_sent(&posted).await.expect("found in history");
    let ms = chrono::Duration::milliseconds(1);
    assert!(
        before - ms <= found && found <= after + ms,
        "{found} not between {before} and {after}"
    );
    assert_eq!(
        slack.already_sent(&other).await,
        None,
        "same user, another delivery"
    );
    assert_eq!(standin.stats().unique, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_over_http2_sends_a_batch_on_one_connection_and_finds_history() {
    let (standin, url) = slack_standin(StandinOptions::default()).await;
    let slack = SlackChannel::api_over(&url, "xoxb-test", 8, true, clock()).unwrap();
    let batch: Vec<_> = (0..40).map(|i| notification(i, &format!("U{i}"))).collect();
    let at = tokio::time::Instant::now() + Duration::from_millis(50);
    let at_ms = Utc::now().timestamp_millis() + 50;
    let results = slack.send_at(&batch, at).await;
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    let stats = standin.stats();
    assert_eq!(stats.unique, 40);
    assert_eq!(stats.http2, 40, "every post over HTTP/2");
    assert!(
        slack.already_sent(&batch[7]).await.is_some(),
        "the history lookup works over HTTP/2 too"
    );
    // Not sent before its instant.
    let first = standin
        .arrivals()
        .iter()
        .map(|a| a.arrived_ms)
        .min()
        .unwrap();
    assert!(first >= at_ms - 2, "arrived {} ms early", at_ms - first);
}

/// A recipient stored before the API refused conversation ids (a channel,
/// a group, a DM, a name) is not posted to: the delivery is undeliverable,
/// and the reason does not quote the id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_refuses_a_recipient_that_is_not_a_user_id() {
    let (standin, url) = slack_standin(StandinOptions::default()).await;
    let slack = SlackChannel::api(&url, "xoxb-test", 1, clock()).unwrap();
    let refused = ["C024BE91L", "G024BE91L", "D024BE91L", "#general", "@ana"];
    let batch: Vec<_> = refused
        .iter()
        .enumerate()
        .map(|(i, id)| notification(i, id))
        .chain([notification(9, "U024BE7LH")])
        .collect();
    let results = slack.send(&batch).await;
    for (id, r) in refused.iter().zip(&results) {
        match r {
            Err(SendError::Permanent(why)) => {
                assert_eq!(why, toki_channels::slack::NOT_A_USER_ID);
                assert!(!why.contains(id), "{why}");
            }
            other => panic!("{id}: {other:?}"),
        }
    }
    assert!(results[refused.len()].is_ok(), "{results:?}");
    let arrived: Vec<_> = standin.arrivals().into_iter().map(|a| a.delivery).collect();
    let user = &batch[refused.len()];
    let expected = format!("{}/{}", user.tenant, user.key);
    assert_eq!(arrived, [expected], "only the user id's reached Slack");
    let outbox = tempfile::tempdir().unwrap();
    let file = outbox.path().join("slack.jsonl");
    let slack = SlackChannel::outbox(file.clone(), clock()).await.unwrap();
    let results = slack.send(&batch[..1]).await;
    assert!(
        matches!(&results[0], Err(SendError::Permanent(_))),
        "{results:?}"
    );
    assert_eq!(
        std::fs::read_to_string(file).unwrap(),
        "",
        "nothing written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_posts_the_documented_body() {
    let (standin, url) = slack_standin(StandinOptions::default()).await;
    let slack = SlackChannel::api(&url, "xoxb-test", 1, clock()).unwrap();
    let n = notification(3, "U3");
    assert!(slack.send(std::slice::from_ref(&n)).await[0].is_ok());
    let arrival = standin.arrivals().pop().expect("arrived");
    assert_eq!(arrival.delivery, format!("{}/{}", n.tenant, n.key));
    assert_eq!(arrival.due_at_ms, n.due_at.millis());
    assert_eq!(standin.stats().http2, 0, "HTTP/1.1 unless asked");
}

fn mail_notification(i: usize) -> Notification {
    notification_on(i, "U1", Channel::Mail)
}

fn pooled_mail(addr: &str, sessions: u32, timeout: Duration) -> MailChannel {
    MailChannel::smtp(
        &format!("smtp://{addr}"),
        "Toki <toki@example.com>",
        sessions,
        timeout,
        clock(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_mail_uses_the_pool_s_sessions_and_no_more() {
    let (smtp, addr) = toki_devtools::smtp_standin::start().await.unwrap();
    let mail = std::sync::Arc::new(pooled_mail(&addr, 4, Duration::from_secs(5)));
    mail.warm_up().await;
    assert_eq!(smtp.stats().connections, 4, "warmed: every session open");
    // Five batches at once, as five workers would send them.
    let batches: Vec<Vec<Notification>> = (0..5)
        .map(|b| (0..60).map(|i| mail_notification(b * 100 + i)).collect())
        .collect();
    let sends = batches.iter().map(|batch| {
        let mail = mail.clone();
        async move { mail.send(batch).await }
    });
    let results: Vec<_> = futures::future::join_all(sends)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(results.len(), 300);
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    let stats = smtp.stats();
    assert_eq!(stats.unique, 300);
    assert_eq!(stats.duplicates, 0);
    assert_eq!(
        stats.connections, 4,
        "no session beyond the pool: {stats:?}"
    );
    assert!(stats.peak_open <= 4, "{stats:?}");
    assert!(
        stats.pipelined >= 300,
        "RCPT and DATA went out with MAIL: {stats:?}"
    );
    assert_eq!(mail.sessions_opened(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_server_closed_is_replaced_without_failing_the_mail() {
    let (smtp, addr) = toki_devtools::smtp_standin::start().await.unwrap();
    let mail = pooled_mail(&addr, 2, Duration::from_secs(5));
    let first: Vec<_> = (0..2).map(mail_notification).collect();
    assert!(mail.send(&first).await.iter().all(|r| r.is_ok()));
    // One or two sessions, as the pool found them free.
    let before = smtp.stats().connections;
    // The server drops its idle sessions (an idle timeout, a restart).
    smtp.close_sessions();
    let next: Vec<_> = (10..14).map(mail_notification).collect();
    let r = mail.send(&next).await;
    assert!(
        r.iter().all(|r| r.is_ok()),
        "no failure reaches the delivery: {r:?}"
    );
    let stats = smtp.stats();
    assert_eq!(stats.unique, 6);
    assert!(
        (before + 1..=before + 2).contains(&stats.connections),
        "the closed sessions were replaced ({before} before): {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_mail_leaves_its_session_usable() {
    use toki_devtools::smtp_standin::SmtpBehaviour;
    let (smtp, addr) = toki_devtools::smtp_standin::start().await.unwrap();
    let mail = pooled_mail(&addr, 1, Duration::from_secs(5));
    smtp.set_behaviour(SmtpBehaviour::Reply("550 5.1.1 no such user".into()));
    let r = mail.send(&[mail_notification(1)]).await;
    assert!(
        matches!(&r[0], Err(SendError::Permanent(m)) if m.contains("550")),
        "{r:?}"
    );
    smtp.set_behaviour(SmtpBehaviour::Accept);
    let r = mail
        .send(&[mail_notification(2), mail_notification(3)])
        .await;
    assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    let stats = smtp.stats();
    assert_eq!(stats.unique, 2);
    assert_eq!(
        stats.mails, 2,
        "nothing half-sent after the refusal: {stats:?}"
    );
    assert_eq!(
        stats.connections, 1,
        "reset (RSET), not reconnected: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeout_is_per_mail_not_for_the_wait_for_a_session() {
    use toki_devtools::smtp_standin::SmtpBehaviour;
    let (smtp, addr) = toki_devtools::smtp_standin::start().await.unwrap();
    // One session, 0.5 s per mail; 8 mails take 1.6 s in all, each 0.2 s.
    smtp.set_behaviour(SmtpBehaviour::Slow(200));
    let mail = pooled_mail(&addr, 1, Duration::from_millis(500));
    let batch: Vec<_> = (0..8).map(mail_notification).collect();
    let r = mail.send(&batch).await;
    assert!(
        r.iter().all(|r| r.is_ok()),
        "queued mails did not time out: {r:?}"
    );
    assert_eq!(smtp.stats().unique, 8);
    // A mail slower than the timeout fails alone, as transient.
    smtp.set_behaviour(SmtpBehaviour::Slow(1_000));
    let r = mail.send(&[mail_notification(20)]).await;
    assert!(
        matches!(&r[0], Err(SendError::Transient(m)) if m.contains("no answer")),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_given_an_instant_goes_out_at_it_not_before() {
    let (smtp, addr) = toki_devtools::smtp_standin::start().await.unwrap();
    let mail = pooled_mail(&addr, 2, Duration::from_secs(5));
    mail.warm_up().await;
    let due_ms = Utc::now().timestamp_millis() + 300;
    let at = tokio::time::Instant::now() + Duration::from_millis(300);
    let batch: Vec<_> = (0..3).map(mail_notification).collect();
    let r = mail.send_at(&batch, at).await;
    assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    let arrived = smtp.arrivals();
    assert_eq!(arrived.len(), 3);
    // One millisecond of slack: the two clocks were read a moment apart.
    assert!(
        arrived.values().all(|(ms, _)| *ms >= due_ms - 1),
        "{arrived:?} before {due_ms}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_that_start_with_a_dot_arrive_intact() {
    let (smtp, addr) = toki_devtools::smtp_standin::start().await.unwrap();
    let mail = pooled_mail(&addr, 1, Duration::from_secs(5));
    let mut n = mail_notification(1);
    n.text = "agenda:\n.\n..two dots\n.one dot\nend".into();
    assert!(mail.send(std::slice::from_ref(&n)).await[0].is_ok());
    let data = &smtp.mails()[0].data;
    // A lone "." would have ended the mail early; the stand-in undoes the stuffing.
    assert!(data.contains("\n.\n..two dots\n.one dot\nend"), "{data}");
    assert_eq!(smtp.stats().unique, 1);
}

/// What an SMTP server reads back from DATA content: its lines (the
/// content must end in CRLF and hold no bare CR or LF), each with one
/// leading dot taken off, or `None` where a line would end the DATA early.
fn read_back(data: &[u8]) -> Option<Vec<Vec<u8>>> {
    let body = data.strip_suffix(b"\r\n")?;
    let mut lines = Vec::new();
    for line in body.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        assert!(!line.contains(&b'\r'), "a bare CR on the wire: {data:?}");
        if line == b"." {
            return None;
        }
        lines.push(line.strip_prefix(b".").unwrap_or(line).to_vec());
    }
    Some(lines)
}

/// The lines a message means, whatever its line endings (CRLF, CR, LF).
fn lines_of(message: &[u8]) -> Vec<Vec<u8>> {
    let mut lines = vec![Vec::new()];
    let mut bytes = message.iter().copied().peekable();
    while let Some(b) = bytes.next() {
        match b {
            b'\r' | b'\n' => {
                if b == b'\r' {
                    bytes.next_if_eq(&b'\n');
                }
                lines.push(Vec::new());
            }
            _ => lines.last_mut().unwrap().push(b),
        }
    }
    if lines.len() > 1 && lines.last().unwrap().is_empty() {
        lines.pop();
    }
    lines
}

/// A dot after a bare CR or a bare LF is stuffed like one after CRLF, and
/// every line ending goes out as CRLF: a message cannot end the DATA early
/// nor smuggle commands after it (a server that takes a bare CR or LF for
/// a line ending reads the same lines as one that does not).
#[test]
fn smtp_data_stuffs_a_dot_after_any_line_ending() {
    use toki_channels::mail::smtp_data;
    let cases: [(&[u8], &[u8]); 8] = [
        (b"a\r.\rb", b"a\r\n..\r\nb\r\n"),
        (b"a\n.\nb", b"a\r\n..\r\nb\r\n"),
        (b"a\r\n.\r\nb", b"a\r\n..\r\nb\r\n"),
        (
            b"a\n.\r\nMAIL FROM:<x@evil.example>\r\n",
            b"a\r\n..\r\nMAIL FROM:<x@evil.example>\r\n",
        ),
        (
            b"a\r.\r\nRCPT TO:<y@example.com>",
            b"a\r\n..\r\nRCPT TO:<y@example.com>\r\n",
        ),
        (b".", b"..\r\n"),
        (b"", b"\r\n"),
        (b"\r\r\n\n", b"\r\n\r\n\r\n"),
    ];
    for (message, wire) in cases {
        assert_eq!(
            smtp_data(message),
            wire,
            "{:?}",
            String::from_utf8_lossy(message)
        );
    }
}

/// Random messages over the bytes that matter (dots, CR, LF, letters):
/// each reads back, line for line, as it was meant, and never ends early.
#[test]
fn smtp_data_reads_back_as_the_message_for_random_bytes() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(59);
    let alphabet = b".\r\n\r\n.aM ";
    for _ in 0..20_000 {
        let len = rng.gen_range(0..24);
        let message: Vec<u8> = (0..len)
            .map(|_| alphabet[rng.gen_range(0..alphabet.len())])
            .collect();
        let data = toki_channels::mail::smtp_data(&message);
        let read = read_back(&data);
        assert_eq!(
            read,
            Some(lines_of(&message)),
            "{message:?} became {data:?}"
        );
    }
}

#[test]
fn a_bad_smtp_url_is_refused_naming_the_field_and_the_part() {
    let cases = [
        ("ftp://mail.example.com", "scheme"),
        ("smtp://mail.example.com?tls=maybe", "tls"),
        ("smtps://mail.example.com?tls=required", "tls"),
        ("smtp://mail.example.com?pool=9", "pool"),
        ("not a url", "not a URL"),
    ];
    for (url, part) in cases {
        let err = match MailChannel::smtp(
            url,
            "Toki <t@example.com>",
            1,
            Duration::from_secs(1),
            clock(),
        ) {
            Ok(_) => panic!("{url} was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.starts_with("mail.smtp_url:"), "{url}: {err}");
        assert!(err.contains(part), "{url}: {err}");
    }
    for url in [
        "smtp://127.0.0.1:2525",
        "smtp://user:p%40ss+w@mail.example.com:587?tls=required",
        "smtps://user:pw@mail.example.com",
        "smtp://mail.example.com?tls=opportunistic",
    ] {
        assert!(
            MailChannel::smtp(
                url,
                "Toki <t@example.com>",
                1,
                Duration::from_secs(1),
                clock()
            )
            .is_ok(),
            "{url}"
        );
    }
}

/// A `chat.postMessage` endpoint that holds each request until `permits`
/// are in flight at once (or every request expected has arrived), and
/// records the order in which recipients arrived and the most in flight.
#[derive(Clone)]
struct HeldSlack {
    permits: usize,
    expected: usize,
    /// (in flight, arrived so far)
    state: std::sync::Arc<tokio::sync::watch::Sender<(usize, usize)>>,
    arrivals: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    most_in_flight: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

async fn held_post(
    axum::extract::State(s): axum::extract::State<HeldSlack>,
    body: axum::Json<serde_json::Value>,
) -> axum::Json<serde_json::Value> {
    use std::sync::atomic::Ordering;
    let user = body["channel"].as_str().unwrap_or_default().to_owned();
    s.arrivals.lock().unwrap().push(user.clone());
    s.state.send_modify(|(in_flight, arrived)| {
        *in_flight += 1;
        *arrived += 1;
        s.most_in_flight.fetch_max(*in_flight, Ordering::SeqCst);
    });
    let mut rx = s.state.subscribe();
    rx.wait_for(|(in_flight, arrived)| *in_flight >= s.permits || *arrived >= s.expected)
        .await
        .unwrap();
    s.state.send_modify(|(in_flight, _)| *in_flight -= 1);
    axum::Json(if user == "UA3" {
        serde_json::json!({"ok": false, "error": "user_not_found"})
    } else {
        serde_json::json!({"ok": true, "ts": "1.0"})
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_batches_take_the_permits_in_turn_and_each_answer_finds_its_notification() {
    let permits = 3;
    let per_batch = 12;
    let held = HeldSlack {
        permits,
        expected: 2 * per_batch,
        state: std::sync::Arc::new(tokio::sync::watch::channel((0, 0)).0),
        arrivals: Default::default(),
        most_in_flight: Default::default(),
    };
    let app = axum::Router::new()
        .route("/api/chat.postMessage", axum::routing::post(held_post))
        .with_state(held.clone());
    let url = format!("http://{}/api", toki_devtools::serve_locally(app).await);
    let slack = SlackChannel::api(&url, "xoxb-test", permits, clock()).unwrap();
    let batch = |prefix: &str| -> Vec<Notification> {
        (0..per_batch)
            .map(|i| {
                let mut n = notification(i, &format!("{prefix}{i}"));
                n.key.schedule = format!("{prefix}-s{i}").parse().unwrap();
                n
            })
            .collect()
    };
    let (a, b) = (batch("UA"), batch("UB"));
    let (ra, rb) = tokio::join!(slack.send(&a), slack.send(&b));
    for (i, r) in ra.iter().enumerate() {
        match r {
            Err(SendError::Permanent(e)) if i == 3 => assert!(e.contains("user_not_found")),
            Ok(_) if i != 3 => {}
            other => panic!("UA{i}: {other:?}"),
        }
    }
    assert!(rb.iter().all(|r| r.is_ok()), "{rb:?}");
    let most = held
        .most_in_flight
        .load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(most, permits, "at most (and up to) the permits in flight");
    let arrivals = held.arrivals.lock().unwrap().clone();
    assert_eq!(arrivals.len(), 2 * per_batch, "{arrivals:?}");
    // One batch's requests, then the next one's: the first batch ends
    // first (its messages are recorded and acknowledged, and the daemon
    // takes new ones), rather than every batch ending together.
    let first_b = arrivals.iter().position(|u| u.starts_with("UB")).unwrap();
    let last_a = arrivals.iter().rposition(|u| u.starts_with("UA")).unwrap();
    assert_eq!(
        (last_a, first_b),
        (per_batch - 1, per_batch),
        "the batches' requests interleaved: {arrivals:?}"
    );
}

/// How a hand-written Web API treats a connection after an answer.
#[derive(Clone, Copy, PartialEq)]
enum AfterAnswer {
    KeepOpen,
    /// Closes it, having said so (`Connection: close`), as a server at its
    /// keep-alive limit does.
    CloseSaying,
    /// Closes it without a word, as a server timing out idle connections
    /// does.
    CloseSilently,
}

/// A Web API that answers every `chat.postMessage` with `ok`, over HTTP/1.1
/// written by hand, counting the connections it accepted and those it
/// closed.
struct CountingSlack {
    url: String,
    connections: tokio::sync::watch::Receiver<usize>,
    closed: tokio::sync::watch::Receiver<usize>,
}

async fn counting_slack(after: AfterAnswer) -> CountingSlack {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/api", listener.local_addr().unwrap());
    let (count, connections) = tokio::sync::watch::channel(0usize);
    let (close_count, closed) = tokio::sync::watch::channel(0usize);
    let close_count = std::sync::Arc::new(close_count);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            count.send_modify(|c| *c += 1);
            let close_count = close_count.clone();
            tokio::spawn(async move {
                let mut socket = BufReader::new(socket);
                loop {
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        if socket.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':') {
                            if name.eq_ignore_ascii_case("content-length") {
                                length = value.trim().parse().unwrap();
                            }
                        }
                    }
                    let mut body = vec![0; length];
                    socket.read_exact(&mut body).await.unwrap();
                    let close = if after == AfterAnswer::CloseSaying {
                        "Connection: close\r\n"
                    } else {
                        ""
                    };
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{close}Content-Length: 11\r\n\r\n{{\"ok\":true}}"
                    );
                    socket.get_mut().write_all(answer.as_bytes()).await.unwrap();
                    if after != AfterAnswer::KeepOpen {
                        drop(socket);
                        close_count.send_modify(|c| *c += 1);
                        return;
                    }
                }
            });
        }
    });
    CountingSlack {
        url,
        connections,
        closed,
    }
}

fn slack_batch(n: usize) -> Vec<Notification> {
    (0..n).map(|i| notification(i, &format!("U{i}"))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_opens_its_connections_before_the_burst_and_keeps_to_them() {
    let permits = 3;
    let mut server = counting_slack(AfterAnswer::KeepOpen).await;
    let slack = SlackChannel::api(&server.url, "xoxb-test", permits, clock()).unwrap();
    slack.warm_up().await;
    server
        .connections
        .wait_for(|c| *c >= permits)
        .await
        .unwrap();
    // Warming again while they are idle opens none.
    slack.warm_up().await;
    let results = slack.send(&slack_batch(30)).await;
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    // Every request was answered, so every connection it used was accepted.
    assert_eq!(
        *server.connections.borrow(),
        permits,
        "30 requests on the connections opened ahead, none more"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_replaces_a_connection_the_server_closed_without_failing_a_message() {
    let server = counting_slack(AfterAnswer::CloseSaying).await;
    let slack = SlackChannel::api(&server.url, "xoxb-test", 2, clock()).unwrap();
    slack.warm_up().await;
    let results = slack.send(&slack_batch(6)).await;
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    // The two opened ahead carried one answer each; each later message
    // found them closed and went on a new connection, none wasted.
    assert_eq!(*server.connections.borrow(), 6, "one connection per answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_sends_on_a_new_connection_when_an_idle_one_was_closed_without_a_word() {
    let mut server = counting_slack(AfterAnswer::CloseSilently).await;
    let slack = SlackChannel::api(&server.url, "xoxb-test", 1, clock()).unwrap();
    let first = slack.send(&slack_batch(1)).await;
    assert!(first[0].is_ok(), "{first:?}");
    server.closed.wait_for(|c| *c >= 1).await.unwrap();
    // The connection back in the pool was closed and nothing said so: the
    // message goes on a new one rather than failing (seen failing with
    // neither the closed check nor the resend on a request handed back).
    let second = slack.send(&slack_batch(1)).await;
    assert!(second[0].is_ok(), "{second:?}");
    assert_eq!(*server.connections.borrow(), 2, "one connection per answer");
}

/// A Web API whose answers to a post are `padding` bytes of whitespace
/// before `{"ok":true}`, over HTTP/1.1 or HTTP/2 (prior knowledge).
async fn padded_slack(padding: usize) -> String {
    let answer = format!("{}{{\"ok\":true}}", " ".repeat(padding));
    let app = axum::Router::new().route(
        "/api/chat.postMessage",
        axum::routing::post(move || {
            let answer = answer.clone();
            async move { ([("content-type", "application/json")], answer) }
        }),
    );
    format!("http://{}/api", toki_devtools::serve_locally(app).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_reads_an_answer_up_to_a_mebibyte_on_either_client() {
    let n = [notification(1, "U1")];
    for http2 in [false, true] {
        let within = padded_slack(512 << 10).await;
        let slack = SlackChannel::api_over(&within, "xoxb-test", 1, http2, clock()).unwrap();
        let r = slack.send(&n).await;
        assert!(r[0].is_ok(), "http2 {http2}: half a MiB is read: {r:?}");

        let over = padded_slack(2 << 20).await;
        let slack = SlackChannel::api_over(&over, "xoxb-test", 1, http2, clock()).unwrap();
        let r = slack.send(&n).await;
        assert!(
            matches!(&r[0], Err(SendError::Transient(reason)) if reason.contains("the answer is over 1048576 bytes")),
            "http2 {http2}: two MiB is cut off: {r:?}"
        );
    }
}
