//! What a conditional write came to (a debounce row, a lease row).

/// The answer of a write made only if the row is as expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Conditional {
    /// The row was as expected: the write is done.
    Written,
    /// The row was not (another writer came first): nothing was written.
    Refused,
}

impl Conditional {
    /// `Written` if the condition held.
    pub fn of(held: bool) -> Self {
        if held {
            Conditional::Written
        } else {
            Conditional::Refused
        }
    }

    pub fn is_written(self) -> bool {
        self == Conditional::Written
    }
}
