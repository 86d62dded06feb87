//! Errors of the llama.cpp engine. They reach callers wrapped in [`crate::Error::Generate`].

use std::path::PathBuf;

/// What went wrong while loading a GGUF model or generating with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GenerateError {
    /// The llama.cpp backend did not initialise (once per process).
    #[error("cannot initialise the llama.cpp backend: {0}")]
    Backend(String),

    /// An [`EngineOptions`](super::EngineOptions) value is out of range.
    #[error("invalid engine option `{option}`: {reason}")]
    InvalidOptions {
        /// The field at fault.
        option: &'static str,
        /// What it must satisfy.
        reason: String,
    },

    /// The GGUF file does not exist.
    #[error("GGUF model {path} not found: run the models fetch step or pass an existing file")]
    ModelNotFound {
        /// The path given.
        path: PathBuf,
    },

    /// llama.cpp could not load the GGUF file (corrupt, truncated or an unsupported architecture).
    #[error("llama.cpp cannot load GGUF model {path}: {source}")]
    LoadModel {
        /// The GGUF file.
        path: PathBuf,
        /// llama-cpp-2's error.
        #[source]
        source: llama_cpp_2::LlamaModelLoadError,
    },

    /// llama.cpp could not create the context (usually: not enough memory for `n_ctx`).
    #[error("cannot create a llama.cpp context of n_ctx {n_ctx} for {path}: {source}; try a smaller n_ctx")]
    CreateContext {
        /// The GGUF file.
        path: PathBuf,
        /// The context size asked for.
        n_ctx: u32,
        /// llama-cpp-2's error.
        #[source]
        source: llama_cpp_2::LlamaContextLoadError,
    },

    /// A request is malformed (empty prompt, zero `max_tokens`, a bad sampling parameter).
    #[error("request {index}: {reason}")]
    InvalidRequest {
        /// Index of the request in the batch.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },

    /// A prompt token id is outside the model's vocabulary.
    #[error("token id {token} is outside the vocabulary (0..{n_vocab})")]
    TokenOutOfRange {
        /// The offending id.
        token: i32,
        /// Vocabulary size.
        n_vocab: i32,
    },

    /// Prompt plus `max_tokens` do not fit the context window.
    #[error(
        "request {index}: {needed} tokens (prefix + prompt + max_tokens) exceed the context of {n_ctx}; raise EngineOptions::n_ctx or lower max_tokens"
    )]
    ContextFull {
        /// Index of the request in the batch.
        index: usize,
        /// Tokens the request needs.
        needed: usize,
        /// The context size.
        n_ctx: u32,
    },

    /// llguidance could not compile the JSON schema (or could not start).
    #[error("cannot compile the JSON schema of request {index} for constrained decoding: {message}")]
    JsonSchema {
        /// Index of the request in the batch.
        index: usize,
        /// llguidance's message.
        message: String,
    },

    /// `llama_decode` failed.
    #[error("llama.cpp decode failed: {0}")]
    Decode(#[from] llama_cpp_2::DecodeError),

    /// A token did not fit the batch (an internal sizing bug).
    #[error("llama.cpp batch: {0}")]
    Batch(#[from] llama_cpp_2::llama_batch::BatchAddError),

    /// A KV-cache sequence operation failed.
    #[error("llama.cpp KV cache: {0}")]
    KvCache(#[from] llama_cpp_2::context::kv_cache::KvCacheConversionError),

    /// A GGUF metadata value could not be read.
    #[error("GGUF metadata `{key}`: {source}")]
    Metadata {
        /// The metadata key (or `#index` when read by index).
        key: String,
        /// llama-cpp-2's error.
        #[source]
        source: llama_cpp_2::MetaValError,
    },
}
