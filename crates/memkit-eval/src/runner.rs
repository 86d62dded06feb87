//! Benchmark runners: an [`EvalRecipe`] in, a [`Report`] out.
//!
//! Every system is reduced to the same thing: for each question, a **ranked list of units**, each
//! unit a text shown to the answer model plus the dataset turns it points to. Raw turns, rule
//! records, LoCoMo observations and HingeMem segments are all units, so one metric compares them:
//! evidence recall at token budgets counts the gold turns reached through the pointers of the
//! units that fit (o200k_base tokens, see [`crate::tokens`]).
//!
//! - `full_context`: all turns in time order (at a budget, the first turns that fit; its context
//!   tokens are the whole dialogue).
//! - `bm25_turns` / `bm25_observations`: BM25 over raw turns / LoCoMo observations, queried with
//!   the question text.
//! - `engine`: records from a [`RecordSource`], the rule query parser, DimMem's tri-path routes
//!   and fusion; optionally HingeMem's adaptive stop on the fused list.
//! - `hinge`: boundary-guided hyperedges over records from a [`RecordSource`], salience rerank,
//!   adaptive stop; its units are the hyperedges' descriptions and member records, in the order
//!   [`HingeIndex::read`] gives.
//!
//! "Context tokens per query" is, for systems that stop adaptively, the tokens of the list they
//! return; for ranked systems, the tokens taken at the largest budget; for full context, the whole
//! dialogue.

use std::cell::OnceCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use chrono::NaiveDateTime;
use memkit_data::{LocomoSample, LongMemEvalItem, Question};
use memkit_engine::bm25::Bm25Index;
use memkit_engine::dense::{CachedEmbedder, DenseIndex, Embedder};
use memkit_engine::fusion::TriPath;
use memkit_engine::hinge::{HingeIndex, Part, RuleSegmenter};
use memkit_engine::query::{QueryParser, RuleQueryParser};
use memkit_engine::recall::{RecallStats, assistant_replies, replies_for, reply_text};
use memkit_engine::rule_extractor::{RuleExtractor, RuleExtractorConfig, raw_turn_records};
use memkit_engine::stopping::{StopConfig, adaptive_stop, classify_query};
use memkit_engine::store::AssistantReply;
use memkit_engine::{Hit, Retriever};
use memkit_prompt::AnswerMemory;
use memkit_schema::{Dialogue, MemoryRecord};
use serde_json::json;

use crate::pointers::{PointerTally, check_pointers};
use crate::qa::{ChatModel, QaItem};
use crate::recipe::QaSpec;
use crate::recipe::{DatasetSpec, EvalRecipe, RecordSource, SystemSpec};
use crate::report::{QaMetrics, QaSection, QaSystemMetrics};
use crate::retrieval::{EvidenceRecall, LongMemEvalMeans, evaluate_retrieval, is_abstention, recall_of_list};
use crate::{CategoryMetrics, Error, Report, Result, SystemMetrics, TokenCounter};

/// Progress of a long run, implemented by the CLI with progress bars (libraries draw none).
pub trait Reporter: Sync {
    /// A stage of `total` steps starts.
    fn start(&self, _stage: &str, _total: u64) {}
    /// `n` steps of the current stage are done.
    fn advance(&self, _n: u64) {}
    /// The current stage is done.
    fn finish(&self) {}
}

/// A reporter that reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;
impl Reporter for Silent {}

/// Where a run reads and what it records about itself.
pub struct RunOptions {
    /// Root that relative dataset paths resolve against (`../shared/data`).
    pub data_dir: PathBuf,
    /// The command line that produced the report, written into it.
    pub command: String,
    /// Sentence embedder for systems whose routes include `dense`.
    pub embedder: Option<Arc<dyn Embedder>>,
    /// The answer model and judge of a recipe with `[qa]`, built by the caller from it.
    pub qa_models: Option<QaModels>,
}

/// The models of `[qa]`.
pub struct QaModels {
    /// Answers the questions.
    pub answer: Arc<dyn ChatModel>,
    /// Judges the answers (`None`: F1 only).
    pub judge: Option<Arc<dyn ChatModel>>,
}

/// A retrieved unit: the text the answer model would read and the turns it points to.
struct Unit {
    text: String,
    turn_ids: Vec<String>,
    tokens: OnceCell<usize>,
    /// What the answer prompt shows for it.
    memory: AnswerMemory,
}

impl Unit {
    fn new(text: String, turn_ids: Vec<String>) -> Self {
        let memory = AnswerMemory { content: text.clone(), ..AnswerMemory::default() };
        Unit { text, turn_ids, tokens: OnceCell::new(), memory }
    }

    fn from_record(r: &MemoryRecord) -> Self {
        // The date is part of what the answer model reads: temporal questions need it.
        let text = match r.pointer.timestamp.get(..10) {
            Some(day) => format!("[{day}] {}", r.content),
            None => r.content.clone(),
        };
        Unit { memory: AnswerMemory::from_record(r), ..Unit::new(text, r.pointer.turn_ids.clone()) }
    }

    fn tokens(&self, counter: &TokenCounter) -> usize {
        *self.tokens.get_or_init(|| counter.count(&self.text))
    }
}

enum Ranker {
    Chronological,
    Bm25(Bm25Index),
    Engine {
        tri: Box<TriPath>,
        adaptive: bool,
    },
    /// Units are the hyperedges' descriptions (one per hyperedge, in order), then their member
    /// records.
    Hinge(Box<HingeIndex>),
}

/// One system prepared over one dialogue.
struct Prepared {
    units: Vec<Unit>,
    ranker: Ranker,
    /// Pointer checks of the records (systems over records other than raw turns).
    pointers: Option<PointerTally>,
    /// Assistant recall, for systems that have it on.
    recall: Option<Recall>,
}

/// A ranking for one question: unit indices best first, and where an adaptive stop cuts it.
struct Ranking {
    order: Vec<usize>,
    stop: Option<usize>,
    /// What assistant recall did for this question (systems with `assistant_recall`).
    recall: Option<RecallStats>,
}

impl Ranking {
    fn new(order: Vec<usize>, stop: Option<usize>) -> Self {
        Ranking { order, stop, recall: None }
    }
}

/// Assistant recall over one dialogue: reply units, appended after the system's own units.
struct Recall {
    /// User turn id → the reply that followed it.
    by_turn: HashMap<String, AssistantReply>,
    /// Reply turn id → its unit.
    unit_of: HashMap<String, usize>,
}

