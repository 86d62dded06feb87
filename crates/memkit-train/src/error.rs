//! Errors of memkit-train.

use std::path::PathBuf;

/// What can go wrong when loading a model or recipe, reading data, training or saving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or folder could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file (`config.json`, a JSONL line, `state.json`) failed to parse.
    #[error("{path}{}: {source}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line, for JSONL files.
        line: Option<usize>,
        /// The parse error (it names the key).
        #[source]
        source: serde_json::Error,
    },
    /// A recipe failed to parse (unknown keys are errors: a typo fails loudly).
    #[error("recipe {path}: {source}")]
    Recipe {
        /// The recipe file.
        path: PathBuf,
        /// The TOML error, with line and key.
        #[source]
        source: toml::de::Error,
    },
    /// The [`Scorer`](crate::train::Scorer) failed on an export.
    #[error("scoring the model after step {step}: {reason}")]
    Score {
        /// The step scored.
        step: usize,
        /// What went wrong.
        reason: String,
    },
    /// A recipe, model config or checkpoint is well-formed but says something unusable.
    #[error("{path}: {reason}")]
    Invalid {
        /// The file to fix.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `model.safetensors` is malformed or lacks a tensor the model needs.
    #[error("{path}: {reason}")]
    Weights {
        /// The safetensors file.
        path: PathBuf,
        /// The missing or mis-shaped tensor.
        reason: String,
    },
    /// `tokenizer.json` failed to load or to encode.
    #[error("tokenizer {path}: {reason}")]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// The tokenizers error.
        reason: String,
    },
    /// A chat template failed to load or render a training example.
    #[error(transparent)]
    Prompt(#[from] memkit_prompt::Error),
    /// A GGUF base model failed to convert (boxed: memkit-infer's error is large).
    #[error(transparent)]
    Convert(Box<memkit_infer::Error>),
    /// The optimiser state of a checkpoint failed to save or load.
    #[error("optimizer state {path}: {reason}")]
    Optimizer {
        /// The `optimizer.bpk` file.
        path: PathBuf,
        /// burn's record error.
        reason: String,
    },
}

impl From<memkit_infer::Error> for Error {
    fn from(error: memkit_infer::Error) -> Self {
        Error::Convert(Box::new(error))
    }
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    pub(crate) fn invalid(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::Invalid { path: path.into(), reason: reason.into() }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
