//! Error types shared by the ports.

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

/// A failure of a storage or queue backend.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("invalid input: {0}")]
    Invalid(#[from] ValidationError),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("conflict: {0}")]
    Conflict(String),
    /// Worth retrying: connection refused, throttled, timed out.
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    #[error("backend error: {0}")]
    Backend(String),
}

impl StoreError {
    pub fn backend(e: impl fmt::Display) -> Self {
        StoreError::Backend(e.to_string())
    }
}

pub type StoreResult<T> = Result<T, StoreError>;