impl Recall {
    /// Adds one unit per assistant reply of the dialogue to `units`.
    fn new(dialogue: &Dialogue, units: &mut Vec<Unit>) -> Self {
        let (mut by_turn, mut unit_of) = (HashMap::new(), HashMap::new());
        for reply in assistant_replies(dialogue) {
            unit_of.insert(reply.reply_turn_id.clone(), units.len());
            units.push(Unit::new(reply_text(&reply), vec![reply.reply_turn_id.clone()]));
            by_turn.insert(reply.turn_id.clone(), reply);
        }
        Recall { by_turn, unit_of }
    }

    /// When the question asks what the assistant said (the query parser's cue rule), puts the
    /// reply that followed each ranked unit's source turns right after that unit (each reply
    /// once), so its tokens count against the budget; an adaptive stop moves with its units.
    fn attach(&self, units: &[Unit], ranking: Ranking, question: &str, date: Option<NaiveDateTime>) -> Result<Ranking> {
        let parsed = RuleQueryParser.parse(question, date)?;
        let mut stats = RecallStats::default();
        let sources = ranking.order.iter().map(|&i| units[i].turn_ids.as_slice());
        let replies = replies_for(|turn| Ok(self.by_turn.get(turn).cloned()), &parsed, sources, &mut stats)?;
        let mut order = Vec::with_capacity(ranking.order.len());
        let mut stop = ranking.stop;
        for (pos, (&i, attached)) in ranking.order.iter().zip(&replies).enumerate() {
            order.push(i);
            order.extend(attached.iter().map(|r| self.unit_of[&r.reply_turn_id]));
            if ranking.stop == Some(pos + 1) {
                stop = Some(order.len());
            }
        }
        Ok(Ranking { order, stop, recall: Some(stats) })
    }
}

impl Prepared {
    fn rank(&self, question: &str, date: Option<NaiveDateTime>) -> Result<Ranking> {
        let ranking = self.rank_units(question, date)?;
        match &self.recall {
            Some(recall) => recall.attach(&self.units, ranking, question, date),
            None => Ok(ranking),
        }
    }

    fn rank_units(&self, question: &str, date: Option<NaiveDateTime>) -> Result<Ranking> {
        let hits_to = |hits: &[Hit]| hits.iter().map(|h| h.doc).collect::<Vec<_>>();
        Ok(match &self.ranker {
            Ranker::Chronological => Ranking::new((0..self.units.len()).collect(), None),
            Ranker::Bm25(index) => Ranking::new(hits_to(&index.search_text(question, self.units.len())), None),
            Ranker::Engine { tri, adaptive } => {
                let parsed = RuleQueryParser.parse(question, date)?;
                let hits = tri.search(&parsed, tri.fusion().cap())?;
                if *adaptive {
                    // The adaptive stop keeps the best-scored hits of the fused list, in score
                    // order (the fused list itself is in concatenation order).
                    let kept = adaptive_stop(&hits, classify_query(question), &StopConfig::default());
                    Ranking::new(hits_to(&kept), Some(kept.len()))
                } else {
                    Ranking::new(hits_to(&hits), None)
                }
            }
            Ranker::Hinge(index) => {
                let parsed = RuleQueryParser.parse(question, date)?;
                let reading = index.read(&parsed, classify_query(question));
                let edges = index.hyperedges().len();
                let order = reading
                    .parts
                    .iter()
                    .map(|&part| match part {
                        Part::Description(e) => e,
                        Part::Member(r) => edges + r,
                    })
                    .collect();
                Ranking::new(order, Some(reading.opened_parts))
            }
        })
    }
}

fn records_for(
    source: &RecordSource,
    rule: RuleExtractorConfig,
    dialogue: &Dialogue,
    sample: Option<&LocomoSample>,
) -> Result<Vec<MemoryRecord>> {
    Ok(match source {
        RecordSource::File(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.clone(), source })?;
            let mut records = Vec::new();
            for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                let record: MemoryRecord = serde_json::from_str(line)
                    .map_err(|e| Error::Dataset(format!("{}:{}: not a memory record: {e}", path.display(), i + 1)))?;
                if record.pointer.belongs_to(&dialogue.id) {
                    records.push(record);
                }
            }
            records
        }
        RecordSource::RawTurns => raw_turn_records(dialogue),
        RecordSource::Rule => RuleExtractor::new(rule).extract(dialogue),
        RecordSource::Observations => {
            LocomoSample::observation_records(sample.ok_or_else(|| Error::Dataset("observations exist only for LoCoMo".into()))?)
        }
    })
}

fn prepare(
    system: &SystemSpec,
    dialogue: &Dialogue,
    sample: Option<&LocomoSample>,
    embedder: Option<&Arc<dyn Embedder>>,
    counter: &TokenCounter,
) -> Result<Prepared> {
    let mut prepared = prepare_units(system, dialogue, sample, embedder, counter)?;
    if system.assistant_recall() {
        prepared.recall = Some(Recall::new(dialogue, &mut prepared.units));
    }
    Ok(prepared)
}

