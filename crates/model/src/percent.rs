//! Percent-encoding for a part of a URL.

/// Every byte but the unreserved URL characters (`A–Z a–z 0–9 - . _ ~`) as
/// `%XX`: safe in any part of a URL, a user id in a query as a password in
/// `user:password@`.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
