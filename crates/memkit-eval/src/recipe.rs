//! Eval recipes: TOML files in `recipes/eval/` that name the dataset, the token budgets and the
//! systems to compare. Unknown keys are errors, so a typo fails loudly.
//!
//! ```toml
//! name = "locomo-baselines"
//! [dataset]
//! kind = "locomo"
//! path = "locomo/locomo10.json"      # relative to the data dir (../shared/data)
//! [[systems]]
//! kind = "bm25_turns"
//! name = "BM25 raw turns"
//! ```

use std::path::{Path, PathBuf};

use memkit_engine::fusion::TriPathConfig;
use memkit_engine::hinge::{HingeConfig, SegmenterConfig};
use memkit_engine::rule_extractor::RuleExtractorConfig;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A whole eval recipe.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalRecipe {
    /// Report folder name: the report goes to `<reports_dir>/<name>/`.
    pub name: String,
    /// One line for the report header.
    #[serde(default)]
    pub description: String,
    /// Which benchmark file to read.
    pub dataset: DatasetSpec,
    /// Token budgets of evidence recall.
    #[serde(default = "default_budgets")]
    pub budgets: Vec<usize>,
    /// Cut-offs of LongMemEval's recall_any/recall_all/nDCG.
    #[serde(default = "default_ks")]
    pub ks: Vec<usize>,
    /// The systems to compare, in report order.
    pub systems: Vec<SystemSpec>,
    /// A system to compare every other one with, question by question: the report gives each
    /// system's evidence-recall difference to it per budget, with a 95% paired bootstrap interval.
    #[serde(default)]
    pub baseline: Option<String>,
    /// Extraction agreement between record files written by `memkit extract` with a model
    /// (`[[agreements]]`), computed from their window ledgers.
    #[serde(default)]
    pub agreements: Vec<AgreementSpec>,
    /// Question answering on a seeded sample (`[qa]`): an answer model reads what each system
    /// retrieves within a budget; official LoCoMo F1 and an LLM judge.
    #[serde(default)]
    pub qa: Option<QaSpec>,
    /// The model of the systems with `query_parser = "llm"` (`[query_model]`): DimMem's query
    /// parser fills each question's fields from `prompts/query.j2`.
    #[serde(default)]
    pub query_model: Option<QueryModelSpec>,
    /// The model of the systems with `update = "llm"` (`[update_model]`): DimMem's update
    /// consolidator decides each candidate pair from `prompts/update.j2`.
    #[serde(default)]
    pub update_model: Option<UpdateModelSpec>,
    /// The model of the HingeMem systems with `boundaries = "llm"` (`[boundary_model]`):
    /// HingeMem's segmenter draws boundaries from `prompts/boundary.j2`.
    #[serde(default)]
    pub boundary_model: Option<BoundaryModelSpec>,
}

/// `[update_model]`: the chat model that consolidates records for systems with
/// `update = "llm"`. Replies are cached like the QA replies; a reply that is cut off or does not
/// parse is decided by the rules instead (counted in the report).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateModelSpec {
    /// The model.
    pub model: ModelSpec,
    /// Most tokens per reply.
    #[serde(default = "default_update_max_tokens")]
    pub max_tokens: usize,
}

/// `[boundary_model]`: the chat model that draws HingeMem's boundaries for systems with
/// `boundaries = "llm"`. Replies are cached like the QA replies; a piece whose reply is cut off
/// or does not parse is segmented by the rules instead (counted in the report).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundaryModelSpec {
    /// The model.
    pub model: ModelSpec,
    /// Most tokens per reply.
    #[serde(default = "default_boundary_max_tokens")]
    pub max_tokens: usize,
    /// Messages shown per request (each session is cut into pieces of at most this many).
    #[serde(default = "default_boundary_messages")]
    pub messages: usize,
    /// Requests per model call (a local model decodes them as one batch).
    #[serde(default = "default_qa_chunk")]
    pub chunk: usize,
}

/// Where a HingeMem system's segment boundaries come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoundaryKind {
    /// The rule segmenter (`[systems.segmenter]`; the default).
    #[default]
    Rule,
    /// HingeMem's language-model segmenter, with the recipe's `[boundary_model]`.
    Llm,
}