fn prepare_units(
    system: &SystemSpec,
    dialogue: &Dialogue,
    sample: Option<&LocomoSample>,
    embedder: Option<&Arc<dyn Embedder>>,
    counter: &TokenCounter,
) -> Result<Prepared> {
    Ok(match system {
        SystemSpec::FullContext { .. } => Prepared {
            units: raw_turn_records(dialogue).iter().map(Unit::from_record).collect(),
            ranker: Ranker::Chronological,
            pointers: None,
            recall: None,
        },
        SystemSpec::Bm25Turns { .. } | SystemSpec::Bm25Observations { .. } => {
            let source = if matches!(system, SystemSpec::Bm25Turns { .. }) { RecordSource::RawTurns } else { RecordSource::Observations };
            let records = records_for(&source, RuleExtractorConfig::default(), dialogue, sample)?;
            let index = Bm25Index::from_records(&records);
            let pointers = (source == RecordSource::Observations).then(|| check_pointers(dialogue, &records));
            Prepared { units: records.iter().map(Unit::from_record).collect(), ranker: Ranker::Bm25(index), pointers, recall: None }
        }
        SystemSpec::Engine { records: source, retrieval, adaptive_stop, rule_extractor, .. } => {
            let records = records_for(source, *rule_extractor, dialogue, sample)?;
            let pointers = (*source != RecordSource::RawTurns).then(|| check_pointers(dialogue, &records));
            let mut tri = TriPath::new(&records, retrieval.clone())?;
            if retrieval.uses_dense() {
                let embedder = embedder.ok_or_else(|| {
                    Error::Dataset(format!(
                        "system {:?} has the dense route, but no embedder is installed (run `just models`)",
                        system.name()
                    ))
                })?;
                let boxed: Box<dyn Embedder> = Box::new(Arc::clone(embedder));
                tri = tri.with_dense(DenseIndex::build(boxed, &records, 64)?)?;
            }
            Prepared {
                units: records.iter().map(Unit::from_record).collect(),
                ranker: Ranker::Engine { tri: Box::new(tri), adaptive: *adaptive_stop },
                pointers,
                recall: None,
            }
        }
        SystemSpec::Hinge { hinge, segmenter, records: source, rule_extractor, embedding_topics, .. } => {
            let records = records_for(source, *rule_extractor, dialogue, sample)?;
            let pointers = (*source != RecordSource::RawTurns).then(|| check_pointers(dialogue, &records));
            let mut rules = RuleSegmenter::new(*segmenter);
            if *embedding_topics {
                rules = rules.with_embedder(embedder.ok_or_else(|| {
                    Error::Dataset(format!(
                        "system {:?} finds topic shifts by embeddings, but no embedder is installed (run `just models`)",
                        system.name()
                    ))
                })?);
            }
            let index = HingeIndex::build(dialogue, &records, &rules, *hinge, &|text| counter.count(text))?;
            let mut units: Vec<Unit> = index
                .hyperedges()
                .iter()
                .enumerate()
                .map(|(e, edge)| Unit::new(edge.description.clone(), index.part_turn_ids(Part::Description(e))))
                .collect();
            units.extend(index.records().iter().map(Unit::from_record));
            Prepared { units, ranker: Ranker::Hinge(Box::new(index)), pointers, recall: None }
        }
    })
}

/// Accumulates one system's figures over questions.
struct Tally {
    budgets: Vec<usize>,
    main: EvidenceRecall,
    per_category: BTreeMap<String, EvidenceRecall>,
    adaptive_recall: f64,
    adaptive_tokens: f64,
    adaptive_n: usize,
    full_tokens: f64,
    latency_ms: f64,
    queries: usize,
    units: usize,
    dialogues: usize,
    session: Option<LongMemEvalMeans>,
    turn: Option<LongMemEvalMeans>,
    pointers: Option<PointerTally>,
    /// Tokens of every HingeMem description.
    descriptions: Vec<usize>,
    /// Assistant recall over all questions (systems with it on).
    recall: Option<RecallStats>,
}

impl Tally {
    fn new(budgets: &[usize], ks: Option<&[usize]>) -> Self {
        Tally {
            budgets: budgets.to_vec(),
            main: EvidenceRecall::new(budgets),
            per_category: BTreeMap::new(),
            adaptive_recall: 0.0,
            adaptive_tokens: 0.0,
            adaptive_n: 0,
            full_tokens: 0.0,
            latency_ms: 0.0,
            queries: 0,
            units: 0,
            dialogues: 0,
            session: ks.map(LongMemEvalMeans::new),
            turn: ks.map(LongMemEvalMeans::new),
            pointers: None,
            descriptions: Vec::new(),
            recall: None,
        }
    }

    /// Counts one dialogue's prepared system (units, pointer checks, HingeMem descriptions).
    fn add_dialogue(&mut self, prepared: &Prepared, counter: &TokenCounter) {
        self.dialogues += 1;
        self.units += prepared.units.len();
        if let Ranker::Hinge(index) = &prepared.ranker {
            self.descriptions.extend(prepared.units[..index.hyperedges().len()].iter().map(|u| u.tokens(counter)));
        }
        if let Some(p) = prepared.pointers {
            self.pointers.get_or_insert_with(PointerTally::default).add(p);
        }
    }

    /// Units of the ranking as `(tokens, turn ids)`, up to the largest budget (and past it for
    /// the adaptive list).
    fn add_evidence(&mut self, prepared: &Prepared, ranking: &Ranking, counter: &TokenCounter, gold: &[String], category: Option<String>) {
        if let Some(r) = ranking.recall {
            let total = self.recall.get_or_insert_with(RecallStats::default);
            total.queries += r.queries;
            total.triggered += r.triggered;
            total.replies_attached += r.replies_attached;
            total.records_without_reply += r.records_without_reply;
        }
        let max_budget = self.budgets.iter().copied().max().unwrap_or(0);
        let mut units: Vec<(usize, &[String])> = Vec::new();
        let mut used = 0;
        for &i in &ranking.order {
            let u = &prepared.units[i];
            let t = u.tokens(counter);
            if used + t > max_budget && ranking.stop.is_none_or(|s| units.len() >= s) {
                break;
            }
            used += t;
            units.push((t, &u.turn_ids));
        }
        let in_main = category.as_deref() != Some("5");
        if in_main {
            self.main.add(&units, gold);
        }
        if let Some(c) = category {
            self.per_category.entry(c).or_insert_with(|| EvidenceRecall::new(&self.budgets)).add(&units, gold);
        }
        if let (Some(stop), true) = (ranking.stop, in_main) {
            let all: Vec<(usize, &[String])> = ranking.order[..stop.min(ranking.order.len())]
                .iter()
                .map(|&i| (prepared.units[i].tokens(counter), &prepared.units[i].turn_ids[..]))
                .collect();
            if let Some(r) = recall_of_list(&all, gold) {
                self.adaptive_recall += r.recall;
                self.adaptive_tokens += r.tokens as f64;
                self.adaptive_n += 1;
            }
        }
    }

    /// LongMemEval's rankings over turns and over sessions (when the tally has `ks`): each by
    /// first appearance in the unit ranking.
    fn add_rankings(&mut self, dialogue: &Dialogue, prepared: &Prepared, ranking: &Ranking, q: &Question) {
        if self.session.is_none() && self.turn.is_none() {
            return;
        }
        let turn_ids: Vec<&str> = dialogue.turns().map(|t| t.id.as_str()).collect();
        let turn_pos: HashMap<&str, usize> = turn_ids.iter().enumerate().map(|(i, t)| (*t, i)).collect();
        let session_ids: Vec<&str> = dialogue.sessions.iter().map(|s| s.id.as_str()).collect();
        let session_pos: HashMap<&str, usize> = session_ids.iter().enumerate().map(|(i, s)| (*s, i)).collect();
        let (mut turn_rank, mut session_rank) = (Vec::new(), Vec::new());
        let (mut seen_t, mut seen_s) = (HashSet::new(), HashSet::new());
        for &u in &ranking.order {
            for id in &prepared.units[u].turn_ids {
                if let Some(&p) = turn_pos.get(id.as_str())
                    && seen_t.insert(p)
                {
                    turn_rank.push(p);
                }
                if let Some(&p) = session_pos.get(session_of(id))
                    && seen_s.insert(p)
                {
                    session_rank.push(p);
                }
            }
        }
        if let Some(s) = self.session.as_mut() {
            s.add(|k| evaluate_retrieval(&session_rank, &q.evidence_sessions, &session_ids, k));
        }
        if let Some(t) = self.turn.as_mut()
            && !q.evidence.is_empty()
        {
            t.add(|k| evaluate_retrieval(&turn_rank, &q.evidence, &turn_ids, k));
        }
    }

