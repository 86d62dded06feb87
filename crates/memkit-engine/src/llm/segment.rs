//! HingeMem's language-model boundary segmenter.
//!
//! [`LlmSegmenter`] shows a chat model each session in pieces of at most `messages` messages
//! (`prompts/boundary.j2`) and takes the segments it draws, decoded under
//! [`Segmentation::json_schema`]. It implements the same [`Segmenter`] trait as the
//! [`RuleSegmenter`], so [`crate::hinge::HingeIndex::build`] takes either.
//!
//! What the model writes is checked:
//! - only the segments' start numbers are used: a start inside the piece (2 to its length)
//!   opens a segment there, with the model's reason (`person`, `time`, `location`, `topic`), so
//!   any set of starts is a valid cover of the piece, whatever the ends say; a reply whose
//!   segments do not tile the piece exactly is counted ([`SegmenterStats::untiled`]);
//! - a reply cut at its token limit, one that does not parse, or one with no segment is replaced
//!   by the rule segmenter's boundaries inside that piece (counted in
//!   [`SegmenterStats::fallbacks`]);
//! - session starts are always boundaries, and a piece's first message is not one by itself (a
//!   piece is a cut for the model's context, not a change in the conversation).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use memkit_data::{Window, WindowConfig, windows};
use memkit_infer::chat::{ChatModel, ChatRequest, Reply};
use memkit_prompt::Segmentation;
use memkit_schema::Dialogue;
use serde::Serialize;

use super::{Step, step_methods};
use crate::hinge::{BoundaryReason, RuleSegmenter, Segment, Segmenter};
use crate::{Error, Result};

/// How an [`LlmSegmenter`] has fared so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SegmenterStats {
    /// Pieces put to the model.
    pub asked: usize,
    /// Of those, segmented by the rules instead: the reply was cut off, did not parse or held
    /// no segment.
    pub fallbacks: usize,
    /// Used replies whose segments did not tile the piece exactly (gaps, overlaps, numbers
    /// outside it); their starts were used all the same.
    pub untiled: usize,
    /// Boundaries the model drew inside pieces.
    pub boundaries: usize,
}

/// HingeMem's boundary segmenter on a chat model, with `boundary.j2`.
pub struct LlmSegmenter {
    step: Step<SegmenterStats>,
    messages: usize,
    rules: RuleSegmenter<'static>,
}

impl LlmSegmenter {
    /// Most tokens of one reply by default: room for about eight segments with their fields.
    pub const DEFAULT_MAX_TOKENS: usize = 800;
    /// Messages per request by default.
    pub const DEFAULT_MESSAGES: usize = 16;
    /// Messages are shown cut to this many characters.
    const MAX_MESSAGE_CHARS: usize = 600;

    /// A segmenter asking `model` with the embedded prompts, the default rules as fallback.
    pub fn new(model: Arc<dyn ChatModel>) -> Result<Self> {
        Ok(Self { step: Step::new(model, Self::DEFAULT_MAX_TOKENS)?, messages: Self::DEFAULT_MESSAGES, rules: RuleSegmenter::default() })
    }

    /// Sets the most messages shown per request.
    #[must_use]
    pub fn with_messages(mut self, messages: usize) -> Self {
        self.messages = messages.max(2);
        self
    }

    /// The rule segmenter used where a reply is unusable.
    #[must_use]
    pub fn with_rules(mut self, rules: RuleSegmenter<'static>) -> Self {
        self.rules = rules;
        self
    }

    step_methods!(SegmenterStats);

    /// The pieces of each session the model is shown.
    fn pieces(&self, dialogue: &Dialogue) -> Vec<Window> {
        let config = WindowConfig { size: self.messages, overlap: 0, user_only: false, max_message_chars: Self::MAX_MESSAGE_CHARS };
        dialogue.sessions.iter().flat_map(|s| windows(&Dialogue { id: dialogue.id.clone(), sessions: vec![s.clone()] }, &config)).collect()
    }
}

/// The boundary reason of a segment's `boundary_reason` as `boundary.j2` names them.
fn reason_of(name: &str) -> BoundaryReason {
    match name.trim().to_ascii_lowercase().as_str() {
        "person" => BoundaryReason::Person,
        "time" => BoundaryReason::TimeGap,
        "location" => BoundaryReason::Location,
        _ => BoundaryReason::Topic,
    }
}

