//! Dimension-aware update (DimMem): consolidate new records against old ones cheaply.
//!
//! For each new record, in order:
//!
//! 1. candidates are the stored records of the **same type** and the **same dialogue** (the part
//!    of the window id before the window, [`memkit_schema::Pointer::dialogue_id`]): one database
//!    can hold several people's conversations, and one person's record never merges into or
//!    supersedes another's;
//! 2. of those, keep the ones whose **keyword Jaccard** with the new record is ≥ 0.3 (keyword
//!    tokens; a record without keywords uses its content tokens);
//! 3. only now **embed** the new record and the surviving candidates (through the store's
//!    embedding cache when enabled), and keep candidates with **cosine ≥ 0.7**;
//! 4. a [`Consolidator`] decides, best cosine first, whether to **merge** into the candidate,
//!    **supersede** it, or **keep both**; the first merge or supersede ends the search.
//!
//! Records accepted earlier in the same batch are candidates for later ones, so duplicates
//! within one batch consolidate too. All decisions are written in one transaction at the end.
//!
//! [`UpdateStats`] counts the embeddings this needs against DimMem's embed-all baseline, which
//! embeds every new record and every stored record of its type (and compares with cosine ≥ 0.85)
//! — DimMem reports −75.5% (LongMemEval) and −59.2% (LoCoMo).

use std::collections::{HashMap, HashSet};

use memkit_schema::{MemoryRecord, MemoryType, TimeSpan, UpdateAction};
use serde::{Deserialize, Serialize};

use crate::dense::{Embedder, cosine};
use crate::store::{ChangeSet, MemoryStore};
use crate::text::content_tokens;
use crate::{Error, Result};

/// A consolidator's answer for one (new, old) pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// What to do.
    pub decision: UpdateAction,
    /// For a merge, the combined content the consolidator wrote; `None` keeps the longer of
    /// the two ([`merge_records`]).
    pub merged_content: Option<String>,
}

impl From<UpdateAction> for Verdict {
    fn from(decision: UpdateAction) -> Self {
        Verdict { decision, merged_content: None }
    }
}

/// Decides between merge, supersede and keep-both for one (new, old) pair that passed the
/// type, keyword and cosine filters: the [`RuleConsolidator`], or DimMem's language model
/// (`llm::LlmConsolidator`, feature `llm`).
pub trait Consolidator {
    /// The verdict for `new` against `old`, whose embeddings have cosine `cosine`. An error (a
    /// model backend that failed) stops the update pass before anything is written.
    fn decide(&self, new: &MemoryRecord, old: &MemoryRecord, cosine: f32) -> Result<Verdict>;
}

/// The rule consolidator of SPEC §6.
///
/// - **fact**: the same value (equal content tokens, or cosine ≥ `same_value_cosine`) merges;
///   a differing value from a newer (or equally timed, or undated) message supersedes; an older
///   message with a differing value is kept beside the newer record;
/// - **episodic / profile**: times that overlap (record time, else the message day) are the same
///   episode and merge; times that do not overlap keep both; when either time is unknown the
///   pair has passed every filter and merges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RuleConsolidator {
    /// Cosine at or above which two facts state the same value.
    pub same_value_cosine: f32,
}

impl Default for RuleConsolidator {
    fn default() -> Self {
        RuleConsolidator { same_value_cosine: 0.95 }
    }
}

/// The record's time span: its `time` dimension, else the day of its message timestamp.
fn record_span(r: &MemoryRecord) -> Option<TimeSpan> {
    if let Ok(span) = r.dims.time.parse::<TimeSpan>() {
        return Some(span);
    }
    r.pointer.timestamp.get(..10).and_then(|d| d.parse().ok())
}

fn token_set(text: &str) -> HashSet<String> {
    content_tokens(text).into_iter().collect()
}

