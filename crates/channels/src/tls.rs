//! TLS for the channels' own clients (SMTP, Slack's `chat.postMessage`):
//! rustls on ring with the webpki roots, as reqwest's and lettre's.

use std::sync::{Arc, OnceLock};

fn config(alpn: &[&[u8]]) -> rustls::ClientConfig {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// For SMTP (no ALPN).
pub fn connector() -> tokio_rustls::TlsConnector {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| Arc::new(config(&[])));
    tokio_rustls::TlsConnector::from(config.clone())
}

/// For HTTP/1.1, said so in ALPN.
pub fn http1_connector() -> tokio_rustls::TlsConnector {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| Arc::new(config(&[b"http/1.1"])));
    tokio_rustls::TlsConnector::from(config.clone())
}