/// Whether an engine system consolidates its records before indexing them (DimMem's
/// dimension-aware update, per dialogue, in record order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpdateKind {
    /// Every record is indexed as extracted (the default).
    #[default]
    None,
    /// The rule consolidator decides merge / supersede / keep both.
    Rule,
    /// DimMem's language-model consolidator, with the recipe's `[update_model]`.
    Llm,
}

/// `[query_model]`: the chat model that parses questions for systems with
/// `query_parser = "llm"`. Each question is parsed once per run; replies are cached like the QA
/// replies, and a reply that is cut off or does not parse falls back to the rule parser (counted
/// in the report).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryModelSpec {
    /// The model.
    pub model: ModelSpec,
    /// Most tokens per reply.
    #[serde(default = "default_query_max_tokens")]
    pub max_tokens: usize,
    /// Questions per model call (a local model decodes them as one batch).
    #[serde(default = "default_qa_chunk")]
    pub chunk: usize,
}

/// How an engine or HingeMem system parses questions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueryParserKind {
    /// The rule parser (no model; the default).
    #[default]
    Rule,
    /// DimMem's language-model parser, with the recipe's `[query_model]`.
    Llm,
}

/// `[qa] budget`: one token budget or several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum QaBudget {
    /// One budget (`budget = 1000`).
    One(usize),
    /// Several (`budget = [500, 1000]`), in the order given.
    Several(Vec<usize>),
}

impl QaBudget {
    /// The budgets, in the recipe's order.
    pub fn as_slice(&self) -> &[usize] {
        match self {
            QaBudget::One(b) => std::slice::from_ref(b),
            QaBudget::Several(list) => list,
        }
    }

    /// The largest budget (what a prompt must have room for).
    pub fn max(&self) -> usize {
        self.as_slice().iter().copied().max().unwrap_or(0)
    }
}

/// `[qa]`: question answering over each system's retrieved units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QaSpec {
    /// Questions in the seeded sample (of LoCoMo categories 1–4, or LongMemEval's
    /// non-abstention questions).
    #[serde(default = "default_qa_questions")]
    pub questions: usize,
    /// The sample's seed.
    #[serde(default = "default_qa_seed")]
    pub seed: u64,
    /// Context tokens the answer model reads (units in rank order until the first that does
    /// not fit, as for evidence recall): one budget, or a list (`[500, 1000]`) at each of which
    /// every system answers, for systems compared at their tokens.
    #[serde(default = "default_qa_budget")]
    pub budget: QaBudget,
    /// Most tokens per answer.
    #[serde(default = "default_qa_max_tokens")]
    pub max_tokens: usize,
    /// Questions per model call (a local model decodes them as one batch; the reply cache
    /// keeps every finished call).
    #[serde(default = "default_qa_chunk")]
    pub chunk: usize,
    /// The systems to answer with, by report name; all when empty.
    #[serde(default)]
    pub systems: Vec<String>,
    /// The answer model.
    pub answer: ModelSpec,
    /// The judge; the answer model when absent.
    #[serde(default)]
    pub judge: Option<ModelSpec>,
    /// Set false to score with F1 only.
    #[serde(default = "default_true")]
    pub judged: bool,
}

impl Default for QaSpec {
    fn default() -> Self {
        Self {
            questions: default_qa_questions(),
            seed: default_qa_seed(),
            budget: default_qa_budget(),
            max_tokens: default_qa_max_tokens(),
            chunk: default_qa_chunk(),
            systems: Vec::new(),
            answer: ModelSpec::local("qwen2.5-coder-1.5b-instruct"),
            judge: None,
            judged: true,
        }
    }
}

/// A chat model: the answer model, the judge, or the query parser's model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ModelSpec {
    /// A GGUF model in-process (llama.cpp), greedy.
    Local {
        /// A packaged model name (`memkit models list`) or a `.gguf` path.
        model: String,
        /// llama.cpp threads (default: the cores available).
        #[serde(default)]
        threads: Option<usize>,
        /// KV-cache size in tokens (default: room for a chunk of prompts).
        #[serde(default)]
        n_ctx: Option<u32>,
    },
    /// Any OpenAI-compatible `/v1/chat/completions` server, `temperature: 0`.
    Openai {
        /// API root including `/v1`.
        base_url: String,
        /// Model name sent with each request.
        model: String,
        /// Environment variable holding the API key.
        #[serde(default = "default_api_key_env")]
        api_key_env: String,
        /// Limit on one attempt, in seconds.
        #[serde(default = "default_timeout_s")]
        timeout_s: u64,
    },
}

