//! Grounding (SPEC §3): every extractor's records are checked against the window they came
//! from. A record should point at the message that says what it says; small models often point
//! at a neighbour, copy a context line, or write something no message says.
//!
//! For each record, every message of the window (not an assistant's) gets a **support** score in
//! `[0, 1]`:
//!
//! - term coverage: the share of the record's content terms ([`memkit_text::words::terms`]:
//!   stemmed, stop words out; the speakers' names and `user` out too, since every message of a
//!   speaker implies them) that occur in the message (text and photo caption);
//! - with a sentence embedder, the cosine of the record's content and the message, mixed in with
//!   weight [`GroundingConfig::embed_weight`].
//!
//! Then: when the best-supported message scores below [`GroundingConfig::min_support`], the
//! record is dropped as unsupported ([`ErrorKind::Unsupported`]); when a context-only message
//! supports it better (by [`GroundingConfig::margin`]) than any new message, it restates what
//! the previous window already covered and is dropped ([`ErrorKind::ContextSource`]); when the
//! best new message is another than the model's `source_id` and beats it by the margin, the
//! record is re-pointed there (and its speaker set to that message's); otherwise the model's
//! pointer is kept. Each decision is returned as a [`Grounded`] with the model's own
//! `source_id`, for the ledgers.
//!
//! The free dimensions of a kept record are checked against its source message too
//! ([`GroundingConfig::fields`]): a small model fills them whether the message says anything or
//! not. A `location`, `reason` or `purpose` less than half of whose terms occur in the source
//! message (or the message before it) is cleared, and so is a keyword none of whose terms occurs
//! there; `reason` and `purpose` are cleared unless the source message has a causal or purpose
//! cue ([`memkit_text::cues`]); `time` becomes the time the source message mentions, resolved
//! against its date ([`memkit_text::time::mentioned_time`]), or "" when it mentions none. The
//! ledger names the fields changed ([`Grounded::fields`]).
//!
//! The thresholds were chosen on the project's gold set (`data/gold/`), never on LoCoMo conv-26
//! of the end-to-end report (see `data/gold/README.md`).

use std::collections::HashSet;

use memkit_data::{Window, WindowMessage};
use memkit_schema::{ErrorKind, ExtractedMemory, RecordError, Role};
use memkit_text::cues::{states_purpose, states_reason};
use memkit_text::embed::Embedder;
use memkit_text::time::mentioned_time;
use memkit_text::words::terms;
use serde::{Deserialize, Serialize};

use crate::Result;

/// Thresholds of grounding.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroundingConfig {
    /// Ground at all (on by default).
    pub enabled: bool,
    /// Least support of the best message; below it the record is dropped as unsupported.
    pub min_support: f64,
    /// How much better another message must support a record to take its pointer.
    pub margin: f64,
    /// Weight of the embedding cosine in the support, when an embedder is loaded (the term
    /// coverage gets the rest).
    pub embed_weight: f64,
    /// Clear free dimensions (location, reason, purpose, keywords) that the source message does
    /// not support.
    pub fields: bool,
}

impl Default for GroundingConfig {
    /// Chosen on the gold set (`data/gold/README.md`).
    fn default() -> Self {
        Self { enabled: true, min_support: 0.5, margin: 0.05, embed_weight: 0.5, fields: true }
    }
}

/// What grounding did with one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The model's pointer stands.
    Kept,
    /// Pointed at a better-supported message.
    Repointed,
    /// No message supports it: dropped.
    Unsupported,
    /// A context-only message says it: dropped (the previous window covers it).
    Context,
}

/// One record's grounding, as the ledgers keep it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grounded {
    /// The record's content.
    pub content: String,
    /// The `source_id` the model wrote.
    pub model_source_id: u32,
    /// The `source_id` after grounding (the model's when kept or dropped).
    pub source_id: u32,
    /// Support of the model's message.
    pub model_support: f64,
    /// Support of the best message.
    pub best_support: f64,
    /// What happened.
    pub decision: Decision,
    /// The dimensions grounding changed on a kept record (`time`, `location`, `reason`,
    /// `purpose`, `keywords`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
}

/// Counts of grounding decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroundingTally {
    /// Records whose pointer stood.
    pub kept: usize,
    /// Records re-pointed.
    pub repointed: usize,
    /// Records dropped as unsupported.
    pub unsupported: usize,
    /// Records dropped as restating a context-only message.
    #[serde(default)]
    pub context: usize,
    /// Kept records some of whose dimensions grounding changed.
    #[serde(default)]
    pub fields: usize,
}