impl RuleConsolidator {
    /// The rules' decision for `new` against `old` (see the type's docs).
    pub fn decision(&self, new: &MemoryRecord, old: &MemoryRecord, cosine: f32) -> UpdateAction {
        match new.memory_type {
            MemoryType::Fact => {
                if cosine >= self.same_value_cosine || token_set(&new.content) == token_set(&old.content) {
                    UpdateAction::Merge
                } else if new.pointer.timestamp.is_empty()
                    || old.pointer.timestamp.is_empty()
                    || new.pointer.timestamp >= old.pointer.timestamp
                {
                    // ISO timestamps compare correctly as strings.
                    UpdateAction::Supersede
                } else {
                    UpdateAction::KeepBoth
                }
            }
            MemoryType::Episodic | MemoryType::Profile => match (record_span(new), record_span(old)) {
                (Some(a), Some(b)) if !a.overlaps(&b) => UpdateAction::KeepBoth,
                _ => UpdateAction::Merge,
            },
        }
    }
}

impl Consolidator for RuleConsolidator {
    fn decide(&self, new: &MemoryRecord, old: &MemoryRecord, cosine: f32) -> Result<Verdict> {
        Ok(self.decision(new, old, cosine).into())
    }
}

/// Folds `new` into `old`: keywords united, the longer content kept, source turns joined, empty
/// dimensions filled from `new`. The id, window, speaker and timestamp stay the old record's.
pub fn merge_records(old: &MemoryRecord, new: &MemoryRecord) -> MemoryRecord {
    let mut out = old.clone();
    if new.content.chars().count() > old.content.chars().count() {
        out.content = new.content.clone();
    }
    let mut seen: HashSet<String> = out.dims.keywords.iter().map(|k| k.trim().to_lowercase()).collect();
    for k in &new.dims.keywords {
        if seen.insert(k.trim().to_lowercase()) {
            out.dims.keywords.push(k.clone());
        }
    }
    for t in &new.pointer.turn_ids {
        if !out.pointer.turn_ids.contains(t) {
            out.pointer.turn_ids.push(t.clone());
        }
    }
    let fill = |mine: &mut String, theirs: &String| {
        if mine.is_empty() {
            mine.clone_from(theirs);
        }
    };
    fill(&mut out.dims.time, &new.dims.time);
    fill(&mut out.dims.location, &new.dims.location);
    fill(&mut out.dims.reason, &new.dims.reason);
    fill(&mut out.dims.purpose, &new.dims.purpose);
    out
}

/// Thresholds of the update pipeline (DimMem's values by default).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpdateConfig {
    /// Minimum keyword Jaccard for a candidate to be embedded.
    pub keyword_jaccard: f32,
    /// Minimum cosine for a candidate to reach the consolidator.
    pub cosine: f32,
    /// Read and write embeddings through the store's cache.
    pub cache_embeddings: bool,
}

impl Default for UpdateConfig {
    fn default() -> Self {
        UpdateConfig { keyword_jaccard: 0.3, cosine: 0.7, cache_embeddings: true }
    }
}

/// What one update pass did and what it cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateStats {
    /// New records processed.
    pub new_records: usize,
    /// (new, old) pairs that passed the type and keyword filters.
    pub keyword_candidates: usize,
    /// Pairs that also passed the cosine filter.
    pub cosine_candidates: usize,
    /// Pairs the consolidator decided: a new record's candidates go to it by cosine, highest
    /// first, until one is merged or superseded, so this is at most `cosine_candidates`.
    #[serde(default)]
    pub pairs_decided: usize,
    /// Texts the embedder actually embedded.
    pub embeddings_computed: usize,
    /// Vectors the filtered pipeline needed that came from the store cache instead.
    pub cache_hits: usize,
    /// Vectors DimMem's embed-all baseline needs for the same pass (every new record and every
    /// same-type record it is compared with, each text once).
    pub embeddings_embed_all_baseline: usize,
    /// New records folded into an existing one.
    pub merges: usize,
    /// Old records replaced by a new one.
    pub supersedes: usize,
    /// New records stored beside the old ones (no candidate, or keep-both).
    pub kept: usize,
}