impl ModelSpec {
    /// A GGUF in process: a packaged model name or a `.gguf` path, default threads and cells.
    pub fn local(model: impl Into<String>) -> Self {
        ModelSpec::Local { model: model.into(), threads: None, n_ctx: None }
    }

    /// `model` on the OpenAI-compatible server at `base_url` (with `/v1`), key from
    /// `OPENAI_API_KEY`, the default timeout.
    pub fn openai(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        ModelSpec::Openai {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: default_api_key_env(),
            timeout_s: default_timeout_s(),
        }
    }
}

fn default_qa_questions() -> usize {
    40
}
fn default_qa_seed() -> u64 {
    7
}
fn default_qa_budget() -> QaBudget {
    QaBudget::One(1000)
}
fn default_qa_max_tokens() -> usize {
    64
}
fn default_query_max_tokens() -> usize {
    memkit_engine::llm::LlmQueryParser::DEFAULT_MAX_TOKENS
}
fn default_update_max_tokens() -> usize {
    memkit_engine::llm::LlmConsolidator::DEFAULT_MAX_TOKENS
}
fn default_boundary_max_tokens() -> usize {
    memkit_engine::llm::LlmSegmenter::DEFAULT_MAX_TOKENS
}
fn default_boundary_messages() -> usize {
    memkit_engine::llm::LlmSegmenter::DEFAULT_MESSAGES
}
fn default_qa_chunk() -> usize {
    4
}
fn default_true() -> bool {
    true
}
fn default_api_key_env() -> String {
    "OPENAI_API_KEY".into()
}
fn default_timeout_s() -> u64 {
    120
}

/// `candidate`'s records against `reference`'s on the windows both extracted: records matched
/// one-to-one (same source message, content token F1 ≥ 0.5), then per-field agreement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgreementSpec {
    /// Report name (`student vs teacher`).
    pub name: String,
    /// The reference records file (e.g. the teacher's); its `<file>.windows.jsonl` is read.
    pub reference: PathBuf,
    /// The candidate records file (e.g. the student's).
    pub candidate: PathBuf,
}

fn default_budgets() -> Vec<usize> {
    vec![250, 500, 1000, 2000, 4000]
}

fn default_ks() -> Vec<usize> {
    vec![1, 3, 5, 10]
}

/// The benchmark file and which part of it to use.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DatasetSpec {
    /// LoCoMo-10; `conversations` picks sample ids (all when empty), `sessions` cuts each to its first N.
    Locomo {
        /// Path relative to the data dir, or absolute.
        path: PathBuf,
        /// Sample ids such as `conv-26`; empty means all ten.
        #[serde(default)]
        conversations: Vec<String>,
        /// Keep each conversation's first N sessions and only the questions whose evidence lies
        /// in them (a named subset for slow extractors); all sessions when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sessions: Option<usize>,
    },
    /// LongMemEval (oracle or S); `questions` keeps those question ids, `question_types` the
    /// questions of those types, then `limit` the first N of them (all when absent).
    Longmemeval {
        /// Path relative to the data dir, or absolute.
        path: PathBuf,
        /// Keep only these question ids (a named subset for slow extractors), in file order; all
        /// when empty. An id the file does not have is an error.
        #[serde(default)]
        questions: Vec<String>,
        /// Keep the first N questions (after the type filter).
        #[serde(default)]
        limit: Option<usize>,
        /// Keep only these question types (`knowledge-update`, `multi-session`, …); all when
        /// empty.
        #[serde(default)]
        question_types: Vec<String>,
    },
}

impl DatasetSpec {
    /// The file path, resolved against the data dir when relative.
    pub fn resolve(&self, data_dir: &Path) -> PathBuf {
        let p = match self {
            DatasetSpec::Locomo { path, .. } | DatasetSpec::Longmemeval { path, .. } => path,
        };
        if p.is_absolute() { p.clone() } else { data_dir.join(p) }
    }

    /// Short dataset name for `metrics.json`.
    pub fn name(&self) -> &'static str {
        match self {
            DatasetSpec::Locomo { .. } => "locomo",
            DatasetSpec::Longmemeval { .. } => "longmemeval",
        }
    }
}

