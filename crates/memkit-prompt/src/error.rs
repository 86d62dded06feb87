//! Errors of memkit-prompt.

use std::path::PathBuf;

/// What can go wrong when loading or rendering prompts and chat templates.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A prompt template failed to parse or render; minijinja's message names the template
    /// (`extract.j2`) and the line.
    #[error("prompt template {name}: {source}")]
    Prompt {
        /// File name of the template, e.g. `extract.j2`.
        name: String,
        /// The template error.
        #[source]
        source: minijinja::Error,
    },
    /// A prompt override folder could not be read.
    #[error("prompt folder {path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A `.j2` file in a prompt override folder that is not one of the known prompts (a typo would
    /// otherwise be ignored silently and the embedded prompt used).
    #[error("{path}: not a known prompt (expected one of {expected})")]
    UnknownPrompt {
        /// The file.
        path: PathBuf,
        /// The known file names, comma-separated.
        expected: String,
    },
    /// A chat template failed to parse or render (including `raise_exception` calls).
    #[error("chat template: {0}")]
    ChatTemplate(#[source] minijinja::Error),
    /// Rendering the conversation up to an assistant turn is not a prefix of rendering it in
    /// full, so the assistant spans cannot be derived (templates that rewrite earlier turns, such
    /// as ones that drop past reasoning, do this).
    #[error("chat template is not prefix-stable at message {index}: {detail}")]
    NotPrefixStable {
        /// 0-based index of the assistant message.
        index: usize,
        /// Which rendering was not a prefix of which.
        detail: String,
    },
    /// A trained window file (`extract_window.json`) that does not parse or leaves no new message.
    #[error("{path}: {reason}")]
    TrainedWindow {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A `tokenizer_config.json` without a usable chat template or special token.
    #[error("{path}: {reason}")]
    TokenizerConfig {
        /// The file.
        path: PathBuf,
        /// What is missing or malformed.
        reason: String,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
