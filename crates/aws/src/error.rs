//! Errors of the AWS backends, and how they map onto [`StoreError`].

use std::error::Error as StdError;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use toki_model::ValidationError;
use toki_ports::StoreError;

/// A failed AWS call or an unusable answer.
#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// Worth retrying: throttled, timed out, connection failed, 5xx.
    #[error("{operation}: {message}")]
    Unavailable {
        operation: &'static str,
        message: String,
    },
    /// The service refused the request (or answered something we cannot use).
    #[error("{operation}: {message}")]
    Service {
        operation: &'static str,
        /// The AWS error code, when the service gave one.
        code: Option<String>,
        message: String,
    },
    /// Bad input, caught before calling AWS or refused by it as such.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
}

impl AwsError {
    pub(crate) fn service(operation: &'static str, message: impl Into<String>) -> Self {
        AwsError::Service {
            operation,
            code: None,
            message: message.into(),
        }
    }

    /// The AWS error code, if any (`ConditionalCheckFailedException`, ...).
    pub fn code(&self) -> Option<&str> {
        match self {
            AwsError::Service { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    pub fn is_retryable(&self) -> bool {
        matches!(self, AwsError::Unavailable { .. })
    }
}

impl From<AwsError> for StoreError {
    fn from(e: AwsError) -> Self {
        match e {
            AwsError::Invalid(v) => StoreError::Invalid(v),
            e @ AwsError::Unavailable { .. } => StoreError::unavailable("AWS call", e),
            e @ AwsError::Service { .. } => StoreError::backend("AWS call", e),
        }
    }
}

/// Error codes that mean "try again later".
const RETRYABLE_CODES: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "TransactionInProgressException",
    "LimitExceededException",
    "InternalServerError",
    "InternalFailure",
    "InternalError",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "AWS.SimpleQueueService.ServiceUnavailable",
    "KmsThrottled",
    "RequestTimeout",
    "RequestTimeoutException",
];

pub(crate) fn is_retryable_code(code: &str) -> bool {
    RETRYABLE_CODES.contains(&code)
}

/// Classifies an SDK error (both SDK crates share the type).
pub(crate) fn sdk<E>(operation: &'static str, e: SdkError<E, HttpResponse>) -> AwsError
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    match &e {
        SdkError::ServiceError(se) => {
            let err = se.err();
            let status = se.raw().status().as_u16();
            let code = err.code().map(str::to_owned);
            let message = format!(
                "{}{}",
                code.as_deref().unwrap_or("error"),
                err.message().map(|m| format!(": {m}")).unwrap_or_default()
            );
            let retryable =
                code.as_deref().is_some_and(is_retryable_code) || status == 429 || status >= 500;
            if retryable {
                AwsError::Unavailable { operation, message }
            } else {
                AwsError::Service {
                    operation,
                    code,
                    message,
                }
            }
        }
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            AwsError::Unavailable {
                operation,
                message: DisplayErrorContext(&e).to_string(),
            }
        }
        _ => AwsError::Service {
            operation,
            code: None,
            message: DisplayErrorContext(&e).to_string(),
        },
    }
}

/// The error code of an SDK error, if the service answered with one.
pub(crate) fn code_of<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> Option<&str> {
    match e {
        SdkError::ServiceError(se) => se.err().code(),
        _ => None,
    }
}

/// A conditional write's result: `Ok(false)` when its condition failed.
pub(crate) fn conditional<T, E>(
    result: Result<T, SdkError<E, HttpResponse>>,
    operation: &'static str,
) -> Result<bool, AwsError>
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    match result {
        Ok(_) => Ok(true),
        Err(e) if code_of(&e) == Some("ConditionalCheckFailedException") => Ok(false),
        Err(e) => Err(sdk(operation, e)),
    }
}
