//! Memory records, their dimensions and pointers, and the extractor's JSON output.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

use crate::Error;

/// The three memory types of DimMem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryType {
    /// Stable knowledge, status or relation ("Ann works as a nurse").
    Fact,
    /// Something that happened or is planned ("Ann ran a charity race on 2023-05-20").
    Episodic,
    /// A long-term preference, habit, trait or belief ("Ann loves hiking").
    Profile,
}

impl MemoryType {
    /// All types, in a fixed order.
    pub const ALL: [MemoryType; 3] = [MemoryType::Fact, MemoryType::Episodic, MemoryType::Profile];

    /// The lowercase name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryType::Fact => "fact",
            MemoryType::Episodic => "episodic",
            MemoryType::Profile => "profile",
        }
    }
}

impl fmt::Display for MemoryType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MemoryType {
    type Err = Error;
    /// Case-insensitive; accepts the common synonyms models write (`event`, `episode`,
    /// `preference`, `persona`).
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fact" | "facts" | "factual" => Ok(MemoryType::Fact),
            "episodic" | "episode" | "event" => Ok(MemoryType::Episodic),
            "profile" | "preference" | "persona" | "habit" => Ok(MemoryType::Profile),
            _ => Err(Error::UnknownMemoryType(s.to_string())),
        }
    }
}

/// The dimensions of a record. Empty string (or empty list) when there is no evidence.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Dimensions {
    /// ISO day `YYYY-MM-DD`, month `YYYY-MM`, year `YYYY`, range `A/B`, or empty.
    pub time: String,
    /// Where it happened or holds.
    pub location: String,
    /// Cause or trigger.
    pub reason: String,
    /// Goal.
    pub purpose: String,
    /// Short noun phrases.
    pub keywords: Vec<String>,
}

/// Where a record came from: the window, the source message(s), the speaker and the timestamp.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Pointer {
    /// Window id (see memkit-data's `Window::id`).
    pub window_id: String,
    /// Dataset turn ids of the source message(s), e.g. LoCoMo `D3:7`.
    pub turn_ids: Vec<String>,
    /// Who said it.
    pub speaker: String,
    /// Message timestamp, `YYYY-MM-DDTHH:MM:SS`, or empty when unknown.
    pub timestamp: String,
}

impl Pointer {
    /// The dialogue of the record's window: window ids are `<dialogue id>/<window>` (`conv-26/w3`,
    /// `conv-26/turns`), and a dialogue id may itself hold `/`. Empty when the window id has no
    /// `/` (records written without one).
    pub fn dialogue_id(&self) -> &str {
        self.window_id.rsplit_once('/').map_or("", |(dialogue, _)| dialogue)
    }

    /// Whether the record's window is one of `dialogue`'s.
    pub fn belongs_to(&self, dialogue: &str) -> bool {
        !dialogue.is_empty() && self.dialogue_id() == dialogue
    }
}

/// A memory record `m = <id, content, type, dims, pointer>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryRecord {
    /// Unique within a store.
    pub id: String,
    /// One self-contained sentence.
    pub content: String,
    /// fact / episodic / profile.
    #[serde(rename = "type")]
    pub memory_type: MemoryType,
    /// Time, location, reason, purpose, keywords.
    #[serde(default)]
    pub dims: Dimensions,
    /// Source window and turn(s).
    #[serde(default)]
    pub pointer: Pointer,
}

/// The `dimension` object of one extractor output record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtractedDimension {
    /// fact / episodic / profile.
    pub memory_type: MemoryType,
    /// See [`Dimensions::time`].
    #[serde(default)]
    pub time: String,
    /// See [`Dimensions::location`].
    #[serde(default)]
    pub location: String,
    /// See [`Dimensions::reason`].
    #[serde(default)]
    pub reason: String,
    /// See [`Dimensions::purpose`].
    #[serde(default)]
    pub purpose: String,
    /// See [`Dimensions::keywords`].
    #[serde(default)]
    pub keywords: Vec<String>,
}

