//! Errors of memkit-eval.

use std::path::PathBuf;

/// What can go wrong while computing metrics or writing a report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The o200k_base tokenizer could not be built from tiktoken-rs' embedded vocabulary.
    #[error("cannot build the o200k_base tokenizer: {0}")]
    Tokenizer(String),
    /// A LoCoMo QA category outside 1..=5.
    #[error("unknown LoCoMo QA category {0} (expected 1..=5)")]
    UnknownCategory(u8),
    /// A LoCoMo answer that is neither a string nor an integer.
    #[error("LoCoMo answer {0} is neither a string nor an integer")]
    AnswerType(String),
    /// A file or folder of a report could not be written.
    #[error("cannot write {path}")]
    Write {
        /// The file or folder that failed.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `metrics.json` could not be serialised or parsed.
    #[error("invalid metrics JSON {path}")]
    Json {
        /// The file being written or read.
        path: PathBuf,
        /// The underlying serde error.
        #[source]
        source: serde_json::Error,
    },
    /// A file of a report could not be read back.
    #[error("cannot read {path}")]
    Read {
        /// The file that failed.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// plotters failed to draw a chart.
    #[error("cannot draw {path}: {message}")]
    Plot {
        /// The SVG being drawn.
        path: PathBuf,
        /// plotters' error, as text (its error type is generic over the backend).
        message: String,
    },
    /// An eval recipe is malformed: unknown key, wrong type, or a bad combination.
    #[error("recipe {path}: {message}")]
    Recipe {
        /// The recipe file.
        path: PathBuf,
        /// What is wrong, with the TOML position when the parser gives one.
        message: String,
    },
    /// A benchmark file could not be loaded or lacks what the recipe asks for.
    #[error(transparent)]
    Data(#[from] memkit_data::Error),
    /// A dataset lacks what the recipe names (a conversation id, say).
    #[error("{0}")]
    Dataset(String),
    /// The memory engine failed.
    #[error(transparent)]
    Engine(#[from] memkit_engine::Error),
    /// Question answering failed: a prompt did not render or the answer or judge model failed.
    #[error("QA: {0}")]
    Qa(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
