//! Mail that respects its recipients, through `toki serve` and the SMTP
//! stand-in: a mailbox the server refuses is listed and never mailed again
//! (its later reminders are recorded `undeliverable` with the reason), the
//! tenant's `List-Unsubscribe` rides on its mail, and SES's bounce and
//! complaint notifications list addresses for the tenant that sent them.

use crate::common;

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::Row;

use common::pipeline::due_in;

const REFUSED: &str = "gone.away@mail.example.com";
const KEPT: &str = "ben@mail.example.com";

/// A meeting `id` with ana and ben, reminded by mail one minute before, due
/// `secs` from now.
fn meeting(secs: i64) -> Value {
    let due = due_in(secs);
    json!({
        "title": "Budget", "starts_at": (due + chrono::Duration::minutes(1)).to_rfc3339(),
        "time_zone": "UTC", "participants": ["ana", "ben"],
        "reminders": [{"minutes_before": 1, "channels": ["mail"]}]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_mailbox_is_listed_and_not_mailed_again() {
    let (smtp, smtp_addr) = toki_devtools::smtp_standin::start().await.unwrap();
    smtp.refuse_mailbox(REFUSED);
    let data = tempfile::tempdir().unwrap();
    let key = common::process::create_tenant(data.path(), "acme");
    let (mut server, base) = common::process::serve(data.path(), |cmd| {
        cmd.env("TOKI_SMTP_URL", format!("smtp://{smtp_addr}"))
            .env("TOKI_MAIL_TRANSPORT", "smtp");
    });
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut r = http
            .request(method, format!("{base}/v1/tenants/acme/{path}"))
            .bearer_auth(&key);
        if let Some(b) = body {
            r = r.json(&b);
        }
        async move {
            let r = r.send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    use reqwest::Method;
    for (id, email) in [("ana", REFUSED), ("ben", KEPT)] {
        let (s, b) = call(
            Method::PUT,
            &format!("users/{id}"),
            Some(json!({"name": id, "email": email})),
        )
        .await;
        assert_eq!(s, 200, "{b}");
    }
    let unsubscribe = json!({"list_unsubscribe": {"url": "https://app.example.com/unsub?u={user}", "mailto": "unsub@example.com"}});
    let (s, b) = call(Method::PUT, "mail", Some(unsubscribe.clone())).await;
    assert_eq!((s, &b), (200, &unsubscribe));
    let (s, b) = call(
        Method::PUT,
        "mail",
        Some(json!({"list_unsubscribe": {"url": "http://x.example"}})),
    )
    .await;
    assert_eq!(
        (s, b["error"]["field"].as_str()),
        (422, Some("list_unsubscribe.url")),
        "{b}"
    );

    // The first reminder: ben's mail arrives, ana's mailbox is refused and listed.
    let (s, b) = call(Method::PUT, "schedules/first", Some(meeting(3))).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(smtp.wait_unique(1, Duration::from_secs(60)).await, 1);
    // Listed after the batch's rows are written: asked until it shows.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let listed = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the refused address was not listed"
        );
        let (s, b) = call(Method::GET, "suppressions", None).await;
        assert_eq!(s, 200, "{b}");
        if !b["suppressions"].as_array().unwrap().is_empty() {
            break b;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(listed["suppressions"][0]["address"], REFUSED);
    assert_eq!(listed["suppressions"][0]["reason"], "refused");
    assert_eq!(smtp.rcpts_refused(REFUSED), 1);
    // Headers unfolded (a long one is folded onto a second line).
    let mail = smtp.mails()[0]
        .data
        .replace("\r\n ", " ")
        .replace("\n ", " ");
    assert!(
        mail.contains("List-Unsubscribe: <https://app.example.com/unsub?u=ben>, <mailto:unsub@example.com?subject=unsubscribe%20ben>")
            && mail.contains("List-Unsubscribe-Post: List-Unsubscribe=One-Click"),
        "{mail}"
    );

    // The second: ben's arrives; ana's is never offered to the server.
    let (s, b) = call(Method::PUT, "schedules/second", Some(meeting(3))).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(smtp.wait_unique(2, Duration::from_secs(60)).await, 2);
    server.signal("TERM");
    let stopped = server.wait_exit(Duration::from_secs(30)).await;
    assert!(
        stopped.is_some_and(|s| s.success()),
        "toki serve did not stop on SIGTERM"
    );
    assert_eq!(
        smtp.rcpts_refused(REFUSED),
        1,
        "the listed address was not mailed again"
    );

    let db = common::process::tenant_file(data.path(), "acme");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let rows = sqlx::query("SELECT schedule_id, status, detail FROM deliveries WHERE recipient = 'ana' ORDER BY schedule_id")
        .fetch_all(&pool)
        .await
        .unwrap();
    let seen: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get::<Option<String>, _>(2).unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        (seen[0].0.as_str(), seen[0].1.as_str()),
        ("first", "undeliverable")
    );
    assert!(seen[0].2.contains("550"), "{seen:?}");
    assert_eq!(
        (seen[1].0.as_str(), seen[1].1.as_str()),
        ("second", "undeliverable")
    );
    assert!(seen[1].2.starts_with("suppressed: refused on "), "{seen:?}");
}

/// A permanent bounce and a complaint for acme's mail list acme's
/// addresses, not another tenant's; a transient bounce lists nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ses_feedback_lists_addresses_for_the_tenant_that_sent() {
    let data = tempfile::tempdir().unwrap();
    common::process::create_tenant(data.path(), "acme");
    common::process::create_tenant(data.path(), "globex");
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ses_feedback.jsonl");
    let toki = |args: &[&str]| {
        std::process::Command::new(common::process::TOKI)
            .args(args)
            .arg("--data-dir")
            .arg(data.path())
            .output()
            .unwrap()
    };
    let out = toki(&["suppression", "feedback", fixture.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("2 addresses listed, 2 notifications list nobody, 0 not read"),
        "{said}"
    );
    let listing = |tenant: &str| {
        let out = toki(&["suppression", "list", "--tenant", tenant]);
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let acme = listing("acme");
    assert!(
        acme.contains("bounced.hard@example.org") && acme.contains("bounce"),
        "{acme}"
    );
    assert!(
        acme.contains("complained@example.org") && acme.contains("complaint"),
        "{acme}"
    );
    assert!(
        !acme.contains("soft.bounce@example.org"),
        "a transient bounce lists nobody: {acme}"
    );
    assert!(
        !listing("globex").contains("@example.org"),
        "another tenant's list is untouched"
    );
}
