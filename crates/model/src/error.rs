//! Bad input (`ValidationError`, naming the field) and error chains for logs.

use std::error::Error as StdError;
use std::fmt;

use thiserror::Error;

/// Bad input: names the field and the problem.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: {problem}")]
pub struct ValidationError {
    pub field: String,
    pub problem: String,
}

impl ValidationError {
    pub fn new(field: impl Into<String>, problem: impl fmt::Display) -> Self {
        Self {
            field: field.into(),
            problem: problem.to_string(),
        }
    }
}

/// The error a backend's driver or SDK gave, kept as the source.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// An error and its sources on one line (`a: b: c`), for logs.
pub fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        // Some errors repeat their source in their own text; say it once.
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = s.source();
    }
    out
}
