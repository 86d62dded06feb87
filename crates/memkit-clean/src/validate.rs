//! Validation of extracted records (SPEC §3): the window's structure (a record comes from a new
//! message of the window), its form (third person, the source message's speaker, a normalised
//! time no later than a year after the message), whom it is about (a speaker of the window, the
//! one whose message it is), and one record per fact ([`crate::duplicate`]). Every dropped
//! record is counted by reason and kept (reason + raw), so nothing bad reaches the training set
//! or the memory silently and nothing is lost. Reasons come from the parser's and grounding's
//! typed errors ([`ErrorKind`]) and from the checks here, never from the text of a message.
//!
//! A window is a training example only when its target is complete ([`Cleaned::complete`]):
//! no record the teacher found was dropped for a fault of its form (first person, a bad time, a
//! wrong speaker, a broken field). Duplicates, records no message supports and records that
//! restate a context message are not something the teacher found, so dropping them leaves the
//! target complete.

use std::collections::BTreeMap;

use chrono::Duration;
use memkit_data::Window;
use memkit_schema::{ErrorKind, ExtractedMemory, RecordError, Role, TimeSpan};
use memkit_text::person::first_person;
use memkit_text::time::normalise_time;
use memkit_text::words::tokens;
use serde::{Deserialize, Serialize};

use crate::duplicate::repeated;

/// Why a record was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Did not parse against the output schema.
    Schema,
    /// `source_id` is a context-only message (the overlap rule).
    ContextMessage,
    /// `source_id` is past the window.
    BadSourceId,
    /// Empty content.
    EmptyContent,
    /// Content in the first person ("I", "my") instead of naming the speaker.
    FirstPerson,
    /// The source message is an assistant's.
    AssistantSource,
    /// `source_speaker` is not the source message's speaker.
    SpeakerMismatch,
    /// `time` is not empty and not a normalised date or range (`2023-05-20`, `2023-05`,
    /// `2023`, `A/B`).
    TimeFormat,
    /// `time` starts more than a year after the source message was written.
    TimeAfterMessage,
    /// The same content as an earlier record of the window, or nearly
    /// ([`crate::duplicate::repeated`]): small models loop, and word one fact of a message
    /// several ways.
    Duplicate,
    /// No message of the window supports the content (grounding).
    Unsupported,
    /// The content names no one of the conversation (no speaker, not "the user"): general
    /// knowledge ("Rituals play a role in Paganism"), not a memory about a person.
    Impersonal,
    /// A record cut off mid-way (the reply is incomplete).
    Truncated,
    /// The content is about another speaker of the window, whom its source message neither is
    /// nor names: a small model swaps the speakers ("Gina lost her job" from Jon's "Lost my
    /// job").
    OtherPerson,
}

impl DropReason {
    /// The snake-case name used in ledgers and stats.
    pub fn name(self) -> &'static str {
        match self {
            Self::Schema => "schema",
            Self::ContextMessage => "context_message",
            Self::BadSourceId => "bad_source_id",
            Self::EmptyContent => "empty_content",
            Self::FirstPerson => "first_person",
            Self::AssistantSource => "assistant_source",
            Self::SpeakerMismatch => "speaker_mismatch",
            Self::TimeFormat => "time_format",
            Self::TimeAfterMessage => "time_after_message",
            Self::Duplicate => "duplicate",
            Self::Unsupported => "unsupported",
            Self::Impersonal => "impersonal",
            Self::Truncated => "truncated",
            Self::OtherPerson => "other_person",
        }
    }

    /// Whether the record was something the teacher found, lost through a fault of its form:
    /// a target without it is partial. Duplicates, unsupported records and restatements of a
    /// context message are not.
    pub fn loses_a_finding(self) -> bool {
        !matches!(self, Self::Duplicate | Self::Unsupported | Self::ContextMessage | Self::Impersonal)
    }

    fn of(kind: ErrorKind) -> Option<Self> {
        Some(match kind {
            ErrorKind::NotJson | ErrorKind::BrokenJson => return None,
            ErrorKind::Truncated => Self::Truncated,
            ErrorKind::Schema => Self::Schema,
            ErrorKind::EmptyContent => Self::EmptyContent,
            ErrorKind::ContextSource => Self::ContextMessage,
            ErrorKind::SourcePastWindow => Self::BadSourceId,
            ErrorKind::Unsupported => Self::Unsupported,
            ErrorKind::Duplicate => Self::Duplicate,
        })
    }
}

/// A dropped record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    /// Why.
    pub reason: DropReason,
    /// The record (or its raw text when it did not parse).
    pub raw: String,
}

