//! Boundary detection: split a dialogue into segments where person, time, location or topic
//! changes.

use std::collections::{BTreeSet, HashSet};
use std::ops::Range;

use memkit_schema::{Dialogue, Turn};
use serde::{Deserialize, Serialize};

use crate::dense::{Embedder, cosine};
use crate::text::{content_tokens, location_mentions};
use crate::{Error, Result};

/// Why a segment starts where it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoundaryReason {
    /// First segment of the dialogue.
    Start,
    /// A new session began (a time change).
    Session,
    /// The gap since the previous message exceeds the threshold (a time change).
    TimeGap,
    /// The set of speakers changed.
    Person,
    /// A location not yet mentioned in the segment appeared.
    Location,
    /// The topic shifted.
    Topic,
}

impl BoundaryReason {
    /// Lowercase name (stored in [`memkit_schema::Hyperedge::boundary_reason`]).
    pub fn as_str(self) -> &'static str {
        match self {
            BoundaryReason::Start => "start",
            BoundaryReason::Session => "session",
            BoundaryReason::TimeGap => "time_gap",
            BoundaryReason::Person => "person",
            BoundaryReason::Location => "location",
            BoundaryReason::Topic => "topic",
        }
    }
}

/// A run of consecutive turns between two boundaries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Positions in [`Dialogue::turns`] order.
    pub turns: Range<usize>,
    /// Index of the session the segment lies in (segments never cross sessions).
    pub session: usize,
    /// Why the segment starts here.
    pub boundary_reason: BoundaryReason,
}

/// Splits a dialogue into segments that cover every turn exactly once, in order.
pub trait Segmenter {
    /// The segments of a dialogue.
    fn segment(&self, dialogue: &Dialogue) -> Result<Vec<Segment>>;
}

/// Thresholds of [`RuleSegmenter`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SegmenterConfig {
    /// A gap between consecutive messages longer than this (minutes) is a boundary.
    pub max_gap_minutes: i64,
    /// Turns on each side compared for speaker-set and topic changes.
    pub window: usize,
    /// Person, location and topic boundaries need at least this many turns on both sides, so
    /// chit-chat does not shatter into one-turn segments. Session and time-gap boundaries always
    /// apply.
    pub min_turns: usize,
    /// Topic shift with an embedder: window cosine below this (at a local minimum). Set for
    /// sentence embedders such as all-MiniLM-L6-v2, where unrelated chat scores below 0.3.
    pub embed_threshold: f32,
    /// Topic shift without an embedder: window content-token Jaccard below this (at a local
    /// minimum). 0.05 gives LoCoMo segments of 9.4 turns on average (0.03: 12.5, 0.1: 6.1).
    pub overlap_threshold: f32,
    /// Draw boundaries at new location mentions.
    pub location_boundaries: bool,
}

impl Default for SegmenterConfig {
    fn default() -> Self {
        SegmenterConfig {
            max_gap_minutes: 30,
            window: 3,
            min_turns: 4,
            embed_threshold: 0.3,
            overlap_threshold: 0.05,
            location_boundaries: true,
        }
    }
}

/// The fast rule segmenter: session starts, time gaps, speaker-set changes, new location
/// mentions and topic shifts (embedding similarity of adjacent turn windows when an
/// [`Embedder`] is given, content-token overlap otherwise).
#[derive(Clone, Copy, Default)]
pub struct RuleSegmenter<'a> {
    /// Thresholds.
    pub config: SegmenterConfig,
    embedder: Option<&'a dyn Embedder>,
}

impl std::fmt::Debug for RuleSegmenter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleSegmenter")
            .field("config", &self.config)
            .field("embedder", &self.embedder.map(|e| e.model_id().to_string()))
            .finish()
    }
}

impl<'a> RuleSegmenter<'a> {
    /// A segmenter with these thresholds and the token-overlap topic test.
    pub fn new(config: SegmenterConfig) -> Self {
        RuleSegmenter { config, embedder: None }
    }

    /// Uses embeddings of adjacent turn windows for the topic test.
    pub fn with_embedder(mut self, embedder: &'a dyn Embedder) -> Self {
        self.embedder = Some(embedder);
        self
    }
}

/// The text of a turn with its photo caption.
pub(crate) fn turn_text(turn: &Turn) -> String {
    match &turn.caption {
        Some(c) if !c.is_empty() => format!("{} [shares photo: {c}]", turn.text),
        _ => turn.text.clone(),
    }
}

/// Place names cued by a preposition ("in Paris", "to New York", "at the Louvre"): memkit-text's
/// [`location_mentions`] (the rule extractor's and the query parser's too), minus names whose
/// first word is in `not_places` (the speakers), each once.
pub fn extract_locations(text: &str, not_places: &HashSet<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in location_mentions(text) {
        let first = name.split_whitespace().next().unwrap_or("").to_lowercase();
        if !not_places.contains(&first) && !out.iter().any(|o| o.eq_ignore_ascii_case(&name)) {
            out.push(name);
        }
    }
    out
}

