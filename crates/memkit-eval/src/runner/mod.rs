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
//! - `engine`: records from a [`RecordSource`], a query parser (the rules, or DimMem's language
//!   model with `[query_model]`), DimMem's tri-path routes and fusion; optionally HingeMem's
//!   adaptive stop on the fused list.
//! - `hinge`: boundary-guided hyperedges over records from a [`RecordSource`], salience rerank,
//!   adaptive stop; its units are the hyperedges' descriptions and member records, in the order
//!   [`HingeIndex::read`] gives.
//!
//! One rule for adaptive systems: what a system returns is what is scored, counted and answered
//! from (`Ranking::returned`); its budget columns are prefixes of that list. "Context tokens per
//! query" is, for systems that stop adaptively, the tokens of the list they return; for ranked systems, the tokens taken at the largest budget; for full context, the whole
//! dialogue.
//!
//! The runner's parts: [`rank`] prepares each system's units over a dialogue and ranks them for a
//! question (with assistant recall), [`tally`] accumulates the figures, [`answers`] builds and
//! scores the QA items, [`ledger`] reads extraction ledgers for cost and agreement.

mod answers;
mod ledger;
mod rank;
mod tally;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use chrono::NaiveDateTime;
use memkit_data::{LocomoSample, LongMemEvalItem, Question};
use memkit_engine::dense::{CachedEmbedder, Embedder};
use memkit_schema::Dialogue;

use memkit_engine::llm::{LlmConsolidator, LlmQueryParser, LlmSegmenter, ParserStats, ground_time};
use memkit_engine::query::{QueryParser, RuleQueryParser};
use memkit_infer::chat::ChatModel;
use memkit_schema::ParsedQuery;

use crate::qa::QaItem;
use crate::recipe::{DatasetSpec, EvalRecipe, QueryModelSpec, QueryParserKind, SystemSpec, UpdateKind};
use crate::retrieval::is_abstention;
use crate::{Difference, Error, Report, Result, SystemMetrics, TokenCounter, bootstrap};

use answers::{answer_questions, answers_qa, qa_item, qa_sample};
use ledger::{agreement_of, extraction_figures};
use rank::{Tools, prepare};
use tally::Tally;

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
    /// The model of a recipe with `[query_model]`, built by the caller from it.
    pub query_model: Option<Arc<dyn ChatModel>>,
    /// The model of a recipe with `[update_model]`, built by the caller from it.
    pub update_model: Option<Arc<dyn ChatModel>>,
    /// The model of a recipe with `[boundary_model]`, built by the caller from it.
    pub boundary_model: Option<Arc<dyn ChatModel>>,
}

/// The models of `[qa]`.
pub struct QaModels {
    /// Answers the questions.
    pub answer: Arc<dyn ChatModel>,
    /// Judges the answers (`None`: F1 only).
    pub judge: Option<Arc<dyn ChatModel>>,
}