/// The records of one window after cleaning: those that passed, and those that did not.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cleaned {
    /// Records that passed, in output order (grounded: re-pointed, fields cleared).
    pub records: Vec<ExtractedMemory>,
    /// Records that did not, each with the first rule it failed (the parser's errors among them).
    pub dropped: Vec<Dropped>,
    /// What grounding did with each parsed record (empty when grounding is off or did not run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grounding: Vec<crate::Grounded>,
    /// Times rewritten to their one exact normal form ([`normalise_time`]).
    #[serde(default)]
    pub time_fixes: usize,
}

impl Cleaned {
    /// Whether no record the extractor found was lost for a fault of its form
    /// ([`DropReason::loses_a_finding`]): only such a window is a whole training target.
    pub fn complete(&self) -> bool {
        !self.dropped.iter().any(|d| d.reason.loses_a_finding())
    }

    /// Dropped records per reason.
    pub fn drop_counts(&self) -> BTreeMap<DropReason, usize> {
        let mut counts = BTreeMap::new();
        for d in &self.dropped {
            *counts.entry(d.reason).or_default() += 1;
        }
        counts
    }
}

/// Why a reply as a whole failed, from its parse `errors`: not JSON, broken JSON, cut off at the
/// token limit, or a record cut off mid-way. Such a reply is never a training example, whatever
/// records it still holds.
pub fn whole_failure(errors: &[RecordError]) -> Option<(ErrorKind, String)> {
    errors.iter().find(|e| e.kind.is_whole_reply()).map(|e| (e.kind, e.reason.clone()))
}

/// Why a record's `source_id` is not a new message of `window` (the overlap rule, SPEC §2): a
/// context-only message, or a number past the window. `None` for a new message.
pub fn outside_suffix(window: &Window, source_id: u32) -> Option<(ErrorKind, String)> {
    if window.in_suffix(source_id) {
        return None;
    }
    Some(if (source_id as usize) <= window.context {
        (ErrorKind::ContextSource, format!("source_id {source_id} is a context-only message (1..={})", window.context))
    } else {
        (ErrorKind::SourcePastWindow, format!("source_id {source_id} is past the window's {} messages", window.messages.len()))
    })
}

/// The speakers of the window that `text` names (first names count, possessives too; "user"
/// where a speaker is the user), in window order.
fn named_speakers<'w>(window: &'w Window, text: &str) -> Vec<&'w str> {
    let words = tokens(&text.replace(['\'', '\u{2019}'], " "));
    let mut named: Vec<&str> = Vec::new();
    for m in &window.messages {
        if !named.contains(&m.turn.speaker.as_str()) && tokens(&m.turn.speaker).iter().any(|name| words.contains(name)) {
            named.push(&m.turn.speaker);
        }
    }
    named
}

/// The speaker a record is about when that is another than its source message's speaker and
/// the message does not name them: the record names only other speakers of the window, none of
/// whom the source message mentions.
pub fn other_person<'w>(window: &'w Window, record: &ExtractedMemory) -> Option<&'w str> {
    let message = window.message(record.source_id)?;
    let named = named_speakers(window, &record.content);
    let said = named_speakers(window, &format!("{} {}", message.turn.text, message.turn.caption.as_deref().unwrap_or_default()));
    if named.is_empty() || named.contains(&message.turn.speaker.as_str()) || named.iter().any(|n| said.contains(n)) {
        return None;
    }
    named.first().copied()
}

/// Checks each of `records` against `window`, and counts the records the parser or grounding
/// already turned into `errors` by their reasons.
pub fn validate(window: &Window, records: &[ExtractedMemory], errors: &[RecordError]) -> Cleaned {
    let mut out = Cleaned::default();
    for error in errors {
        if let Some(reason) = DropReason::of(error.kind) {
            out.dropped.push(Dropped { reason, raw: error.raw.clone() });
        }
    }
    for record in records {
        let mut record = record.clone();
        if let Some(time) = normalise_time(&record.dimension.time) {
            record.dimension.time = time;
            out.time_fixes += 1;
        }
        match check(window, &record) {
            None => out.records.push(record),
            Some(reason) => out.dropped.push(Dropped { reason, raw: serde_json::to_string(&record).expect("plain data") }),
        }
    }
    out.drop_duplicates();
    out
}

