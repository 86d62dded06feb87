//! Validation and filtering of teacher records (SPEC §3). Every dropped record is counted by
//! reason and kept (reason + raw) in the ledger, so nothing bad reaches the training set
//! silently and nothing is lost.

use std::collections::BTreeMap;

use chrono::Duration;
use memkit_data::Window;
use memkit_infer::Extraction;
use memkit_schema::{ExtractedMemory, Role, TimeSpan};
use serde::{Deserialize, Serialize};

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
    /// The same content as an earlier record of the window (small teachers loop).
    Duplicate,
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
        }
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

/// The records of one window that passed, and the ones that did not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Validated {
    /// Records that passed every check, in output order.
    pub records: Vec<ExtractedMemory>,
    /// Records that failed, with the first failed check.
    pub dropped: Vec<Dropped>,
}

impl Validated {
    /// Dropped records per reason.
    pub fn drop_counts(&self) -> BTreeMap<DropReason, usize> {
        let mut counts = BTreeMap::new();
        for d in &self.dropped {
            *counts.entry(d.reason).or_default() += 1;
        }
        counts
    }
}

/// Whether the reply as a whole failed: not JSON, or no `memories` array.
pub fn unparsable(extraction: &Extraction) -> Option<String> {
    extraction.errors.iter().find(|e| e.index.is_none() && !is_source_error(&e.reason)).map(|e| e.reason.clone())
}

fn is_source_error(reason: &str) -> bool {
    reason.starts_with("source_id ")
}

/// Checks each record of `extraction` against `window`.
pub fn validate(window: &Window, extraction: &Extraction) -> Validated {
    let mut out = Validated::default();
    for error in &extraction.errors {
        let reason = if error.reason.contains("context-only") {
            DropReason::ContextMessage
        } else if error.reason.contains("past the window") {
            DropReason::BadSourceId
        } else if error.index.is_none() {
            continue; // a whole-output failure, see `unparsable`
        } else if error.reason.contains("`content` is empty") {
            DropReason::EmptyContent
        } else {
            DropReason::Schema
        };
        out.dropped.push(Dropped { reason, raw: error.raw.clone() });
    }
    for record in &extraction.records {
        match check(window, record) {
            None => out.records.push(record.clone()),
            Some(reason) => out.dropped.push(Dropped { reason, raw: serde_json::to_string(record).expect("plain data") }),
        }
    }
    out.drop_duplicates();
    out
}

impl Validated {
    /// Drops records whose content (case and spacing aside) repeats an earlier one's.
    /// Idempotent, so the dataset builder applies it again to older ledger entries.
    pub fn drop_duplicates(&mut self) {
        let mut seen = std::collections::HashSet::new();
        let records = std::mem::take(&mut self.records);
        for record in records {
            let normalised = record.content.to_lowercase().split_whitespace().collect::<Vec<_>>().join(" ");
            if seen.insert(normalised) {
                self.records.push(record);
            } else {
                self.dropped.push(Dropped { reason: DropReason::Duplicate, raw: serde_json::to_string(&record).expect("plain data") });
            }
        }
    }
}

fn check(window: &Window, record: &ExtractedMemory) -> Option<DropReason> {
    let Some(message) = window.message(record.source_id) else {
        return Some(DropReason::BadSourceId);
    };
    if record.content.trim().is_empty() {
        return Some(DropReason::EmptyContent);
    }
    if message.role == Role::Assistant {
        return Some(DropReason::AssistantSource);
    }
    if first_person(&record.content) {
        return Some(DropReason::FirstPerson);
    }
    if !record.source_speaker.trim().eq_ignore_ascii_case(message.speaker.trim()) {
        return Some(DropReason::SpeakerMismatch);
    }
    let time = record.dimension.time.trim();
    if !time.is_empty() {
        let Ok(span) = time.parse::<TimeSpan>() else {
            return Some(DropReason::TimeFormat);
        };
        if let Some(at) = message.timestamp
            && span.start > at.date() + Duration::days(366)
        {
            return Some(DropReason::TimeAfterMessage);
        }
    }
    None
}