    fn finish(self, name: &str, full_context: bool, counter: &TokenCounter) -> SystemMetrics {
        let mut m = SystemMetrics::new(name);
        m.evidence_recall_at = self.main.recall_at();
        m.questions = self.main.questions();
        let largest = self.budgets.iter().max().map(|b| b.to_string()).unwrap_or_default();
        m.mean_context_tokens = if full_context {
            self.full_tokens / self.dialogues.max(1) as f64
        } else if self.adaptive_n > 0 {
            self.adaptive_tokens / self.adaptive_n as f64
        } else {
            self.main.tokens_at().get(&largest).copied().unwrap_or(0.0)
        };
        for (c, r) in self.per_category {
            m.per_category.insert(c, CategoryMetrics { questions: r.questions(), evidence_recall_at: r.recall_at(), ..Default::default() });
        }
        m.extra.insert("questions_without_gold".into(), json!(self.main.without_gold()));
        if self.adaptive_n > 0 {
            m.extra.insert("adaptive_recall".into(), json!(self.adaptive_recall / self.adaptive_n as f64));
            m.extra.insert("adaptive_tokens".into(), json!(self.adaptive_tokens / self.adaptive_n as f64));
        }
        m.extra.insert("mean_latency_ms".into(), json!(self.latency_ms / self.queries.max(1) as f64));
        m.extra.insert("units_per_dialogue".into(), json!(self.units as f64 / self.dialogues.max(1) as f64));
        m.extra.insert("token_counter".into(), json!(counter.name()));
        if !self.descriptions.is_empty() {
            let mut d = self.descriptions.clone();
            d.sort_unstable();
            let at = |q: f64| d[((d.len() - 1) as f64 * q).round() as usize];
            m.extra.insert("hyperedges_per_dialogue".into(), json!(d.len() as f64 / self.dialogues.max(1) as f64));
            m.extra.insert("description_tokens_mean".into(), json!(d.iter().sum::<usize>() as f64 / d.len() as f64));
            m.extra.insert("description_tokens_p50".into(), json!(at(0.5)));
            m.extra.insert("description_tokens_p90".into(), json!(at(0.9)));
            m.extra.insert("description_tokens_max".into(), json!(d[d.len() - 1]));
        }
        if let Some(r) = self.recall {
            m.extra.insert("assistant_recall_trigger_rate".into(), json!(r.trigger_rate()));
            m.extra.insert("assistant_replies_per_triggered_query".into(), json!(r.replies_attached as f64 / r.triggered.max(1) as f64));
        }
        if let Some(p) = self.pointers {
            m.extra.insert("pointer_accuracy".into(), json!(p.accuracy()));
            m.extra.insert("pointer_records_checked".into(), json!(p.checked));
        }
        if let Some(s) = self.session {
            m.recall_any_at = Some(s.recall_any_at());
            m.recall_all_at = Some(s.recall_all_at());
            m.ndcg_at = Some(s.ndcg_at());
            m.extra.insert("longmemeval_questions".into(), json!(s.questions()));
        }
        if let Some(t) = self.turn {
            m.extra.insert("turn_recall_any_at".into(), json!(t.recall_any_at()));
            m.extra.insert("turn_recall_all_at".into(), json!(t.recall_all_at()));
            m.extra.insert("turn_ndcg_at".into(), json!(t.ndcg_at()));
        }
        m
    }
}

/// Runs every system of the recipe and returns the report (not yet written).
pub fn run(recipe: &EvalRecipe, options: &RunOptions, reporter: &dyn Reporter) -> Result<Report> {
    // Dense systems over the same records and questions share their vectors.
    let cached = RunOptions {
        data_dir: options.data_dir.clone(),
        command: options.command.clone(),
        embedder: options.embedder.clone().map(|e| Arc::new(CachedEmbedder::new(e)) as Arc<dyn Embedder>),
        qa_models: options.qa_models.as_ref().map(|m| QaModels { answer: Arc::clone(&m.answer), judge: m.judge.clone() }),
    };
    let options = &cached;
    let counter = TokenCounter::o200k()?;
    let path = recipe.dataset.resolve(&options.data_dir);
    let mut notes = vec![
        format!("Tokens counted with {} for every system.", counter.name()),
        "Evidence recall: units taken in rank order until the first one that does not fit the budget; recall = share of gold evidence turns reached through the units' pointers.".to_string(),
        "Context tokens per query: adaptive systems = tokens of the list they return; ranked systems = tokens taken at the largest budget; full context = the whole dialogue.".to_string(),
    ];
    if recipe.qa.is_some() && options.qa_models.is_none() {
        return Err(Error::Qa("the recipe has [qa] but no answer model was given".into()));
    }
    let mut qa_items = Vec::new();
    let systems = match &recipe.dataset {
        DatasetSpec::Locomo { conversations, sessions, .. } => {
            let mut samples = memkit_data::load_locomo(&path)?;
            if !conversations.is_empty() {
                if let Some(missing) = conversations.iter().find(|c| !samples.iter().any(|s| &s.id == *c)) {
                    return Err(Error::Dataset(format!("{}: no conversation {missing:?}", path.display())));
                }
                samples.retain(|s| conversations.contains(&s.id));
            }
            if let Some(n) = *sessions {
                samples = samples.into_iter().map(|s| s.first_sessions(n)).collect();
                notes.push(format!(
                    "Subset: each conversation cut to its first {n} sessions; only questions whose evidence lies in them ({} questions).",
                    samples.iter().map(|s| s.questions.len()).sum::<usize>()
                ));
            }
            let warnings: usize = samples.iter().map(|s| s.warnings.len()).sum();
            notes.push(format!(
                "LoCoMo: {} conversations; main figures over categories 1–4, category 5 (adversarial) reported apart; {} malformed evidence ids repaired or dropped by the loader.",
                samples.len(),
                warnings
            ));
            run_locomo(recipe, &samples, options, &counter, reporter, &mut qa_items)?
        }
        DatasetSpec::Longmemeval { limit, .. } => {
            let mut items = memkit_data::load_longmemeval(&path)?;
            if let Some(n) = limit {
                items.truncate(*n);
            }
            let abstention = items.iter().filter(|i| is_abstention(&i.question.id)).count();
            notes.push(format!(
                "LongMemEval: {} questions read, {abstention} abstention (`_abs`) questions excluded; session-level recall_any/recall_all/nDCG@k (official definitions) in the tables, turn level in metrics.json.",
                items.len()
            ));
            run_longmemeval(recipe, &items, options, &counter, reporter, &mut qa_items)?
        }
    };
    let dataset = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| recipe.dataset.name().to_string());
    if !recipe.description.is_empty() {
        notes.insert(0, recipe.description.clone());
    }
    let agreements = recipe.agreements.iter().map(agreement_of).collect::<Result<Vec<_>>>()?;
    let qa = match (&recipe.qa, &options.qa_models) {
        (Some(spec), Some(models)) => Some(answer_questions(spec, models, &qa_items, &systems, reporter)?),
        _ => None,
    };
    Ok(Report { name: recipe.name.clone(), dataset, command: options.command.clone(), systems, agreements, qa, notes })
}

