//! The dense route: cosine similarity between embedded query anchor and record text.

use crate::Result;

/// Anything that turns texts into L2-normalised vectors of one dimension.
///
/// memkit-infer implements it with all-MiniLM-L6-v2 in candle; the engine itself has no ML
/// dependency.
pub trait Embedder: Send + Sync {
    /// Model id for caching embeddings in the store (`sentence-transformers/all-MiniLM-L6-v2`).
    fn model_id(&self) -> &str;
    /// Vector length.
    fn dim(&self) -> usize;
    /// Embeds a batch of texts; one L2-normalised vector per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>>;
}

/// Cosine similarity of two L2-normalised vectors (their dot product).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
