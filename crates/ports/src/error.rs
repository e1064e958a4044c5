//! The error every port returns when its backend fails.

use thiserror::Error;

use toki_model::error::BoxError;
use toki_model::ValidationError;

/// A failure of a storage or queue backend. `Display` says what was being
/// done; the driver's own error is the `source` (print the chain with [`chain`]).
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("invalid input: {0}")]
    Invalid(#[from] ValidationError),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("conflict: {0}")]
    Conflict(String),
    /// Worth retrying: connection refused, throttled, timed out.
    #[error("{what}: backend unavailable")]
    Unavailable {
        what: String,
        #[source]
        source: BoxError,
    },
    /// The backend refused or failed in a way retrying will not fix.
    #[error("{what}: backend error")]
    Backend {
        what: String,
        #[source]
        source: BoxError,
    },
    /// Stored data that does not parse back into the domain.
    #[error("corrupt data: {what}")]
    Corrupt {
        what: String,
        #[source]
        source: BoxError,
    },
    /// Toki itself is misconfigured (a setting is missing or wrong).
    #[error("not configured: {0}")]
    Unconfigured(String),
}

impl StoreError {
    pub fn unavailable(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        StoreError::Unavailable {
            what: what.into(),
            source: source.into(),
        }
    }

    pub fn backend(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        StoreError::Backend {
            what: what.into(),
            source: source.into(),
        }
    }

    pub fn corrupt(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        StoreError::Corrupt {
            what: what.into(),
            source: source.into(),
        }
    }

    /// Whether trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;
    use toki_model::error::chain;

    #[test]
    fn the_chain_keeps_the_source() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = StoreError::unavailable("opening the tenant database", io);
        assert_eq!(
            e.to_string(),
            "opening the tenant database: backend unavailable"
        );
        assert_eq!(
            chain(&e),
            "opening the tenant database: backend unavailable: refused"
        );
        assert!(e.is_transient());
        assert!(e.source().is_some());
    }
}
