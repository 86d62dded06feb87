//! The memory engine every extractor plugs into.
//!
//! Records ([`memkit_schema::MemoryRecord`]) go into a [`store`]; questions are parsed
//! ([`query`]) into a [`memkit_schema::ParsedQuery`] and answered by retrieval routes behind one
//! [`Retriever`] trait: [`bm25`], [`dense`] and [`dimension`] match, combined by [`fusion`]
//! (DimMem's dedup-concatenation, RRF, weighted) and cut by [`stopping`] (HingeMem's adaptive
//! stops). [`reading`] reads a retrieved key as the dialogue's sentence it points at; [`recall`] attaches the assistant reply behind a record when the query needs it,
//! [`update`] consolidates new records against old ones dimension by dimension, and [`hinge`]
//! builds HingeMem's boundary-guided hyperedges and query-adaptive reranking.
//!
//! The crate depends on no ML library by default: the dense route takes any
//! [`dense::Embedder`].
//!
//! # Features
//!
//! - `dense`: implements [`dense::Embedder`] for memkit-infer's `SentenceEmbedder`
//!   (all-MiniLM-L6-v2 in candle), so the dense route and the update step use real embeddings.
//! - `llm`: DimMem's language-model steps on any memkit-infer chat model (a GGUF in process or
//!   an OpenAI-compatible endpoint): [`llm::LlmQueryParser`] with `prompts/query.j2` and
//!   [`llm::LlmConsolidator`] with `prompts/update.j2`.

pub mod bm25;
pub mod dense;
pub mod dimension;
mod error;
pub mod fusion;
pub mod hinge;
#[cfg(feature = "llm")]
pub mod llm;
pub mod query;
pub mod reading;
pub mod recall;
mod retriever;
pub mod rule_extractor;
pub mod stopping;
pub mod store;
pub mod update;

pub use error::{Error, Result};
/// Text normalisation of the lexical routes (memkit-text's `words`).
pub use memkit_text::words as text;
pub use retriever::{Hit, Retriever};