/// Where the engine's records come from: `records = "rule"`, or
/// `records = { file = "runs/extract/student.jsonl" }` for the output of `memkit extract`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordSource {
    /// One record per turn, content "Speaker: text", no dimensions.
    RawTurns,
    /// The rule extractor baseline (type cues, message date, keywords).
    Rule,
    /// LoCoMo's own `observation` facts, each pointing at its evidence turns.
    Observations,
    /// Records JSONL written by `memkit extract` (any extractor: a teacher, a trained student):
    /// a dialogue gets the records whose window id starts with `<dialogue id>/`. Relative to
    /// the working directory.
    File(PathBuf),
}

/// One system to evaluate.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SystemSpec {
    /// The whole conversation in time order: the upper bound on recall and cost.
    FullContext {
        /// Report name.
        name: String,
    },
    /// BM25 over raw turns (the reference point of SPEC §7).
    Bm25Turns {
        /// Report name.
        name: String,
    },
    /// BM25 over LoCoMo's `observation` facts.
    Bm25Observations {
        /// Report name.
        name: String,
    },
    /// The memory engine: records from `records`, a query parser, the routes and fusion that
    /// `retrieval` names (BM25 + dimension by default; `routes = ["bm25", "dense", "dimension"]`
    /// is DimMem's tri-path and needs the embedder).
    Engine {
        /// Report name.
        name: String,
        /// Where the records come from: one source, or a list whose records are indexed together
        /// (`records = ["rule", { file = "…" }]`: rule sentences and an extractor's records as
        /// keys of one index).
        #[serde(deserialize_with = "one_or_many")]
        records: Vec<RecordSource>,
        /// What the answer model reads for a retrieved record: the record itself (`"record"`,
        /// the default), the turns it points at (`"source"`: records are keys, the source
        /// holds the details; each turn is read once, at its best-ranked record), or the one
        /// sentence of those turns that shares most words with it (`"sentence"`: records are
        /// keys, and what is read is the dialogue's own words, one sentence at a time, each once).
        #[serde(default)]
        read: Reading,
        /// Routes, BM25 parameters, dimension weights and fusion (`[systems.retrieval]`).
        #[serde(default)]
        retrieval: TriPathConfig,
        /// Apply HingeMem's adaptive stop to the fused list (recall at the tokens actually used).
        #[serde(default)]
        adaptive_stop: bool,
        /// Settings of the rule extractor when `records = "rule"` (`[systems.rule_extractor]`:
        /// `per_sentence`, `max_keywords`, `style`).
        #[serde(default)]
        rule_extractor: RuleExtractorConfig,
        /// DimMem's assistant recall: when the question asks what the assistant said, the reply
        /// that followed a retrieved unit's source turn is read right after it, and its tokens
        /// count against the budget.
        #[serde(default)]
        assistant_recall: bool,
        /// `"rule"` (default) or `"llm"`: DimMem's model-backed parser, with `[query_model]`.
        #[serde(default)]
        query_parser: QueryParserKind,
        /// With `query_parser = "llm"`: keep the model's time constraint only when the question
        /// names a time (memkit-engine's `llm::ground_time`; the default). False keeps the parse
        /// as the model wrote it.
        #[serde(default = "default_true")]
        ground_query_time: bool,
        /// Consolidate the dialogue's records before indexing them: `"none"` (default),
        /// `"rule"`, or `"llm"` with `[update_model]` (DimMem's dimension-aware update; needs
        /// the embedder for its cosine filter).
        #[serde(default)]
        update: UpdateKind,
    },
    /// HingeMem: boundary-guided hyperedges over memory records, salience rerank, adaptive stop;
    /// read part by part (descriptions and member records).
    Hinge {
        /// Report name.
        name: String,
        /// Where the hyperedges' member records come from (default: raw turns); a list, as for
        /// `engine` systems, indexes several sources together.
        #[serde(default = "raw_turns", deserialize_with = "one_or_many")]
        records: Vec<RecordSource>,
        /// Settings of the rule extractor when `records = "rule"`.
        #[serde(default)]
        rule_extractor: RuleExtractorConfig,
        /// Merge, salience, rerank and stop settings (`[systems.hinge]`).
        #[serde(default)]
        hinge: HingeConfig,
        /// Boundary rules (`[systems.segmenter]`; not used with `boundaries = "llm"`, whose
        /// unusable replies fall back to the rules' default thresholds).
        #[serde(default)]
        segmenter: SegmenterConfig,
        /// `"rule"` (default) or `"llm"`: HingeMem's model-drawn boundaries, with
        /// `[boundary_model]`.
        #[serde(default)]
        boundaries: BoundaryKind,
        /// Find topic shifts by sentence embeddings of adjacent turn windows rather than by token
        /// overlap (needs the embedder).
        #[serde(default)]
        embedding_topics: bool,
        /// Assistant recall, as for `engine` systems.
        #[serde(default)]
        assistant_recall: bool,
        /// The query parser, as for `engine` systems.
        #[serde(default)]
        query_parser: QueryParserKind,
        /// With `query_parser = "llm"`: keep the model's time constraint only when the question
        /// names a time (memkit-engine's `llm::ground_time`; the default). False keeps the parse
        /// as the model wrote it.
        #[serde(default = "default_true")]
        ground_query_time: bool,
    },
}

