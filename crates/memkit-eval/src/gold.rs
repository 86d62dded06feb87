//! Extraction against hand-written gold records (`data/gold/`): record precision, recall and F1,
//! and per-field agreement, for any records file (a teacher's, a student's, the rule extractor's,
//! LoCoMo's observations).
//!
//! A gold record names its dialogue, its source turn, its speaker, its content and every
//! dimension. A candidate record matches a gold record of the same dialogue when it points at
//! the same turn (its first turn id) and their contents reach the agreement's token-F1 threshold
//! ([`crate::agreement::MATCH_THRESHOLD`]); matching is one-to-one, as in
//! [`crate::agreement::agreement`], with one pseudo-window per dialogue whose message numbers are
//! the dialogue's turns.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use memkit_schema::{ExtractedDimension, ExtractedMemory, MemoryRecord};
use serde::{Deserialize, Serialize};

use crate::agreement::{Agreement, WindowPair, agreement};
use crate::{Error, Result};

/// One hand-written record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoldRecord {
    /// The dialogue id as memkit loads it (`conv-30`, `lme-s/<session id>`).
    pub dialogue: String,
    /// The source turn (`D1:2`, `<session id>:<n>`).
    pub turn_id: String,
    /// Its speaker.
    pub speaker: String,
    /// One sentence, third person, absolute dates.
    pub content: String,
    /// Type and dimensions.
    pub dimension: ExtractedDimension,
}

/// Reads a gold JSONL file; errors name the line.
pub fn read_gold(path: &Path) -> Result<Vec<GoldRecord>> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_owned(), source })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let record: GoldRecord =
            serde_json::from_str(line).map_err(|e| Error::Dataset(format!("{}:{}: not a gold record: {e}", path.display(), i + 1)))?;
        out.push(record);
    }
    Ok(out)
}

/// Compares `records` with `gold` on the gold's dialogues (records of other dialogues are left
/// out). Each dialogue is one window of [`agreement`]; `json_validity` is 1.
pub fn compare(gold: &[GoldRecord], records: &[MemoryRecord]) -> Agreement {
    // Turn ids get numbers per dialogue, in order of appearance (gold first, then records).
    let mut dialogues: BTreeMap<&str, (Vec<ExtractedMemory>, Vec<ExtractedMemory>)> = BTreeMap::new();
    let mut turns: HashMap<(&str, &str), u32> = HashMap::new();
    for g in gold {
        let n = number(&mut turns, &g.dialogue, &g.turn_id);
        dialogues.entry(g.dialogue.as_str()).or_default().0.push(ExtractedMemory {
            source_id: n,
            source_speaker: g.speaker.clone(),
            content: g.content.clone(),
            dimension: g.dimension.clone(),
        });
    }
    for r in records {
        let Some(dialogue) = gold.iter().map(|g| g.dialogue.as_str()).find(|d| r.pointer.belongs_to(d)) else {
            continue;
        };
        let Some(turn) = r.pointer.turn_ids.first() else { continue };
        let n = number(&mut turns, dialogue, turn);
        dialogues.entry(dialogue).or_default().1.push(ExtractedMemory {
            source_id: n,
            source_speaker: r.pointer.speaker.clone(),
            content: r.content.clone(),
            dimension: dimension_of(r),
        });
    }
    let pairs: Vec<WindowPair<'_>> =
        dialogues.values().map(|(reference, candidate)| WindowPair { reference, candidate: Some(candidate) }).collect();
    agreement(&pairs)
}

fn dimension_of(r: &MemoryRecord) -> ExtractedDimension {
    ExtractedDimension {
        memory_type: r.memory_type,
        time: r.dims.time.clone(),
        location: r.dims.location.clone(),
        reason: r.dims.reason.clone(),
        purpose: r.dims.purpose.clone(),
        keywords: r.dims.keywords.clone(),
    }
}

/// The number of a dialogue's turn, given in order of first appearance.
fn number<'a>(turns: &mut HashMap<(&'a str, &'a str), u32>, dialogue: &'a str, turn: &'a str) -> u32 {
    let next = turns.len() as u32 + 1;
    *turns.entry((dialogue, turn)).or_insert(next)
}

#[cfg(test)]
mod tests {
    use memkit_schema::{Dimensions, MemoryType, Pointer};

    use super::*;

    fn gold(dialogue: &str, turn: &str, content: &str) -> GoldRecord {
        GoldRecord {
            dialogue: dialogue.into(),
            turn_id: turn.into(),
            speaker: "Jon".into(),
            content: content.into(),
            dimension: ExtractedDimension {
                memory_type: MemoryType::Episodic,
                time: "2023-01-19".into(),
                location: String::new(),
                reason: String::new(),
                purpose: String::new(),
                keywords: vec!["job".into()],
            },
        }
    }

    fn record(window: &str, turn: &str, content: &str, time: &str) -> MemoryRecord {
        MemoryRecord {
            id: content.into(),
            content: content.into(),
            memory_type: MemoryType::Episodic,
            dims: Dimensions { time: time.into(), keywords: vec!["job".into()], ..Dimensions::default() },
            pointer: Pointer { window_id: window.into(), turn_ids: vec![turn.into()], speaker: "Jon".into(), timestamp: String::new() },
        }
    }

    #[test]
    fn records_match_gold_by_turn_and_content_within_their_dialogue() {
        let gold = [
            gold("conv-30", "D1:2", "Jon lost his job as a banker on 19 January 2023."),
            gold("conv-30", "D1:4", "Jon is starting a dance studio."),
            gold("lme-s/x", "x:1", "The user owns an iPhone 13 Pro."),
        ];
        let records = [
            // Same turn, close content, same time: a match with every field agreeing.
            record("conv-30/w0", "D1:2", "Jon lost his job as a banker on 2023-01-19.", "2023-01-19"),
            // Right content, wrong turn: no match.
            record("conv-30/w0", "D1:3", "Jon is starting a dance studio.", ""),
            // Another dialogue, outside the gold: left out.
            record("conv-26/w0", "D1:2", "Caroline went to a support group.", ""),
            // The LongMemEval dialogue, same turn and content, another time.
            record("lme-s/x/w0", "x:1", "The user owns an iPhone 13 Pro.", "2023-05"),
        ];
        let a = compare(&gold, &records);
        // 3 gold, 3 candidates in gold dialogues, 2 matched.
        assert_eq!((a.reference_records, a.candidate_records, a.matched), (3, 3, 2));
        assert!((a.precision - 2.0 / 3.0).abs() < 1e-12 && (a.recall - 2.0 / 3.0).abs() < 1e-12);
        // Time agrees on one of the two matches; keywords on both.
        assert_eq!(a.fields["time"], 0.5);
        assert_eq!(a.fields["keywords"], 1.0);
        assert!((a.field_recall["time"] - 1.0 / 3.0).abs() < 1e-12);
    }
}
