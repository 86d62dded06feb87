//! Errors of memkit-engine.

use std::path::PathBuf;

/// What can go wrong in the engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The SQLite store failed; the path names the database file.
    #[error("store {path}: {source}")]
    Store {
        /// Database file.
        path: PathBuf,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// The database was written by an older, newer or unknown schema version.
    #[error(
        "store {path}: schema version {found} is not supported (this build reads version {expected}); ingest the dialogues again into a new database"
    )]
    SchemaVersion {
        /// Database file.
        path: PathBuf,
        /// Version found in the file.
        found: i64,
        /// Version this build writes.
        expected: i64,
    },
    /// A stored row could not be decoded.
    #[error("store {path}: row {key}: {message}")]
    Corrupt {
        /// Database file.
        path: PathBuf,
        /// Which row.
        key: String,
        /// What was wrong.
        message: String,
    },
    /// The embedder failed.
    #[error("embedder: {0}")]
    Embed(String),
    /// A language model's backend failed (not a bad reply: those fall back and are counted).
    #[error("language model {0}")]
    Model(String),
    /// A prompt did not render.
    #[error("prompt: {0}")]
    Prompt(String),
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
}

impl From<memkit_text::embed::EmbedError> for Error {
    fn from(e: memkit_text::embed::EmbedError) -> Self {
        Error::Embed(e.0)
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
