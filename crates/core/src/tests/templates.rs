//! A tenant's reminder templates through the pipeline, on paused time: each
//! recipient gets their channel's template in their locale, with the
//! meeting's time in their zone; a deleted template gives the default back.

use std::time::Duration;

use chrono::Duration as ChronoDuration;

use crate::registrar::{Registrar, RegistrarError};
use crate::testing::{meeting, user, TestKit};
use toki_model::domain::Channel;
use toki_model::input::UserInput;
use toki_model::template::TemplateInput;

const WAIT: Duration = Duration::from_secs(3600);

#[tokio::test(start_paused = true)]
async fn each_recipient_gets_their_locales_template_for_the_channel() {
    let kit = TestKit::new();
    let t = kit.tenant("acme").await;
    let registrar = kit.registrar();
    // u1 reads Japanese in Tokyo; u0 English in Tokyo (the kit's default).
    registrar
        .put_user(
            &t,
            &"u1".parse().unwrap(),
            &UserInput {
                locale: "ja-JP".into(),
                ..user(1)
            },
        )
        .await
        .unwrap();
    let template = |subject: Option<&str>, text: &str| TemplateInput {
        subject: subject.map(Into::into),
        text: text.into(),
        html: None,
    };
    registrar
        .put_template(
            &t,
            Channel::Slack,
            "ja",
            &template(
                None,
                "<https://example.com|予定> *{{ title }}* は {{ time }} から",
            ),
        )
        .await
        .unwrap();
    registrar
        .put_template(
            &t,
            Channel::Mail,
            "en",
            &template(
                Some("[{{ minutes }} min] {{ title }}"),
                "{{ title }} at {{ starts_at }} {{ time_zone }}",
            ),
        )
        .await
        .unwrap();
    let run = kit.run();
    let due = kit.now() + ChronoDuration::minutes(15);
    let meeting = toki_model::input::ScheduleInput {
        title: "Review <Q3> & plans".into(),
        ..meeting(
            due + ChronoDuration::minutes(5),
            5,
            &["u0", "u1"],
            &[Channel::Mail, Channel::Slack],
        )
    };
    kit.registrar()
        .put_schedule(&t, &"review".parse().unwrap(), &meeting)
        .await
        .unwrap();
    run.daemon.stats.wait_for(WAIT, |s| s.delivered >= 4).await;
    let sent = kit.sent();
    let of = |recipient: &str, channel: Channel| {
        sent.iter()
            .find(|s| s.key.recipient.as_str() == recipient && s.key.channel == channel)
            .unwrap_or_else(|| panic!("{recipient} {channel}: {sent:?}"))
    };
    let start_tokyo = (due + ChronoDuration::minutes(5)).with_timezone(&chrono_tz::Asia::Tokyo);
    // The tenant's Japanese Slack text, the title escaped, the link kept.
    assert_eq!(
        of("u1", Channel::Slack).text,
        format!(
            "<https://example.com|予定> *Review &lt;Q3&gt; &amp; plans* は {} から",
            start_tokyo.format("%H:%M")
        )
    );
    // English Slack: the default, escaped.
    assert!(of("u0", Channel::Slack)
        .text
        .starts_with("Hi User 0, \"Review &lt;Q3&gt; &amp; plans\""));
    // The tenant's English mail: its subject; an HTML part saying the same.
    let mail = of("u0", Channel::Mail);
    assert_eq!(mail.subject, "[5 min] Review <Q3> & plans");
    let when = format!("{} Asia/Tokyo", start_tokyo.format("%Y-%m-%d %H:%M"));
    assert_eq!(mail.text, format!("Review <Q3> & plans at {when}"));
    assert_eq!(
        mail.html.as_deref(),
        Some(format!("<p>Review &lt;Q3&gt; &amp; plans at {when}</p>\n").as_str())
    );
    // Japanese mail: no Japanese mail template, so the default Japanese one.
    let ja_mail = of("u1", Channel::Mail);
    assert_eq!(ja_mail.subject, "[リマインダー] Review <Q3> & plans");
    assert!(ja_mail
        .html
        .as_deref()
        .unwrap()
        .contains("<strong>Review &lt;Q3&gt; &amp; plans</strong>"));
    run.stop().await;

    // Deleted: the default again (and a second delete finds nothing).
    registrar
        .delete_template(&t, Channel::Slack, "JA")
        .await
        .unwrap();
    assert!(registrar
        .delete_template(&t, Channel::Slack, "ja")
        .await
        .is_err());
    assert!(matches!(
        registrar.template(&t, Channel::Slack, "ja").await,
        Err(RegistrarError::NotFound(_))
    ));
    let current = Registrar::default_template(Channel::Slack, "ja").unwrap();
    assert!(current.text.contains("分後に開始します"), "{current:?}");
    assert_eq!(registrar.templates(&t).await.unwrap().len(), 1);
}

/// A tenant whose stored chat template spins past its fuel (it could only be
/// stored by going around the registrar's check): its chat deliveries are
/// undeliverable with the reason, at once, while another tenant's reminders
/// at the same instant, and its own on other channels, are delivered.
#[tokio::test(start_paused = true)]
async fn a_template_over_its_fuel_is_undeliverable_and_holds_up_no_one() {
    use toki_model::domain::DeliveryStatus;
    use toki_model::template::ReminderTemplate;
    use toki_ports::TenantStore;

    let kit = TestKit::new();
    let bad = kit.tenant("spinner").await;
    let good = kit.tenant("acme").await;
    let spin = "{% for a in range(10000) %}{% for b in range(10000) %}{% endfor %}{% endfor %}x";
    let template = ReminderTemplate {
        channel: Channel::Chat,
        locale: "en".into(),
        subject: None,
        text: spin.into(),
        html: None,
    };
    assert!(
        ReminderTemplate::validate(
            Channel::Chat,
            "en",
            &TemplateInput {
                subject: None,
                text: spin.into(),
                html: None,
            }
        )
        .is_err(),
        "the registrar refuses it"
    );
    kit.stores
        .get(&bad)
        .unwrap()
        .put_template(&template, kit.now())
        .await
        .unwrap();
    let run = kit.run();
    let due = kit.now() + ChronoDuration::minutes(15);
    let both = meeting(
        due + ChronoDuration::minutes(5),
        5,
        &["u0", "u1"],
        &[Channel::Chat, Channel::Mail],
    );
    for t in [&bad, &good] {
        kit.registrar()
            .put_schedule(t, &"review".parse().unwrap(), &both)
            .await
            .unwrap();
    }
    run.daemon
        .stats
        .wait_for(WAIT, |s| s.delivered >= 6 && s.undeliverable >= 2)
        .await;
    // Everyone else's reminders went out at their instant.
    let sent = kit.sent();
    assert_eq!(sent.len(), 6, "{sent:?}");
    assert!(sent.iter().all(|s| s.at == due), "{sent:?}");
    assert!(sent
        .iter()
        .all(|s| s.tenant != bad || s.key.channel == Channel::Mail));
    let rows = kit.stores.get(&bad).unwrap().deliveries().await.unwrap();
    let chat: Vec<_> = rows
        .iter()
        .filter(|r| r.key.channel == Channel::Chat)
        .collect();
    assert_eq!(chat.len(), 2, "{rows:?}");
    for r in chat {
        assert_eq!(r.status, DeliveryStatus::Undeliverable, "{r:?}");
        assert_eq!(
            r.detail.as_deref(),
            Some("its chat template uses more than the 50000 steps of work a template may take (fuel)")
        );
        assert_eq!(r.at, due);
    }
    run.stop().await;
}