impl UpdateStats {
    /// Vectors the filtered pipeline needed (computed or cached).
    pub fn embeddings_needed(&self) -> usize {
        self.embeddings_computed + self.cache_hits
    }

    /// Share of the baseline's embeddings saved, in `[0, 1]` (0 when the baseline needs none).
    pub fn embedding_saving(&self) -> f64 {
        if self.embeddings_embed_all_baseline == 0 {
            return 0.0;
        }
        1.0 - self.embeddings_needed() as f64 / self.embeddings_embed_all_baseline as f64
    }
}

/// Keyword tokens of a record (content tokens when it has no keywords).
fn keyword_tokens(r: &MemoryRecord) -> HashSet<String> {
    let set: HashSet<String> = r.dims.keywords.iter().flat_map(|k| content_tokens(k)).collect();
    if set.is_empty() { token_set(&r.content) } else { set }
}

/// Jaccard index of two sets (0 when both are empty).
pub fn jaccard<T: Eq + std::hash::Hash>(a: &HashSet<T>, b: &HashSet<T>) -> f32 {
    let union = a.union(b).count();
    if union == 0 { 0.0 } else { a.intersection(b).count() as f32 / union as f32 }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Stored,
    New,
}

struct Entry {
    record: MemoryRecord,
    keywords: HashSet<String>,
    origin: Origin,
    /// Bumped on every merge, so a changed text counts as a new text to embed.
    version: u32,
    alive: bool,
}

/// Vectors of the current text of each entry, keyed by entry index.
struct Vectors<'a, S: ?Sized> {
    store: &'a S,
    embedder: &'a dyn Embedder,
    use_cache: bool,
    memo: HashMap<usize, Vec<f32>>,
    /// Entries whose vector the embedder computed in this pass (to write back to the cache).
    computed: HashSet<usize>,
}

impl<S: MemoryStore + ?Sized> Vectors<'_, S> {
    fn ensure(&mut self, entries: &[Entry], wanted: &[usize], stats: &mut UpdateStats) -> Result<()> {
        let missing: Vec<usize> = wanted.iter().copied().filter(|i| !self.memo.contains_key(i)).collect();
        let mut to_embed = Vec::new();
        if self.use_cache {
            // Only unchanged stored records can have a valid cached vector.
            let cacheable: Vec<&str> = missing
                .iter()
                .filter(|&&i| entries[i].origin == Origin::Stored && entries[i].version == 0)
                .map(|&i| entries[i].record.id.as_str())
                .collect();
            let cached = self.store.get_embeddings(self.embedder.model_id(), &cacheable)?;
            for &i in &missing {
                match cached.get(&entries[i].record.id) {
                    Some(v) if entries[i].origin == Origin::Stored && entries[i].version == 0 => {
                        self.memo.insert(i, v.clone());
                        stats.cache_hits += 1;
                    }
                    _ => to_embed.push(i),
                }
            }
        } else {
            to_embed = missing;
        }
        if to_embed.is_empty() {
            return Ok(());
        }
        let texts: Vec<&str> = to_embed.iter().map(|&i| entries[i].record.content.as_str()).collect();
        let vectors = self.embedder.embed(&texts)?;
        if vectors.len() != texts.len() {
            return Err(Error::Embed(format!("{} returned {} vectors for {} texts", self.embedder.model_id(), vectors.len(), texts.len())));
        }
        stats.embeddings_computed += texts.len();
        for (i, v) in to_embed.into_iter().zip(vectors) {
            self.memo.insert(i, v);
            self.computed.insert(i);
        }
        Ok(())
    }

    fn invalidate(&mut self, i: usize) {
        self.memo.remove(&i);
        self.computed.remove(&i);
    }
}

