//! The no-model baseline extractor, and the raw-turn baseline.
//!
//! [`RuleExtractor`] turns each turn of a [`Dialogue`] (or each sentence, with
//! [`RuleExtractorConfig::per_sentence`]) into one [`MemoryRecord`] by rules alone. It is a
//! baseline to compare trained extractors against and a way to run the engine without a model,
//! not an extractor in its own right: its content is the turn itself with the speaker named
//! ("Caroline said: …"), and its dimensions come from surface cues:
//!
//! - **time**: the first time expression resolved against the message date by
//!   [`memkit_text::time::mentioned_time`] ("yesterday" → the day before), else the message date;
//! - **type**: "I like / love / prefer / always / usually" → profile; past-tense and time cues
//!   ("went", "did", "yesterday", "ago", "-ed") or plans → episodic; anything else → fact;
//! - **location**: the first capitalised place after a locative preposition;
//! - **reason** / **purpose**: the clause after "because" / "so that", "in order to";
//! - **keywords**: capitalised names and quoted titles, then the most frequent (then longest)
//!   content words.
//!
//! [`raw_turn_records`] makes the "raw turns" baseline: one record per turn, `Speaker: text`,
//! no dimensions.
//!
//! Pointers name the window `<dialogue id>/turns`, the turn id, speaker and timestamp, so
//! evidence recall and assistant recall work on these records as on extracted ones.

use std::collections::HashMap;

use chrono::NaiveDateTime;
use memkit_schema::{Dialogue, Dimensions, MemoryRecord, MemoryType, Pointer, Role, Session, Turn};
use memkit_text::time::mentioned_time;
use serde::{Deserialize, Serialize};

use crate::text::{CALENDAR_WORDS, content_tokens, is_filler, is_vague, location_mentions, named_phrases, tokens};

/// How a record's content names the speaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContentStyle {
    /// `Caroline said: I went to a support group yesterday.`
    #[default]
    Said,
    /// `Caroline: I went to a support group yesterday.`
    Colon,
}

/// Settings of [`RuleExtractor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuleExtractorConfig {
    /// One record per sentence instead of per turn.
    pub per_sentence: bool,
    /// Also make records from assistant turns (off: SPEC §2 extracts user messages, and the
    /// assistant reply is fetched on demand through the pointer).
    pub include_assistant: bool,
    /// Most keywords per record.
    pub max_keywords: usize,
    /// How the content names the speaker.
    pub style: ContentStyle,
}

impl Default for RuleExtractorConfig {
    fn default() -> Self {
        RuleExtractorConfig { per_sentence: false, include_assistant: false, max_keywords: 6, style: ContentStyle::Said }
    }
}

/// The rule-based baseline extractor (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct RuleExtractor {
    config: RuleExtractorConfig,
}

/// The pointer window id of turn-level records: `<dialogue id>/turns`.
pub fn turns_window_id(dialogue: &Dialogue) -> String {
    format!("{}/turns", dialogue.id)
}

fn turn_time(turn: &Turn, session: &Session) -> Option<NaiveDateTime> {
    turn.timestamp.or(session.date)
}

fn pointer(dialogue: &Dialogue, session: &Session, turn: &Turn) -> Pointer {
    Pointer {
        window_id: turns_window_id(dialogue),
        turn_ids: vec![turn.id.clone()],
        speaker: turn.speaker.clone(),
        timestamp: turn_time(turn, session).map(|t| t.format("%Y-%m-%dT%H:%M:%S").to_string()).unwrap_or_default(),
    }
}

fn with_caption(text: &str, caption: Option<&str>) -> String {
    match caption.map(str::trim).filter(|c| !c.is_empty()) {
        Some(c) if text.trim().is_empty() => format!("[shares photo: {c}]"),
        Some(c) => format!("{} [shares photo: {c}]", text.trim()),
        None => text.trim().to_string(),
    }
}