/// Runs every system of the recipe and returns the report (not yet written).
pub fn run(recipe: &EvalRecipe, options: &RunOptions, reporter: &dyn Reporter) -> Result<Report> {
    // Dense systems over the same records and questions share their vectors.
    let cached = RunOptions {
        data_dir: options.data_dir.clone(),
        command: options.command.clone(),
        embedder: options.embedder.clone().map(|e| Arc::new(CachedEmbedder::new(e)) as Arc<dyn Embedder>),
        qa_models: options.qa_models.as_ref().map(|m| QaModels { answer: Arc::clone(&m.answer), judge: m.judge.clone() }),
        query_model: options.query_model.clone(),
        update_model: options.update_model.clone(),
        boundary_model: options.boundary_model.clone(),
    };
    let options = &cached;
    let counter = TokenCounter::o200k()?;
    let path = recipe.dataset.resolve(&options.data_dir);
    let mut notes = vec![
        format!("Tokens counted with {} for every system.", counter.name()),
        "Evidence recall: units taken in rank order until the first one that does not fit the budget; recall = share of gold evidence turns reached through the units' pointers.".to_string(),
        "Adaptive systems (an adaptive stop, HingeMem) are scored on the list they return: a budget column is the prefix of that list within the budget, never a unit past the stop; budget columns describe ranked lists.".to_string(),
        "Context tokens per query: adaptive systems = tokens of the list they return; ranked systems = tokens taken at the largest budget; full context = the whole dialogue.".to_string(),
    ];
    if recipe.qa.is_some() && options.qa_models.is_none() {
        return Err(Error::Qa("the recipe has [qa] but no answer model was given".into()));
    }
    if recipe.query_model.is_some() && options.query_model.is_none() {
        return Err(Error::Qa("the recipe has [query_model] but no query model was given".into()));
    }
    if recipe.update_model.is_some() && options.update_model.is_none() {
        return Err(Error::Qa("the recipe has [update_model] but no update model was given".into()));
    }
    if recipe.boundary_model.is_some() && options.boundary_model.is_none() {
        return Err(Error::Qa("the recipe has [boundary_model] but no boundary model was given".into()));
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
            run_locomo(recipe, &samples, options, &counter, reporter, &mut qa_items, &mut notes)?
        }
        DatasetSpec::Longmemeval { limit, questions, question_types, .. } => {
            let mut items = memkit_data::load_longmemeval(&path)?;
            if !questions.is_empty() {
                if let Some(missing) = questions.iter().find(|q| !items.iter().any(|i| &i.question.id == *q)) {
                    return Err(Error::Dataset(format!("dataset.questions: {} has no question {missing:?}", path.display())));
                }
                items.retain(|i| questions.contains(&i.question.id));
                notes.push(format!("Subset: the questions {} ({} of them).", questions.join(", "), items.len()));
            }
            if !question_types.is_empty() {
                items.retain(|i| i.question.question_type.as_ref().is_some_and(|t| question_types.contains(t)));
                notes.push(format!("Subset: the questions of type {} ({} of them).", question_types.join(", "), items.len()));
            }
            if let Some(n) = limit {
                items.truncate(*n);
            }
            let abstention = items.iter().filter(|i| is_abstention(&i.question.id)).count();
            notes.push(format!(
                "LongMemEval: {} questions read, {abstention} abstention (`_abs`) questions excluded; session-level recall_any/recall_all/nDCG@k (official definitions) in the tables, turn level in metrics.json.",
                items.len()
            ));
            run_longmemeval(recipe, &items, options, &counter, reporter, &mut qa_items, &mut notes)?
        }
    };
    let dataset = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| recipe.dataset.name().to_string());
    if !recipe.description.is_empty() {
        notes.insert(0, recipe.description.clone());
    }
    let agreements = recipe.agreements.iter().map(agreement_of).collect::<Result<Vec<_>>>()?;
    let qa = match (&recipe.qa, &options.qa_models) {
        (Some(spec), Some(models)) => Some(answer_questions(spec, models, &qa_items, &systems, recipe.baseline.as_deref(), reporter)?),
        _ => None,
    };
    Ok(Report { name: recipe.name.clone(), dataset, command: options.command.clone(), systems, agreements, qa, notes })
}

