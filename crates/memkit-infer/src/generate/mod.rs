//! GGUF generation with llama.cpp (through `llama-cpp-2`), behind the `llama` feature.
//!
//! [`LlamaEngine`] holds one model and one context. It generates for already rendered prompts
//! (memkit-prompt renders the chat template) with:
//!
//! - **prefix reuse**: [`LlamaEngine::generate_batch`] evaluates a shared prefix (system prompt,
//!   instructions, examples) once and starts every request's sequence from it;
//! - **batched decoding**: the requests of a batch advance together, one `llama_decode` call per
//!   step, each with its own sampler and stop state;
//! - **JSON-schema constrained decoding** with llguidance: with
//!   [`GenerateRequest::json_schema`] set, tokens that would break the schema are masked before
//!   sampling, so the output always parses (caps such as `maxItems` hold too);
//! - greedy or temperature sampling, stop strings, token counts and timings.
//!
//! llama.cpp is built without OpenMP (`OMP_WAIT_POLICY` plays no part; see
//! [`EngineOptions::n_threads`] for threads on a busy machine). Its logs go to `tracing`.
//!
//! # Example
//!
//! ```no_run
//! use memkit_infer::generate::{EngineOptions, GenerateRequest, LlamaEngine};
//!
//! # fn main() -> memkit_infer::Result<()> {
//! let mut engine = LlamaEngine::load("SmolLM2-135M-Instruct.Q4_1.gguf", EngineOptions::default())?;
//! let prefix = "<|im_start|>system\nAnswer in one word.<|im_end|>\n";
//! let requests: Vec<_> = ["Capital of France?", "Colour of the sky?"]
//!     .iter()
//!     .map(|q| {
//!         GenerateRequest::new(format!("<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"))
//!             .with_max_tokens(16)
//!     })
//!     .collect();
//! for generation in engine.generate_batch(prefix, &requests)? {
//!     println!("{} ({:?})", generation.text, generation.finish_reason);
//! }
//! # Ok(())
//! # }
//! ```

mod engine;
mod error;
mod repeat;
mod request;
mod stop;

pub use engine::{EngineOptions, LlamaEngine, ModelMeta};
pub use error::GenerateError;
pub use request::{Dry, FinishReason, GenerateRequest, Generation, Prompt, RepeatedItem, Sampling, Timings};
