//! The one sentence-embedder trait: texts in, L2-normalised vectors out.
//!
//! memkit-infer implements it with all-MiniLM-L6-v2 in candle; the engine's dense route and
//! update step and memkit-clean's grounding take any implementation, so neither needs an ML
//! dependency, and tests can hand them a lexical embedder.

use std::sync::Arc;

/// Why an embedder failed: its own message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedError(pub String);

impl std::fmt::Display for EmbedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EmbedError {}

/// Anything that turns texts into L2-normalised vectors of one dimension.
pub trait Embedder: Send + Sync {
    /// The model's id (`sentence-transformers/all-MiniLM-L6-v2`): the key of cached vectors, and
    /// what a ledger records of who embedded.
    fn model_id(&self) -> &str;
    /// Vector length.
    fn dim(&self) -> usize;
    /// Embeds a batch of texts; one L2-normalised vector per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// Pointers to an embedder embed as it does.
macro_rules! forward_embedder {
    ($($pointer:ty),*) => {$(
        impl<E: Embedder + ?Sized> Embedder for $pointer {
            fn model_id(&self) -> &str {
                (**self).model_id()
            }
            fn dim(&self) -> usize {
                (**self).dim()
            }
            fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
                (**self).embed(texts)
            }
        }
    )*};
}
forward_embedder!(Box<E>, &E, Arc<E>);

/// Cosine similarity of two L2-normalised vectors (their dot product).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
