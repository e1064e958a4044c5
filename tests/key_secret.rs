//! `toki tenant create | key create --key-secret NAME`: a new API key handed
//! over through Secrets Manager (on the AWS emulator, `aws_support`), never
//! printed: stdout has the secret's ARN, and the key in the secret
//! authenticates. The tenants are on the embedded backend (no Postgres
//! needed); only Secrets Manager is AWS.

use std::path::Path;
use std::process::{Command, Output};

use toki_app::{BackendKind, Config, Toki};
use toki_aws::aws_sdk_secretsmanager::Client;
use toki_model::api_key::authenticate;
use toki_model::TenantId;

use crate::aws_support;
use crate::common::process::TOKI;

fn toki(data: &Path, env: &[(String, String)], args: &[&str]) -> Output {
    Command::new(TOKI)
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .env_remove("AWS_ENDPOINT_URL_SECRETS_MANAGER")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

async fn open(data: &Path) -> Toki {
    Toki::open(Config {
        backend: BackendKind::Embedded,
        data_dir: data.to_path_buf(),
        ..Config::default()
    })
    .await
    .unwrap()
}

/// The secret's current value and ARN.
async fn read(sm: &Client, name: &str) -> (String, String) {
    let v = sm.get_secret_value().secret_id(name).send().await.unwrap();
    (
        v.secret_string().expect("a string secret").to_owned(),
        v.arn().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto): scripts/test.sh runs it"]
async fn a_key_handed_over_through_a_secret_is_never_printed_and_authenticates() {
    let env = aws_support::endpoint_env();
    let sm = Client::new(&aws_support::sdk().await);
    let data = tempfile::tempdir().unwrap();
    let tenant = format!("ks{}", std::process::id());
    let id: TenantId = tenant.parse().unwrap();
    let secret = format!("toki/test/tenant-keys/{}", aws_support::unique(&tenant));

    // tenant create: CreateSecret.
    let created = toki(
        data.path(),
        &env,
        &["tenant", "create", &tenant, "--key-secret", &secret],
    );
    let (out, err) = (text(&created.stdout), text(&created.stderr));
    assert!(created.status.success(), "{err}");
    let (key, arn) = read(&sm, &secret).await;
    assert!(
        key.starts_with("toki_") && key.len() > 40,
        "a key in the secret"
    );
    assert_eq!(out.trim(), arn, "stdout is the secret's ARN alone");
    assert!(!out.contains(&key) && !err.contains(&key), "{out}\n{err}");
    assert!(
        err.contains(&secret) && err.contains("get-secret-value"),
        "{err}"
    );
    let described = sm
        .describe_secret()
        .secret_id(&secret)
        .send()
        .await
        .unwrap();
    assert_eq!(
        described.description(),
        Some(format!("Toki API key default of tenant {tenant}").as_str())
    );

    // key create to the same secret: PutSecretValue (a new current value).
    let second = toki(
        data.path(),
        &env,
        &[
            "tenant",
            "key",
            "create",
            &tenant,
            "ci",
            "--expires-in",
            "1d",
            "--key-secret",
            &secret,
        ],
    );
    let (out2, err2) = (text(&second.stdout), text(&second.stderr));
    assert!(second.status.success(), "{err2}");
    let (ci, arn2) = read(&sm, &secret).await;
    assert_ne!(ci, key);
    assert_eq!((out2.trim(), arn2.as_str()), (arn.as_str(), arn.as_str()));
    assert!(err2.contains("existed"), "{err2}");
    for k in [&key, &ci] {
        assert!(!out2.contains(k.as_str()) && !err2.contains(k.as_str()));
    }

    // Both keys authenticate: their digests are in the directory.
    let toki = open(data.path()).await;
    let keys = toki.tenant_record(&id).await.unwrap().api_keys;
    let now = toki.clock.now();
    let name = |k: &str| authenticate(&keys, k, now).map(|k| k.name.to_string());
    assert_eq!(name(&key).as_deref(), Some("default"));
    assert_eq!(name(&ci).as_deref(), Some("ci"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the AWS emulator (moto): scripts/test.sh runs it"]
async fn a_key_that_cannot_be_handed_over_is_revoked_and_never_printed() {
    // Secrets Manager where nothing listens: CreateSecret fails.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let env: Vec<(String, String)> = [
        ("AWS_REGION", aws_support::REGION.to_owned()),
        ("AWS_ACCESS_KEY_ID", "test".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
        ("AWS_MAX_ATTEMPTS", "1".to_owned()),
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let data = tempfile::tempdir().unwrap();
    let tenant = format!("kf{}", std::process::id());
    let id: TenantId = tenant.parse().unwrap();
    let secret = "toki/test/tenant-keys/unreachable";

    let created = toki(
        data.path(),
        &env,
        &["tenant", "create", &tenant, "--key-secret", secret],
    );
    let (out, err) = (text(&created.stdout), text(&created.stderr));
    assert!(!created.status.success(), "{out}");
    assert_eq!(out, "", "no key, no ARN on stdout");
    assert!(!err.contains("toki_"), "no key on stderr: {err}");
    assert!(
        err.contains("CreateSecret") && err.contains(secret) && err.contains("was revoked"),
        "the error names the call, the secret and what became of the key: {err}"
    );
    // The tenant exists; its only key, which nobody has, is revoked.
    let toki = open(data.path()).await;
    let keys = toki.tenant_record(&id).await.unwrap().api_keys;
    assert_eq!(keys.len(), 1);
    assert!(keys[0].revoked_at.is_some(), "the default key is revoked");
}
