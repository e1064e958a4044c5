//! One TLS crypto provider for the process. The AWS SDK brings rustls with
//! aws-lc-rs and the Postgres, SMTP and Slack clients bring it with ring; with
//! both compiled in, rustls cannot choose for the clients that use its default
//! (sqlx's TLS to Postgres), so the process chooses once, at start.

/// Installs ring as the process's default provider; a second call is a no-op.
pub fn install_default_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