/// The questions of the QA sample among `scored` (question ids), or none without `[qa]`.
fn qa_sample(spec: Option<&QaSpec>, scored: &[&str]) -> HashSet<String> {
    spec.map(|qa| crate::qa::sample(scored, qa.questions, qa.seed)).unwrap_or_default()
}

/// Whether `system` answers the QA sample.
fn answers_qa(spec: Option<&QaSpec>, system: &SystemSpec) -> bool {
    spec.is_some_and(|qa| qa.systems.is_empty() || qa.systems.iter().any(|n| n == system.name()))
}

/// Question `q` put to `system`, asked on `date`, with the memories of its ranking that fit
/// `budget` tokens. The kind is the question type (LoCoMo's category name, LongMemEval's type);
/// only LoCoMo questions have a category, which picks the official F1 rule.
fn qa_item(
    system: &SystemSpec,
    q: &Question,
    date: Option<NaiveDateTime>,
    prepared: &Prepared,
    ranking: &Ranking,
    counter: &TokenCounter,
    budget: usize,
) -> QaItem {
    let (memories, context_tokens) = memories_within(prepared, ranking, counter, budget);
    QaItem {
        system: system.name().to_owned(),
        question_id: q.id.clone(),
        question: q.question.clone(),
        date,
        gold: q.answer.clone(),
        category: q.category,
        kind: q.question_type.clone().unwrap_or_default(),
        memories,
        context_tokens,
    }
}

/// The memories of a ranking that fit `budget` tokens (in rank order until the first that
/// does not fit, and no further than an adaptive stop), and their tokens.
fn memories_within(prepared: &Prepared, ranking: &Ranking, counter: &TokenCounter, budget: usize) -> (Vec<AnswerMemory>, usize) {
    let (mut memories, mut used) = (Vec::new(), 0);
    let end = ranking.stop.unwrap_or(ranking.order.len()).min(ranking.order.len());
    for &i in &ranking.order[..end] {
        let t = prepared.units[i].tokens(counter);
        if used + t > budget {
            break;
        }
        used += t;
        memories.push(prepared.units[i].memory.clone());
    }
    (memories, used)
}

fn answer_questions(
    spec: &QaSpec,
    models: &QaModels,
    items: &[QaItem],
    systems: &[SystemMetrics],
    reporter: &dyn Reporter,
) -> Result<QaSection> {
    reporter.start("QA", items.len() as u64);
    let judge = if spec.judged { Some(models.judge.as_deref().unwrap_or(&*models.answer)) } else { None };
    let results = crate::qa::answer_and_judge(items, spec, &*models.answer, judge, &|n| reporter.advance(n as u64))?;
    reporter.finish();
    let per_system = systems
        .iter()
        .filter(|s| results.iter().any(|r| r.system == s.name))
        .map(|s| {
            let q = crate::qa::summarize(results.iter().filter(|r| r.system == s.name));
            QaSystemMetrics {
                name: s.name.clone(),
                questions: q.questions,
                f1: q.f1,
                judge_accuracy: q.judge_accuracy,
                judge_unparsed: q.judge_unparsed,
                mean_context_tokens: q.context_tokens,
            }
        })
        .collect();
    let questions = items.iter().map(|i| i.question_id.as_str()).collect::<HashSet<_>>().len();
    Ok(QaSection {
        metrics: QaMetrics {
            answer_model: models.answer.id(),
            judge_model: judge.map(ChatModel::id),
            questions,
            seed: spec.seed,
            budget: spec.budget,
            systems: per_system,
        },
        results,
    })
}

fn last_session_date(d: &Dialogue) -> Option<NaiveDateTime> {
    d.sessions.iter().filter_map(|s| s.turns.last().and_then(|t| t.timestamp).or(s.date)).max()
}

fn run_locomo(
    recipe: &EvalRecipe,
    samples: &[LocomoSample],
    options: &RunOptions,
    counter: &TokenCounter,
    reporter: &dyn Reporter,
    qa_items: &mut Vec<QaItem>,
) -> Result<Vec<SystemMetrics>> {
    // QA over categories 1–4: the ones with a gold answer to score.
    let scored: Vec<&str> = samples
        .iter()
        .flat_map(|s| &s.questions)
        .filter(|q| q.category.is_some_and(|c| (1..=4).contains(&c)) && !q.answer.is_empty())
        .map(|q| q.id.as_str())
        .collect();
    let cases: Vec<Case> = samples
        .iter()
        .map(|sample| {
            // LoCoMo questions carry no date: they are asked after the last session.
            let date = last_session_date(&sample.dialogue);
            Case {
                dialogue: &sample.dialogue,
                sample: Some(sample),
                questions: sample.questions.iter().map(|q| (q, date, q.category.map(|c| c.to_string()))).collect(),
            }
        })
        .collect();
    run_cases(recipe, &cases, None, &scored, options, counter, reporter, qa_items)
}

/// A dialogue and the questions asked about it: what both benchmarks reduce to.
struct Case<'a> {
    dialogue: &'a Dialogue,
    /// The LoCoMo sample (for its observations).
    sample: Option<&'a LocomoSample>,
    /// Each question with the date it is asked on and the category it is reported under.
    questions: Vec<(&'a Question, Option<NaiveDateTime>, Option<String>)>,
}

