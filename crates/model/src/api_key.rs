//! A tenant's API keys: several, by name, each kept as its SHA-256 only,
//! with an optional expiry and a revoked state.
//!
//! A key is 192 random bits (`toki_` and 48 hex digits), so a fast hash is
//! enough: a slow one (argon2, bcrypt) protects guessable secrets such as
//! passwords, and 2^192 keys cannot be guessed however fast the hash.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use thiserror::Error;

use crate::domain::KeyName;
use crate::time::Instant;

/// The SHA-256 of an API key: what the directory keeps instead of the key.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct KeyDigest([u8; 32]);

impl KeyDigest {
    pub fn of(key: &str) -> Self {
        Self(Sha256::digest(key.as_bytes()).into())
    }

    /// Whether `other` is the same digest, in time that does not depend on
    /// where they differ (no byte-by-byte early exit to time).
    pub fn matches(&self, other: &KeyDigest) -> subtle::Choice {
        self.0.ct_eq(&other.0)
    }

    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

// Never print a digest (it would let a log reader test guesses offline).
impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyDigest(..)")
    }
}

impl TryFrom<String> for KeyDigest {
    type Error = String;
    fn try_from(hex: String) -> Result<Self, String> {
        let bad = || format!("not 64 hex digits ({} characters)", hex.len());
        if hex.len() != 64 || !hex.is_ascii() {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Self(out))
    }
}

impl From<KeyDigest> for String {
    fn from(d: KeyDigest) -> String {
        d.to_hex()
    }
}

/// One of a tenant's API keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKey {
    pub name: KeyName,
    pub sha256: KeyDigest,
    /// Unknown (`None`) for the key carried over from a single-key directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Instant>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Instant>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<Instant>,
}

/// Whether a key opens the API at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    Active,
    Expired,
    Revoked,
}

impl fmt::Display for KeyState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyState::Active => "active",
            KeyState::Expired => "expired",
            KeyState::Revoked => "revoked",
        })
    }
}

impl ApiKey {
    pub fn new(name: KeyName, key: &str, created_at: Instant, expires_at: Option<Instant>) -> Self {
        Self {
            name,
            sha256: KeyDigest::of(key),
            created_at: Some(created_at),
            expires_at,
            revoked_at: None,
        }
    }

    pub fn state(&self, now: Instant) -> KeyState {
        match (self.revoked_at, self.expires_at) {
            (Some(_), _) => KeyState::Revoked,
            (None, Some(expiry)) if expiry <= now => KeyState::Expired,
            _ => KeyState::Active,
        }
    }
}

/// A change to a tenant's keys that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    /// Names are kept after revocation too, so that logs stay unambiguous.
    #[error("the tenant has a key named {0} already")]
    NameTaken(KeyName),
    #[error("the tenant has no key named {0}")]
    NoSuchKey(KeyName),
}

/// Which of `keys` is `presented` and usable at `now`. Every key's digest
/// is compared, in constant time, so the answer's timing tells nothing of
/// which key (or how much of one) matched.
pub fn authenticate<'a>(keys: &'a [ApiKey], presented: &str, now: Instant) -> Option<&'a ApiKey> {
    let digest = KeyDigest::of(presented);
    let mut found = None;
    for key in keys {
        if bool::from(key.sha256.matches(&digest)) {
            found = Some(key);
        }
    }
    found.filter(|k| k.state(now) == KeyState::Active)
}

/// The keys as a directory row holds them: the `api_keys` JSON, or on rows
/// written before there were several keys, the one `api_key_sha256` (hex)
/// read as a key named `default`.
pub fn keys_from_stored(
    json: Option<&str>,
    legacy_sha256: Option<&str>,
) -> Result<Vec<ApiKey>, String> {
    match (json, legacy_sha256) {
        (Some(json), _) => serde_json::from_str(json).map_err(|e| format!("api_keys: {e}")),
        (None, Some(hex)) if !hex.is_empty() => Ok(vec![ApiKey {
            name: "default".parse().expect("a valid key name"),
            sha256: KeyDigest::try_from(hex.to_owned())
                .map_err(|e| format!("api_key_sha256: {e}"))?,
            created_at: None,
            expires_at: None,
            revoked_at: None,
        }]),
        (None, _) => Ok(Vec::new()),
    }
}