/// When LoCoMo questions are asked: after the dialogue's last message.
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
    notes: &mut Vec<String>,
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
    run_cases(recipe, &cases, None, &scored, options, counter, reporter, qa_items, notes)
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
    notes: &mut Vec<String>,
) -> Result<Vec<SystemMetrics>> {
    let in_qa = qa_sample(recipe.qa.as_ref(), scored);
    // The language-model parses, once per question for every system that uses them.
    let asked: Vec<(&str, Option<NaiveDateTime>)> =
        cases.iter().flat_map(|c| c.questions.iter().map(|(q, date, _)| (q.question.as_str(), *date))).collect();
    let llm_parses = match (&recipe.query_model, &options.query_model) {
        (Some(spec), Some(model)) => {
            let (parses, stats) = parse_with_model(spec, model, &asked, reporter)?;
            notes.push(format!(
                "Systems with query_parser = \"llm\" parse questions with {} (prompts/query.j2, JSON constrained): {} questions asked, {} fell back to the rule parser (reply cut off or unparsable); with ground_query_time (the default) a time constraint stays only when the question names a time (query_times_dropped counts the others). Their latency excludes the model's time.",
                model.id(),
                stats.asked,
                stats.fallbacks
            ));
            Some((parses, stats))
        }
        _ => None,
    };
    // The language-model consolidator, shared by every system with update = "llm".
    let llm_update = match (&recipe.update_model, &options.update_model) {
        (Some(spec), Some(model)) => Some(LlmConsolidator::new(Arc::clone(model))?.with_max_tokens(spec.max_tokens)),
        _ => None,
    };
    // The language-model segmenter, shared by every system with boundaries = "llm" (the rules
    // with default thresholds step in for unusable replies).
    let llm_boundaries = match (&recipe.boundary_model, &options.boundary_model) {
        (Some(spec), Some(model)) => {
            Some(LlmSegmenter::new(Arc::clone(model))?.with_max_tokens(spec.max_tokens).with_messages(spec.messages))
        }
        _ => None,
    };
    let tools =
        Tools { embedder: options.embedder.as_ref(), counter, llm_update: llm_update.as_ref(), llm_boundaries: llm_boundaries.as_ref() };
    let total: usize = cases.iter().map(|c| c.questions.len()).sum();
    let dialogues: Vec<&str> = cases.iter().map(|c| c.dialogue.id.as_str()).collect();
    let mut out = Vec::new();
    // Each system's per-question recall at each budget, for the differences to the baseline.
    let mut per_question: Vec<Vec<Vec<f64>>> = Vec::new();
    for system in &recipe.systems {
        let full_context = matches!(system, SystemSpec::FullContext { .. });
        let with_qa = answers_qa(recipe.qa.as_ref(), system);
        reporter.start(system.name(), total as u64);
        let mut tally = Tally::new(&recipe.budgets, ks);
        let parser = system.query_parser();
        let (mut asked_index, mut times_dropped) = (0, 0);
        for case in cases {
            let prepared = prepare(system, case.dialogue, case.sample, tools)?;
            tally.add_dialogue(&prepared, counter);
            if full_context {
                tally.full_tokens += prepared.units.iter().map(|u| u.tokens(counter)).sum::<usize>() as f64;
            }
            for (q, date, category) in &case.questions {
                let started = Instant::now();
                let parsed = match (parser, &llm_parses) {
                    (QueryParserKind::Llm, Some((parses, _))) => {
                        let mut parsed = parses[asked_index].clone();
                        if system.grounds_query_time() && ground_time(&mut parsed, &q.question, *date) {
                            times_dropped += 1;
                        }
                        parsed
                    }
                    _ => RuleQueryParser.parse(&q.question, *date)?,
                };
                asked_index += 1;
                let ranking = prepared.rank(&q.question, &parsed)?;
                tally.latency_ms += started.elapsed().as_secs_f64() * 1e3;
                tally.queries += 1;
                tally.add_evidence(&prepared, &ranking, counter, &q.evidence, category.clone());
                tally.add_rankings(case.dialogue, &prepared, &ranking, q);
                if with_qa && in_qa.contains(&q.id) {
                    let qa = recipe.qa.as_ref().expect("with_qa implies [qa]");
                    for &budget in qa.budget.as_slice() {
                        qa_items.push(qa_item(system, q, *date, &prepared, &ranking, counter, budget));
                    }
                }
                reporter.advance(1);
            }
        }
        reporter.finish();
        per_question.push((0..recipe.budgets.len()).map(|i| tally.main.per_question(i)).collect());
        let mut metrics = tally.finish(system.name(), full_context, counter);
        if let (QueryParserKind::Llm, Some((_, stats))) = (parser, &llm_parses) {
            metrics.extra.insert("query_parser_fallbacks".into(), stats.fallbacks.into());
            metrics.extra.insert("query_times_dropped".into(), times_dropped.into());
        }
        extraction_figures(system, &dialogues, &mut metrics)?;
        out.push(metrics);
    }
    if let Some(baseline) = &recipe.baseline {
        differences(&mut out, &per_question, &recipe.budgets, baseline);
    }
    if let Some(c) = &llm_update {
        let s = c.stats();
        notes.push(format!(
            "Systems with update = \"llm\" consolidate records with {} (prompts/update.j2, JSON constrained): {} pairs asked ({} merge, {} supersede, {} keep both), {} decided by the rules instead (reply cut off or unparsable), {} merged sentences rejected for dropping a record's terms (the longer content kept).",
            c.model_id(),
            s.asked,
            s.merges,
            s.supersedes,
            s.keep_both,
            s.fallbacks,
            s.merged_text_rejected
        ));
    }
    if let Some(b) = &llm_boundaries {
        let s = b.stats();
        notes.push(format!(
            "HingeMem systems with boundaries = \"llm\" segment with {} (prompts/boundary.j2, JSON constrained, sessions in pieces of at most {} messages; session starts are always boundaries): {} pieces asked, {} boundaries drawn inside pieces, {} pieces segmented by the rules instead (reply cut off or unparsable), {} replies whose segments did not tile their piece (their starts used).",
            b.model_id(),
            recipe.boundary_model.as_ref().map_or(0, |m| m.messages),
            s.asked,
            s.boundaries,
            s.fallbacks,
            s.untiled
        ));
    }
    if recipe.systems.iter().any(|s| s.update() != UpdateKind::None) {
        notes.push("Systems with update consolidate each dialogue's records before indexing them (DimMem's dimension-aware update, in record order: same type and dialogue, keyword Jaccard ≥ 0.3, MiniLM cosine ≥ 0.7, then the consolidator); pointer accuracy is measured on the records before the update.".into());
    }
    Ok(out)
}

