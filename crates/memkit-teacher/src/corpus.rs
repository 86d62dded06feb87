//! The training corpus (SPEC §3): LongMemEval-S filler sessions and MemoryBank dialogues, cut
//! into windows and drawn in a seeded order. Never LoCoMo: it is evaluation data.
//!
//! A LongMemEval-S session is *filler* when it is no question's evidence (`answer_session_ids`)
//! and appears in no haystack of a question in the evaluation split. Filler sessions recur in
//! many haystacks; each is used once, in the haystack of the first training question (by id)
//! that holds it, so a training dialogue is that question's filler sessions in haystack order.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use memkit_data::{Dialogue, Split, Window, assign_split, load_chitchat, load_longmemeval, load_memorybank, unit_hash, windows};
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::recipe::CorpusSpec;

/// Where a window comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    /// LongMemEval-S filler sessions.
    LongmemevalS,
    /// MemoryBank.
    Memorybank,
    /// The BYU chit-chat dataset.
    Chitchat,
    /// A dialogue file labelled outside distillation (`memkit extract` with a teacher): never
    /// training data.
    Other,
}

impl SourceKind {
    /// The name in JSON, stats and parquet (`longmemeval-s`, `memorybank`).
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::LongmemevalS => "longmemeval-s",
            SourceKind::Memorybank => "memorybank",
            SourceKind::Chitchat => "chitchat",
            SourceKind::Other => "other",
        }
    }
}

/// A window to label, with its source.
#[derive(Debug, Clone)]
pub struct CorpusWindow {
    /// Where it comes from.
    pub source: SourceKind,
    /// The window.
    pub window: Window,
}

/// The sampled windows and what was left out.
#[derive(Debug, Clone, Default)]
pub struct Corpus {
    /// The first `windows` windows in the seeded order, in that order.
    pub windows: Vec<CorpusWindow>,
    /// Windows available after the length filter, per source.
    pub available: BTreeMap<SourceKind, usize>,
    /// Windows skipped because their rendered lines exceed `max_window_chars`.
    pub skipped_long: usize,
    /// LongMemEval-S: filler sessions used, and sessions excluded as evidence or eval haystack.
    pub lme_sessions_used: usize,
    /// LongMemEval-S sessions left out (evidence, or in an evaluation-split haystack).
    pub lme_sessions_excluded: usize,
    /// Warnings from the loaders.
    pub warnings: Vec<String>,
}

/// Loads the sources of `spec` (relative paths resolve against `data_dir`), cuts windows and
/// draws `spec.windows` of them.
pub fn select(spec: &CorpusSpec, data_dir: &Path) -> Result<Corpus> {
    let resolve = |p: &Path| if p.is_absolute() { p.to_owned() } else { data_dir.join(p) };
    let mut corpus = Corpus::default();
    let mut dialogues: Vec<(SourceKind, Dialogue)> = Vec::new();
    if let Some(lme) = &spec.longmemeval_s {
        let items = load_longmemeval(&resolve(&lme.path))?;
        let (filler, used, excluded) = longmemeval_filler(items, lme.split_seed, &lme.ratios(), &mut corpus.warnings);
        corpus.lme_sessions_used = used;
        corpus.lme_sessions_excluded = excluded;
        dialogues.extend(filler.into_iter().map(|d| (SourceKind::LongmemevalS, d)));
    }
    if let Some(bank) = &spec.memorybank {
        dialogues.extend(load_memorybank(&resolve(&bank.path))?.into_iter().map(|d| (SourceKind::Memorybank, d)));
    }
    if let Some(chitchat) = &spec.chitchat {
        let name = memkit_infer::models::CHITCHAT_DATASET.name;
        let path = match &chitchat.path {
            Some(path) => resolve(path),
            None => memkit_infer::models::locate(name)
                .ok_or_else(|| crate::Error::DatasetMissing { section: "chitchat", name: name.to_owned() })?,
        };
        dialogues.extend(load_chitchat(&path)?.into_iter().map(|d| (SourceKind::Chitchat, d)));
    }
    let mut all = Vec::new();
    for (source, dialogue) in &dialogues {
        for window in windows(dialogue, &spec.window) {
            if window.render().chars().count() > spec.max_window_chars {
                corpus.skipped_long += 1;
                continue;
            }
            *corpus.available.entry(*source).or_default() += 1;
            all.push(CorpusWindow { source: *source, window });
        }
    }
    // The order depends only on each window's id and the seed, so a larger `windows` keeps
    // every window a smaller one drew.
    all.sort_by(|a, b| {
        unit_hash(&a.window.id, spec.seed).total_cmp(&unit_hash(&b.window.id, spec.seed)).then_with(|| a.window.id.cmp(&b.window.id))
    });
    all.truncate(spec.windows);
    corpus.windows = all;
    Ok(corpus)
}

