//! The rule extractor on a real LoCoMo conversation (conv-26, memkit-data's loader):
//! record invariants, and how often its resolved times agree with LoCoMo's own answers to
//! "When did …" questions.

mod common;

use std::collections::HashSet;

use chrono::NaiveDate;
use memkit_engine::rule_extractor::{ContentStyle, RuleExtractor, RuleExtractorConfig, raw_turn_records};
use memkit_schema::{MemoryType, TimeSpan};

#[test]
fn records_cover_every_turn_with_valid_fields() {
    let dialogue = common::locomo_sample("conv-26").dialogue;
    assert_eq!(dialogue.len(), 419);
    let records = RuleExtractor::default().extract(&dialogue);
    assert_eq!(records.len(), dialogue.len());
    let ids: HashSet<&str> = records.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids.len(), records.len(), "ids are unique");
    for (r, t) in records.iter().zip(dialogue.turns()) {
        assert!(r.content.starts_with(&format!("{} said: ", t.speaker)), "{}", r.content);
        assert!(r.dims.time.parse::<TimeSpan>().is_ok(), "{}: time {:?}", r.id, r.dims.time);
        assert_eq!(r.pointer.turn_ids, std::slice::from_ref(&t.id));
        assert_eq!(r.pointer.window_id, "conv-26/turns");
        assert!(!r.pointer.timestamp.is_empty());
        assert!(r.dims.keywords.len() <= 6);
        if let Some(c) = &t.caption {
            assert!(r.content.ends_with(&format!("[shares photo: {}]", c.trim())));
        }
    }
    // All three types occur in a real conversation.
    let types: HashSet<MemoryType> = records.iter().map(|r| r.memory_type).collect();
    assert_eq!(types.len(), 3);

    let sentences =
        RuleExtractor::new(RuleExtractorConfig { per_sentence: true, style: ContentStyle::Colon, ..Default::default() }).extract(&dialogue);
    assert!(sentences.len() > records.len() * 3 / 2, "{} sentence records", sentences.len());
    assert_eq!(raw_turn_records(&dialogue).len(), dialogue.len());
}

/// LoCoMo answers many "When did …" questions with a date ("7 May 2023") and one evidence turn.
/// Share of those (all ten conversations) where the rule record of the evidence turn carries
/// exactly that day: measured 11 of 11 when written. Most of these turns say "yesterday" or
/// "last Friday", so the test fails when relative times stop resolving against the message date.
#[test]
fn resolved_times_agree_with_locomo_answers() {
    let (mut agree, mut total) = (0, 0);
    for sample in common::locomo() {
        let records = RuleExtractor::default().extract(&sample.dialogue);
        for q in sample.questions.iter().filter(|q| q.category == Some(2)) {
            let Ok(day) = NaiveDate::parse_from_str(&q.answer, "%d %B %Y") else { continue };
            let [evidence] = q.evidence.as_slice() else { continue };
            let record = records.iter().find(|r| &r.pointer.turn_ids[0] == evidence).unwrap();
            total += 1;
            agree += usize::from(record.dims.time == day.format("%Y-%m-%d").to_string());
        }
    }
    assert!(total >= 10, "{total} dated questions");
    assert!(agree * 10 >= total * 8, "{agree} of {total} resolved times agree with the answer");
}
