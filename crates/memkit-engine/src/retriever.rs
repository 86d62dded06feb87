//! The one trait every retrieval route implements.

use memkit_schema::ParsedQuery;

use crate::Result;

/// One retrieved unit: an index into the corpus the retriever was built over, and its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Position of the record in the corpus slice the retriever was built from.
    pub doc: usize,
    /// Route-specific score; higher is better.
    pub score: f32,
}

/// A retrieval route over a fixed corpus of records.
pub trait Retriever {
    /// Short route name for reports (`bm25`, `dense`, `dimension`).
    fn name(&self) -> &str;
    /// The best `k` hits for a parsed query, best first. Ties break by lower `doc`.
    fn search(&self, query: &ParsedQuery, k: usize) -> Result<Vec<Hit>>;
}
