//! Slack ids a tenant may give: a person's user id only (`U…`, `W…`), never a conversation's.
//!
//! `chat.postMessage` posts to whatever conversation its `channel` names,
//! so a channel id (`C…`), a private group (`G…`) or a name (`#general`)
//! would let a tenant post into any channel the operator's bot is in. A
//! user id opens the person's direct messages with the bot, and nothing else.

use std::fmt;

/// The longest Slack user id accepted (Slack's are 9 or 11 characters today;
/// room is left for them to grow).
pub const MAX_SLACK_USER_ID_CHARS: usize = 32;

/// Why a value is not a Slack user id; the text says so without quoting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotAUserId {
    #[error("is a Slack channel id (C…); reminders go only to a person's user id (U… or W…)")]
    Channel,
    #[error("is a Slack private channel or group id (G…); reminders go only to a person's user id (U… or W…)")]
    Group,
    #[error("is a Slack direct-message conversation id (D…); give the person's user id (U… or W…) instead")]
    DirectMessage,
    #[error("is a channel name; reminders go only to a person's Slack user id (U… or W…)")]
    ChannelName,
    #[error("is a mention or a user name; give the person's Slack user id (U… or W…) instead")]
    Mention,
    #[error("is longer than {MAX_SLACK_USER_ID_CHARS} characters, more than a Slack user id has")]
    TooLong,
    #[error("is not a Slack user id: U or W, then upper-case letters and digits (like U024BE7LH)")]
    Malformed,
}

/// A Slack user id: `U` or `W`, then 1 to 31 upper-case ASCII letters and digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SlackUserId(String);

impl SlackUserId {
    /// `s` as a user id, as given (no trimming), or why it is not one.
    pub fn parse(s: &str) -> Result<Self, NotAUserId> {
        if s.chars().count() > MAX_SLACK_USER_ID_CHARS {
            return Err(NotAUserId::TooLong);
        }
        let well_formed = |rest: &str| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        };
        let mut chars = s.chars();
        let first = chars.next();
        let rest = chars.as_str();
        match first {
            Some('U' | 'W') if well_formed(rest) => Ok(Self(s.to_owned())),
            Some('C') if well_formed(rest) => Err(NotAUserId::Channel),
            Some('G') if well_formed(rest) => Err(NotAUserId::Group),
            Some('D') if well_formed(rest) => Err(NotAUserId::DirectMessage),
            Some('#') => Err(NotAUserId::ChannelName),
            Some('@' | '<' | '!') => Err(NotAUserId::Mention),
            _ => Err(NotAUserId::Malformed),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<SlackUserId> for String {
    fn from(id: SlackUserId) -> String {
        id.0
    }
}

impl fmt::Display for SlackUserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ids_are_accepted() {
        for id in [
            "U024BE7LH",
            "W012A3CDE",
            "U1",
            "UABCDEFGHIJ",
            &format!("U{}", "9".repeat(31)),
        ] {
            assert_eq!(SlackUserId::parse(id).unwrap().as_str(), id);
        }
    }

    /// Conversations, names and mentions are refused, each saying why.
    #[test]
    fn anything_but_a_user_id_is_refused() {
        let cases = [
            ("C024BE91L", NotAUserId::Channel),
            ("G024BE91L", NotAUserId::Group),
            ("D024BE91L", NotAUserId::DirectMessage),
            ("#general", NotAUserId::ChannelName),
            ("@ana", NotAUserId::Mention),
            ("<!channel>", NotAUserId::Mention),
            ("!here", NotAUserId::Mention),
            ("u024be7lh", NotAUserId::Malformed),
            ("U", NotAUserId::Malformed),
            ("", NotAUserId::Malformed),
            ("U024 BE7LH", NotAUserId::Malformed),
            ("U024BE7LH\n", NotAUserId::Malformed),
            ("U02Ä", NotAUserId::Malformed),
            ("general", NotAUserId::Malformed),
            ("T024BE7LH", NotAUserId::Malformed),
        ];
        for (value, why) in cases {
            assert_eq!(SlackUserId::parse(value), Err(why), "{value:?}");
        }
        let long = format!("U{}", "A".repeat(MAX_SLACK_USER_ID_CHARS));
        assert_eq!(SlackUserId::parse(&long), Err(NotAUserId::TooLong));
    }

    #[test]
    fn a_refusal_does_not_quote_the_value() {
        let why = SlackUserId::parse("C024BE91L").unwrap_err().to_string();
        assert!(!why.contains("C024BE91L"), "{why}");
        assert!(why.contains("channel"), "{why}");
    }
}
