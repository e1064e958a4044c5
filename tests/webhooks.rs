//! The webhook channel against a local receiver that verifies every signature: what a request carries, what each answer means, the egress (SSRF) policy at the API and when connecting, and a reminder through the pipeline.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use common::faults::free_addr;
use common::pipeline::{due_in, Harness};
use toki_channels::egress::{EgressPolicy, PortRange, Schemes, NO_ADDRESS};
use toki_channels::{WebhookChannel, WebhookOptions};
use toki_devtools::webhook_standin::{Behaviour, WebhookStandin};
use toki_model::egress::EndpointUrl;
use toki_model::input::{RuleInput, ScheduleInput};
use toki_model::webhook::{WebhookSettings, WebhookTarget};
use toki_model::Channel;
use toki_ports::channel::{ChannelSender, Notification, SendError};

/// A receiver on a free port; its base URL.
pub async fn receiver() -> (WebhookStandin, String) {
    let standin = WebhookStandin::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(toki_devtools::webhook_standin::serve(
        standin.clone(),
        listener,
    ));
    (standin, url)
}

/// The policy the tests run under: 127.0.0.1 allowed, http allowed, any
/// port (the receivers listen on free ones).
fn local_policy() -> EgressPolicy {
    EgressPolicy {
        allow: vec!["127.0.0.1/32".parse().unwrap()],
        schemes: Schemes::HttpAllowed,
        ports: vec![PortRange::ALL],
    }
}

fn channel(policy: EgressPolicy) -> WebhookChannel {
    let options = WebhookOptions {
        policy,
        timeout: Duration::from_secs(5),
        ..WebhookOptions::default()
    };
    WebhookChannel::new(options, Arc::new(toki_ports::SystemClock)).unwrap()
}

/// Notification `i` on the webhook channel to `url`, signed by `settings`.
fn to(url: &str, i: usize, settings: &Arc<WebhookSettings>) -> Notification {
    let mut n = common::notification_on(i, "U0", Channel::Webhook);
    n.parts.get_or_insert_default().webhook = Some(WebhookTarget {
        url: EndpointUrl::parse("url", url).unwrap(),
        settings: settings.clone(),
    });
    n
}