/// Every system of the recipe over every case: evidence recall at the budgets, LongMemEval's
/// session and turn rankings at `ks` (when given), and the QA items of the questions in the QA
/// sample drawn from `scored`.
#[allow(clippy::too_many_arguments)]
fn run_cases(
    recipe: &EvalRecipe,
    cases: &[Case],
    ks: Option<&[usize]>,
    scored: &[&str],
    options: &RunOptions,
    counter: &TokenCounter,
    reporter: &dyn Reporter,
    qa_items: &mut Vec<QaItem>,
) -> Result<Vec<SystemMetrics>> {
    let in_qa = qa_sample(recipe.qa.as_ref(), scored);
    let total: usize = cases.iter().map(|c| c.questions.len()).sum();
    let dialogues: Vec<&str> = cases.iter().map(|c| c.dialogue.id.as_str()).collect();
    let mut out = Vec::new();
    for system in &recipe.systems {
        let full_context = matches!(system, SystemSpec::FullContext { .. });
        let with_qa = answers_qa(recipe.qa.as_ref(), system);
        reporter.start(system.name(), total as u64);
        let mut tally = Tally::new(&recipe.budgets, ks);
        for case in cases {
            let prepared = prepare(system, case.dialogue, case.sample, options.embedder.as_ref(), counter)?;
            tally.add_dialogue(&prepared, counter);
            if full_context {
                tally.full_tokens += prepared.units.iter().map(|u| u.tokens(counter)).sum::<usize>() as f64;
            }
            for (q, date, category) in &case.questions {
                let started = Instant::now();
                let ranking = prepared.rank(&q.question, *date)?;
                tally.latency_ms += started.elapsed().as_secs_f64() * 1e3;
                tally.queries += 1;
                tally.add_evidence(&prepared, &ranking, counter, &q.evidence, category.clone());
                tally.add_rankings(case.dialogue, &prepared, &ranking, q);
                if with_qa && in_qa.contains(&q.id) {
                    let qa = recipe.qa.as_ref().expect("with_qa implies [qa]");
                    qa_items.push(qa_item(system, q, *date, &prepared, &ranking, counter, qa.budget));
                }
                reporter.advance(1);
            }
        }
        reporter.finish();
        let mut metrics = tally.finish(system.name(), full_context, counter);
        extraction_figures(system, &dialogues, &mut metrics)?;
        out.push(metrics);
    }
    Ok(out)
}

/// For a records file: how many of its records belong to no evaluated dialogue (skipped, with a
/// warning); and for records written by `memkit extract` with a model, what extraction cost
/// (wall seconds per window, a batch's time shared among its windows; completion tokens per
/// window), read from the window ledger next to the records file (`<file>.windows.jsonl`), when
/// there is one.
fn extraction_figures(system: &SystemSpec, dialogues: &[&str], metrics: &mut SystemMetrics) -> Result<()> {
    let Some(RecordSource::File(path)) = system.record_source() else { return Ok(()) };
    // Records of dialogues this run does not evaluate are skipped: count them and say so.
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.clone(), source })?;
    let mut outside = 0usize;
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let record: MemoryRecord =
            serde_json::from_str(line).map_err(|e| Error::Dataset(format!("{}:{}: not a memory record: {e}", path.display(), i + 1)))?;
        outside += usize::from(!dialogues.iter().any(|d| record.pointer.belongs_to(d)));
    }
    if outside > 0 {
        tracing::warn!(system = system.name(), file = %path.display(), records = outside, "records of dialogues outside this evaluation: skipped");
    }
    metrics.extra.insert("records_outside_dataset".into(), json!(outside));
    let ledger = memkit_schema::window_ledger_path(path);
    let Ok(text) = std::fs::read_to_string(&ledger) else { return Ok(()) };
    let (mut windows, mut millis, mut completion, mut empty) = (0usize, 0u64, 0u64, 0usize);
    let mut grounding: BTreeMap<String, usize> = BTreeMap::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let entry: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| Error::Dataset(format!("{}:{}: not a window ledger line: {e}", ledger.display(), i + 1)))?;
        let extraction = &entry["extraction"];
        windows += 1;
        // A batch's windows share its wall time: each gets its share.
        millis += extraction["usage"]["millis"].as_u64().unwrap_or(0) / entry["batch"].as_u64().unwrap_or(1).max(1);
        completion += extraction["usage"]["completion_tokens"].as_u64().unwrap_or(0);
        empty += usize::from(extraction["records"].as_array().is_none_or(Vec::is_empty));
        for decision in extraction["grounding"].as_array().into_iter().flatten() {
            *grounding.entry(decision["decision"].as_str().unwrap_or("unknown").to_owned()).or_default() += 1;
        }
    }
    if windows > 0 {
        metrics.extra.insert("extraction_windows".into(), json!(windows));
        metrics.extra.insert("extraction_s_per_window".into(), json!(millis as f64 / 1e3 / windows as f64));
        metrics.extra.insert("extraction_tokens_per_window".into(), json!(completion as f64 / windows as f64));
        metrics.extra.insert("windows_without_records".into(), json!(empty));
        // What grounding did with the model's records (absent: written without grounding).
        if !grounding.is_empty() {
            metrics.extra.insert("grounding".into(), json!(grounding));
        }
    }
    Ok(())
}

/// One window of a `memkit extract` window ledger, as far as agreement needs it.
#[derive(serde::Deserialize)]
struct LedgerLine {
    extraction: LedgerExtraction,
}

#[derive(serde::Deserialize)]
struct LedgerExtraction {
    window_id: String,
    records: Vec<memkit_schema::ExtractedMemory>,
    #[serde(default)]
    errors: Vec<memkit_schema::RecordError>,
    #[serde(default)]
    raw: String,
}

/// Per window: the records, or `None` when the reply did not parse as a whole.
fn read_window_ledger(records_file: &std::path::Path) -> Result<BTreeMap<String, Option<Vec<memkit_schema::ExtractedMemory>>>> {
    let path = memkit_schema::window_ledger_path(records_file);
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Read { path: path.clone(), source })?;
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let entry: LedgerLine = serde_json::from_str(line)
            .map_err(|e| Error::Dataset(format!("{}:{}: not a window ledger line: {e}", path.display(), i + 1)))?;
        let e = entry.extraction;
        // Unparsable = the reply was not whole (not JSON, broken, cut off): an error of that kind
        // in the ledger, or, for ledgers written before errors had kinds, in the raw reply.
        // Records dropped for pointing outside the window are no parse failure.
        let whole = |errors: &[memkit_schema::RecordError]| errors.iter().any(|err| err.kind.is_whole_reply());
        let whole_failure = whole(&e.errors) || (!e.raw.is_empty() && whole(&memkit_schema::parse_extractor_output(&e.raw).errors));
        out.insert(e.window_id, (!whole_failure).then_some(e.records));
    }
    Ok(out)
}

