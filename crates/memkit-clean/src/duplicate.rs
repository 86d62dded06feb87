//! The near-duplicate rule: one fact is one record.
//!
//! Small models loop (they write the same record again until the record cap), and a teacher
//! words one fact of a message two or three ways. Both thresholds are token F1 on the content
//! (LoCoMo's, stemmed: [`memkit_text::f1::f1_score`]). Cleaning drops them within a window, after
//! validation (a record that repeats an invalid one is not a repeat), the agreement scorers drop
//! them before matching, and decoding ends a reply at its first repeat: all with [`repeated`].

use memkit_schema::ExtractedMemory;

/// Content token F1 at which two records count as one, whatever their messages. Small models
/// loop: they write the same record again until the record cap.
pub const NEAR_DUPLICATE_F1: f64 = 0.8;

/// Content token F1 at which two records of the same source message count as one fact said
/// twice: the teacher words one fact of a message two or three ways ("The user is looking for a
/// charity event" and "The user is looking for charity events in their area"). Chosen on the
/// gold set (the teacher's gold records re-scored with
/// `reports/smollm2-135m-messages/same_message_duplicates.py`): from 0.8 (the loop rule alone)
/// to 0.7 / 0.6 / 0.5 the teacher's gold F1 went 0.364 / 0.373 / 0.399 / 0.391, its matched
/// records 68 / 67 / 67 / 63. Records of different messages keep the looser loop rule: two
/// people, or two days, can do the same thing.
pub const SAME_MESSAGE_DUPLICATE_F1: f64 = 0.6;

/// The first of `earlier` that `record` nearly repeats: content token F1 ≥
/// [`NEAR_DUPLICATE_F1`], or ≥ [`SAME_MESSAGE_DUPLICATE_F1`] with the same `source_id`.
pub fn repeated<'a>(record: &ExtractedMemory, earlier: &'a [ExtractedMemory]) -> Option<&'a ExtractedMemory> {
    earlier.iter().find(|k| {
        let min = if k.source_id == record.source_id { SAME_MESSAGE_DUPLICATE_F1 } else { NEAR_DUPLICATE_F1 };
        memkit_text::f1::f1_score(&record.content, &k.content) >= min
    })
}
