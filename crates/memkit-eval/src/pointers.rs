//! Pointer accuracy: does a record point at the turn that says what it says?
//!
//! Evidence recall goes through records' pointers, so a record with the right content and the
//! wrong source turn counts as a miss. This measures the pointers on their own, without gold
//! labels: for each record, the record's content terms ([`memkit_engine::text::terms`], minus
//! the dialogue's speaker names, which every turn of a speaker implies) are looked up in every
//! turn of the dialogue (text and photo caption). A record's pointer is **right** when one of
//! the turns it points at covers as many of its terms as the best-covering turn of the dialogue
//! (ties count as right). Records that share no term with any turn are not checked.
//!
//! Rule records copy their turn, so they score ~1.0 (the check's sanity bound); extracted
//! records paraphrase, so a lower figure mixes wrong pointers with loose wording. It is a
//! diagnostic next to evidence recall, not a gold metric.

use std::collections::{HashMap, HashSet};

use memkit_engine::text::terms;
use memkit_schema::{Dialogue, MemoryRecord};

/// Pointer checks over some records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PointerTally {
    /// Records whose pointed turn covers their terms as well as the best turn does.
    pub right: usize,
    /// Records checked (those sharing at least one term with some turn).
    pub checked: usize,
}

impl PointerTally {
    /// Adds another tally.
    pub fn add(&mut self, other: PointerTally) {
        self.right += other.right;
        self.checked += other.checked;
    }

    /// `right / checked`, `None` when nothing was checked.
    pub fn accuracy(&self) -> Option<f64> {
        (self.checked > 0).then(|| self.right as f64 / self.checked as f64)
    }
}

/// Checks every record's pointer against the turns of its dialogue.
pub fn check_pointers(dialogue: &Dialogue, records: &[MemoryRecord]) -> PointerTally {
    let speakers: HashSet<String> = dialogue.sessions.iter().flat_map(|s| &s.turns).flat_map(|t| terms(&t.speaker)).collect();
    let turns: Vec<(&str, HashSet<String>)> = dialogue
        .sessions
        .iter()
        .flat_map(|s| &s.turns)
        .map(|t| {
            let text = match &t.caption {
                Some(c) => format!("{} {c}", t.text),
                None => t.text.clone(),
            };
            (t.id.as_str(), terms(&text).into_iter().collect())
        })
        .collect();
    let mut postings: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, (_, set)) in turns.iter().enumerate() {
        for term in set {
            postings.entry(term.as_str()).or_default().push(i);
        }
    }
    let index: HashMap<&str, usize> = turns.iter().enumerate().map(|(i, (id, _))| (*id, i)).collect();
    let mut tally = PointerTally::default();
    for r in records {
        let mut record_terms: Vec<String> = terms(&r.content).into_iter().filter(|t| !speakers.contains(t)).collect();
        record_terms.sort_unstable();
        record_terms.dedup();
        let mut cover = vec![0usize; turns.len()];
        for t in &record_terms {
            for &i in postings.get(t.as_str()).into_iter().flatten() {
                cover[i] += 1;
            }
        }
        let best = cover.iter().copied().max().unwrap_or(0);
        if best == 0 {
            continue;
        }
        tally.checked += 1;
        let pointed = r.pointer.turn_ids.iter().filter_map(|id| index.get(id.as_str())).map(|&i| cover[i]).max().unwrap_or(0);
        tally.right += usize::from(pointed == best);
    }
    tally
}

#[cfg(test)]
mod tests {
    use memkit_schema::{MemoryType, Pointer, Role, Session, Turn};

    use super::*;

    fn turn(id: &str, speaker: &str, text: &str) -> Turn {
        Turn::new(id, speaker, Role::User, text)
    }

    fn record(content: &str, turn_ids: &[&str]) -> MemoryRecord {
        MemoryRecord {
            id: content.into(),
            content: content.into(),
            memory_type: MemoryType::Episodic,
            dims: Default::default(),
            pointer: Pointer { turn_ids: turn_ids.iter().map(|t| t.to_string()).collect(), ..Default::default() },
        }
    }

    #[test]
    fn right_wrong_tied_and_unchecked_pointers() {
        let dialogue = Dialogue {
            id: "d".into(),
            sessions: vec![Session {
                id: "s1".into(),
                date: None,
                turns: vec![
                    turn("D1:1", "Caroline", "I went to a support group yesterday."),
                    turn("D1:2", "Melanie", "Caroline, I painted a sunrise by the lake!"),
                    turn("D1:3", "Caroline", "The support group was great."),
                ],
            }],
        };
        let records = [
            // "Melanie painted a sunrise": terms painted, sunrise (speaker names dropped) → D1:2.
            record("Melanie painted a sunrise.", &["D1:2"]),
            // Same content pointed at the wrong turn.
            record("Melanie painted a sunrise.", &["D1:1"]),
            // support + group appear in D1:1 and D1:3 alike: either is right.
            record("Caroline attended a support group.", &["D1:3"]),
            // A pointer to a missing turn id is wrong when another turn covers the terms.
            record("Caroline went to a support group.", &["D9:9"]),
            // Nothing in common with any turn: not checked.
            record("Caroline likes astronomy.", &["D1:1"]),
        ];
        let tally = check_pointers(&dialogue, &records);
        assert_eq!(tally, PointerTally { right: 2, checked: 4 });
        assert_eq!(tally.accuracy(), Some(0.5));
        assert_eq!(PointerTally::default().accuracy(), None);
    }
}