/// Agreement of one recipe entry: the candidate's windows against the reference's, on the
/// windows both extracted.
fn agreement_of(spec: &crate::recipe::AgreementSpec) -> Result<crate::report::NamedAgreement> {
    let reference = read_window_ledger(&spec.reference)?;
    let candidate = read_window_ledger(&spec.candidate)?;
    let pairs: Vec<crate::agreement::WindowPair<'_>> = reference
        .iter()
        .filter_map(|(id, r)| {
            let c = candidate.get(id)?;
            Some(crate::agreement::WindowPair { reference: r.as_deref().unwrap_or(&[]), candidate: c.as_deref() })
        })
        .collect();
    if pairs.is_empty() {
        return Err(Error::Dataset(format!(
            "agreement {:?}: {} and {} share no window",
            spec.name,
            memkit_schema::window_ledger_path(&spec.reference).display(),
            memkit_schema::window_ledger_path(&spec.candidate).display()
        )));
    }
    Ok(crate::report::NamedAgreement { name: spec.name.clone(), agreement: crate::agreement::agreement(&pairs) })
}

/// The session of a LongMemEval turn id `<session>:<n>`.
fn session_of(turn_id: &str) -> &str {
    turn_id.rsplit_once(':').map_or(turn_id, |(s, _)| s)
}