fn raw_turns() -> Vec<RecordSource> {
    vec![RecordSource::RawTurns]
}

/// What an engine system gives the answer model for a retrieved record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reading {
    /// The record: its content, with the day it was said.
    #[default]
    Record,
    /// The turns the record points at, each once (`[day] Speaker: text`), with the record's
    /// resolved time for the answer prompt.
    Source,
    /// The rule sentence (`per_sentence`) of the record's source turns that shares most words
    /// with it, each sentence once, with the record's resolved time for the answer prompt. A rule
    /// sentence reads itself; a record whose turns have no rule sentence reads itself.
    Sentence,
}

/// `records = "rule"` or `records = ["rule", { file = "…" }]`: one source or a non-empty list.
fn one_or_many<'de, D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Vec<RecordSource>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(RecordSource),
        Many(Vec<RecordSource>),
    }
    let sources = match OneOrMany::deserialize(deserializer).map_err(|_| {
        serde::de::Error::custom("records: expected \"raw_turns\", \"rule\", \"observations\", { file = \"…\" } or a list of them")
    })? {
        OneOrMany::One(source) => vec![source],
        OneOrMany::Many(sources) => sources,
    };
    if sources.is_empty() {
        return Err(serde::de::Error::custom("records: the list is empty; name at least one source"));
    }
    Ok(sources)
}

impl SystemSpec {
    /// True when the system needs the sentence embedder (the dense route, embedding topic shifts,
    /// the update's cosine filter).
    pub fn uses_dense(&self) -> bool {
        match self {
            SystemSpec::Engine { retrieval, update, .. } => retrieval.uses_dense() || *update != UpdateKind::None,
            SystemSpec::Hinge { embedding_topics, .. } => *embedding_topics,
            _ => false,
        }
    }

    /// Where a HingeMem system's boundaries come from (the rules for other systems).
    pub fn boundaries(&self) -> BoundaryKind {
        match self {
            SystemSpec::Hinge { boundaries, .. } => *boundaries,
            _ => BoundaryKind::Rule,
        }
    }

    /// How the system consolidates its records before indexing them.
    pub fn update(&self) -> UpdateKind {
        match self {
            SystemSpec::Engine { update, .. } => *update,
            _ => UpdateKind::None,
        }
    }

    /// Whether assistant recall is on.
    pub fn assistant_recall(&self) -> bool {
        matches!(self, SystemSpec::Engine { assistant_recall: true, .. } | SystemSpec::Hinge { assistant_recall: true, .. })
    }

    /// How the system parses questions (always the rules for systems without a parser).
    pub fn query_parser(&self) -> QueryParserKind {
        match self {
            SystemSpec::Engine { query_parser, .. } | SystemSpec::Hinge { query_parser, .. } => *query_parser,
            _ => QueryParserKind::Rule,
        }
    }

    /// Whether an LLM parse keeps its time constraint only when the question names a time.
    pub fn grounds_query_time(&self) -> bool {
        match self {
            SystemSpec::Engine { ground_query_time, .. } | SystemSpec::Hinge { ground_query_time, .. } => *ground_query_time,
            _ => false,
        }
    }

    /// Where the system's records come from (engine and HingeMem systems; empty for the others).
    pub fn record_sources(&self) -> &[RecordSource] {
        match self {
            SystemSpec::Engine { records, .. } | SystemSpec::Hinge { records, .. } => records,
            _ => &[],
        }
    }

    /// The report name.
    pub fn name(&self) -> &str {
        match self {
            SystemSpec::FullContext { name }
            | SystemSpec::Bm25Turns { name }
            | SystemSpec::Bm25Observations { name }
            | SystemSpec::Engine { name, .. }
            | SystemSpec::Hinge { name, .. } => name,
        }
    }
}

