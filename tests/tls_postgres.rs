//! TLS to Postgres: RDS for PostgreSQL 15+ refuses plain connections
//! (`rds.force_ssl`), so sqlx is built with rustls. Against the local server
//! (SSL on, a self-signed certificate for `localhost`): `sslmode=require`
//! encrypts, `verify-full` with the server's certificate as the root
//! (`sslrootcert`, as with the RDS bundle) succeeds, and `verify-full` with
//! only the public roots refuses the self-signed server.

use crate::common;

use sqlx::{Connection, PgConnection};

fn url(params: &str) -> String {
    let base = common::services::postgres_url_for("postgres");
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}{params}")
}

async fn server_ssl_cert() -> Option<String> {
    // As every Toki process does when it opens its backend.
    toki_app::tls::install_default_crypto();
    let mut conn = PgConnection::connect(&common::services::postgres_url_for("postgres"))
        .await
        .expect("the test Postgres");
    let on: String = sqlx::query_scalar("SHOW ssl")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(on, "on", "scripts/test.sh turns SSL on for the test server");
    let path: String = sqlx::query_scalar("SHOW ssl_cert_file")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let path = if path.starts_with('/') {
        path
    } else {
        let dir: String = sqlx::query_scalar("SHOW data_directory")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        format!("{dir}/{path}")
    };
    std::path::Path::new(&path).exists().then_some(path)
}

#[tokio::test]
#[ignore = "needs Postgres: scripts/test.sh runs it"]
async fn sslmode_require_encrypts_the_connection() {
    server_ssl_cert().await;
    let mut conn = PgConnection::connect(&url("sslmode=require"))
        .await
        .expect("sslmode=require connects (sqlx has TLS)");
    let ssl: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(ssl, "the connection is not encrypted");
}

#[tokio::test]
#[ignore = "needs Postgres: scripts/test.sh runs it"]
async fn certificates_are_verified() {
    let Some(cert) = server_ssl_cert().await else {
        panic!("the server's certificate file is not readable here");
    };
    // The certificate names `localhost`: connect by that name, as to an RDS endpoint by its own.
    let by_name = |params: &str| url(params).replace("@127.0.0.1:", "@localhost:");
    let mut full =
        PgConnection::connect(&by_name(&format!("sslmode=verify-full&sslrootcert={cert}")))
            .await
            .expect("verify-full with the server's own certificate as the root");
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut full)
        .await
        .unwrap();
    assert_eq!(one, 1);
    let refused = PgConnection::connect(&by_name("sslmode=verify-full")).await;
    assert!(
        refused.is_err(),
        "verify-full accepted a self-signed certificate without its root"
    );
}
