//! Mail through Amazon SES's v2 API, against the AWS emulator (moto): the
//! raw message arrives with its delivery header, a sender SES has not
//! verified is a transient failure (the operator's to fix, never a silent
//! drop), and the probe answers. Read back through moto's model dump, on a
//! moto of this binary's own.

use crate::aws_support;
use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::conformance::unique;
use toki_channels::{ses_error_verdict, MailChannel};
use toki_model::*;
use toki_ports::channel::{ChannelSender, Notification, SendError};

fn notification(i: usize, subject: &str) -> Notification {
    let mut n = common::notification_on(i, "U0", Channel::Mail);
    n.parts.get_or_insert_default().subject = subject.into();
    n
}

/// SES on this binary's own moto (its model dump is read back).
async fn ses_client() -> aws_sdk_sesv2::Client {
    let sdk = toki_aws::sdk_config(Some(aws_support::own_moto()), Some(aws_support::REGION)).await;
    aws_sdk_sesv2::Client::new(&sdk)
}

fn channel(client: aws_sdk_sesv2::Client, from: &str) -> MailChannel {
    MailChannel::ses(
        client,
        None,
        from,
        4,
        Duration::from_secs(10),
        Arc::new(toki_ports::SystemClock),
    )
    .unwrap()
}

/// The raw messages moto holds whose text contains `marker`.
async fn sent_with(marker: &str) -> Vec<String> {
    let url = format!("{}/moto-api/data.json", aws_support::own_moto());
    let dump: serde_json::Value = reqwest::get(url).await.unwrap().json().await.unwrap();
    dump["ses"]["RawMessage"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m["raw_data"].as_str().map(str::to_owned))
        .filter(|raw| raw.contains(marker))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto, SES): scripts/test.sh runs it"]
async fn mail_goes_through_ses_with_its_delivery_header() {
    let client = ses_client().await;
    let sender = format!("{}@example.com", unique("toki"));
    client
        .create_email_identity()
        .email_identity(&sender)
        .send()
        .await
        .unwrap();
    let mail = channel(client, &format!("Toki <{sender}>"));
    mail.probe().await.expect("SES answers the probe");
    let marker = unique("m");
    let batch: Vec<_> = (0..3)
        .map(|i| notification(i, &format!("Reminder {marker}")))
        .collect();
    let results = mail.send(&batch).await;
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    let sent = sent_with(&marker).await;
    assert_eq!(sent.len(), 3, "one SES message per mail");
    for n in &batch {
        let header = format!("X-Toki-Delivery: acme/{}", n.key);
        assert!(
            sent.iter().any(|m| m.contains(&header)),
            "no mail carries {header}"
        );
    }
    assert!(sent.iter().all(|m| m.contains("Message-ID: <acme.")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto, SES): scripts/test.sh runs it"]
async fn a_sender_ses_has_not_verified_is_tried_again_not_dropped() {
    let mail = channel(
        ses_client().await,
        &format!("{}@example.com", unique("unverified")),
    );
    let marker = unique("m");
    let results = mail
        .send(&[notification(0, &format!("Reminder {marker}"))])
        .await;
    match &results[0] {
        Err(SendError::Transient(why)) => {
            assert!(why.contains("MessageRejected"), "{why}")
        }
        other => panic!("expected a transient failure, got {other:?}"),
    }
    assert!(sent_with(&marker).await.is_empty());
}

#[test]
fn ses_throttling_costs_nothing_and_a_rejected_mail_is_final() {
    assert!(matches!(
        ses_error_verdict(
            Some("TooManyRequestsException"),
            Some("Maximum sending rate exceeded.")
        ),
        SendError::Throttled { .. }
    ));
    // A resource limit is the operator's to raise: counted, then dead-lettered.
    assert!(matches!(
        ses_error_verdict(Some("LimitExceededException"), None),
        SendError::Transient(_)
    ));
    assert!(matches!(
        ses_error_verdict(Some("MessageRejected"), Some("Message contains a virus")),
        SendError::Permanent(_)
    ));
    assert!(matches!(
        ses_error_verdict(
            Some("MessageRejected"),
            Some("Email address is not verified. The following identities failed the check")
        ),
        SendError::Transient(_)
    ));
    assert!(matches!(
        ses_error_verdict(Some("SendingPausedException"), None),
        SendError::Transient(_)
    ));
    assert!(matches!(
        ses_error_verdict(None, Some("dispatch failure: connection refused")),
        SendError::Transient(_)
    ));
}
