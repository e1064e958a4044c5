//! An erased person's suppression entry, kept as a keyed hash of their
//! address (docs/erasure.md, docs/suppression.md): the address itself is
//! gone, yet if the tenant adds someone with that address again, the hash
//! matches and the entry comes back, so a person who complained stays
//! unmailed.
//!
//! The hash is HMAC-SHA-256 under a key of the tenant's own, 32 random bytes
//! kept in the tenant's database (table `tenant_secrets`), made at its first
//! use. A dictionary of addresses cannot be matched against the hashes
//! without that key; whoever holds a copy of the whole database holds the
//! key too, and can test a guessed address one by one (never list them).
//! Deleting the tenant drops the database, the key with it.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::ValidationError;
use crate::suppression::ListedAddress;

/// The length of a key, in bytes.
const KEY_BYTES: usize = 32;

/// A tenant's key for hashing erased addresses (hex when stored).
#[derive(Clone, PartialEq, Eq)]
pub struct SuppressionHashKey([u8; KEY_BYTES]);

impl SuppressionHashKey {
    /// A new key drawn from `rng`: a store holding real tenants' data
    /// passes the operating system's source (a secret); the in-memory
    /// store of tests and the simulation passes a seeded one, so a run
    /// replays exactly.
    pub fn generate(rng: &mut impl rand::RngCore) -> Self {
        let mut key = [0u8; KEY_BYTES];
        rng.fill_bytes(&mut key);
        Self(key)
    }

    /// A key as stored (64 hex digits).
    pub fn parse(stored: &str) -> Result<Self, ValidationError> {
        let bad = || ValidationError::new("suppression_hash_key", "must be 64 hex digits");
        if stored.len() != KEY_BYTES * 2 || !stored.is_ascii() {
            return Err(bad());
        }
        let mut key = [0u8; KEY_BYTES];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&stored[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Self(key))
    }

    /// The key as stored.
    pub fn to_stored(&self) -> String {
        hex(&self.0)
    }

    /// The hash an erased entry of `address` is kept under.
    pub fn digest(&self, address: &ListedAddress) -> AddressDigest {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(address.as_str().as_bytes());
        AddressDigest(hex(&mac.finalize().into_bytes()))
    }
}

impl fmt::Debug for SuppressionHashKey {
    // A secret: never in a log or a test's failure message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SuppressionHashKey(..)")
    }
}

/// The keyed hash of a listed address (64 hex digits).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AddressDigest(String);

impl AddressDigest {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The name the key is stored under in `tenant_secrets`.
pub const SUPPRESSION_HASH_KEY: &str = "suppression_hash_key";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_depends_on_the_key_and_the_listed_address_only() {
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(59);
        let key = SuppressionHashKey::generate(&mut rng);
        let again = SuppressionHashKey::parse(&key.to_stored()).unwrap();
        let a = ListedAddress::parse("email", " Ana@Example.com").unwrap();
        let b = ListedAddress::parse("email", "ana@example.com").unwrap();
        assert_eq!(key.digest(&a), again.digest(&b));
        assert_eq!(key.digest(&a).as_str().len(), 64);
        assert!(!key.digest(&a).as_str().contains("ana"));
        let other = SuppressionHashKey::generate(&mut rng);
        assert_ne!(key.digest(&a), other.digest(&a), "another tenant's key");
        assert!(SuppressionHashKey::parse("xyz").is_err());
        assert_eq!(format!("{key:?}"), "SuppressionHashKey(..)");
    }
}