/// Builds one dialogue per training question from its filler sessions; returns the dialogues,
/// the number of sessions used and the number excluded.
fn longmemeval_filler(
    items: Vec<memkit_data::LongMemEvalItem>,
    seed: u64,
    ratios: &memkit_data::SplitRatios,
    warnings: &mut Vec<String>,
) -> (Vec<Dialogue>, usize, usize) {
    // Repeated session ids inside one haystack were renamed `<id>#2` by the loader.
    let base = |id: &str| id.split('#').next().unwrap_or(id).to_owned();
    let mut excluded: HashSet<String> = HashSet::new();
    for item in &items {
        excluded.extend(item.question.evidence_sessions.iter().map(|s| base(s)));
        if assign_split(&item.question.id, seed, ratios) == Split::Test {
            excluded.extend(item.dialogue.sessions.iter().map(|s| base(&s.id)));
        }
    }
    let mut items: Vec<_> = items.into_iter().filter(|i| assign_split(&i.question.id, seed, ratios) != Split::Test).collect();
    items.sort_by(|a, b| a.question.id.cmp(&b.question.id));
    let mut used: HashSet<String> = HashSet::new();
    let mut dialogues = Vec::new();
    for item in items {
        warnings.extend(item.warnings);
        let sessions: Vec<_> = item
            .dialogue
            .sessions
            .into_iter()
            .filter(|s| {
                let id = base(&s.id);
                !excluded.contains(&id) && used.insert(id)
            })
            .collect();
        if !sessions.is_empty() {
            dialogues.push(Dialogue { id: format!("lme-s/{}", item.question.id), sessions });
        }
    }
    (dialogues, used.len(), excluded.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::ChitchatSource;

    /// A chit-chat source gives windows of both people's messages (both are users), named by
    /// the pair, counted under their own source.
    #[test]
    fn chitchat_windows_hold_both_speakers() {
        let message = |text: &str, minute: u32, sender: &str| serde_json::json!({"text": text, "timestamp": format!("2018-05-02T19:{minute:02}:00Z"), "sender": sender});
        let turns: Vec<serde_json::Value> = (0..8)
            .map(|i| serde_json::json!([message(&format!("I moved to town number {i} last year."), i, ["aaaa", "bbbb"][i as usize % 2])]))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dataset.json");
        std::fs::write(&path, serde_json::json!({"c1": {"messages": turns}}).to_string()).unwrap();
        let spec: CorpusSpec = toml::from_str("windows = 10\nwindow = { size = 5, overlap = 1, user_only = true }").unwrap();
        let spec = CorpusSpec { chitchat: Some(ChitchatSource { path: Some(path) }), ..spec };
        let corpus = select(&spec, dir.path()).unwrap();
        assert_eq!(corpus.available.get(&SourceKind::Chitchat), Some(&2), "8 messages, windows of 5 with 1 of context");
        let window = &corpus.windows.iter().find(|w| w.window.id.ends_with("/w0")).unwrap().window;
        assert!(window.id.starts_with("chitchat/aaaa-bbbb/"), "{}", window.id);
        let speakers: std::collections::HashSet<&str> = window.messages.iter().map(|m| m.turn.speaker.as_str()).collect();
        assert_eq!(speakers.len(), 2, "{speakers:?}");
    }

    #[test]
    fn source_names_are_the_serde_names() {
        for kind in [SourceKind::LongmemevalS, SourceKind::Memorybank, SourceKind::Chitchat] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }
}