fn run_longmemeval(
    recipe: &EvalRecipe,
    items: &[LongMemEvalItem],
    options: &RunOptions,
    counter: &TokenCounter,
    reporter: &dyn Reporter,
    qa_items: &mut Vec<QaItem>,
) -> Result<Vec<SystemMetrics>> {
    let items: Vec<&LongMemEvalItem> = items.iter().filter(|i| !is_abstention(&i.question.id)).collect();
    let scored: Vec<&str> = items.iter().map(|i| i.question.id.as_str()).collect();
    let cases: Vec<Case> = items
        .iter()
        .map(|item| Case {
            dialogue: &item.dialogue,
            sample: None,
            questions: vec![(&item.question, item.question.question_date, item.question.question_type.clone())],
        })
        .collect();
    run_cases(recipe, &cases, Some(&recipe.ks), &scored, options, counter, reporter, qa_items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::AgreementSpec;

    fn memory(source_id: u32, content: &str) -> serde_json::Value {
        serde_json::json!({"source_id": source_id, "source_speaker": "Ann", "content": content,
            "dimension": {"memory_type": "fact", "time": "", "location": "", "reason": "", "purpose": "", "keywords": []}})
    }

    /// A window ledger line as `memkit extract` writes it.
    fn line(window: &str, kept: &[serde_json::Value], raw: &str, errors: serde_json::Value) -> String {
        serde_json::json!({"extractor": "m", "batch": 2, "extraction": {"window_id": window, "records": kept, "errors": errors,
            "raw": raw, "usage": {"prompt_tokens": 10, "completion_tokens": 4, "millis": 3000}}})
        .to_string()
    }

    /// See: issue 18. The adaptive stop cuts the fused list by score; the units kept must be the
    /// best-scored hits, best first, not the first hits of the concatenated route lists.
    #[test]
    fn the_adaptive_stop_keeps_the_best_scored_hits_in_score_order() {
        use memkit_schema::{Role, Session, Turn};
        let at = |d: u32| chrono::NaiveDate::from_ymd_opt(2023, 5, d).unwrap().and_hms_opt(10, 0, 0);
        let texts = [
            "I moved to Paris last week, the flat is tiny but I love it.",
            "Paris is lovely in May, we walked along the river.",
            "My sister visited me on Sunday and we cooked pasta.",
            "I started a new job at a bakery in May.",
            "The bakery opens at six so I get up at five.",
            "We went to the Louvre and saw the Mona Lisa.",
        ];
        let turns = texts
            .iter()
            .enumerate()
            .map(|(i, t)| Turn {
                id: format!("D1:{}", i + 1),
                speaker: "Ann".into(),
                role: Role::User,
                text: (*t).into(),
                caption: None,
                timestamp: at(10 + i as u32),
                has_answer: false,
            })
            .collect();
        let dialogue = Dialogue { id: "d".into(), sessions: vec![Session { id: "session_1".into(), date: at(10), turns }] };
        let system: SystemSpec = toml::from_str("kind = \"engine\"\nname = \"x\"\nrecords = \"rule\"\nadaptive_stop = true").unwrap();
        let prepared = prepare(&system, &dialogue, None, None, &TokenCounter::o200k().unwrap()).unwrap();
        let question = "When did Ann move to Paris and start at the bakery?";
        let ranking = prepared.rank(question, at(20)).unwrap();
        let Ranker::Engine { tri, .. } = &prepared.ranker else { panic!("an engine system") };
        let mut hits = tri.search(&RuleQueryParser.parse(question, at(20)).unwrap(), tri.fusion().cap()).unwrap();
        memkit_engine::stopping::sort_hits(&mut hits);
        let stop = ranking.stop.unwrap();
        assert!(stop >= 1 && stop <= hits.len());
        let best: Vec<usize> = hits[..stop].iter().map(|h| h.doc).collect();
        assert_eq!(ranking.order[..stop], best[..], "hits {hits:?}");
    }

    #[test]
    fn agreement_reads_window_ledgers_and_only_unparsable_replies_count_as_invalid() {
        let dir = tempfile::tempdir().unwrap();
        let (teacher, student) = (dir.path().join("teacher.jsonl"), dir.path().join("student.jsonl"));
        let cat = memory(4, "Ann adopted a cat named Tom");
        let paris = memory(5, "Ann moved to Paris in May");
        let reply = |records: &[&serde_json::Value]| serde_json::json!({"memories": records}).to_string();
        std::fs::write(
            memkit_schema::window_ledger_path(&teacher),
            [
                line("d/w0", &[cat.clone(), paris.clone()], &reply(&[&cat, &paris]), serde_json::json!([])),
                line("d/w1", std::slice::from_ref(&cat), &reply(&[&cat]), serde_json::json!([])),
            ]
            .join("\n"),
        )
        .unwrap();
        // w0: one record kept, one dropped for pointing at a context message (not a parse
        // failure, whatever its index says); w1: a reply that is not JSON at all.
        let context = memory(1, "Ann said hello");
        let dropped = serde_json::json!([{"index": null, "reason": "source_id 1 is a context-only message (1..=3)", "raw": ""}]);
        let lines = [
            line("d/w0", std::slice::from_ref(&cat), &reply(&[&cat, &context]), dropped),
            line("d/w1", &[], "I cannot", serde_json::json!([])),
        ];
        std::fs::write(memkit_schema::window_ledger_path(&student), lines.join("\n")).unwrap();

        let spec = AgreementSpec { name: "s vs t".into(), reference: teacher.clone(), candidate: student.clone() };
        let got = agreement_of(&spec).unwrap().agreement;
        assert_eq!((got.windows, got.json_validity), (2, 0.5));
        assert_eq!((got.reference_records, got.candidate_records, got.matched), (3, 1, 1));

        // Extraction cost: each window gets half of its batch's 3 s.
        let system: SystemSpec =
            toml::from_str(&format!("kind = \"engine\"\nname = \"x\"\nrecords = {{ file = {:?} }}", student.display().to_string()))
                .unwrap();
        // The records file: one record of the evaluated dialogue `d`, one of another.
        let record = |window: &str| serde_json::json!({"id": window, "content": "x", "type": "fact", "pointer": {"window_id": window}});
        std::fs::write(&student, format!("{}\n{}\n", record("d/w0"), record("elsewhere/w3"))).unwrap();
        let mut metrics = SystemMetrics::new("x");
        extraction_figures(&system, &["d"], &mut metrics).unwrap();
        assert_eq!(metrics.extra["records_outside_dataset"], serde_json::json!(1));
        assert_eq!(metrics.extra["extraction_s_per_window"], serde_json::json!(1.5));
        assert_eq!(metrics.extra["windows_without_records"], serde_json::json!(1));

        let missing = AgreementSpec { name: "none".into(), reference: teacher, candidate: dir.path().join("nothing.jsonl") };
        assert!(agreement_of(&missing).is_err());
    }

    /// Assistant recall in eval: the reply that followed a retrieved user turn is read right
    /// after it, only when the question asks what the assistant said.
    #[test]
    fn assistant_recall_reads_the_reply_after_its_turn() {
        use memkit_schema::{Role, Session, Turn};
        let turn = |id: &str, role: Role, text: &str| Turn {
            id: id.into(),
            speaker: if role == Role::User { "user" } else { "assistant" }.into(),
            role,
            text: text.into(),
            caption: None,
            timestamp: None,
            has_answer: false,
        };
        let turns = vec![
            turn("s:0", Role::User, "I need a new sci-fi novel to read on my trip."),
            turn("s:1", Role::Assistant, "Try The Left Hand of Darkness by Ursula K. Le Guin."),
            turn("s:2", Role::User, "My cat Miso knocked over a plant."),
            turn("s:3", Role::Assistant, "Cats love knocking things over."),
        ];
        let dialogue = Dialogue { id: "d".into(), sessions: vec![Session { id: "s".into(), date: None, turns }] };
        let spec = |recall: bool| -> SystemSpec {
            toml::from_str(&format!("kind = \"engine\"\nname = \"x\"\nrecords = \"rule\"\nassistant_recall = {recall}")).unwrap()
        };
        let counter = TokenCounter::o200k().unwrap();
        let with = prepare(&spec(true), &dialogue, None, None, &counter).unwrap();
        let without = prepare(&spec(false), &dialogue, None, None, &counter).unwrap();
        // The rule extractor keeps user turns only; recall adds one unit per reply.
        assert_eq!(with.units.len(), without.units.len() + 2);

        let cue = "What sci-fi novel did you recommend to me last time?";
        let plain = without.rank(cue, None).unwrap();
        let ranked = with.rank(cue, None).unwrap();
        let first = plain.order[0];
        assert_eq!(with.units[first].turn_ids, ["s:0"]);
        // The novel turn first, then its reply; the cat turn's reply right after the cat turn.
        let turns: Vec<&str> = ranked.order.iter().map(|&i| with.units[i].turn_ids[0].as_str()).collect();
        assert_eq!(turns[..2], ["s:0", "s:1"]);
        assert_eq!(ranked.order.len(), plain.order.len() * 2);
        assert!(with.units[ranked.order[1]].text.starts_with("(assistant replied: Try The Left Hand"));
        let stats = ranked.recall.unwrap();
        assert_eq!((stats.queries, stats.triggered, stats.replies_attached), (1, 1, plain.order.len()));

        // No cue, no replies: the same order as without recall.
        let asked = "What novel does the user want for the trip?";
        let ranked = with.rank(asked, None).unwrap();
        assert_eq!(ranked.order, without.rank(asked, None).unwrap().order);
        assert_eq!(ranked.recall.unwrap().triggered, 0);
    }

    /// A HingeMem system's units are its descriptions, then its member records, and its ranking
    /// is the index's reading, cut where the opened hyperedges end.
    #[test]
    fn hinge_units_follow_the_reading() {
        let d = memkit_data::load_locomo(&memkit_data::shared_data_dir().join("locomo/locomo10.json")).unwrap().swap_remove(0).dialogue;
        let spec: SystemSpec =
            toml::from_str("kind = \"hinge\"\nname = \"h\"\nrecords = \"rule\"\nrule_extractor.per_sentence = true").unwrap();
        let counter = TokenCounter::o200k().unwrap();
        let prepared = prepare(&spec, &d, None, None, &counter).unwrap();
        let Ranker::Hinge(index) = &prepared.ranker else { panic!("a HingeMem system") };
        let edges = index.hyperedges().len();
        assert_eq!(prepared.units.len(), edges + index.records().len());
        let question = "What did Caroline research?";
        let ranking = prepared.rank(question, None).unwrap();
        let reading = index.read(&RuleQueryParser.parse(question, None).unwrap(), classify_query(question));
        assert!(reading.opened_parts >= 1, "{reading:?}");
        assert_eq!(ranking.order.len(), reading.parts.len());
        assert_eq!(ranking.stop, Some(reading.opened_parts));
        for (&u, &part) in ranking.order.iter().zip(&reading.parts) {
            assert_eq!(prepared.units[u].turn_ids, index.part_turn_ids(part));
            match part {
                Part::Description(e) => assert_eq!(prepared.units[u].text, index.hyperedges()[e].description),
                Part::Member(r) => assert!(prepared.units[u].text.ends_with(&index.records()[r].content)),
            }
        }
    }
}