/// One record per turn, `Speaker: text` (photo caption appended), no dimensions; the type is
/// `fact` for every record, since the raw baseline has no types.
pub fn raw_turn_records(dialogue: &Dialogue) -> Vec<MemoryRecord> {
    let mut out = Vec::with_capacity(dialogue.len());
    for session in &dialogue.sessions {
        for turn in &session.turns {
            out.push(MemoryRecord {
                id: format!("{}/{}", dialogue.id, turn.id),
                content: format!("{}: {}", turn.speaker, with_caption(&turn.text, turn.caption.as_deref())),
                memory_type: MemoryType::Fact,
                dims: Dimensions::default(),
                pointer: pointer(dialogue, session, turn),
            });
        }
    }
    out
}

/// Splits a message into sentences at `.`, `!` or `?` followed by a space.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for i in 0..bytes.len() {
        if matches!(bytes[i], b'.' | b'!' | b'?') && bytes.get(i + 1).is_some_and(|b| b.is_ascii_whitespace()) {
            out.push(text[start..=i].trim());
            start = i + 1;
        }
    }
    out.push(text[start..].trim());
    out.retain(|s| !s.is_empty());
    out
}

const PROFILE_CUES: &[&str] = &[
    "i like",
    "i love",
    "i prefer",
    "i enjoy",
    "i always",
    "i usually",
    "i often",
    "i hate",
    "my favorite",
    "my favourite",
    "i'm a fan",
    "i am a fan",
    "i'm into",
    "i adore",
    "i tend to",
];
const EPISODIC_WORDS: &[&str] = &[
    "yesterday",
    "went",
    "did",
    "ago",
    "last",
    "today",
    "tonight",
    "met",
    "took",
    "made",
    "got",
    "saw",
    "ran",
    "bought",
    "began",
    "gave",
    "had",
    "came",
    "won",
    "found",
    "planning",
    "plan",
    "tomorrow",
    "upcoming",
    "next",
];
/// `-ed` words that are adjectives far more often than past events.
const NOT_PAST: &[&str] = &[
    "interested",
    "excited",
    "tired",
    "bored",
    "scared",
    "worried",
    "related",
    "based",
    "used",
    "supposed",
    "blessed",
    "amazed",
    "need",
    "indeed",
    "red",
    "bed",
    "married",
    "talented",
    "dedicated",
    "determined",
    "motivated",
    "inspired",
    "thrilled",
    "stressed",
    "overwhelmed",
    "shed",
    "speed",
    "feed",
    "seed",
    "weed",
    "embed",
    "shared",
];
/// Conversational words that carry nothing to retrieve by, besides [`FILLER`](memkit_text::words::FILLER)
/// and [`VAGUE`](memkit_text::words::VAGUE):
/// time words (a record's time is its own dimension) and contractions as tokens.
const CHATTER: &[&str] = &[
    "hello",
    "ive",
    "dont",
    "thats",
    "youre",
    "gonna",
    "ill",
    "let",
    "lets",
    "yesterday",
    "today",
    "tomorrow",
    "tonight",
    "ago",
    "day",
    "days",
    "week",
    "weeks",
    "month",
    "months",
    "year",
    "years",
    "last",
    "next",
];

/// The memory type a message suggests by its cue words.
pub fn memory_type_of(text: &str) -> MemoryType {
    let lower = text.to_lowercase().replace('’', "'");
    if PROFILE_CUES.iter().any(|c| lower.contains(c)) {
        return MemoryType::Profile;
    }
    let past = |w: &String| w.len() > 4 && w.ends_with("ed") && !NOT_PAST.contains(&w.as_str());
    let words = tokens(&lower);
    if words.iter().any(|w| EPISODIC_WORDS.contains(&w.as_str()) || past(w)) || lower.contains("going to") {
        return MemoryType::Episodic;
    }
    MemoryType::Fact
}

