//! Personal data kept out of logs and traces (docs/privacy.md).
//!
//! A value that names a person (a user id, an address, a Slack id) is logged
//! as a pseudonym: the first 8 bytes of HMAC-SHA-256 under a key, in hex. The
//! key is random per process unless the deployment sets one
//! ([`set_pseudonym_key`], `TOKI_LOG_PSEUDONYM_KEY`), so that the same person
//! carries the same pseudonym across a fleet's logs; a dictionary of
//! addresses cannot undo it without the key.
//!
//! [`scrub`] is the last line: every log line passes through it, and any mail
//! address or Slack user id left in it (an SMTP server's reply that echoes
//! the recipient, a database error quoting a value) becomes a pseudonym.

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

use hmac::{Hmac, Mac};
use sha2::Sha256;

static KEY: OnceLock<Vec<u8>> = OnceLock::new();

/// Sets the key pseudonyms are made with, before the first is made; false if
/// one was in use already (then that one stays).
pub fn set_pseudonym_key(key: &[u8]) -> bool {
    KEY.set(key.to_vec()).is_ok()
}

fn key() -> &'static [u8] {
    KEY.get_or_init(|| rand::random::<[u8; 32]>().to_vec())
}

/// What a logged personal value is replaced by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pseudonym([u8; 8]);

impl Pseudonym {
    pub fn of(value: &str) -> Self {
        let mut mac = Hmac::<Sha256>::new_from_slice(key()).expect("HMAC takes any key length");
        mac.update(value.as_bytes());
        let digest = mac.finalize().into_bytes();
        let mut short = [0u8; 8];
        short.copy_from_slice(&digest[..8]);
        Self(short)
    }
}

impl fmt::Display for Pseudonym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("p-")?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// `text` with every mail address and Slack user id in it replaced by its
/// pseudonym; borrowed when there is none (the common case).
pub fn scrub(text: &str) -> Cow<'_, str> {
    let spans = personal_spans(text);
    if spans.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end) in spans {
        out.push_str(&text[at..start]);
        out.push_str(&Pseudonym::of(&text[start..end]).to_string());
        at = end;
    }
    out.push_str(&text[at..]);
    Cow::Owned(out)
}

/// Byte ranges of the words of `text` that look like a mail address or a
/// Slack user id, in order, not overlapping.
fn personal_spans(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !is_word_byte(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_word_byte(bytes[i]) {
            i += 1;
        }
        let word = &text[start..i];
        if is_address(word) || is_slack_id(word) {
            spans.push((start, i));
        }
    }
    spans
}

/// Bytes a mail address or an id is made of (non-ASCII too: an address may
/// hold them, and a UTF-8 sequence is never cut, its bytes all being ≥ 0x80).
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b >= 0x80 || b"@._%+-'".contains(&b)
}

/// `local@domain.tld`, loosely: anything with an `@` between non-empty parts
/// and a dot in the domain.
fn is_address(word: &str) -> bool {
    let word = word.trim_matches(|c| c == '.' || c == '\'');
    match word.split_once('@') {
        Some((local, domain)) => {
            !local.is_empty()
                && domain
                    .split_once('.')
                    .is_some_and(|(a, b)| !a.is_empty() && !b.is_empty())
        }
        None => false,
    }
}

/// A Slack user id: `U` or `W` then 8 to 12 capitals and digits, at least one
/// a digit (so that a word such as `UNAVAILABLE` is left alone).
fn is_slack_id(word: &str) -> bool {
    let b = word.as_bytes();
    (9..=13).contains(&b.len())
        && matches!(b[0], b'U' | b'W')
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        && b[1..].iter().any(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_slack_ids_become_pseudonyms() {
        let line = "550 5.1.1 <ana.perez+x@mail.example.com>: unknown; U012AB3CDE not found";
        let out = scrub(line);
        assert!(!out.contains("ana.perez"), "{out}");
        assert!(!out.contains("U012AB3CDE"), "{out}");
        assert!(out.starts_with("550 5.1.1 <p-"), "{out}");
        let same = Pseudonym::of("ana.perez+x@mail.example.com").to_string();
        assert!(
            out.contains(&same),
            "the same value, the same pseudonym: {out}"
        );
    }

    #[test]
    fn ordinary_text_is_left_as_it_is() {
        for line in [
            "SERVICE_UNAVAILABLE after 3 attempts",
            "delivery acme#s-1#1700000000000#r10 sent at 09:00",
            "an @ alone, a@b, version 1.2.3",
        ] {
            assert!(matches!(scrub(line), Cow::Borrowed(_)), "{line}");
        }
    }

    #[test]
    fn pseudonyms_differ_per_value() {
        assert_ne!(Pseudonym::of("ana"), Pseudonym::of("ben"));
        assert_eq!(Pseudonym::of("ana").to_string().len(), 18);
    }
}
