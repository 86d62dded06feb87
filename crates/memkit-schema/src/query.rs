//! Parsed queries (DimMem) and hyperedges (HingeMem).

use serde::{Deserialize, Serialize};

use crate::{MemoryType, TimeConstraint};

/// Which dimension the question asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnswerDim {
    /// No particular dimension.
    #[default]
    #[serde(rename = "")]
    None,
    /// What happened / what is.
    Content,
    /// When.
    Time,
    /// Where.
    Location,
    /// Why (cause).
    Reason,
    /// What for (goal).
    Purpose,
    /// Which things.
    Keywords,
}

/// A question turned into retrieval fields (SPEC §1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ParsedQuery {
    /// The question as a retrieval sentence ("I/my" → "the user").
    pub query_anchor: String,
    /// True when the answer needs what the assistant said earlier.
    pub need_assistant_context: bool,
    /// Types the answer is likely stored as; empty means any.
    pub target_memory_type: Vec<MemoryType>,
    /// Key noun phrases.
    pub keywords: Vec<String>,
    /// Time constraint; `None` when the question asks *for* a time or has none.
    pub time: Option<TimeConstraint>,
    /// Location mentioned in the question.
    pub location: String,
    /// The dimension asked for.
    pub answer_dim: AnswerDim,
}

/// A HingeMem hyperedge: a dialogue segment between two boundaries, over typed element nodes,
/// holding the memory records extracted from its turns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Hyperedge {
    /// Unique within a store.
    pub id: String,
    /// Person nodes.
    pub persons: Vec<String>,
    /// Time nodes (ISO values as in records).
    pub times: Vec<String>,
    /// Location nodes.
    pub locations: Vec<String>,
    /// Topic nodes.
    pub topics: Vec<String>,
    /// A short description of the segment.
    pub description: String,
    /// Why the segment starts here (person / time / location / topic change).
    pub boundary_reason: String,
    /// Dataset turn ids covered by the segment.
    pub turn_ids: Vec<String>,
    /// Ids of the memory records the hyperedge holds (empty for one built without records).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<String>,
}
