//! HingeMem: boundary-guided memory and query-adaptive retrieval.
//!
//! **Construction.** A [`Segmenter`] draws boundaries where a person, time, location or topic
//! changes ([`RuleSegmenter`] does it from speaker sets, time gaps, location mentions and topic
//! shifts). Each segment becomes a [`memkit_schema::Hyperedge`] over typed [`Node`]s
//! ([`build_hyperedges`]); hyperedges whose field-aware Jaccard exceeds 0.8 are merged until none
//! do ([`merge_hyperedges`]); nodes get a salience from frequency, degree centrality and
//! co-occurrence diversity ([`node_salience`]).
//!
//! **Retrieval.** [`HingeIndex`] scores hyperedges with BM25 (ξ, the engine's
//! [`Bm25Index`](crate::bm25::Bm25Index) over content tokens), reranks with the salience of the
//! nodes the query matches, weighted by element priority (Ω_S), and a rare-topic bonus /
//! common-topic penalty (Ω_T), then applies the adaptive stop of
//! [`crate::stopping`] for the query's type (recall, precision, judgment). See [`HingeIndex`] for
//! the exact formulas.
//!
//! ```
//! use memkit_engine::hinge::{HingeConfig, HingeIndex, RuleSegmenter};
//! use memkit_engine::Retriever;
//! use memkit_schema::{Dialogue, ParsedQuery, Session, Turn};
//!
//! let turn = |id: &str, who: &str, text: &str| Turn {
//!     id: id.into(), speaker: who.into(), role: Default::default(), text: text.into(),
//!     caption: None, timestamp: None, has_answer: false,
//! };
//! let dialogue = Dialogue { id: "d".into(), sessions: vec![
//!     Session { id: "s1".into(), date: None, turns: vec![turn("D1:1", "Ann", "I adopted a puppy named Rex.")] },
//!     Session { id: "s2".into(), date: None, turns: vec![turn("D2:1", "Ann", "I baked sourdough bread today.")] },
//! ]};
//! let index = HingeIndex::build(&dialogue, &RuleSegmenter::default(), HingeConfig::default()).unwrap();
//! let query = ParsedQuery { query_anchor: "What is the name of Ann's puppy?".into(), ..Default::default() };
//! let hits = index.search(&query, 5).unwrap();
//! assert_eq!(index.turn_ids(hits[0].doc), ["D1:1"]);
//! ```

mod edges;
mod index;
mod segment;

pub use edges::{Node, NodeKind, SalienceWeights, build_hyperedges, edge_nodes, field_jaccard, merge_hyperedges, node_salience};
pub use index::{ElementPriority, HingeConfig, HingeIndex, element_priority};
pub use segment::{BoundaryReason, RuleSegmenter, Segment, Segmenter, SegmenterConfig, extract_locations};
