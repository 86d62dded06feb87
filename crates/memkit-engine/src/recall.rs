//! Dynamic assistant recall (DimMem): fetch what the assistant said, only when the query needs it.
//!
//! Records hold what the user said; the assistant's replies stay out of memory so they do not
//! bloat every context. When the parsed query has `need_assistant_context` ("what did you
//! recommend…"), each retrieved record's pointer leads back through the store to its source
//! turn(s) and the assistant reply that followed. DimMem triggers this on 12.2% of LongMemEval
//! queries; [`RecallStats`] counts how often it fires here.

use std::collections::HashSet;

use memkit_schema::{MemoryRecord, ParsedQuery};
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::store::{AssistantReply, MemoryStore};

/// How often assistant recall fired and what it found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecallStats {
    /// Queries seen.
    pub queries: usize,
    /// Queries that needed assistant context.
    pub triggered: usize,
    /// Replies attached (each reply at most once per query).
    pub replies_attached: usize,
    /// Retrieved records of triggered queries for which no reply was stored.
    pub records_without_reply: usize,
}

impl RecallStats {
    /// Share of queries that triggered recall (0 when no query was seen).
    pub fn trigger_rate(&self) -> f64 {
        if self.queries == 0 { 0.0 } else { self.triggered as f64 / self.queries as f64 }
    }
}

/// For each record (same order), the assistant replies that followed its source turns; all empty
/// when the query does not need assistant context.
///
/// A reply shared by several records (two records from one turn) is attached to the first only,
/// so the context does not repeat it.
#[tracing::instrument(skip_all, fields(records = records.len(), triggered = query.need_assistant_context))]
pub fn attach_assistant_replies<S: MemoryStore + ?Sized>(
    store: &S,
    query: &ParsedQuery,
    records: &[MemoryRecord],
    stats: &mut RecallStats,
) -> Result<Vec<Vec<AssistantReply>>> {
    let sources = records.iter().map(|r| (r.pointer.dialogue_id(), r.pointer.turn_ids.as_slice()));
    replies_for(|dialogue, turn| store.assistant_reply(dialogue, turn), query, sources, stats)
}

/// The rule behind [`attach_assistant_replies`] for any retrieved items given by their dialogue
/// and source turns (a record's pointer, a HingeMem part's turns), with replies looked up by
/// dialogue and user turn id (the store, or [`AssistantReply::of_dialogue`] in memory).
pub fn replies_for<'a>(
    lookup: impl Fn(&str, &str) -> Result<Option<AssistantReply>>,
    query: &ParsedQuery,
    sources: impl IntoIterator<Item = (&'a str, &'a [String])>,
    stats: &mut RecallStats,
) -> Result<Vec<Vec<AssistantReply>>> {
    stats.queries += 1;
    let sources: Vec<(&str, &[String])> = sources.into_iter().collect();
    let mut out = vec![Vec::new(); sources.len()];
    if !query.need_assistant_context {
        return Ok(out);
    }
    stats.triggered += 1;
    let mut seen = HashSet::new();
    for ((dialogue, turns), slot) in sources.into_iter().zip(out.iter_mut()) {
        let mut found = false;
        for turn_id in turns {
            if let Some(reply) = lookup(dialogue, turn_id)? {
                found = true;
                if seen.insert((reply.dialogue_id.clone(), reply.reply_turn_id.clone())) {
                    slot.push(reply);
                }
            }
        }
        if !found {
            stats.records_without_reply += 1;
        }
    }
    stats.replies_attached += out.iter().map(Vec::len).sum::<usize>();
    Ok(out)
}

/// How an attached reply reads in a context: `(assistant replied: …)`.
pub fn reply_text(reply: &AssistantReply) -> String {
    format!("(assistant replied: {})", reply.text)
}

/// A record's content followed by its attached replies, as one context block.
pub fn render_with_replies(record: &MemoryRecord, replies: &[AssistantReply]) -> String {
    let mut s = record.content.clone();
    for r in replies {
        s.push_str("\n  ");
        s.push_str(&reply_text(r));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{IngestBatch, SqliteStore};
    use memkit_schema::{Dialogue, MemoryType, Pointer, Role, Session, Turn};

    fn turn(id: &str, role: Role, text: &str) -> Turn {
        Turn::new(id, if role == Role::User { "user" } else { "assistant" }, role, text)
    }

    fn record(id: &str, turns: &[&str]) -> MemoryRecord {
        MemoryRecord {
            id: id.into(),
            content: format!("record {id}"),
            memory_type: MemoryType::Fact,
            dims: Default::default(),
            pointer: Pointer { window_id: "d/w0".into(), turn_ids: turns.iter().map(|t| t.to_string()).collect(), ..Default::default() },
        }
    }

    fn store() -> SqliteStore {
        let dialogue = Dialogue {
            id: "d".into(),
            sessions: vec![Session {
                id: "s1".into(),
                date: None,
                turns: vec![
                    turn("s1:0", Role::User, "I want to eat better."),
                    turn("s1:1", Role::Assistant, "Try more lentils."),
                    turn("s1:2", Role::User, "Thanks."),
                ],
            }],
        };
        let mut s = SqliteStore::open_in_memory().unwrap();
        s.ingest(&IngestBatch::from_dialogue(&dialogue)).unwrap();
        s
    }

    #[test]
    fn attaches_replies_only_when_needed_and_counts() {
        let s = store();
        let records = [record("a", &["s1:0"]), record("b", &["s1:0"]), record("c", &["s1:2"])];
        let mut stats = RecallStats::default();
        let plain = attach_assistant_replies(&s, &ParsedQuery::default(), &records, &mut stats).unwrap();
        assert!(plain.iter().all(Vec::is_empty));
        let q = ParsedQuery { need_assistant_context: true, ..Default::default() };
        let got = attach_assistant_replies(&s, &q, &records, &mut stats).unwrap();
        assert_eq!(got[0].len(), 1);
        assert_eq!(got[0][0].text, "Try more lentils.");
        assert!(got[1].is_empty(), "the shared reply is attached once");
        assert!(got[2].is_empty(), "s1:2 has no reply after it");
        assert_eq!(stats, RecallStats { queries: 2, triggered: 1, replies_attached: 1, records_without_reply: 1 });
        assert!((stats.trigger_rate() - 0.5).abs() < 1e-9);
        assert_eq!(render_with_replies(&records[0], &got[0]), "record a\n  (assistant replied: Try more lentils.)");
    }
}