/// Consolidates `new_records` into the store (see the module docs) and returns what it did.
///
/// Nothing is written when any step fails.
#[tracing::instrument(skip_all, fields(new = new_records.len()))]
pub fn update<S: MemoryStore + ?Sized>(
    store: &mut S,
    new_records: Vec<MemoryRecord>,
    embedder: &dyn Embedder,
    consolidator: &dyn Consolidator,
    config: &UpdateConfig,
) -> Result<UpdateStats> {
    let mut stats = UpdateStats::default();
    let mut entries: Vec<Entry> = store
        .list_records()?
        .into_iter()
        .map(|record| Entry { keywords: keyword_tokens(&record), record, origin: Origin::Stored, version: 0, alive: true })
        .collect();
    let mut deletes = Vec::new();
    let mut baseline_seen: HashSet<(usize, u32)> = HashSet::new();
    let mut vectors =
        Vectors { store: &*store, embedder, use_cache: config.cache_embeddings, memo: HashMap::new(), computed: HashSet::new() };

    for record in new_records {
        stats.new_records += 1;
        let new_index = entries.len();
        entries.push(Entry { keywords: keyword_tokens(&record), record, origin: Origin::New, version: 0, alive: false });
        // Candidates come from the same dialogue only: one database can hold several people's
        // conversations, and a record about one must never merge into or supersede another's.
        let (new_type, new_dialogue) = (entries[new_index].record.memory_type, entries[new_index].record.pointer.dialogue_id());
        let same_type: Vec<usize> = (0..new_index)
            .filter(|&i| {
                let r = &entries[i].record;
                entries[i].alive && r.memory_type == new_type && r.pointer.dialogue_id() == new_dialogue
            })
            .collect();
        baseline_seen.insert((new_index, 0));
        baseline_seen.extend(same_type.iter().map(|&i| (i, entries[i].version)));

        let candidates: Vec<usize> = same_type
            .into_iter()
            .filter(|&i| jaccard(&entries[i].keywords, &entries[new_index].keywords) >= config.keyword_jaccard)
            .collect();
        stats.keyword_candidates += candidates.len();

        let mut decided = None;
        if !candidates.is_empty() {
            let wanted: Vec<usize> = std::iter::once(new_index).chain(candidates.iter().copied()).collect();
            vectors.ensure(&entries, &wanted, &mut stats)?;
            let new_vec = &vectors.memo[&new_index];
            let mut scored: Vec<(usize, f32)> =
                candidates.iter().map(|&i| (i, cosine(new_vec, &vectors.memo[&i]))).filter(|&(_, c)| c >= config.cosine).collect();
            scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            stats.cosine_candidates += scored.len();
            for (i, c) in scored {
                stats.pairs_decided += 1;
                let verdict = consolidator.decide(&entries[new_index].record, &entries[i].record, c)?;
                if verdict.decision != UpdateAction::KeepBoth {
                    decided = Some((verdict, i));
                    break;
                }
            }
        }
        match decided.map(|(v, i)| (v.decision, v.merged_content, i)) {
            Some((UpdateAction::Merge, content, i)) => {
                entries[i].record = merge_records(&entries[i].record, &entries[new_index].record);
                if let Some(content) = content {
                    entries[i].record.content = content;
                }
                entries[i].keywords = keyword_tokens(&entries[i].record);
                entries[i].version += 1;
                vectors.invalidate(i);
                vectors.invalidate(new_index);
                stats.merges += 1;
            }
            Some((UpdateAction::Supersede, _, i)) => {
                entries[i].alive = false;
                vectors.invalidate(i);
                if entries[i].origin == Origin::Stored {
                    deletes.push(entries[i].record.id.clone());
                }
                entries[new_index].alive = true;
                stats.supersedes += 1;
            }
            _ => {
                entries[new_index].alive = true;
                stats.kept += 1;
            }
        }
    }
    stats.embeddings_embed_all_baseline = baseline_seen.len();

    let writeback: Vec<(String, Vec<f32>)> =
        vectors.computed.iter().filter(|&&i| entries[i].alive).map(|&i| (entries[i].record.id.clone(), vectors.memo[&i].clone())).collect();
    let changes = ChangeSet {
        deletes,
        updates: entries.iter().filter(|e| e.alive && e.origin == Origin::Stored && e.version > 0).map(|e| e.record.clone()).collect(),
        inserts: entries.iter().filter(|e| e.alive && e.origin == Origin::New).map(|e| e.record.clone()).collect(),
    };
    store.apply(&changes)?;
    if config.cache_embeddings && !writeback.is_empty() {
        store.put_embeddings(embedder.model_id(), &writeback)?;
    }
    tracing::debug!(?stats, saving = stats.embedding_saving(), "update pass done");
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use memkit_schema::{Dimensions, Pointer};

    fn rec(id: &str, t: MemoryType, content: &str, time: &str, ts: &str) -> MemoryRecord {
        MemoryRecord {
            id: id.into(),
            content: content.into(),
            memory_type: t,
            dims: Dimensions { time: time.into(), ..Default::default() },
            pointer: Pointer { timestamp: ts.into(), ..Default::default() },
        }
    }

    #[test]
    fn rules_follow_the_spec() {
        let c = RuleConsolidator::default();
        let old = rec("o", MemoryType::Fact, "Ann lives in Paris.", "", "2023-01-01T10:00:00");
        let moved = rec("n", MemoryType::Fact, "Ann lives in Berlin.", "", "2023-06-01T10:00:00");
        assert_eq!(c.decision(&moved, &old, 0.8), UpdateAction::Supersede);
        assert_eq!(c.decision(&old, &moved, 0.8), UpdateAction::KeepBoth, "an older message does not supersede");
        let same = rec("s", MemoryType::Fact, "Ann lives in Paris", "", "2023-06-01T10:00:00");
        assert_eq!(c.decision(&same, &old, 0.8), UpdateAction::Merge);

        let a = rec("a", MemoryType::Episodic, "Ann ran a race.", "2023-05-20", "");
        let b = rec("b", MemoryType::Episodic, "Ann ran a charity race.", "2023-05", "");
        let later = rec("c", MemoryType::Episodic, "Ann ran a race.", "2023-09-02", "");
        assert_eq!(c.decision(&b, &a, 0.9), UpdateAction::Merge);
        assert_eq!(c.decision(&later, &a, 0.9), UpdateAction::KeepBoth);
        let undated = rec("d", MemoryType::Profile, "Ann loves running.", "", "");
        assert_eq!(c.decision(&undated, &a, 0.9), UpdateAction::Merge);
    }

    #[test]
    fn merge_unites_and_keeps_longer() {
        let mut old = rec("o", MemoryType::Episodic, "Ann ran a race.", "", "");
        old.dims.keywords = vec!["race".into()];
        old.pointer.turn_ids = vec!["D1:1".into()];
        let mut new = rec("n", MemoryType::Episodic, "Ann ran a charity race for shelters.", "2023-05-20", "");
        new.dims.keywords = vec!["Race".into(), "charity".into()];
        new.pointer.turn_ids = vec!["D1:1".into(), "D1:3".into()];
        let m = merge_records(&old, &new);
        assert_eq!(m.id, "o");
        assert_eq!(m.content, new.content);
        assert_eq!(m.dims.keywords, ["race", "charity"]);
        assert_eq!(m.pointer.turn_ids, ["D1:1", "D1:3"]);
        assert_eq!(m.dims.time, "2023-05-20");
    }

    #[test]
    fn jaccard_of_sets() {
        let a: HashSet<_> = ["x", "y"].into_iter().collect();
        let b: HashSet<_> = ["y", "z"].into_iter().collect();
        assert!((jaccard(&a, &b) - 1.0 / 3.0).abs() < 1e-6);
        assert_eq!(jaccard::<&str>(&HashSet::new(), &HashSet::new()), 0.0);
    }
}