impl Segmenter for RuleSegmenter<'_> {
    #[tracing::instrument(skip_all, fields(dialogue = %dialogue.id, turns = dialogue.len()))]
    fn segment(&self, dialogue: &Dialogue) -> Result<Vec<Segment>> {
        let cfg = &self.config;
        if cfg.window == 0 {
            return Err(Error::Config("segmenter window must be at least 1 turn".into()));
        }
        let speakers: HashSet<String> = dialogue.turns().map(|t| t.speaker.to_lowercase()).collect();
        let mut segments = Vec::new();
        let mut offset = 0;
        for (si, session) in dialogue.sessions.iter().enumerate() {
            let turns = &session.turns;
            let m = turns.len();
            if m == 0 {
                continue;
            }
            let texts: Vec<String> = turns.iter().map(turn_text).collect();
            let similarity = self.window_similarity(&texts)?;
            let threshold = if self.embedder.is_some() { cfg.embed_threshold } else { cfg.overlap_threshold };
            let locations: Vec<Vec<String>> = texts.iter().map(|t| extract_locations(t, &speakers)).collect();

            let reason0 = if segments.is_empty() { BoundaryReason::Start } else { BoundaryReason::Session };
            let mut start = 0;
            let mut reason = reason0;
            let mut seen_locations: HashSet<String> = locations[0].iter().map(|l| l.to_lowercase()).collect();
            for i in 1..m {
                let gap = match (turns[i - 1].timestamp, turns[i].timestamp) {
                    (Some(a), Some(b)) => (b - a).num_minutes() > cfg.max_gap_minutes,
                    _ => false,
                };
                let room = i - start >= cfg.min_turns && m - i >= cfg.min_turns;
                let new_location = locations[i].iter().any(|l| !seen_locations.contains(&l.to_lowercase()));
                let boundary = if gap {
                    Some(BoundaryReason::TimeGap)
                } else if !room {
                    None
                } else if speaker_set(turns, i.saturating_sub(cfg.window)..i) != speaker_set(turns, i..(i + cfg.window).min(m)) {
                    Some(BoundaryReason::Person)
                } else if cfg.location_boundaries && new_location {
                    Some(BoundaryReason::Location)
                } else if is_topic_shift(&similarity, i, threshold) {
                    Some(BoundaryReason::Topic)
                } else {
                    None
                };
                if let Some(next_reason) = boundary {
                    segments.push(Segment { turns: offset + start..offset + i, session: si, boundary_reason: reason });
                    start = i;
                    reason = next_reason;
                    seen_locations.clear();
                }
                seen_locations.extend(locations[i].iter().map(|l| l.to_lowercase()));
            }
            segments.push(Segment { turns: offset + start..offset + m, session: si, boundary_reason: reason });
            offset += m;
        }
        tracing::debug!(segments = segments.len(), "segmented dialogue");
        Ok(segments)
    }
}

fn speaker_set(turns: &[Turn], range: Range<usize>) -> BTreeSet<&str> {
    turns[range].iter().map(|t| t.speaker.as_str()).collect()
}

/// A topic boundary before turn `i`: the similarity there is below the threshold and no higher
/// than its neighbours (a local minimum, so a slow drift yields one boundary, not several).
fn is_topic_shift(similarity: &[f32], i: usize, threshold: f32) -> bool {
    let s = similarity[i];
    s < threshold && similarity.get(i - 1).is_none_or(|&p| i == 1 || s <= p) && similarity.get(i + 1).is_none_or(|&n| s <= n)
}

impl RuleSegmenter<'_> {
    /// `similarity[i]` compares the `window` turns before `i` with the `window` turns from `i`
    /// (index 0 unused).
    fn window_similarity(&self, texts: &[String]) -> Result<Vec<f32>> {
        let m = texts.len();
        let w = self.config.window;
        let mut similarity = vec![1.0; m];
        match self.embedder {
            Some(embedder) => {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                let vectors = embedder.embed(&refs)?;
                if vectors.len() != m {
                    return Err(Error::Embed(format!("{} returned {} vectors for {m} texts", embedder.model_id(), vectors.len())));
                }
                let mean = |range: Range<usize>| {
                    let mut acc = vec![0.0f32; embedder.dim()];
                    for v in &vectors[range] {
                        for (a, x) in acc.iter_mut().zip(v) {
                            *a += x;
                        }
                    }
                    let norm = acc.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
                    acc.iter_mut().for_each(|x| *x /= norm);
                    acc
                };
                for (i, s) in similarity.iter_mut().enumerate().skip(1) {
                    *s = cosine(&mean(i.saturating_sub(w)..i), &mean(i..(i + w).min(m)));
                }
            }
            None => {
                let sets: Vec<HashSet<String>> = texts.iter().map(|t| content_tokens(t).into_iter().collect()).collect();
                let union = |range: Range<usize>| sets[range].iter().flatten().cloned().collect::<HashSet<String>>();
                for (i, s) in similarity.iter_mut().enumerate().skip(1) {
                    *s = crate::update::jaccard(&union(i.saturating_sub(w)..i), &union(i..(i + w).min(m)));
                }
            }
        }
        Ok(similarity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_follow_prepositions() {
        let speakers: HashSet<String> = ["melanie".to_string()].into();
        assert_eq!(extract_locations("We flew to New York and then to Boston.", &speakers), ["New York", "Boston"]);
        assert_eq!(extract_locations("I talked to Melanie in May at the Louvre.", &speakers), ["Louvre"]);
        assert!(extract_locations("Going to the park in the evening.", &speakers).is_empty());
        // Calendar words and a name that modifies a noun are no places; each place once.
        assert_eq!(extract_locations("Back in Paris on Friday, at the Paris Museum, and in paris.", &speakers), ["Paris", "Paris Museum"]);
    }

    #[test]
    fn topic_shift_needs_a_local_minimum() {
        let s = [1.0, 0.5, 0.01, 0.02, 0.5];
        assert!(is_topic_shift(&s, 2, 0.03));
        assert!(!is_topic_shift(&s, 3, 0.03), "0.02 is not below its neighbour 0.01");
        assert!(!is_topic_shift(&s, 1, 0.03));
    }
}
