//! The BYU chit-chat dataset (`chitchat_dataset/dataset.json` of the PyPI package
//! `chitchat-dataset`, MIT): 7,168 English conversations between people who met in a chat app,
//! each started from a prompt ("If you could relive one day of your life…"). A training corpus
//! with two human speakers, what LongMemEval's user–assistant chats lack; never a benchmark.
//!
//! The file maps a conversation id to `{"prompt", "start", "ratings", "messages"}`, `messages`
//! being the turns in order, each a list of one sender's consecutive messages
//! (`{"text", "timestamp", "sender"}`, senders are UUIDs). Conversations between the same two
//! people are one [`Dialogue`] (`chitchat/<uuid prefix>-<uuid prefix>`), a session per
//! conversation in time order (session id: the conversation id), so a pair that met again is a
//! multi-session dialogue. A turn's text is its messages joined by new lines, its time the
//! first message's. Turn ids are `<session n>:<turn n>`, both 1-based. Speakers get first names
//! from [`NAMES`] by a stable hash of their UUID, the same name in every conversation, never the
//! same name for both people of a pair. Conversations with one sender, or more than two, are
//! left out.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::NaiveDateTime;
use memkit_schema::{Dialogue, Role, Session, Turn};
use serde_json::Value;
use tracing::instrument;

use crate::json::{self, At, Source};
use crate::{Result, stable_hash};

/// First names given to the UUID senders.
pub(crate) const NAMES: [&str; 48] = [
    "Alex", "Avery", "Bailey", "Blake", "Cameron", "Casey", "Charlie", "Dakota", "Drew", "Eden", "Elliot", "Emery", "Finley", "Frankie",
    "Gray", "Harper", "Hayden", "Jamie", "Jesse", "Jordan", "Jules", "Kai", "Kendall", "Kennedy", "Lane", "Logan", "Marley", "Morgan",
    "Noel", "Oakley", "Parker", "Peyton", "Quinn", "Reese", "Riley", "River", "Robin", "Rowan", "Sage", "Sam", "Sawyer", "Shay", "Sidney",
    "Skyler", "Taylor", "Tatum", "Toby", "Wren",
];

/// One conversation as read: its id, its turns as (sender, text, time).
struct Conversation {
    id: String,
    turns: Vec<(String, String, NaiveDateTime)>,
}

fn name_of(sender: &str) -> usize {
    (stable_hash(sender, 0) % NAMES.len() as u64) as usize
}