impl GroundingTally {
    /// Tallies decisions.
    pub fn of<'a>(decisions: impl IntoIterator<Item = &'a Grounded>) -> Self {
        let mut tally = Self::default();
        for g in decisions {
            tally.add_one(g.decision);
            tally.fields += usize::from(!g.fields.is_empty());
        }
        tally
    }

    fn add_one(&mut self, decision: Decision) {
        match decision {
            Decision::Kept => self.kept += 1,
            Decision::Repointed => self.repointed += 1,
            Decision::Unsupported => self.unsupported += 1,
            Decision::Context => self.context += 1,
        }
    }

    /// Adds another tally.
    pub fn add(&mut self, other: Self) {
        self.kept += other.kept;
        self.repointed += other.repointed;
        self.unsupported += other.unsupported;
        self.context += other.context;
        self.fields += other.fields;
    }

    /// Records grounded.
    pub fn total(&self) -> usize {
        self.kept + self.repointed + self.unsupported + self.context
    }
}

/// Grounds records: [`GroundingConfig`] and, optionally, a sentence embedder.
#[derive(Default)]
pub struct Grounder {
    config: GroundingConfig,
    embedder: Option<Box<dyn Embedder>>,
}

impl std::fmt::Debug for Grounder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grounder").field("config", &self.config).field("embedder", &self.embedder_id()).finish()
    }
}

impl Grounder {
    /// A grounder by term coverage alone.
    pub fn new(config: GroundingConfig) -> Self {
        Self { config, embedder: None }
    }

