//! Errors of memkit-schema.

/// What can go wrong when reading schema values from text.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A memory type other than `fact`, `episodic` or `profile`.
    #[error("unknown memory type {0:?} (expected fact, episodic or profile)")]
    UnknownMemoryType(String),
    /// A time value that is not `YYYY`, `YYYY-MM`, `YYYY-MM-DD` or `A/B` of those.
    #[error("invalid time {0:?} (expected YYYY, YYYY-MM, YYYY-MM-DD or A/B)")]
    InvalidTime(String),
    /// A time constraint that is not `on|before|after|around X` or `between A and B`.
    #[error("invalid time constraint {0:?} (expected on/before/after/around X or between A and B)")]
    InvalidTimeConstraint(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