impl Cleaned {
    /// Drops records that nearly repeat an earlier kept one ([`repeated`]). Idempotent, so the
    /// dataset builder applies it again to older ledger entries.
    pub fn drop_duplicates(&mut self) {
        let records = std::mem::take(&mut self.records);
        for record in records {
            if repeated(&record, &self.records).is_some() {
                self.dropped.push(Dropped { reason: DropReason::Duplicate, raw: serde_json::to_string(&record).expect("plain data") });
            } else {
                self.records.push(record);
            }
        }
    }
}

fn check(window: &Window, record: &ExtractedMemory) -> Option<DropReason> {
    if let Some((kind, _)) = outside_suffix(window, record.source_id) {
        return DropReason::of(kind);
    }
    let Some(message) = window.message(record.source_id) else {
        return Some(DropReason::BadSourceId);
    };
    if record.content.trim().is_empty() {
        return Some(DropReason::EmptyContent);
    }
    if message.turn.role == Role::Assistant {
        return Some(DropReason::AssistantSource);
    }
    if first_person(&record.content) {
        return Some(DropReason::FirstPerson);
    }
    if !record.source_speaker.trim().eq_ignore_ascii_case(message.turn.speaker.trim()) {
        return Some(DropReason::SpeakerMismatch);
    }
    let time = record.dimension.time.trim();
    if !time.is_empty() {
        let Ok(span) = time.parse::<TimeSpan>() else {
            return Some(DropReason::TimeFormat);
        };
        if let Some(at) = message.turn.timestamp
            && span.start > at.date() + Duration::days(366)
        {
            return Some(DropReason::TimeAfterMessage);
        }
    }
    if named_speakers(window, &record.content).is_empty() {
        return Some(DropReason::Impersonal);
    }
    if other_person(window, record).is_some() {
        return Some(DropReason::OtherPerson);
    }
    None
}

#[cfg(test)]
mod tests {
    use memkit_data::WindowMessage;
    use memkit_schema::{ParseOutcome, parse_extractor_output};

    use super::*;

    fn checked(w: &Window, reply: &ParseOutcome) -> Cleaned {
        validate(w, &reply.records, &reply.errors)
    }

    fn window() -> Window {
        let at = chrono::NaiveDate::from_ymd_opt(2023, 5, 20).unwrap().and_hms_opt(10, 0, 0).unwrap();
        let message = |n: u32| WindowMessage::user(n, "Ann", "text").at(at);
        Window::of("d/w0", 1, vec![message(1), message(2), message(3).by_assistant()])
    }

    fn memory(source_id: u32, speaker: &str, content: &str, time: &str) -> serde_json::Value {
        serde_json::json!({"source_id": source_id, "source_speaker": speaker, "content": content,
            "dimension": {"memory_type": "fact", "time": time, "location": "", "reason": "", "purpose": "", "keywords": []}})
    }

    #[test]
    fn each_check_drops_with_its_reason() {
        let w = window();
        let memories = vec![
            memory(2, "Ann", "Ann adopted a cat named Tom.", "2023-05-18"),
            memory(2, "Ann", "Ann adopted a cat  named tom.", ""),
            // Token F1 with the first record: [ann adopt cat call tom] vs [ann adopt cat name tom] = 0.8.
            memory(2, "Ann", "Ann adopted a cat called Tom.", ""),
            memory(2, "Ann", "Ann visited Rome.", "2023/05/02"),
            memory(2, "Ann", "Rome is the capital of Italy.", ""),
            memory(1, "Ann", "Ann likes tea.", ""),
            memory(9, "Ann", "Ann likes tea.", ""),
            memory(2, "Ann", "  ", ""),
            memory(3, "assistant", "The assistant suggested a vet.", ""),
            memory(2, "Ann", "I adopted a cat.", ""),
            // Other facts than the first record's: a paraphrase of it in the same message would
            // be a duplicate (`SAME_MESSAGE_DUPLICATE_F1`) before any other check.
            memory(2, "Bob", "Bob fed the fish.", ""),
            memory(2, "Ann", "Ann bakes bread.", "last week"),
            memory(2, "Ann", "Ann plans a trip.", "2025-01"),
            memory(2, "Ann", "Ann said \"my cat is great\" to her friend.", "2023/2024"),
            serde_json::json!({"source_id": "x"}),
        ];
        let raw = serde_json::json!({ "memories": memories }).to_string();
        let reply = parse_extractor_output(&raw);
        let v = checked(&w, &reply);
        let kept: Vec<&str> = v.records.iter().map(|r| r.content.as_str()).collect();
        assert_eq!(kept, ["Ann adopted a cat named Tom.", "Ann visited Rome.", "Ann said \"my cat is great\" to her friend."]);
        assert_eq!((v.records[1].dimension.time.as_str(), v.time_fixes), ("2023-05-02", 1));
        let counts = v.drop_counts();
        let expect = [
            (DropReason::Schema, 1),
            (DropReason::ContextMessage, 1),
            (DropReason::BadSourceId, 1),
            (DropReason::EmptyContent, 1),
            (DropReason::FirstPerson, 1),
            (DropReason::AssistantSource, 1),
            (DropReason::SpeakerMismatch, 1),
            (DropReason::TimeFormat, 1),
            (DropReason::TimeAfterMessage, 1),
            (DropReason::Duplicate, 2),
            (DropReason::Impersonal, 1),
        ];
        assert_eq!(counts, expect.into_iter().collect(), "{:#?}", v.dropped);
        assert_eq!(whole_failure(&reply.errors), None);
        // First person, a bad time, a wrong speaker…: the teacher found something the target lacks.
        assert!(!v.complete());
    }

