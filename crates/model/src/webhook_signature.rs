//! Signatures on what Toki posts to a tenant's endpoint (delivery events and
//! the webhook channel), as the Standard Webhooks specification describes
//! them: an id, a timestamp in seconds and an HMAC-SHA256 over
//! `{id}.{timestamp}.{body}`, sent as the headers `webhook-id`,
//! `webhook-timestamp` and `webhook-signature` (`v1,<base64>`; several,
//! space-separated, while a secret is being rotated).

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use thiserror::Error;

/// The header names the specification gives.
pub const HEADER_ID: &str = "webhook-id";
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
pub const HEADER_SIGNATURE: &str = "webhook-signature";

/// How far a timestamp may be from the receiver's clock (the specification's
/// suggested tolerance): older messages are refused as possible replays.
pub const TOLERANCE_S: i64 = 5 * 60;

const PREFIX: &str = "whsec_";
/// Key sizes the specification allows (24 to 64 bytes).
const KEY_BYTES: std::ops::RangeInclusive<usize> = 24..=64;
/// What Toki generates: 256 bits.
const GENERATED_BYTES: usize = 32;

/// A signing secret, `whsec_` and the base64 of its key.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct WebhookSecret(Vec<u8>);

impl WebhookSecret {
    pub fn generate(rng: &mut impl RngCore) -> Self {
        let mut key = vec![0u8; GENERATED_BYTES];
        rng.fill_bytes(&mut key);
        Self(key)
    }

    /// The `v1,<base64>` signature of one message under this secret.
    pub fn sign(&self, id: &str, timestamp_s: i64, body: &[u8]) -> String {
        format!("v1,{}", BASE64.encode(self.mac(id, timestamp_s, body)))
    }

    fn mac(&self, id: &str, timestamp_s: i64, body: &[u8]) -> [u8; 32] {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp_s.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.finalize().into_bytes().into()
    }

    /// The secret as the tenant stores it (`whsec_…`): shown once, when it is made.
    pub fn expose(&self) -> String {
        format!("{PREFIX}{}", BASE64.encode(&self.0))
    }
}

// Never print a secret.
impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(…)")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SecretError {
    #[error("a webhook secret starts with `whsec_` and goes on in base64")]
    Format,
    #[error("a webhook secret's key is 24 to 64 bytes, not {0}")]
    Length(usize),
}

impl FromStr for WebhookSecret {
    type Err = SecretError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let encoded = s.strip_prefix(PREFIX).ok_or(SecretError::Format)?;
        let key = BASE64.decode(encoded).map_err(|_| SecretError::Format)?;
        if !KEY_BYTES.contains(&key.len()) {
            return Err(SecretError::Length(key.len()));
        }
        Ok(Self(key))
    }
}

impl TryFrom<String> for WebhookSecret {
    type Error = SecretError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<WebhookSecret> for String {
    fn from(secret: WebhookSecret) -> String {
        secret.expose()
    }
}

/// The `webhook-signature` header: one signature per secret given (the
/// current one first, then the one being rotated out).
pub fn signature_header<'a>(
    secrets: impl IntoIterator<Item = &'a WebhookSecret>,
    id: &str,
    timestamp_s: i64,
    body: &[u8],
) -> String {
    let signatures: Vec<String> = secrets
        .into_iter()
        .map(|s| s.sign(id, timestamp_s, body))
        .collect();
    signatures.join(" ")
}

/// Why a receiver refused a message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VerifyError {
    #[error("webhook-timestamp is not a number of seconds")]
    Timestamp,
    #[error("webhook-timestamp is {0} s from now, beyond the tolerance")]
    OutsideTolerance(i64),
    #[error("no signature in webhook-signature matches")]
    NoMatch,
}

/// What a receiver does (Toki's own tests and stand-ins): the timestamp
/// within [`TOLERANCE_S`] of `now_s`, and one `v1` signature in `header`
/// made by `secret`, compared in constant time.
pub fn verify(
    secret: &WebhookSecret,
    id: &str,
    timestamp: &str,
    header: &str,
    body: &[u8],
    now_s: i64,
) -> Result<(), VerifyError> {
    let timestamp_s: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| VerifyError::Timestamp)?;
    let skew = now_s - timestamp_s;
    if skew.abs() > TOLERANCE_S {
        return Err(VerifyError::OutsideTolerance(skew));
    }
    let expected = secret.mac(id, timestamp_s, body);
    let matched = header
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .filter_map(|s| BASE64.decode(s).ok())
        .any(|given| bool::from(given.as_slice().ct_eq(&expected)));
    if matched {
        Ok(())
    } else {
        Err(VerifyError::NoMatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The specification's own example.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1614265330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;

    #[test]
    fn signs_the_specifications_example_as_it_says() {
        let secret: WebhookSecret = SECRET.parse().unwrap();
        assert_eq!(
            secret.sign(ID, TS, BODY),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert_eq!(secret.expose(), SECRET);
    }

    #[test]
    fn verifies_any_of_the_rotating_signatures_and_refuses_a_changed_body() {
        let old: WebhookSecret = SECRET.parse().unwrap();
        let new = WebhookSecret::generate(&mut rand::thread_rng());
        let header = signature_header([&new, &old], ID, TS, BODY);
        assert_eq!(header.split(' ').count(), 2);
        assert_eq!(
            verify(&old, ID, "1614265330", &header, BODY, TS + 10),
            Ok(())
        );
        assert_eq!(verify(&new, ID, "1614265330", &header, BODY, TS), Ok(()));
        assert_eq!(
            verify(&old, ID, "1614265330", &header, b"{}", TS),
            Err(VerifyError::NoMatch)
        );
        assert_eq!(
            verify(&old, "msg_other", "1614265330", &header, BODY, TS),
            Err(VerifyError::NoMatch)
        );
    }

    #[test]
    fn refuses_an_old_timestamp_and_a_malformed_secret() {
        let secret: WebhookSecret = SECRET.parse().unwrap();
        let header = secret.sign(ID, TS, BODY);
        assert_eq!(
            verify(&secret, ID, "1614265330", &header, BODY, TS + 301),
            Err(VerifyError::OutsideTolerance(301))
        );
        assert_eq!("MfKQ".parse::<WebhookSecret>(), Err(SecretError::Format));
        assert_eq!(
            "whsec_AAAA".parse::<WebhookSecret>(),
            Err(SecretError::Length(3))
        );
        assert_eq!(format!("{secret:?}"), "WebhookSecret(…)");
    }
}