fn settings() -> Arc<WebhookSettings> {
    Arc::new(WebhookSettings::new(None, &mut rand::thread_rng()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_signed_and_a_retry_carries_the_same_ids() {
    let (standin, base) = receiver().await;
    let s = settings();
    standin.add_secret("acme", s.secret.clone());
    let webhook = channel(local_policy());
    let n = to(&format!("{base}/hook"), 0, &s);
    assert!(webhook
        .send(&[n.clone(), to(&format!("{base}/hook"), 1, &s)])
        .await
        .iter()
        .all(Result::is_ok));
    // The same delivery again, as a retry after a lost answer would send it.
    assert!(webhook.send(&[n]).await[0].is_ok());
    let stats = standin.stats();
    assert_eq!((stats.unique, stats.duplicates), (2, 1), "{stats:?}");
    assert_eq!(
        standin.receiver_stats().refused,
        0,
        "every signature verified"
    );
    // One Idempotency-Key and one webhook-id across both copies.
    let dups = standin.duplicate_ids();
    assert_eq!(dups.len(), 1);
    assert_eq!((dups[0].1, dups[0].2), (1, 1), "{dups:?}");
    assert_eq!(
        standin.texts("acme", "u0"),
        vec!["review starts in 5 minutes"; 2]
    );
}

/// Two tenants' deliveries can have the same key; a receiver that serves
/// both must not take one for a retry of the other: the `Idempotency-Key`
/// includes the tenant, and stays the same across a delivery's attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idempotency_key_differs_across_tenants_and_not_across_retries() {
    let (standin, base) = receiver().await;
    let (s, t) = (settings(), settings());
    standin.add_secret("acme", s.secret.clone());
    standin.add_secret("globex", t.secret.clone());
    let webhook = channel(local_policy());
    let acme = to(&format!("{base}/hook"), 0, &s);
    let mut globex = to(&format!("{base}/hook"), 0, &t);
    globex.tenant = "globex".parse().unwrap();
    assert_eq!(acme.key, globex.key, "the same delivery key");
    let sent = webhook
        .send(&[acme.clone(), globex.clone(), acme.clone()])
        .await;
    assert!(sent.iter().all(Result::is_ok), "{sent:?}");
    let key = acme.key.to_string();
    let (of_acme, of_globex) = (
        standin.idempotency_keys("acme", &key),
        standin.idempotency_keys("globex", &key),
    );
    assert_eq!(of_acme, [format!("acme:{key}")], "one key for both copies");
    assert_eq!(of_globex, [format!("globex:{key}")]);
    assert_eq!(toki_channels::webhook::idempotency_key(&acme), of_acme[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_signs_with_both_secrets_and_a_receiver_with_either_verifies() {
    let (standin, base) = receiver().await;
    let mut s = WebhookSettings::new(None, &mut rand::thread_rng());
    let old = s.secret.clone();
    s.rotate(&mut rand::thread_rng(), chrono::Utc::now());
    // The receiver still knows only the old secret.
    standin.add_secret("acme", old);
    let webhook = channel(local_policy());
    let r = webhook
        .send(&[to(&format!("{base}/hook"), 0, &Arc::new(s))])
        .await;
    assert!(r[0].is_ok(), "{r:?}");
    assert_eq!(standin.receiver_stats().refused, 0);
    // A receiver with no matching secret refuses, and that is permanent.
    let r = webhook
        .send(&[to(&format!("{base}/hook"), 1, &settings())])
        .await;
    assert_eq!(
        r[0],
        Err(SendError::Permanent(
            "webhook: HTTP 401 Unauthorized".into()
        ))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_decide_between_throttled_transient_and_permanent() {
    let (standin, base) = receiver().await;
    let s = settings();
    standin.add_secret("acme", s.secret.clone());
    let webhook = channel(local_policy());
    let hook = format!("{base}/hook");
    standin.set_behaviour(Behaviour::Throttle(7));
    assert_eq!(
        webhook.send(&[to(&hook, 0, &s)]).await[0],
        Err(SendError::Throttled {
            retry_after: Duration::from_secs(7)
        })
    );
    standin.set_behaviour(Behaviour::HttpError(503));
    assert!(matches!(
        &webhook.send(&[to(&hook, 0, &s)]).await[0],
        Err(SendError::Transient(r)) if r.contains("503")
    ));
    standin.set_behaviour(Behaviour::HttpError(404));
    assert_eq!(
        webhook.send(&[to(&hook, 0, &s)]).await[0],
        Err(SendError::Permanent("webhook: HTTP 404 Not Found".into()))
    );
    standin.set_behaviour(Behaviour::Ok);
    let closed = format!("http://{}/hook", free_addr());
    assert!(matches!(
        &webhook.send(&[to(&closed, 0, &s)]).await[0],
        Err(SendError::Transient(_))
    ));
    assert_eq!(standin.stats().unique, 0);
}

/// An endpoint that answers 200 and then streams a body without end.
async fn endless_endpoint() -> String {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(|| async {
            let chunk = axum::body::Bytes::from(vec![b'x'; 64 * 1024]);
            let stream =
                futures::stream::repeat_with(move || Ok::<_, std::io::Error>(chunk.clone()));
            axum::body::Body::from_stream(stream)
        }),
    );
    format!("http://{}/hook", toki_devtools::serve_locally(app).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_reply_is_read_bounded_and_the_delivery_counts_as_sent() {
    let url = endless_endpoint().await;
    let webhook = channel(local_policy());
    // Read to its end, the reply would run into the timeout (a transient failure).
    let r = webhook.send(&[to(&url, 0, &settings())]).await;
    assert!(r[0].is_ok(), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_addresses_are_refused_when_connecting_whatever_the_url_says() {
    let (standin, base) = receiver().await;
    let s = settings();
    standin.add_secret("acme", s.secret.clone());
    let port = base.rsplit(':').next().unwrap();
    // Plain http allowed, but no address exception: the operator's default.
    let strict = channel(EgressPolicy {
        allow: Vec::new(),
        schemes: Schemes::HttpAllowed,
        ports: vec![PortRange::ALL],
    });
    for url in [
        format!("http://127.0.0.1:{port}/hook"),
        // A name that resolves to loopback: refused where it resolves.
        format!("http://localhost:{port}/hook"),
        "http://169.254.169.254/latest/meta-data".to_owned(),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        format!("http://[2002:7f00:1::1]:{port}/hook"),
        format!("http://[64:ff9b:1::7f00:1]:{port}/hook"),
    ] {
        let r = strict.send(&[to(&url, 0, &s)]).await;
        assert!(
            matches!(&r[0], Err(SendError::Permanent(why)) if why.contains("SSRF policy")),
            "{url}: {r:?}"
        );
    }
    assert_eq!(standin.receiver_stats().requests, 0, "nothing reached it");
    // https only: an http endpoint is refused, saying why.
    let https_only = channel(EgressPolicy::default());
    let r = https_only
        .send(&[to("http://hooks.example.com/", 0, &s)])
        .await;
    assert!(
        matches!(&r[0], Err(SendError::Permanent(why)) if why.contains("https")),
        "{r:?}"
    );
    // With the exception, the same name gets through (its ::1 dropped).
    let allowed = channel(local_policy());
    let r = allowed
        .send(&[to(&format!("http://localhost:{port}/hook"), 0, &s)])
        .await;
    assert!(r[0].is_ok(), "{r:?}");
}

/// Port 443 and the operator's ports only, checked before each request:
/// an endpoint on another port (stored before the rule, or under a policy
/// since narrowed) gets no connection, whatever its address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_the_operator_did_not_allow_gets_no_request() {
    let (standin, base) = receiver().await;
    let s = settings();
    standin.add_secret("acme", s.secret.clone());
    let port: u16 = base.rsplit(':').next().unwrap().parse().unwrap();
    let policy = |ports: Vec<PortRange>| EgressPolicy {
        ports,
        ..local_policy()
    };
    let hook = format!("{base}/hook");
    let r = channel(policy(Vec::new())).send(&[to(&hook, 0, &s)]).await;
    assert_eq!(
        r[0],
        Err(SendError::Permanent(format!(
            "webhook: refused by the egress policy: the endpoint's port {port} is not 443 or one the operator allows"
        )))
    );
    let other = format!("{}-{}", port.wrapping_add(1).max(1), u16::MAX);
    let r = channel(policy(vec![other.parse().unwrap()]))
        .send(&[to(&hook, 0, &s)])
        .await;
    assert!(matches!(&r[0], Err(SendError::Permanent(_))), "{r:?}");
    assert_eq!(standin.receiver_stats().requests, 0, "nothing reached it");
    let r = channel(policy(vec![port.to_string().parse().unwrap()]))
        .send(&[to(&hook, 0, &s)])
        .await;
    assert!(r[0].is_ok(), "the operator's port: {r:?}");
}

/// What a tenant reads about an endpoint whose name led nowhere Toki may
/// send (an event endpoint's `last_error`, a webhook delivery's reason)
/// says the egress policy refused it, and not how the name resolved: the
/// same for a name that resolves to loopback and one that does not resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_tenant_reads_does_not_tell_how_a_name_resolved() {
    use toki_ports::events::{EventPoster, SignedPost};
    // A label that starts with a hyphen: glibc's resolver refuses the name
    // without asking a DNS server (over http: TLS would refuse it first).
    let urls = ["http://localhost/hook", "http://-nowhere-.example/hook"];
    let policy = EgressPolicy {
        schemes: Schemes::HttpAllowed,
        ports: vec![PortRange::ALL],
        ..EgressPolicy::default()
    };
    let poster = toki_channels::HttpEventPoster::new(policy.clone()).unwrap();
    let request = SignedPost {
        webhook_id: "evt_1".into(),
        timestamp_s: 0,
        signature: "v1,AAAA".into(),
        body: b"{}".to_vec(),
    };
    for url in urls {
        let url = EndpointUrl::parse("url", url).unwrap();
        let error = poster.post(&url, &request).await.unwrap_err();
        assert_eq!(error.0, NO_ADDRESS, "{url}");
    }
    let webhook = channel(policy);
    let s = settings();
    let reasons: Vec<String> = webhook
        .send(&[to(urls[0], 0, &s), to(urls[1], 1, &s)])
        .await
        .into_iter()
        .map(|r| match r {
            Err(SendError::Permanent(why) | SendError::Transient(why)) => why,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(reasons, vec![format!("webhook: {NO_ADDRESS}"); 2]);
    for told in ["loopback", "127.0.0.1", "::1", "lookup", "resolve to"] {
        assert!(!reasons[0].contains(told), "{}", reasons[0]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_refuses_private_endpoints_naming_the_field() {
    let data = tempfile::tempdir().unwrap().keep();
    let key = common::process::create_tenant(&data, "acme");
    let (_server, base) = common::process::serve(&data, |cmd| {
        cmd.env("TOKI_WEBHOOK_ALLOW_HTTP", "true")
            .env("TOKI_WEBHOOK_ALLOW_PORTS", "1-65535");
    });
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{base}/v1/tenants/acme/{p}");
    let put = |p: &str, body: Value| http.put(url(p)).bearer_auth(&key).json(&body).send();
    for (path, field, body) in [
        (
            "users/ana",
            "webhook_url",
            json!({"name": "Ana", "webhook_url": "https://10.0.0.5/hook"}),
        ),
        (
            "users/ana",
            "webhook_url",
            json!({"name": "Ana", "webhook_url": "http://[fd00::1]/hook"}),
        ),
        (
            "users/ana",
            "webhook_url",
            json!({"name": "Ana", "webhook_url": "https://user:pw@example.com/"}),
        ),
        (
            "webhook",
            "default_url",
            json!({"default_url": "https://169.254.169.254/latest"}),
        ),
        (
            "webhook",
            "default_url",
            json!({"default_url": "http://127.0.0.1:9/hook"}),
        ),
    ] {
        let r = put(path, body.clone()).await.unwrap();
        assert_eq!(r.status(), 422, "{body}");
        let answer: Value = r.json().await.unwrap();
        assert_eq!(answer["error"]["field"], field, "{answer}");
    }
    // Nothing was written: no settings, no user.
    let r = http
        .get(url("webhook"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // A public endpoint is taken; the secret is shown once.
    let r = put(
        "webhook",
        json!({"default_url": "https://hooks.example.com/toki"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let made: Value = r.json().await.unwrap();
    assert!(
        made["secret"].as_str().unwrap().starts_with("whsec_"),
        "{made}"
    );
    let again: Value = put("webhook", json!({"default_url": null}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(again.get("secret").is_none(), "shown once: {again}");
    let rotated: Value = http
        .post(url("webhook/secret:rotate"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_ne!(rotated["secret"], made["secret"]);
    assert!(rotated["previous_secret_until"].is_string(), "{rotated}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_reaches_the_tenants_endpoint_and_a_users_own() {
    let (tenant_hook, tenant_base) = receiver().await;
    let (own_hook, own_base) = receiver().await;
    let h = Harness::start(|c| {
        c.webhook.allow_addresses = vec!["127.0.0.1/32".parse().unwrap()];
        c.webhook.allow_http = true;
        c.webhook.allow_ports = vec![PortRange::ALL];
    })
    .await;
    let t = h.tenant("acme", true).await;
    let registrar = h.toki.registrar();
    let made = registrar
        .put_webhook_settings(
            &t,
            &toki_model::webhook::WebhookSettingsInput {
                default_url: Some(format!("{tenant_base}/hook")),
            },
        )
        .await
        .unwrap();
    let secret: toki_model::webhook_signature::WebhookSecret =
        made.secret.unwrap().parse().unwrap();
    tenant_hook.add_secret("acme", secret.clone());
    own_hook.add_secret("acme", secret);
    let mut u2 = common::pipeline::user(2);
    u2.webhook_url = Some(format!("{own_base}/hook"));
    registrar
        .put_user(&t, &"u2".parse().unwrap(), &u2)
        .await
        .unwrap();
    registrar
        .put_schedule(
            &t,
            &common::pipeline::sid("review"),
            &meeting_by(due_in(3), &["webhook"]),
        )
        .await
        .unwrap();
    let delivered = h.wait_delivered(&t, 3, Duration::from_secs(30)).await;
    assert_eq!(delivered.len(), 3, "{:?}", h.outcomes(&t).await);
    assert_eq!(
        tenant_hook.stats().unique,
        2,
        "u0 and u1 at the tenant's default"
    );
    assert_eq!(own_hook.stats().unique, 1, "u2 at its own endpoint");
    assert_eq!(
        tenant_hook.receiver_stats().refused + own_hook.receiver_stats().refused,
        0
    );
    let text = own_hook.texts("acme", "u2");
    assert!(
        text.len() == 1 && text[0].contains("Design review"),
        "{text:?}"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_a_webhook_delivery_is_undeliverable_with_the_reason() {
    let h = Harness::start(|_| {}).await;
    let t = h.tenant("acme", true).await;
    h.toki
        .registrar()
        .put_schedule(
            &t,
            &common::pipeline::sid("review"),
            &meeting_by(due_in(3), &["webhook", "chat"]),
        )
        .await
        .unwrap();
    h.wait_delivered(&t, 3, Duration::from_secs(30)).await;
    let outcomes = h.outcomes(&t).await;
    let webhook: Vec<_> = outcomes
        .iter()
        .filter(|o| o.key.channel == Channel::Webhook)
        .collect();
    assert_eq!(webhook.len(), 3, "{outcomes:?}");
    assert!(
        webhook
            .iter()
            .all(|o| o.status == toki_model::DeliveryStatus::Undeliverable
                && o.detail
                    .as_deref()
                    .is_some_and(|d| d.contains("webhook settings"))),
        "{webhook:?}"
    );
    h.stop().await;
}

/// A meeting of u0, u1 and u2 whose reminder is due at `due`, by `channels`.
fn meeting_by(due: chrono::DateTime<chrono::Utc>, channels: &[&str]) -> ScheduleInput {
    ScheduleInput {
        title: "Design review".into(),
        body: "Room 3".into(),
        starts_at: (due + chrono::Duration::minutes(5)).to_rfc3339(),
        time_zone: "Asia/Tokyo".into(),
        participants: vec!["u0".into(), "u1".into(), "u2".into()],
        reminders: vec![RuleInput {
            minutes_before: 5,
            channels: channels.iter().map(|c| c.to_string()).collect(),
        }],
        recurrence: None,
        dst: None,
    }
}
