//! Dialogues as every loader produces them: sessions of timestamped turns.

use chrono::NaiveDateTime;
use serde::{Deserialize, Serialize};

/// Who speaks a turn. LoCoMo has two human speakers (both `User`); LongMemEval has user and
/// assistant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A person whose memory we keep.
    #[default]
    User,
    /// The assistant; its replies are kept for assistant recall, not extracted by default.
    Assistant,
}

/// One message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// Dataset turn id (LoCoMo `D3:7`; LongMemEval `<session_id>:<index>`). Reads as `turn_id`
    /// too: the key of window messages written before they held a `Turn`.
    #[serde(alias = "turn_id")]
    pub id: String,
    /// Speaker name as it appears in the dataset (`Caroline`, `user`, `assistant`).
    pub speaker: String,
    /// User or assistant.
    #[serde(default)]
    pub role: Role,
    /// The message text.
    pub text: String,
    /// Image caption for turns that share a photo (LoCoMo `blip_caption`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
    /// Message time: the session start plus a small step per turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<NaiveDateTime>,
    /// LongMemEval's turn-level evidence flag.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub has_answer: bool,
}

impl Turn {
    /// A turn with no caption, no time and no evidence flag: the builder of programs and tests
    /// that make their own dialogues (set `timestamp` or `caption` after, or with `..`).
    pub fn new(id: impl Into<String>, speaker: impl Into<String>, role: Role, text: impl Into<String>) -> Self {
        Turn { id: id.into(), speaker: speaker.into(), role, text: text.into(), caption: None, timestamp: None, has_answer: false }
    }
}

/// A session: turns that happened together, with a start time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Dataset session id (LoCoMo `session_3`; LongMemEval haystack session id).
    pub id: String,
    /// Session start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<NaiveDateTime>,
    /// Turns in order.
    pub turns: Vec<Turn>,
}

/// A whole dialogue (one LoCoMo conversation, one LongMemEval haystack, one user file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dialogue {
    /// Dataset id (`conv-26`, a LongMemEval question id, ...).
    pub id: String,
    /// Sessions in time order.
    pub sessions: Vec<Session>,
}

impl Dialogue {
    /// All turns of all sessions, in order.
    pub fn turns(&self) -> impl Iterator<Item = &Turn> {
        self.sessions.iter().flat_map(|s| s.turns.iter())
    }

    /// Number of turns.
    pub fn len(&self) -> usize {
        self.sessions.iter().map(|s| s.turns.len()).sum()
    }

    /// True when there is no turn.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