/// Loads a chit-chat dataset file: one dialogue per pair of people (ordered by their first
/// conversation), each conversation a session.
#[instrument]
pub fn load_chitchat(path: &Path) -> Result<Vec<Dialogue>> {
    let bytes = json::read(path)?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| crate::Error::json(path.to_path_buf(), 0, &e))?;
    let root = At::root(Source { file: path, line: None });
    let mut pairs: BTreeMap<(String, String), Vec<Conversation>> = BTreeMap::new();
    let mut skipped = 0usize;
    for (id, conversation) in root.object(value)? {
        let c_at = root.key(&id);
        let mut conversation = c_at.object(conversation)?;
        let m_at = c_at.key("messages");
        let mut turns = Vec::new();
        for (i, group) in m_at.array(c_at.required(&mut conversation, "messages")?)?.into_iter().enumerate() {
            let g_at = m_at.index(i);
            let (mut sender, mut texts, mut time) = (None::<String>, Vec::new(), None);
            for (j, message) in g_at.array(group)?.into_iter().enumerate() {
                let at = g_at.index(j);
                let mut message = at.object(message)?;
                let who = at.key("sender").string(at.required(&mut message, "sender")?)?;
                let text = at.key("text").string(at.required(&mut message, "text")?)?;
                let stamp = at.key("timestamp").string(at.required(&mut message, "timestamp")?)?;
                let stamp = chrono::DateTime::parse_from_rfc3339(&stamp)
                    .map_err(|_| at.key("timestamp").error(format!("cannot read {stamp:?} (expected an RFC 3339 time)")))?
                    .naive_utc();
                match &sender {
                    Some(s) if *s != who => return Err(at.key("sender").error("a turn's messages come from two senders")),
                    _ => sender = Some(who),
                }
                time.get_or_insert(stamp);
                if !text.trim().is_empty() {
                    texts.push(text.trim().to_owned());
                }
            }
            if let (Some(sender), Some(time), false) = (sender, time, texts.is_empty()) {
                turns.push((sender, texts.join("\n"), time));
            }
        }
        let mut senders: Vec<String> = turns.iter().map(|(s, _, _)| s.clone()).collect();
        senders.sort();
        senders.dedup();
        match <[String; 2]>::try_from(senders) {
            Ok([a, b]) => pairs.entry((a, b)).or_default().push(Conversation { id, turns }),
            Err(_) => skipped += 1,
        }
    }
    let mut dialogues = Vec::with_capacity(pairs.len());
    for ((a, b), mut conversations) in pairs {
        conversations.sort_by_key(|c| (c.turns[0].2, c.id.clone()));
        let first = name_of(&a);
        let second = match name_of(&b) {
            n if n == first => (n + 1) % NAMES.len(),
            n => n,
        };
        let speaker = |sender: &str| if sender == a { NAMES[first] } else { NAMES[second] };
        let sessions = conversations
            .iter()
            .enumerate()
            .map(|(s, c)| Session {
                id: c.id.clone(),
                date: Some(c.turns[0].2),
                turns: c
                    .turns
                    .iter()
                    .enumerate()
                    .map(|(t, (sender, text, time))| Turn {
                        timestamp: Some(*time),
                        ..Turn::new(format!("{}:{}", s + 1, t + 1), speaker(sender), Role::User, text.as_str())
                    })
                    .collect(),
            })
            .collect();
        dialogues.push(Dialogue { id: format!("chitchat/{}-{}", &a[..a.len().min(8)], &b[..b.len().min(8)]), sessions });
    }
    dialogues.sort_by_key(|d| (d.sessions[0].date, d.id.clone()));
    tracing::debug!(dialogues = dialogues.len(), skipped, "loaded the chit-chat dataset");
    Ok(dialogues)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(text: &str, minute: u32, sender: &str) -> serde_json::Value {
        serde_json::json!({"text": text, "timestamp": format!("2018-05-02T19:{minute:02}:00Z"), "sender": sender})
    }

    /// Two conversations of one pair become one dialogue of two sessions in time order; a
    /// one-person conversation is left out; names are stable and differ within the pair.
    #[test]
    fn a_pair_that_met_twice_is_one_dialogue_of_two_sessions() {
        let (ann, bob, solo) = ("aaaaaaaa-1111", "bbbbbbbb-2222", "cccccccc-3333");
        let file = serde_json::json!({
            "late": {"prompt": "p", "start": "x", "ratings": {}, "messages": [
                [message("welcome back", 30, bob)], [message("hi again", 31, ann)]]},
            "early": {"prompt": "p", "start": "x", "ratings": {}, "messages": [
                [message("Hello", 1, ann), message("I just took a nap.", 2, ann)],
                [message("whats up", 3, bob)]]},
            "alone": {"prompt": "p", "start": "x", "ratings": {}, "messages": [[message("anyone?", 5, solo)]]},
        });
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dataset.json");
        std::fs::write(&path, file.to_string()).unwrap();
        let dialogues = load_chitchat(&path).unwrap();
        assert_eq!(dialogues.len(), 1);
        let d = &dialogues[0];
        assert_eq!(d.id, "chitchat/aaaaaaaa-bbbbbbbb");
        let ids: Vec<&str> = d.sessions.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["early", "late"]);
        let first = &d.sessions[0].turns[0];
        assert_eq!((first.id.as_str(), first.text.as_str()), ("1:1", "Hello\nI just took a nap."));
        assert_eq!(first.timestamp, NaiveDateTime::parse_from_str("2018-05-02 19:01:00", "%Y-%m-%d %H:%M:%S").ok());
        assert_eq!(d.sessions[1].turns[1].id, "2:2");
        let (a, b) = (&d.sessions[0].turns[0].speaker, &d.sessions[0].turns[1].speaker);
        assert_ne!(a, b);
        assert_eq!(a, &d.sessions[1].turns[1].speaker, "the same person has the same name in every session");
        assert!(d.sessions.iter().flat_map(|s| &s.turns).all(|t| t.role == Role::User));
    }

    #[test]
    fn a_turn_of_two_senders_is_named() {
        let file = serde_json::json!({"c": {"messages": [[message("a", 1, "x"), message("b", 2, "y")]]}});
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dataset.json");
        std::fs::write(&path, file.to_string()).unwrap();
        let err = load_chitchat(&path).unwrap_err().to_string();
        assert!(err.contains("dataset.json") && err.contains("c.messages[0][1].sender"), "{err}");
    }
}
