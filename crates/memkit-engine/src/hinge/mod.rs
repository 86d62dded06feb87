//! HingeMem: boundary-guided memory and query-adaptive retrieval.
//!
//! **Construction.** A [`Segmenter`] draws boundaries where a person, time, location or topic
//! changes ([`RuleSegmenter`] does it from speaker sets, time gaps, location mentions and topic
//! shifts). Each segment becomes a [`memkit_schema::Hyperedge`] over typed [`Node`]s holding the
//! memory records extracted from its turns, from any record source: raw turns, rule sentences, a
//! model's records ([`build_hyperedges`]); hyperedges whose field-aware Jaccard exceeds 0.8 are
//! merged until none do ([`merge_hyperedges`]); each gets a compact description of its elements
//! and most salient members within a token cap ([`describe`]); nodes get a salience from
//! frequency, degree centrality and co-occurrence diversity ([`node_salience`]).
//!
//! **Retrieval.** [`HingeIndex`] scores hyperedges with BM25 (ξ, the engine's
//! [`Bm25Index`](crate::bm25::Bm25Index) over content tokens), reranks with the salience of the
//! nodes the query matches, weighted by element priority (Ω_S), and a rare-topic bonus /
//! common-topic penalty (Ω_T), then applies the adaptive stop of
//! [`crate::stopping`] for the query's type (recall, precision, judgment). See [`HingeIndex`] for
//! the exact formulas. [`HingeIndex::read`] hands out parts, not whole segments: the opened
//! hyperedges' descriptions and members, best first, so a token budget takes the best parts.
//!
//! ```
//! use memkit_engine::hinge::{HingeConfig, HingeIndex, Part, RuleSegmenter};
//! use memkit_engine::rule_extractor::raw_turn_records;
//! use memkit_engine::stopping::QueryType;
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
//! let words = |s: &str| s.split_whitespace().count();
//! let records = raw_turn_records(&dialogue);
//! let index = HingeIndex::build(&dialogue, &records, &RuleSegmenter::default(), HingeConfig::default(), &words).unwrap();
//! let query = ParsedQuery { query_anchor: "What is the name of Ann's puppy?".into(), ..Default::default() };
//! let hits = index.search(&query, 5).unwrap();
//! assert_eq!(index.turn_ids(hits[0].doc), ["D1:1"]);
//! // A reader takes the puppy segment's description first; it quotes the one turn.
//! let reading = index.read(&query, QueryType::Precision);
//! assert_eq!(reading.parts[0], Part::Description(hits[0].doc));
//! assert_eq!(index.part_turn_ids(reading.parts[0]), ["D1:1"]);
//! ```

mod edges;
mod index;
mod segment;

pub use edges::{
    Description, Node, NodeKind, SalienceWeights, build_hyperedges, describe, edge_nodes, field_jaccard, merge_hyperedges, node_salience,
    unplaced_records,
};
pub use index::{ElementPriority, HingeConfig, HingeIndex, Part, Reading, element_priority};
pub use segment::{BoundaryReason, RuleSegmenter, Segment, Segmenter, SegmenterConfig, extract_locations};