/// The segment starts a reply draws inside a piece of `n` messages (message numbers 2 to `n`,
/// each once, in order, with their reasons) and whether its segments tile `1..=n` exactly; `None`
/// when the reply was cut at its token limit, does not parse, or holds no segment.
pub fn decode_boundaries(reply: &Reply, n: usize) -> Option<(Vec<(u32, BoundaryReason)>, bool)> {
    if reply.usage.hit_max_tokens {
        return None;
    }
    let mut segments = serde_json::from_str::<Segmentation>(reply.text.trim()).ok()?.segments;
    if segments.is_empty() {
        return None;
    }
    segments.sort_by_key(|s| s.start);
    let mut next = 1;
    let mut tiled = true;
    for s in &segments {
        tiled &= s.start == next && s.end >= s.start;
        next = s.end + 1;
    }
    tiled &= next as usize == n + 1;
    let mut starts: Vec<(u32, BoundaryReason)> =
        segments.iter().filter(|s| (2..=n as u32).contains(&s.start)).map(|s| (s.start, reason_of(&s.boundary_reason))).collect();
    starts.dedup_by_key(|s| s.0);
    Some((starts, tiled))
}

impl Segmenter for LlmSegmenter {
    #[tracing::instrument(skip_all, fields(dialogue = %dialogue.id, turns = dialogue.len()))]
    fn segment(&self, dialogue: &Dialogue) -> Result<Vec<Segment>> {
        // Each turn's position in dialogue order, and the session it lies in.
        let mut position: HashMap<&str, usize> = HashMap::new();
        let mut session_of = Vec::with_capacity(dialogue.len());
        let mut boundaries: BTreeMap<usize, BoundaryReason> = BTreeMap::new();
        for (si, session) in dialogue.sessions.iter().enumerate() {
            if !session.turns.is_empty() {
                let reason = if boundaries.is_empty() { BoundaryReason::Start } else { BoundaryReason::Session };
                boundaries.insert(session_of.len(), reason);
            }
            for turn in &session.turns {
                position.insert(turn.id.as_str(), session_of.len());
                session_of.push(si);
            }
        }
        let sessions_start = boundaries.clone();
        let mut rule_segments: Option<Vec<Segment>> = None;
        let pieces = self.pieces(dialogue);
        let requests = pieces
            .iter()
            .map(|w| {
                let messages = self.step.prompts.render_boundary(w).map_err(|e| Error::Prompt(e.to_string()))?.to_messages();
                Ok(ChatRequest::new(messages, self.step.max_tokens).with_schema(Segmentation::json_schema(w.messages.len())))
            })
            .collect::<Result<Vec<_>>>()?;
        let replies = self.step.ask(&requests)?;
        for (piece, reply) in pieces.iter().zip(replies) {
            self.step.count(|s| s.asked += 1);
            let at = |number: u32| piece.message(number).and_then(|m| position.get(m.turn.id.as_str()).copied());
            let (first, last) = (at(1), at(piece.messages.len() as u32));
            let (Some(first), Some(last)) = (first, last) else { continue };
            match decode_boundaries(&reply, piece.messages.len()) {
                Some((starts, tiled)) => {
                    if !tiled {
                        self.step.count(|s| s.untiled += 1);
                    }
                    for (number, reason) in starts {
                        if let Some(p) = at(number) {
                            boundaries.entry(p).or_insert(reason);
                            self.step.count(|s| s.boundaries += 1);
                        }
                    }
                }
                None => {
                    self.step.count(|s| s.fallbacks += 1);
                    tracing::debug!(piece = %piece.id, reply = %reply.text, cut = reply.usage.hit_max_tokens, "boundary reply unusable, rules used");
                    if rule_segments.is_none() {
                        rule_segments = Some(self.rules.segment(dialogue)?);
                    }
                    for s in rule_segments.iter().flatten().filter(|s| s.turns.start > first && s.turns.start <= last) {
                        boundaries.entry(s.turns.start).or_insert(s.boundary_reason);
                    }
                }
            }
        }
        // Session starts keep their own reason.
        boundaries.extend(sessions_start);
        let starts: Vec<(usize, BoundaryReason)> = boundaries.into_iter().collect();
        let segments = starts
            .iter()
            .enumerate()
            .map(|(k, &(start, reason))| {
                let end = starts.get(k + 1).map_or(session_of.len(), |s| s.0);
                Segment { turns: start..end, session: session_of[start], boundary_reason: reason }
            })
            .collect();
        Ok(segments)
    }
}