/// Whether `text` speaks in the first person singular (outside quotes it should name the
/// speaker: "Emily plays piano", not "I play piano").
pub fn first_person(text: &str) -> bool {
    const WORDS: [&str; 9] = ["i", "i'm", "i've", "i'd", "i'll", "me", "my", "mine", "myself"];
    let mut in_quote = false;
    for raw in text.split_whitespace() {
        let starts = raw.starts_with(['"', '\u{201c}']);
        let word: String = raw.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'').replace('\u{2019}', "'").to_lowercase();
        if starts {
            in_quote = true;
        }
        if !in_quote && WORDS.contains(&word.as_str()) {
            return true;
        }
        if raw.ends_with(['"', '\u{201d}']) || raw.trim_end_matches(['.', ',', '!', '?']).ends_with(['"', '\u{201d}']) {
            in_quote = false;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use memkit_data::WindowMessage;
    use memkit_infer::extract::Usage;

    use super::*;

    fn window() -> Window {
        let at = chrono::NaiveDate::from_ymd_opt(2023, 5, 20).unwrap().and_hms_opt(10, 0, 0).unwrap();
        let message = |number: u32, speaker: &str, role| WindowMessage {
            number,
            turn_id: format!("s:{number}"),
            speaker: speaker.into(),
            role,
            text: "text".into(),
            caption: None,
            timestamp: Some(at),
            assistant_reply: None,
        };
        Window {
            id: "d/w0".into(),
            dialogue_id: "d".into(),
            index: 0,
            context: 1,
            max_message_chars: 8000,
            messages: vec![message(1, "Ann", Role::User), message(2, "Ann", Role::User), message(3, "assistant", Role::Assistant)],
        }
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
            memory(1, "Ann", "Ann likes tea.", ""),
            memory(9, "Ann", "Ann likes tea.", ""),
            memory(2, "Ann", "  ", ""),
            memory(3, "assistant", "The assistant suggested a vet.", ""),
            memory(2, "Ann", "I adopted a cat.", ""),
            memory(2, "Bob", "Bob adopted a cat.", ""),
            memory(2, "Ann", "Ann adopts a cat.", "last week"),
            memory(2, "Ann", "Ann plans a trip.", "2025-01"),
            memory(2, "Ann", "Ann said \"my cat is great\" to her friend.", "2023/2024"),
            serde_json::json!({"source_id": "x"}),
        ];
        let raw = serde_json::json!({ "memories": memories }).to_string();
        let extraction = Extraction::from_output(&w, raw, Usage::default());
        let v = validate(&w, &extraction);
        let kept: Vec<&str> = v.records.iter().map(|r| r.content.as_str()).collect();
        assert_eq!(kept, ["Ann adopted a cat named Tom.", "Ann said \"my cat is great\" to her friend."]);
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
            (DropReason::Duplicate, 1),
        ];
        assert_eq!(counts, expect.into_iter().collect(), "{:#?}", v.dropped);
        assert_eq!(unparsable(&extraction), None);
    }

    #[test]
    fn garbage_is_unparsable() {
        let extraction = Extraction::from_output(&window(), "Sure! Here are the memories".into(), Usage::default());
        assert!(unparsable(&extraction).is_some());
        assert!(validate(&window(), &extraction).records.is_empty());
    }

    #[test]
    fn first_person_ignores_quotes_and_lookalikes() {
        assert!(first_person("I love hiking."));
        assert!(first_person("Ann told me about it."));
        assert!(first_person("Sold my car"));
        assert!(!first_person("Ann said \"I love it\"."));
        assert!(!first_person("Ann visited Milan in Italy."));
        assert!(!first_person("Ann's mine-craft server"));
    }
}