/// Names first, then the most frequent (then longest, then earliest) content words.
fn rule_keywords(text: &str, max: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in named_phrases(text) {
        if out.len() < max && !out.iter().any(|o| o.eq_ignore_ascii_case(&p.text)) {
            out.push(p.text);
        }
    }
    let covered: Vec<String> = out.iter().flat_map(|k| tokens(k)).collect();
    let words = content_tokens(text);
    let mut stats: HashMap<&str, (usize, usize)> = HashMap::new();
    for (i, w) in words.iter().enumerate() {
        let e = stats.entry(w.as_str()).or_insert((0, i));
        e.0 += 1;
    }
    let mut ranked: Vec<(&str, (usize, usize))> = stats
        .into_iter()
        .filter(|(w, _)| {
            w.len() > 2
                && !is_filler(w)
                && !is_vague(w)
                && !CHATTER.contains(w)
                && !CALENDAR_WORDS.contains(w)
                && !covered.iter().any(|c| c == w)
                && !w.chars().all(|c| c.is_ascii_digit())
        })
        .collect();
    ranked.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(b.0.len().cmp(&a.0.len())).then(a.1.1.cmp(&b.1.1)));
    for (w, _) in ranked {
        if out.len() >= max {
            break;
        }
        out.push(w.to_string());
    }
    out
}

/// The clause after the first of the markers, up to the end of its sentence.
fn clause_after(text: &str, markers: &[&str]) -> String {
    let lower = text.to_lowercase();
    let Some((pos, len)) = markers.iter().filter_map(|m| lower.find(m).map(|p| (p, m.len()))).min() else {
        return String::new();
    };
    // `lower` may differ in byte length from `text` outside ASCII; then skip the clause.
    if lower.len() != text.len() {
        return String::new();
    }
    let rest = &text[pos + len..];
    let end = rest.find(['.', '!', '?', ';']).unwrap_or(rest.len());
    rest[..end].trim().trim_end_matches(',').to_string()
}

impl RuleExtractor {
    /// An extractor with the given settings.
    pub fn new(config: RuleExtractorConfig) -> Self {
        RuleExtractor { config }
    }

    /// The settings.
    pub fn config(&self) -> &RuleExtractorConfig {
        &self.config
    }

    /// Records for every (user) turn of a dialogue, in dialogue order.
    pub fn extract(&self, dialogue: &Dialogue) -> Vec<MemoryRecord> {
        let mut out = Vec::new();
        for session in &dialogue.sessions {
            for turn in &session.turns {
                if turn.role == Role::Assistant && !self.config.include_assistant {
                    continue;
                }
                let parts: Vec<&str> = if self.config.per_sentence { sentences(&turn.text) } else { vec![turn.text.as_str()] };
                let count = parts.len();
                for (i, part) in parts.iter().enumerate() {
                    // The photo goes with the turn's last sentence.
                    let caption = if i + 1 == count { turn.caption.as_deref() } else { None };
                    let id = if self.config.per_sentence {
                        format!("{}/{}#{}", dialogue.id, turn.id, i + 1)
                    } else {
                        format!("{}/{}", dialogue.id, turn.id)
                    };
                    out.push(self.record(id, part, caption, dialogue, session, turn));
                }
                if count == 0 && turn.caption.is_some() {
                    out.push(self.record(format!("{}/{}", dialogue.id, turn.id), "", turn.caption.as_deref(), dialogue, session, turn));
                }
            }
        }
        out
    }

