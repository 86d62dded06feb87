//! What a retrieved key is read as. Records are good retrieval keys (speaker named, time
//! resolved, one fact); the dialogue's own words hold the details answers need. [`Sentences`]
//! reads a key as the rule sentence of its source turns that shares most words with it, so a key
//! costs nothing when its sentence was read already and finds a sentence the sentence keys alone
//! ranked low when it was not (`read = "sentence"` in an eval recipe, `memkit query --read
//! sentence`; chosen on LoCoMo's development split, reports/locomo-keys-dev/).

use std::collections::{HashMap, HashSet};

use memkit_schema::{Dialogue, MemoryRecord};

use crate::rule_extractor::{RuleExtractor, RuleExtractorConfig};
use crate::text::terms;

/// A record as the answer model reads it: its day (the date of its source turn), then its content.
/// Temporal questions need the date.
pub fn dated(r: &MemoryRecord) -> String {
    match r.pointer.timestamp.get(..10) {
        Some(day) => format!("[{day}] {}", r.content),
        None => r.content.clone(),
    }
}

/// A dialogue's rule sentences (`per_sentence`) by source turn, in order, each with its distinct
/// terms.
#[derive(Debug, Default)]
pub struct Sentences {
    by_turn: HashMap<String, Vec<(MemoryRecord, HashSet<String>)>>,
}

impl Sentences {
    /// The rule sentences of `dialogue` under `config` (`per_sentence` is set here).
    pub fn of(dialogue: &Dialogue, config: RuleExtractorConfig) -> Self {
        let mut by_turn: HashMap<String, Vec<(MemoryRecord, HashSet<String>)>> = HashMap::new();
        for s in RuleExtractor::new(RuleExtractorConfig { per_sentence: true, ..config }).extract(dialogue) {
            let words = terms(&s.content).into_iter().collect();
            by_turn.entry(s.pointer.turn_ids[0].clone()).or_default().push((s, words));
        }
        Sentences { by_turn }
    }

    /// The sentences of one turn, in order (none for a turn the dialogue lacks).
    pub fn of_turn(&self, turn_id: &str) -> impl Iterator<Item = &MemoryRecord> {
        self.by_turn.get(turn_id).into_iter().flatten().map(|(s, _)| s)
    }

    /// The sentence of `key`'s turns that shares most distinct terms with its content (the first
    /// on a tie; a rule sentence is its own). `None` when its turns have no sentence or none
    /// shares a term: the key is read as itself.
    pub fn sentence_for(&self, key: &MemoryRecord) -> Option<&MemoryRecord> {
        let words: HashSet<String> = terms(&key.content).into_iter().collect();
        let candidates = key.pointer.turn_ids.iter().filter_map(|t| self.by_turn.get(t)).flatten();
        let scored: Vec<_> = candidates.map(|(s, terms)| ((terms.intersection(&words).count(), s.content == key.content), s)).collect();
        // `max_by_key` keeps the last of equals, so reversed, the first sentence wins a tie.
        match scored.into_iter().rev().max_by_key(|(score, _)| *score) {
            Some(((n, _), sentence)) if n > 0 => Some(sentence),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;
    use memkit_schema::{Role, Session, Turn};

    use super::*;
    use crate::rule_extractor::raw_turn_records;

    fn ann_says(texts: &[&str]) -> Dialogue {
        let at = NaiveDate::from_ymd_opt(2023, 5, 1).unwrap().and_hms_opt(10, 0, 0);
        let turns = texts
            .iter()
            .enumerate()
            .map(|(i, text)| Turn { timestamp: at, ..Turn::new(format!("D1:{}", i + 1), "Ann", Role::User, *text) })
            .collect();
        Dialogue { id: "d".into(), sessions: vec![Session { id: "s1".into(), date: at, turns }] }
    }

    /// A key reads the sentence of its turn it shares most words with (the first on a tie); a
    /// key sharing none, or pointing at a turn without sentences, reads itself; a rule sentence
    /// reads itself.
    #[test]
    fn a_key_reads_the_sentence_of_its_turn_it_shares_most_words_with() {
        let dialogue = ann_says(&["I adopted a puppy. Her name is Miso and she loves the beach.", "Work was busy today."]);
        let sentences = Sentences::of(&dialogue, RuleExtractorConfig::default());
        let first: Vec<&MemoryRecord> = sentences.of_turn("D1:1").collect();
        assert_eq!(first.len(), 2);
        let (adopted, miso) = (first[0], first[1]);
        assert!(adopted.content.contains("adopted") && miso.content.contains("Miso"), "{first:?}");
        let mut key = raw_turn_records(&dialogue)[0].clone();
        // "miso", "beach" and "loves" against "adopted", "puppy": the second sentence.
        key.content = "Ann's puppy Miso loves the beach".into();
        assert_eq!(sentences.sentence_for(&key), Some(miso));
        // One shared word each ("puppy", "beach"): the first.
        key.content = "puppy at the beach".into();
        assert_eq!(sentences.sentence_for(&key), Some(adopted));
        key.content = "zebra crossing".into();
        assert_eq!(sentences.sentence_for(&key), None);
        key.content = "Ann's puppy Miso".into();
        key.pointer.turn_ids = vec!["D9:9".into()];
        assert_eq!(sentences.sentence_for(&key), None);
        for s in sentences.of_turn("D1:1").chain(sentences.of_turn("D1:2")) {
            assert_eq!(sentences.sentence_for(s), Some(s));
        }
    }
}