    #[test]
    fn duplicates_and_unsupported_records_leave_the_target_complete() {
        let w = window();
        let raw = serde_json::json!({"memories": [memory(2, "Ann", "Ann likes tea.", ""), memory(2, "Ann", "Ann likes tea!", "")]});
        let mut reply = parse_extractor_output(&raw.to_string());
        reply.errors.push(memkit_schema::RecordError {
            index: Some(2),
            kind: ErrorKind::Unsupported,
            reason: "no message supports it".into(),
            raw: String::new(),
        });
        let v = checked(&w, &reply);
        assert_eq!(v.drop_counts(), [(DropReason::Duplicate, 1), (DropReason::Unsupported, 1)].into_iter().collect());
        assert!(v.complete());
    }

    #[test]
    fn garbage_and_truncated_replies_are_whole_failures() {
        let garbage = parse_extractor_output("Sure! Here are the memories");
        assert_eq!(whole_failure(&garbage.errors).map(|f| f.0), Some(ErrorKind::NotJson));
        assert!(checked(&window(), &garbage).records.is_empty());
        // A reply that kept one whole record before it was cut off is still a failure.
        let cut = format!(r#"{{"memories": [{}, {{"source_id": 2, "content": "Ann has"#, memory(2, "Ann", "Ann likes tea.", ""));
        let cut = parse_extractor_output(&cut);
        assert_eq!(cut.records.len(), 1);
        assert_eq!(whole_failure(&cut.errors).map(|f| f.0), Some(ErrorKind::BrokenJson));
        // A reply cut at its token limit (the extractor adds this error) is one too.
        let at_limit = RecordError { index: None, kind: ErrorKind::Truncated, reason: "at the limit".into(), raw: String::new() };
        assert_eq!(whole_failure(&[at_limit]).map(|f| f.0), Some(ErrorKind::Truncated));
    }

    #[test]
    fn only_new_messages_of_the_window_are_sources() {
        let w = window();
        assert_eq!(outside_suffix(&w, 2), None);
        assert_eq!(outside_suffix(&w, 3), None, "an assistant's message is in the suffix; validation drops it for its role");
        let kinds = [0, 1, 4].map(|n| outside_suffix(&w, n).map(|o| o.0));
        assert_eq!(kinds, [Some(ErrorKind::ContextSource), Some(ErrorKind::ContextSource), Some(ErrorKind::SourcePastWindow)]);
    }

    #[test]
    fn a_record_about_the_other_speaker_is_dropped() {
        let w = Window::of(
            "conv/w0",
            0,
            vec![
                WindowMessage::user(1, "Jon", "Lost my job as a banker yesterday."),
                WindowMessage::user(2, "Gina", "Sorry about your job Jon! I lost mine at Door Dash too."),
            ],
        );
        let raw = serde_json::json!({"memories": [
            // Jon's message, Gina's name: swapped.
            memory(1, "Jon", "Gina lost her job as a banker.", ""),
            // Gina's message names Jon: a record about him is hers to give.
            memory(2, "Gina", "Jon lost his job.", ""),
            memory(2, "Gina", "Gina lost her job at Door Dash.", ""),
            memory(1, "Jon", "Jon's job loss worried Gina.", ""),
        ]});
        let v = checked(&w, &parse_extractor_output(&raw.to_string()));
        assert_eq!(v.drop_counts(), [(DropReason::OtherPerson, 1)].into_iter().collect());
        assert_eq!(v.records.len(), 3);
        assert!(!v.complete(), "the swapped record was a finding");
        let swapped = parse_extractor_output(&raw.to_string()).records.remove(0);
        assert_eq!(other_person(&w, &swapped), Some("Gina"));
    }
}