    fn record(&self, id: String, text: &str, caption: Option<&str>, dialogue: &Dialogue, session: &Session, turn: &Turn) -> MemoryRecord {
        let body = with_caption(text, caption);
        let content = match self.config.style {
            ContentStyle::Said => format!("{} said: {body}", turn.speaker),
            ContentStyle::Colon => format!("{}: {body}", turn.speaker),
        };
        let date = turn_time(turn, session).map(|t| t.date());
        let time = match mentioned_time(text, date) {
            Some(span) => span.to_string(),
            None => date.map(|d| d.format("%Y-%m-%d").to_string()).unwrap_or_default(),
        };
        MemoryRecord {
            id,
            content,
            memory_type: memory_type_of(text),
            dims: Dimensions {
                time,
                location: location_mentions(text).into_iter().next().unwrap_or_default(),
                reason: clause_after(text, &["because ", "since i ", "due to "]),
                purpose: clause_after(text, &["so that ", "in order to "]),
                keywords: rule_keywords(&body, self.config.max_keywords),
            },
            pointer: pointer(dialogue, session, turn),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn dialogue() -> Dialogue {
        let at = |h: u32, m: u32| NaiveDate::from_ymd_opt(2023, 5, 8).unwrap().and_hms_opt(h, m, 0);
        let turn = |id: &str, speaker: &str, role: Role, text: &str, caption: Option<&str>, min: u32| Turn {
            id: id.into(),
            speaker: speaker.into(),
            role,
            text: text.into(),
            caption: caption.map(str::to_string),
            timestamp: at(13, min),
            has_answer: false,
        };
        Dialogue {
            id: "conv-x".into(),
            sessions: vec![Session {
                id: "session_1".into(),
                date: at(13, 56),
                turns: vec![
                    turn("D1:1", "Caroline", Role::User, "I went to a LGBTQ support group yesterday. It was so powerful!", None, 56),
                    turn(
                        "D1:2",
                        "Melanie",
                        Role::User,
                        "I love painting sunsets because they calm me down.",
                        Some("a painting of a sunset"),
                        57,
                    ),
                    turn("D1:3", "assistant", Role::Assistant, "That sounds lovely.", None, 58),
                    turn("D1:4", "Caroline", Role::User, "My mentor works at the Rainbow Center in Boston.", None, 59),
                ],
            }],
        }
    }

    #[test]
    fn raw_turns_keep_every_turn_with_pointer() {
        let records = raw_turn_records(&dialogue());
        assert_eq!(records.len(), 4);
        assert_eq!(
            records[1].content,
            "Melanie: I love painting sunsets because they calm me down. [shares photo: a painting of a sunset]"
        );
        assert_eq!(records[0].id, "conv-x/D1:1");
        assert_eq!(records[0].pointer.window_id, "conv-x/turns");
        assert_eq!(records[0].pointer.turn_ids, ["D1:1"]);
        assert_eq!(records[0].pointer.timestamp, "2023-05-08T13:56:00");
        assert_eq!(records[2].pointer.speaker, "assistant");
        assert_eq!(records[3].dims, Dimensions::default());
    }

    #[test]
    fn rule_records_carry_cue_dimensions() {
        let records = RuleExtractor::default().extract(&dialogue());
        assert_eq!(records.len(), 3, "assistant turns are skipped by default");
        let [went, love, mentor] = &records[..] else { panic!("three records") };
        assert_eq!(went.content, "Caroline said: I went to a LGBTQ support group yesterday. It was so powerful!");
        assert_eq!(went.memory_type, MemoryType::Episodic);
        assert_eq!(went.dims.time, "2023-05-07", "yesterday resolved against the message date");
        assert_eq!(went.dims.keywords[..3], ["LGBTQ", "powerful", "support"]);
        assert_eq!(love.memory_type, MemoryType::Profile);
        assert_eq!(love.dims.reason, "they calm me down");
        assert_eq!(love.dims.time, "2023-05-08");
        assert!(love.dims.keywords.contains(&"sunsets".to_string()));
        assert_eq!(mentor.memory_type, MemoryType::Fact);
        assert_eq!(mentor.dims.location, "Rainbow Center");
        assert_eq!(mentor.pointer.turn_ids, ["D1:4"]);
    }

    #[test]
    fn per_sentence_mode_splits_and_attaches_caption_last() {
        let config = RuleExtractorConfig { per_sentence: true, include_assistant: true, style: ContentStyle::Colon, ..Default::default() };
        let records = RuleExtractor::new(config).extract(&dialogue());
        let ids: Vec<&str> = records.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["conv-x/D1:1#1", "conv-x/D1:1#2", "conv-x/D1:2#1", "conv-x/D1:3#1", "conv-x/D1:4#1"]);
        assert_eq!(records[1].content, "Caroline: It was so powerful!");
        assert!(records[2].content.ends_with("[shares photo: a painting of a sunset]"));
        assert_eq!(records[1].memory_type, MemoryType::Fact);
    }

    #[test]
    fn type_cues() {
        assert_eq!(memory_type_of("I usually go running in the morning"), MemoryType::Profile);
        assert_eq!(memory_type_of("We visited the museum"), MemoryType::Episodic);
        assert_eq!(memory_type_of("I'm so excited about it"), MemoryType::Fact);
        assert_eq!(memory_type_of("I'm going to a conference next month"), MemoryType::Episodic);
        assert_eq!(memory_type_of("She is a counselor"), MemoryType::Fact);
    }
}