/// Every system's evidence-recall difference to `baseline`, per budget, with its paired bootstrap
/// interval over the questions both answered (the same questions, in the same order).
fn differences(systems: &mut [SystemMetrics], per_question: &[Vec<Vec<f64>>], budgets: &[usize], baseline: &str) {
    let Some(b) = systems.iter().position(|s| s.name == baseline) else { return };
    for (i, system) in systems.iter_mut().enumerate() {
        if i == b {
            continue;
        }
        let at = budgets
            .iter()
            .enumerate()
            .filter_map(|(k, budget)| {
                let interval = bootstrap::paired(&per_question[i][k], &per_question[b][k], bootstrap::RESAMPLES, bootstrap::SEED)?;
                Some((budget.to_string(), interval))
            })
            .collect();
        system.difference = Some(Difference { baseline: baseline.to_owned(), at });
    }
}

/// Parses `asked` with `model` through `query.j2`, `spec.chunk` questions per call.
fn parse_with_model(
    spec: &QueryModelSpec,
    model: &Arc<dyn ChatModel>,
    asked: &[(&str, Option<NaiveDateTime>)],
    reporter: &dyn Reporter,
) -> Result<(Vec<ParsedQuery>, ParserStats)> {
    // As the model wrote them: each system grounds the time constraint or not.
    let parser = LlmQueryParser::new(Arc::clone(model))?.with_max_tokens(spec.max_tokens).with_grounded_time(false);
    reporter.start("query parsing", asked.len() as u64);
    let mut parses = Vec::with_capacity(asked.len());
    for chunk in asked.chunks(spec.chunk.max(1)) {
        parses.extend(parser.parse_all(chunk)?);
        reporter.advance(chunk.len() as u64);
    }
    reporter.finish();
    Ok((parses, parser.stats()))
}

/// LongMemEval: each item is one haystack dialogue with one question (abstention questions left
/// out), ranked by sessions and turns at the recipe's `ks` besides evidence recall.
fn run_longmemeval(
    recipe: &EvalRecipe,
    items: &[LongMemEvalItem],
    options: &RunOptions,
    counter: &TokenCounter,
    reporter: &dyn Reporter,
    qa_items: &mut Vec<QaItem>,
    notes: &mut Vec<String>,
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
    run_cases(recipe, &cases, Some(&recipe.ks), &scored, options, counter, reporter, qa_items, notes)
}