    /// Mixes in the embedding cosine of `embedder`.
    #[must_use]
    pub fn with_embedder(mut self, embedder: Box<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// The thresholds.
    pub fn config(&self) -> &GroundingConfig {
        &self.config
    }

    /// The embedder's model id, when it uses one.
    pub fn embedder_id(&self) -> Option<&str> {
        self.embedder.as_ref().map(|e| e.model_id())
    }

    /// Grounds `records` against `window`: re-points, moves the unsupported ones to `errors`,
    /// and returns every decision, in record order. Does nothing when grounding is off.
    pub fn ground(&self, window: &Window, records: &mut Vec<ExtractedMemory>, errors: &mut Vec<RecordError>) -> Result<Vec<Grounded>> {
        let mut decisions = Vec::with_capacity(records.len());
        if !self.config.enabled || records.is_empty() {
            return Ok(decisions);
        }
        let candidates: Vec<&WindowMessage> = window.messages.iter().filter(|m| m.turn.role != Role::Assistant).collect();
        let in_suffix = |i: usize| window.in_suffix(candidates[i].number);
        let names: HashSet<String> = window.messages.iter().flat_map(|m| terms(&m.turn.speaker)).chain(terms("user")).collect();
        let message_terms: Vec<HashSet<String>> = candidates.iter().map(|m| terms(&message_text(m)).into_iter().collect()).collect();
        let cosines = match &self.embedder {
            Some(embedder) => {
                let texts: Vec<String> = candidates.iter().map(|m| message_text(m)).collect();
                let contents: Vec<&str> = records.iter().map(|r| r.content.as_str()).collect();
                let all: Vec<&str> = texts.iter().map(String::as_str).chain(contents.iter().copied()).collect();
                let vectors = embedder.embed(&all).map_err(crate::Error::Embed)?;
                let (messages, records) = vectors.split_at(texts.len());
                Some(records.iter().map(|r| messages.iter().map(|m| dot(r, m).clamp(0.0, 1.0)).collect::<Vec<f64>>()).collect::<Vec<_>>())
            }
            None => None,
        };
        let weight = if cosines.is_some() { self.config.embed_weight } else { 0.0 };
        for (k, mut record) in std::mem::take(records).into_iter().enumerate() {
            let own: Vec<String> =
                terms(&record.content).into_iter().filter(|t| !names.contains(t)).collect::<HashSet<_>>().into_iter().collect();
            let support: Vec<f64> = (0..candidates.len())
                .map(|i| {
                    let coverage = if own.is_empty() {
                        0.0
                    } else {
                        own.iter().filter(|t| message_terms[i].contains(*t)).count() as f64 / own.len() as f64
                    };
                    let cosine = cosines.as_ref().map_or(0.0, |c| c[k][i]);
                    (1.0 - weight) * coverage + weight * cosine
                })
                .collect();
            let model_index = candidates.iter().position(|m| m.number == record.source_id);
            let model_support = model_index.map_or(0.0, |i| support[i]);
            // The best new message; ties go to the model's own pointer, then to the earlier one.
            let (best, best_support) = (0..candidates.len()).filter(|&i| in_suffix(i)).fold((model_index, model_support), |(bi, bs), i| {
                if support[i] > bs || bi.is_none() { (Some(i), support[i]) } else { (bi, bs) }
            });
            let context_support = (0..candidates.len()).filter(|&i| !in_suffix(i)).map(|i| support[i]).fold(0.0, f64::max);
            let mut grounded = Grounded {
                content: record.content.clone(),
                model_source_id: record.source_id,
                source_id: record.source_id,
                model_support,
                best_support,
                decision: Decision::Kept,
                fields: Vec::new(),
            };
            match best {
                _ if context_support >= self.config.min_support && context_support > best_support + self.config.margin => {
                    grounded.decision = Decision::Context;
                }
                Some(_) if best_support < self.config.min_support => grounded.decision = Decision::Unsupported,
                None => grounded.decision = Decision::Unsupported,
                Some(i) if Some(i) != model_index && best_support >= model_support + self.config.margin => {
                    grounded.decision = Decision::Repointed;
                    record.source_id = candidates[i].number;
                    record.source_speaker.clone_from(&candidates[i].turn.speaker);
                    grounded.source_id = record.source_id;
                }
                Some(_) => {}
            }
            let dropped = match grounded.decision {
                Decision::Unsupported => {
                    Some((ErrorKind::Unsupported, format!("no new message of the window supports it (best support {best_support:.2})")))
                }
                Decision::Context => Some((
                    ErrorKind::ContextSource,
                    format!("a context-only message says it (support {context_support:.2} against {best_support:.2})"),
                )),
                Decision::Kept | Decision::Repointed => None,
            };
            if dropped.is_none() && self.config.fields {
                let source = window.message(record.source_id);
                let before = window.message(record.source_id.saturating_sub(1)).filter(|_| record.source_id > 1);
                let said: HashSet<String> = source.into_iter().chain(before).flat_map(|m| terms(&message_text(m))).collect();
                let was = record.dimension.clone();
                clear_unsaid_fields(&mut record.dimension, &said);
                if let Some(source) = source {
                    ground_cued_fields(&mut record.dimension, source);
                }
                grounded.fields = changed_fields(&was, &record.dimension);
            }
            match dropped {
                Some((kind, reason)) => {
                    errors.push(RecordError { index: Some(k), kind, reason, raw: serde_json::to_string(&record).unwrap_or_default() });
                }
                None => records.push(record),
            }
            decisions.push(grounded);
        }
        Ok(decisions)
    }
}

/// Clears `location`, `reason` and `purpose` when less than half of their terms are in `said`, and
/// drops keywords with no term in it.
fn clear_unsaid_fields(dimension: &mut memkit_schema::ExtractedDimension, said: &HashSet<String>) {
    let supported = |text: &str| {
        let own: HashSet<String> = terms(text).into_iter().collect();
        own.is_empty() || 2 * own.iter().filter(|t| said.contains(*t)).count() >= own.len()
    };
    for field in [&mut dimension.location, &mut dimension.reason, &mut dimension.purpose] {
        if !supported(field) {
            field.clear();
        }
    }
    dimension.keywords.retain(|k| terms(k).iter().any(|t| said.contains(t)));
}

/// `time` becomes the time the source message mentions, resolved against the message's date
/// ("" when it mentions none: a small model copies the message date into nearly every record and
/// resolves "yesterday" or "next Friday" badly); `reason` and `purpose` are cleared unless the
/// message has a cue for them ([`memkit_text::cues`]).
fn ground_cued_fields(dimension: &mut memkit_schema::ExtractedDimension, source: &WindowMessage) {
    let text = message_text(source);
    dimension.time = mentioned_time(&text, source.turn.timestamp.map(|t| t.date())).map(|span| span.to_string()).unwrap_or_default();
    if !states_reason(&text) {
        dimension.reason.clear();
    }
    if !states_purpose(&text) {
        dimension.purpose.clear();
    }
}

/// The names of the dimensions that differ.
fn changed_fields(was: &memkit_schema::ExtractedDimension, now: &memkit_schema::ExtractedDimension) -> Vec<String> {
    [
        ("time", was.time != now.time),
        ("location", was.location != now.location),
        ("reason", was.reason != now.reason),
        ("purpose", was.purpose != now.purpose),
        ("keywords", was.keywords != now.keywords),
    ]
    .into_iter()
    .filter(|(_, changed)| *changed)
    .map(|(name, _)| name.to_owned())
    .collect()
}

/// A message's text with its photo caption.
fn message_text(m: &WindowMessage) -> String {
    match &m.turn.caption {
        Some(c) => format!("{} {c}", m.turn.text),
        None => m.turn.text.clone(),
    }
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parsed records, with the errors and decisions grounding adds.
    struct E {
        records: Vec<ExtractedMemory>,
        errors: Vec<RecordError>,
        grounding: Vec<Grounded>,
    }

    fn parsed(raw: &str) -> E {
        let p = memkit_schema::parse_extractor_output(raw);
        E { records: p.records, errors: p.errors, grounding: Vec::new() }
    }

    fn ground(grounder: Grounder, e: &mut E) {
        e.grounding = grounder.ground(&window(), &mut e.records, &mut e.errors).unwrap();
    }

    fn window() -> Window {
        // Friday 20 January 2023.
        let at = |n: u32| chrono::NaiveDate::from_ymd_opt(2023, 1, 20).and_then(|d| d.and_hms_opt(10, n, 0)).unwrap();
        let message = |n: u32, speaker: &str, text: &str| WindowMessage::user(n, speaker, text).at(at(n));
        Window::of(
            "conv/w1",
            1,
            vec![
                message(1, "Jon", "I lost my job as a banker yesterday."),
                message(2, "Gina", "Sorry Jon! I also lost my job at Door Dash this month."),
                message(3, "Jon", "I'm going to open a dance studio next month because dancing is my passion."),
                message(4, "Gina", "That's awesome, good luck!"),
            ],
        )
    }

    fn extraction(records: &[(u32, &str, &str)]) -> E {
        let memories: Vec<serde_json::Value> = records
            .iter()
            .map(|(id, speaker, content)| {
                serde_json::json!({"source_id": id, "source_speaker": speaker, "content": content,
                    "dimension": {"memory_type": "fact", "time": "", "location": "", "reason": "", "purpose": "", "keywords": []}})
            })
            .collect();
        parsed(&serde_json::json!({ "memories": memories }).to_string())
    }

    fn decisions(e: &E) -> Vec<(u32, u32, Decision)> {
        e.grounding.iter().map(|g| (g.model_source_id, g.source_id, g.decision)).collect()
    }

    #[test]
    fn keeps_a_correct_pointer() {
        let mut e = extraction(&[(3, "Jon", "Jon plans to open a dance studio.")]);
        ground(Grounder::new(GroundingConfig::default()), &mut e);
        assert_eq!(decisions(&e), [(3, 3, Decision::Kept)]);
        assert_eq!(e.records.len(), 1);
    }

    #[test]
    fn repoints_to_the_message_that_says_it() {
        // Gina's job loss is in message 2, not in Jon's message 3; the speaker follows.
        let mut e = extraction(&[(3, "Jon", "Gina lost her job at Door Dash.")]);
        ground(Grounder::new(GroundingConfig::default()), &mut e);
        assert_eq!(decisions(&e), [(3, 2, Decision::Repointed)]);
        assert_eq!((e.records[0].source_id, e.records[0].source_speaker.as_str()), (2, "Gina"));
        // Coverage: {lost, job, door, dash} all in message 2 (4/4), none in message 3 (0/4).
        assert_eq!((e.grounding[0].model_support, e.grounding[0].best_support), (0.0, 1.0));
    }

    #[test]
    fn drops_what_no_message_supports() {
        // "Lisbon" and "design" appear nowhere in the window (a leaked prompt example).
        let mut e = extraction(&[(3, "Jon", "Jon moved to Lisbon for a design job."), (4, "Gina", "Gina wished Jon good luck.")]);
        ground(Grounder::new(GroundingConfig::default()), &mut e);
        // Record 1: terms {move, lisbon, design, job}; best is message 2 with {job}: 1/4 < 0.5.
        assert_eq!(decisions(&e), [(3, 3, Decision::Unsupported), (4, 4, Decision::Kept)]);
        assert_eq!(e.records.len(), 1);
        assert_eq!(e.errors.iter().filter(|x| x.kind == ErrorKind::Unsupported).count(), 1);
        assert_eq!(GroundingTally::of(&e.grounding), GroundingTally { kept: 1, repointed: 0, unsupported: 1, context: 0, fields: 0 });
    }

    #[test]
    fn a_record_that_restates_the_context_is_dropped_and_off_means_off() {
        // Terms {lost, job, banker}: context message 1 has all three (1.0), the best new message
        // (2) has {lost, job} (0.67): the previous window covers it.
        let mut e = extraction(&[(3, "Jon", "Jon lost his job as a banker.")]);
        ground(Grounder::new(GroundingConfig::default()), &mut e);
        assert_eq!(decisions(&e), [(3, 3, Decision::Context)]);
        assert_eq!(e.errors.iter().map(|x| x.kind).collect::<Vec<_>>(), [ErrorKind::ContextSource]);
        let mut e = extraction(&[(3, "Jon", "Jon moved to Lisbon.")]);
        ground(Grounder::new(GroundingConfig { enabled: false, ..GroundingConfig::default() }), &mut e);
        assert!(e.grounding.is_empty());
        assert_eq!(e.records.len(), 1);
    }

    #[test]
    fn dimensions_the_message_does_not_say_are_cleared() {
        let raw = serde_json::json!({"memories": [{"source_id": 3, "source_speaker": "Jon", "content": "Jon plans to open a dance studio.",
            "dimension": {"memory_type": "episodic", "time": "", "location": "Paris", "reason": "passion for dancing",
                "purpose": "to earn money", "keywords": ["dance studio", "money", "passion"]}}]});
        let mut e = parsed(&raw.to_string());
        ground(Grounder::new(GroundingConfig::default()), &mut e);
        let d = &e.records[0].dimension;
        // Messages 3 and 2 say nothing of Paris or money; "passion" and "dancing" are in message 3.
        assert_eq!((d.location.as_str(), d.reason.as_str(), d.purpose.as_str()), ("", "passion for dancing", ""));
        assert_eq!(d.keywords, ["dance studio", "passion"]);
    }

    #[test]
    fn time_is_what_the_message_mentions_and_reason_and_purpose_need_a_cue() {
        let record = |source_id: u32, content: &str| {
            serde_json::json!({"source_id": source_id, "source_speaker": if source_id == 3 { "Jon" } else { "Gina" }, "content": content, "dimension": {"memory_type": "episodic",
                "time": "2023-01-20", "location": "", "reason": "dancing is a passion", "purpose": "open a dance studio", "keywords": []}})
        };
        let raw = serde_json::json!({"memories": [record(2, "Gina lost her job at Door Dash."), record(3, "Jon will open a dance studio."),
            record(4, "Gina wished Jon good luck.")]});
        let mut e = parsed(&raw.to_string());
        ground(Grounder::new(GroundingConfig::default()), &mut e);
        let dims: Vec<_> =
            e.records.iter().map(|r| (r.dimension.time.as_str(), r.dimension.reason.as_str(), r.dimension.purpose.as_str())).collect();
        // Message 2 says "this month" (January 2023) and has no cue; message 3 says "next month"
        // (February) and "because"; message 4 mentions no time and no cue. None says a purpose.
        assert_eq!(dims, [("2023-01", "", ""), ("2023-02", "dancing is a passion", ""), ("", "", "")]);
        let fields: Vec<_> = e.grounding.iter().map(|g| g.fields.join(",")).collect();
        assert_eq!(fields, ["time,reason,purpose", "time,purpose", "time,reason,purpose"]);
        assert_eq!(GroundingTally::of(&e.grounding).fields, 3);
    }

    #[test]
    fn the_margin_protects_the_models_choice() {
        // Message 2 supports it fully (1.0) and message 3 not at all (0.0): with a margin above
        // 1.0 the model's pointer stands, with the default it moves.
        let config = GroundingConfig { margin: 1.5, ..GroundingConfig::default() };
        let mut e = extraction(&[(3, "Jon", "Gina lost her job at Door Dash.")]);
        ground(Grounder::new(config), &mut e);
        assert_eq!(decisions(&e), [(3, 3, Decision::Kept)]);
    }
}
