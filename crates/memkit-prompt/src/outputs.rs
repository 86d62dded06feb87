//! What the boundary, update and judge prompts ask the model to reply, as serde types.
//!
//! The extraction and query prompts reply with memkit-schema's `ExtractorOutput` and
//! `ParsedQuery`; these are the shapes of the other three, kept next to the prompts that define
//! them. The example reply in each prompt is exactly what serde writes for these types (a test
//! checks it).

use memkit_data::Window;
use memkit_schema::{Hyperedge, UpdateAction};
use serde::{Deserialize, Serialize};

/// The reply of `boundary.j2`: the segments of a window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segmentation {
    /// Segments in message order.
    #[serde(default)]
    pub segments: Vec<SegmentRecord>,
}

/// One segment between two boundaries, as the model writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SegmentRecord {
    /// Number of the first message (1-based, as in the window lines).
    pub start: u32,
    /// Number of the last message (inclusive).
    pub end: u32,
    /// `start`, `person`, `time`, `location` or `topic`.
    pub boundary_reason: String,
    /// People involved.
    pub persons: Vec<String>,
    /// Dates the segment is about (`YYYY-MM-DD`, `YYYY-MM`, `YYYY`).
    pub times: Vec<String>,
    /// Places mentioned.
    pub locations: Vec<String>,
    /// Short noun phrases.
    pub topics: Vec<String>,
    /// One sentence about the segment.
    pub description: String,
}

impl Segmentation {
    /// The JSON Schema a reply to `boundary.j2` for a piece of `messages` messages is decoded
    /// under: every field required, message numbers within the piece, at most one segment per
    /// message, so a complete reply always deserialises.
    pub fn json_schema(messages: usize) -> serde_json::Value {
        let number = serde_json::json!({"type": "integer", "minimum": 1, "maximum": messages.max(1)});
        let list = |items: usize| serde_json::json!({"type": "array", "items": {"type": "string", "maxLength": 60}, "maxItems": items});
        serde_json::json!({
            "type": "object",
            "properties": {
                "segments": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": messages.max(1),
                    "items": {
                        "type": "object",
                        "properties": {
                            "start": number,
                            "end": number,
                            "boundary_reason": {"type": "string", "enum": ["start", "person", "time", "location", "topic"]},
                            "persons": list(6),
                            "times": list(4),
                            "locations": list(4),
                            "topics": list(4),
                            "description": {"type": "string", "maxLength": 300}
                        },
                        "required": ["start", "end", "boundary_reason", "persons", "times", "locations", "topics", "description"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["segments"],
            "additionalProperties": false
        })
    }
}

impl SegmentRecord {
    /// The hyperedge of this segment, with the dataset turn ids of its messages in `window`
    /// (numbers outside the window are skipped).
    pub fn into_hyperedge(self, id: String, window: &Window) -> Hyperedge {
        let turn_ids = (self.start..=self.end).filter_map(|n| window.message(n)).map(|m| m.turn.id.clone()).collect();
        Hyperedge {
            id,
            persons: self.persons,
            times: self.times,
            locations: self.locations,
            topics: self.topics,
            description: self.description,
            boundary_reason: self.boundary_reason,
            turn_ids,
            members: Vec::new(),
        }
    }
}

/// The reply of `update.j2`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateVerdict {
    /// What to do.
    pub decision: UpdateAction,
    /// The combined sentence for [`UpdateAction::Merge`], else empty.
    #[serde(default)]
    pub content: String,
    /// A short justification.
    #[serde(default)]
    pub reason: String,
}

impl UpdateVerdict {
    /// The JSON Schema a reply to `update.j2` is decoded under: every field required, the
    /// decision one of the three actions, so a complete reply always deserialises.
    pub fn json_schema() -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "decision": {"type": "string", "enum": ["MERGE", "SUPERSEDE", "KEEP_BOTH"]},
                "content": {"type": "string", "maxLength": 400},
                "reason": {"type": "string", "maxLength": 300}
            },
            "required": ["decision", "content", "reason"],
            "additionalProperties": false
        })
    }
}

/// The label of `judge.j2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum JudgeLabel {
    /// Same information as the gold answer.
    Correct,
    /// Anything else.
    Wrong,
}

/// The reply of `judge.j2`; the reason comes first so the model argues before it labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgeVerdict {
    /// A short justification.
    #[serde(default)]
    pub reason: String,
    /// CORRECT or WRONG.
    pub label: JudgeLabel,
}