#[cfg(test)]
mod tests {
    use memkit_infer::reply::Usage;
    use memkit_schema::{Role, Session, Turn};

    use super::*;
    use crate::llm::scripted::Scripted;

    fn dialogue(sessions: &[usize]) -> Dialogue {
        let sessions = sessions
            .iter()
            .enumerate()
            .map(|(s, &n)| Session {
                id: format!("session_{}", s + 1),
                date: None,
                turns: (0..n)
                    .map(|i| {
                        let speaker = if i % 2 == 0 { "Ann" } else { "Bob" };
                        Turn::new(format!("D{}:{}", s + 1, i + 1), speaker, Role::User, format!("message {} of session {}", i + 1, s + 1))
                    })
                    .collect(),
            })
            .collect();
        Dialogue { id: "d".into(), sessions }
    }

    fn segments(spans: &[(u32, u32, &str)]) -> String {
        let segs: Vec<String> = spans
            .iter()
            .map(|(a, b, r)| {
                format!(r#"{{"start":{a},"end":{b},"boundary_reason":"{r}","persons":[],"times":[],"locations":[],"topics":[],"description":"x"}}"#)
            })
            .collect();
        format!(r#"{{"segments":[{}]}}"#, segs.join(","))
    }

    /// Two sessions of 6 and 4 messages in pieces of 4: pieces 1–4 and 5–6 of the first
    /// session, 1–4 of the second. The model's starts become boundaries; the second piece's reply
    /// is cut off, so the rules decide there (they draw none in two short messages); session
    /// starts are boundaries whatever the model says.
    #[test]
    fn starts_become_boundaries_and_sessions_always_split() {
        let first = segments(&[(1, 2, "start"), (3, 4, "topic")]);
        let third = segments(&[(1, 1, "start"), (2, 3, "person"), (3, 4, "location")]);
        let model = Scripted::new(&[(&first, false), (&first[..30], true), (&third, false)]);
        let segmenter = LlmSegmenter::new(model.clone()).unwrap().with_messages(4);
        let got = segmenter.segment(&dialogue(&[6, 4])).unwrap();
        let spans: Vec<(std::ops::Range<usize>, usize, BoundaryReason)> =
            got.iter().map(|s| (s.turns.clone(), s.session, s.boundary_reason)).collect();
        assert_eq!(
            spans,
            [
                (0..2, 0, BoundaryReason::Start),
                (2..6, 0, BoundaryReason::Topic),
                (6..7, 1, BoundaryReason::Session),
                (7..8, 1, BoundaryReason::Person),
                (8..10, 1, BoundaryReason::Location),
            ]
        );
        // The third reply's segments overlap (2–3, 3–4): used, and counted as untiled.
        assert_eq!(segmenter.stats(), SegmenterStats { asked: 3, fallbacks: 1, untiled: 1, boundaries: 3 });
        let asked = model.asked.lock().unwrap();
        assert!(asked[0].messages[1].content.contains("Split these 4 messages"), "{}", asked[0].messages[1].content);
        assert!(asked[1].messages[1].content.contains("Split these 2 messages"));
        assert_eq!(asked[0].schema.as_ref(), Some(&Segmentation::json_schema(4)));
        assert_eq!(asked[0].max_tokens, LlmSegmenter::DEFAULT_MAX_TOKENS);
    }

    #[test]
    fn a_reply_is_read_for_its_starts() {
        let reply = |text: &str, cut: bool| Reply { text: text.to_owned(), usage: Usage { hit_max_tokens: cut, ..Usage::default() } };
        let tiled = segments(&[(1, 3, "start"), (4, 5, "time")]);
        assert_eq!(decode_boundaries(&reply(&tiled, false), 5), Some((vec![(4, BoundaryReason::TimeGap)], true)));
        // Out of order, one start past the piece, a gap: the starts inside are used.
        let messy = segments(&[(4, 4, "Person"), (1, 2, "start"), (9, 9, "topic")]);
        assert_eq!(decode_boundaries(&reply(&messy, false), 5), Some((vec![(4, BoundaryReason::Person)], false)));
        assert_eq!(decode_boundaries(&reply(&tiled, true), 5), None);
        assert_eq!(decode_boundaries(&reply(r#"{"segments":[]}"#, false), 5), None);
        assert_eq!(decode_boundaries(&reply("Here are the segments.", false), 5), None);
    }
}