/// The `api_keys` JSON a directory row holds.
pub fn keys_to_stored(keys: &[ApiKey]) -> String {
    serde_json::to_string(keys).expect("keys serialise")
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone, Utc};

    use super::*;

    fn at(hour: u32) -> Instant {
        Utc.with_ymd_and_hms(2026, 11, 23, hour, 0, 0).unwrap()
    }

    fn key(name: &str, secret: &str, expires_at: Option<Instant>) -> ApiKey {
        ApiKey::new(name.parse().unwrap(), secret, at(8), expires_at)
    }

    #[test]
    fn the_matching_active_key_is_found() {
        let keys = [key("a", "toki_a", None), key("b", "toki_b", None)];
        assert_eq!(
            authenticate(&keys, "toki_b", at(9)).map(|k| k.name.as_str()),
            Some("b")
        );
        assert_eq!(authenticate(&keys, "toki_c", at(9)), None);
        assert_eq!(authenticate(&[], "toki_a", at(9)), None);
    }

    #[test]
    fn an_expired_key_opens_nothing_from_its_expiry_on() {
        let keys = [key("a", "toki_a", Some(at(10)))];
        assert!(authenticate(&keys, "toki_a", at(10) - Duration::seconds(1)).is_some());
        assert_eq!(keys[0].state(at(10)), KeyState::Expired);
        assert!(authenticate(&keys, "toki_a", at(10)).is_none());
    }

    #[test]
    fn a_revoked_key_opens_nothing_and_keeps_its_name() {
        let mut record = crate::TenantRecord {
            id: "acme".parse().unwrap(),
            reminders_enabled: true,
            active: true,
            database: String::new(),
            api_keys: vec![key("a", "toki_a", None)],
            change_notices: Default::default(),
            limits: Default::default(),
            retention: Default::default(),
        };
        let a: KeyName = "a".parse().unwrap();
        record.revoke_key(&a, at(9)).unwrap();
        record.revoke_key(&a, at(11)).unwrap();
        assert_eq!(record.key(&a).unwrap().revoked_at, Some(at(9)));
        assert_eq!(record.key(&a).unwrap().state(at(10)), KeyState::Revoked);
        assert!(authenticate(&record.api_keys, "toki_a", at(10)).is_none());
        assert_eq!(
            record.add_key(key("a", "toki_a2", None)),
            Err(KeyError::NameTaken(a))
        );
        let nope: KeyName = "nope".parse().unwrap();
        assert_eq!(
            record.revoke_key(&nope, at(9)),
            Err(KeyError::NoSuchKey(nope))
        );
    }

    #[test]
    fn a_single_key_row_reads_as_the_default_key() {
        let hex = KeyDigest::of("toki_old").to_hex();
        let keys = keys_from_stored(None, Some(&hex)).unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].name.as_str(), "default");
        assert!(authenticate(&keys, "toki_old", at(9)).is_some());
        assert_eq!(keys_from_stored(None, Some("")).unwrap(), vec![]);
        assert!(keys_from_stored(None, Some("zz")).is_err());
    }

    #[test]
    fn stored_keys_round_trip_and_win_over_the_old_column() {
        let keys = vec![key("a", "toki_a", Some(at(10)))];
        let json = keys_to_stored(&keys);
        let old = KeyDigest::of("toki_old").to_hex();
        assert_eq!(keys_from_stored(Some(&json), Some(&old)).unwrap(), keys);
        assert!(!json.contains("toki_a"), "only the digest is stored");
    }

    #[test]
    fn a_digest_is_never_printed() {
        let d = KeyDigest::of("toki_a");
        assert_eq!(format!("{d:?}"), "KeyDigest(..)");
    }
}