impl EvalRecipe {
    /// Reads and checks a recipe file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Read { path: path.to_path_buf(), source: e })?;
        let recipe: EvalRecipe = toml::from_str(&text).map_err(|e| Error::Recipe { path: path.to_path_buf(), message: e.to_string() })?;
        recipe.check().map_err(|message| Error::Recipe { path: path.to_path_buf(), message })?;
        Ok(recipe)
    }

    fn check(&self) -> std::result::Result<(), String> {
        if self.systems.is_empty() {
            return Err("no [[systems]]: name at least one system to evaluate".into());
        }
        if self.budgets.is_empty() || self.budgets.contains(&0) {
            return Err("`budgets` must be a non-empty list of positive token counts".into());
        }
        if let Some(qa) = &self.qa {
            let budgets = qa.budget.as_slice();
            if qa.questions == 0 || qa.max_tokens == 0 || budgets.is_empty() || budgets.contains(&0) {
                return Err(
                    "[qa]: questions, budget and max_tokens must be positive (budget: a token count or a non-empty list of them)".into()
                );
            }
            if let Some(b) = budgets.iter().enumerate().find_map(|(i, b)| budgets[..i].contains(b).then_some(b)) {
                return Err(format!("[qa] budget lists {b} twice"));
            }
            if let Some(unknown) = qa.systems.iter().find(|n| !self.systems.iter().any(|s| s.name() == n.as_str())) {
                return Err(format!("[qa] systems names {unknown:?}, which is not a system of this recipe"));
            }
        }
        let llm_systems = self.systems.iter().filter(|s| s.query_parser() == QueryParserKind::Llm).count();
        match &self.query_model {
            None if llm_systems > 0 => {
                return Err("a system has query_parser = \"llm\", but the recipe has no [query_model] to parse with".into());
            }
            Some(_) if llm_systems == 0 => {
                return Err("[query_model] is set, but no system has query_parser = \"llm\"".into());
            }
            Some(q) if q.max_tokens == 0 || q.chunk == 0 => return Err("[query_model]: max_tokens and chunk must be positive".into()),
            _ => {}
        }
        let llm_updates = self.systems.iter().filter(|s| s.update() == UpdateKind::Llm).count();
        match &self.update_model {
            None if llm_updates > 0 => {
                return Err("a system has update = \"llm\", but the recipe has no [update_model] to decide with".into());
            }
            Some(_) if llm_updates == 0 => return Err("[update_model] is set, but no system has update = \"llm\"".into()),
            Some(u) if u.max_tokens == 0 => return Err("[update_model]: max_tokens must be positive".into()),
            _ => {}
        }
        let llm_boundaries = self.systems.iter().filter(|s| s.boundaries() == BoundaryKind::Llm).count();
        match &self.boundary_model {
            None if llm_boundaries > 0 => {
                return Err("a system has boundaries = \"llm\", but the recipe has no [boundary_model] to segment with".into());
            }
            Some(_) if llm_boundaries == 0 => return Err("[boundary_model] is set, but no system has boundaries = \"llm\"".into()),
            Some(b) if b.max_tokens == 0 || b.messages < 2 || b.chunk == 0 => {
                return Err("[boundary_model]: max_tokens and chunk must be positive, messages at least 2".into());
            }
            _ => {}
        }
        if let Some(b) = &self.baseline
            && !self.systems.iter().any(|s| s.name() == b.as_str())
        {
            return Err(format!("baseline names {b:?}, which is not a system of this recipe"));
        }
        let mut seen = std::collections::HashSet::new();
        for s in &self.systems {
            if !seen.insert(s.name()) {
                return Err(format!("two systems are named {:?}: names must be unique", s.name()));
            }
            let uses_observations =
                matches!(s, SystemSpec::Bm25Observations { .. }) || s.record_sources().contains(&RecordSource::Observations);
            if uses_observations && !matches!(self.dataset, DatasetSpec::Locomo { .. }) {
                return Err(format!("system {:?} uses LoCoMo observations, but the dataset is not LoCoMo", s.name()));
            }
            if let SystemSpec::Engine { retrieval, .. } = s {
                retrieval.validate().map_err(|e| format!("system {:?}: {e}", s.name()))?;
            }
        }
        Ok(())
    }
}