/// One record as the extractor writes it; `source_id` is the message number inside the window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtractedMemory {
    /// 1-based message number inside the window.
    pub source_id: u32,
    /// Speaker of the source message (the decomposed teacher does not write it: it follows from
    /// `source_id`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source_speaker: String,
    /// One self-contained sentence.
    pub content: String,
    /// Type and dimensions.
    pub dimension: ExtractedDimension,
}

/// The whole extractor output: `{"memories": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtractorOutput {
    /// The records, in output order.
    pub memories: Vec<ExtractedMemory>,
}

impl ExtractedMemory {
    /// Turns an extracted record into a stored one, given its id and pointer.
    pub fn into_record(self, id: String, pointer: Pointer) -> MemoryRecord {
        let d = self.dimension;
        MemoryRecord {
            id,
            content: self.content,
            memory_type: d.memory_type,
            dims: Dimensions { time: d.time, location: d.location, reason: d.reason, purpose: d.purpose, keywords: d.keywords },
            pointer,
        }
    }
}

/// The window ledger next to a records file: `memkit extract --output F` writes one line per
/// finished window to `F.windows.jsonl` (what makes the run resumable), and evaluation reads it
/// for extraction cost and agreement.
pub fn window_ledger_path(records_file: &std::path::Path) -> std::path::PathBuf {
    let mut name = records_file.file_name().unwrap_or_default().to_os_string();
    name.push(".windows.jsonl");
    records_file.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pointer_belongs_to_the_dialogue_before_its_window() {
        let pointer = Pointer { window_id: "lme-s/gpt4_8c8961ae/w40".into(), ..Pointer::default() };
        assert_eq!(pointer.dialogue_id(), "lme-s/gpt4_8c8961ae");
        assert!(pointer.belongs_to("lme-s/gpt4_8c8961ae"));
        assert!(!pointer.belongs_to("lme-s"), "a dialogue id is the whole part before the window");
        assert!(!pointer.belongs_to("lme-s/gpt4_8c8961a"), "a prefix that stops inside an id");
        assert!(!pointer.belongs_to("lme-s/gpt4_8c8961ae/w40"), "the window itself is no dialogue");
        assert!(!Pointer { window_id: "conv-26".into(), ..Pointer::default() }.belongs_to("conv-26"));
        assert_eq!(Pointer::default().dialogue_id(), "");
        assert!(!Pointer::default().belongs_to(""));
    }

    #[test]
    fn memory_type_parses_synonyms_and_rejects_others() {
        assert_eq!("Episodic".parse::<MemoryType>(), Ok(MemoryType::Episodic));
        assert_eq!(" event ".parse::<MemoryType>(), Ok(MemoryType::Episodic));
        assert_eq!("preference".parse::<MemoryType>(), Ok(MemoryType::Profile));
        assert!("opinion".parse::<MemoryType>().is_err());
    }

    #[test]
    fn record_round_trips_through_json() {
        let r = MemoryRecord {
            id: "w0-1".into(),
            content: "Ann adopted a dog.".into(),
            memory_type: MemoryType::Episodic,
            dims: Dimensions { time: "2023-05".into(), keywords: vec!["dog".into()], ..Default::default() },
            pointer: Pointer { window_id: "conv-26/w0".into(), turn_ids: vec!["D1:3".into()], ..Default::default() },
        };
        let s = serde_json::to_string(&r).unwrap();
        assert!(s.contains("\"type\":\"episodic\""));
        assert_eq!(serde_json::from_str::<MemoryRecord>(&s).unwrap(), r);
    }
}

/// What DimMem's dimension-aware update does with a new record that resembles a stored one (the
/// rule and the model consolidators' answer, and the action `update.j2` asks for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum UpdateAction {
    /// Same fact, event or preference: fold the new record into the stored one.
    Merge,
    /// Same attribute with a new value: the new record replaces the stored one.
    Supersede,
    /// Different facts or events: keep both.
    KeepBoth,
}
