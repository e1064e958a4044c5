//! A page of a listing ordered by sequence number (events, the audit log):
//! its query's `after` and `limit` checked, and the cursor for the next page.

use toki_model::ValidationError;

/// How many a page holds when the query does not say.
const DEFAULT_LIMIT: usize = 100;

/// `after` and `limit`, within bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SeqPage {
    pub after: u64,
    pub limit: usize,
}

impl SeqPage {
    /// A page of at most `max`; `limit` defaults to 100, and `after` must fit
    /// a database integer. The error names the parameter.
    pub fn checked(after: u64, limit: Option<usize>, max: usize) -> Result<Self, ValidationError> {
        let limit = limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=max).contains(&limit) {
            return Err(ValidationError::new(
                "limit",
                format!("must be 1 to {max}, got {limit}"),
            ));
        }
        if after > i64::MAX as u64 {
            return Err(ValidationError::new(
                "after",
                format!("must be at most {}", i64::MAX),
            ));
        }
        Ok(SeqPage { after, limit })
    }

    /// The next page's `after`: the last one's sequence number when the page
    /// is full (there may be more), none at the end.
    pub fn next_after(&self, returned: usize, last_seq: Option<u64>) -> Option<u64> {
        (returned == self.limit).then_some(last_seq).flatten()
    }
}
