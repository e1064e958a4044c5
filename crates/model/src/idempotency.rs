//! Idempotent writes: the key a client sends, the digest of the request it keyed, and the answer kept for replays.

use std::fmt;
use std::str::FromStr;

use chrono::Duration;
use sha2::{Digest, Sha256};

use crate::error::ValidationError;

/// The request header, as errors name it.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// The longest key accepted.
pub const MAX_KEY_LEN: usize = 255;

/// How long a key's first answer is replayed; older keys are forgotten.
pub fn key_lifetime() -> Duration {
    Duration::hours(24)
}

/// How long a request may stay in progress under its key before its process
/// is taken to have died and a retry may run it again (until then: 409).
pub fn abandoned_after() -> Duration {
    Duration::minutes(5)
}

/// A client's `Idempotency-Key`: 1 to 255 printable ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for IdempotencyKey {
    type Err = ValidationError;

    fn from_str(s: &str) -> Result<Self, ValidationError> {
        let bad = |problem: String| ValidationError::new(IDEMPOTENCY_KEY_HEADER, problem);
        if s.is_empty() {
            return Err(bad("must not be empty".into()));
        }
        if s.len() > MAX_KEY_LEN {
            return Err(bad(format!(
                "is {} characters; at most {MAX_KEY_LEN}",
                s.len()
            )));
        }
        if let Some(c) = s.chars().find(|c| !(' '..='~').contains(c)) {
            return Err(bad(format!(
                "must be printable ASCII; {:?} is not",
                c.escape_default().to_string()
            )));
        }
        Ok(Self(s.to_owned()))
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What identifies a request under its key: SHA-256 over its method, path
/// and body (each length-prefixed, so no two requests share an encoding), in
/// hex. Kept instead of the request itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestDigest(String);

impl RequestDigest {
    pub fn of(method: &str, path: &str, body: &[u8]) -> Self {
        let mut h = Sha256::new();
        for part in [method.as_bytes(), path.as_bytes(), body] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        Self(
            h.finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        )
    }

    /// A digest as a store kept it: 64 lowercase hex digits.
    pub fn from_stored(hex: String) -> Result<Self, ValidationError> {
        let ok = hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if ok {
            Ok(Self(hex))
        } else {
            Err(ValidationError::new(
                "digest",
                "is not 64 lowercase hex digits",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The answer a finished request gave, replayed to a repeat of it: its
/// status and its (JSON) body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptAnswer {
    pub status: u16,
    pub body: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_bounded_printable_ascii() {
        for good in ["a", "9f1c-77", "with space", &"k".repeat(MAX_KEY_LEN)] {
            assert!(good.parse::<IdempotencyKey>().is_ok(), "{good:?}");
        }
        for bad in ["", "tab\there", "é", "nul\0", &"k".repeat(MAX_KEY_LEN + 1)] {
            let e = bad.parse::<IdempotencyKey>().unwrap_err();
            assert_eq!(e.field, IDEMPOTENCY_KEY_HEADER, "{bad:?}");
        }
    }

    #[test]
    fn the_digest_tells_method_path_and_body_apart() {
        let d = RequestDigest::of("POST", "/a", b"{}");
        assert_eq!(d, RequestDigest::of("POST", "/a", b"{}"));
        assert_ne!(d, RequestDigest::of("POST", "/a", b"{ }"));
        assert_ne!(d, RequestDigest::of("POST", "/b", b"{}"));
        assert_ne!(d, RequestDigest::of("PUT", "/a", b"{}"));
        // The parts' boundaries count: "/a" + "b" is not "/ab" + "".
        assert_ne!(
            RequestDigest::of("POST", "/a", b"b"),
            RequestDigest::of("POST", "/ab", b"")
        );
        assert_eq!(RequestDigest::from_stored(d.as_str().into()), Ok(d));
        assert!(RequestDigest::from_stored("xyz".into()).is_err());
    }
}
