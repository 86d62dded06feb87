//! The distillation loop: draw the windows, skip the finished ones, answer from the cache what
//! it holds, ask the teacher for the rest a batch at a time, validate, and append to the
//! ledgers as each batch finishes.

use std::path::{Path, PathBuf};
use std::time::Instant;

use memkit_data::Window;
use memkit_infer::{ExtractConfig, Extraction};
use memkit_prompt::{ChatMessage, Prompts};

use crate::cache::{self, Cache};
use crate::corpus::{self, Corpus, CorpusWindow};
use crate::ledger::{self, Entry, Failure, Ledger, Status};
use crate::recipe::{DistillRecipe, GenerationSpec};
use crate::teacher::Teacher;
use crate::validate::{unparsable, validate};
use crate::{Error, Result};

/// Backend failures in a row after which the run stops (the teacher is down).
const MAX_FAILURES_IN_A_ROW: usize = 8;

/// Progress of a run, for a bar.
pub trait Progress: Sync {
    /// `total` windows to label, `done` of them already finished by earlier runs.
    fn start(&self, _total: u64, _done: u64) {}
    /// Windows finished, with a short status line.
    fn advance(&self, _n: u64, _status: &str) {}
    /// The run is over.
    fn finish(&self) {}
}

/// A progress sink that shows nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;
impl Progress for Silent {}

/// Where a run reads and writes.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Benchmark data (relative corpus paths resolve here).
    pub data_dir: PathBuf,
    /// The reply cache.
    pub cache_dir: PathBuf,
    /// Label at most this many new windows in this run.
    pub limit: Option<usize>,
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Windows the recipe draws.
    pub windows: usize,
    /// Finished before this run.
    pub already_done: usize,
    /// Finished in this run with a parsable reply.
    pub labelled: usize,
    /// Finished in this run with an unparsable reply.
    pub unparsable: usize,
    /// Of those finished in this run, answered from the cache.
    pub from_cache: usize,
    /// Windows whose request failed in this run (not finished; retried next run).
    pub backend_failures: usize,
}

/// The ledger files of an output folder.
pub fn ledger_path(out_dir: &Path) -> PathBuf {
    out_dir.join("ledger.jsonl")
}

/// The failures ledger of an output folder.
pub fn failures_path(out_dir: &Path) -> PathBuf {
    out_dir.join("failures.jsonl")
}

/// The cache parameters: everything besides the model and the messages that shapes a reply.
#[derive(Debug, serde::Serialize)]
struct Params<'a> {
    generation: &'a GenerationSpec,
    temperature: f32,
}

/// Renders the extraction messages of a window (the cache key's input, and the SFT prompt).
pub fn messages(prompts: &Prompts, window: &Window, config: &ExtractConfig) -> Result<Vec<ChatMessage>> {
    Ok(prompts.render_extract(window, &config.prompt_options())?.to_messages())
}

/// The cache key of a window's request.
pub fn cache_key(model: &str, messages: &[ChatMessage], generation: &GenerationSpec) -> String {
    cache::key(model, messages, &Params { generation, temperature: 0.0 })
}

/// Labels the recipe's windows that are not finished yet.
pub fn run(recipe: &DistillRecipe, options: &RunOptions, teacher: &dyn Teacher, progress: &dyn Progress) -> Result<(Corpus, RunSummary)> {
    let corpus = corpus::select(&recipe.corpus, &options.data_dir)?;
    let out_dir = recipe.out_dir();
    let done = ledger::finished(ledger::read(&ledger_path(&out_dir))?);
    let pending: Vec<&CorpusWindow> = corpus.windows.iter().filter(|w| !done.contains_key(&w.window.id)).collect();
    let mut summary =
        RunSummary { windows: corpus.windows.len(), already_done: corpus.windows.len() - pending.len(), ..RunSummary::default() };
    let pending = &pending[..options.limit.map_or(pending.len(), |l| l.min(pending.len()))];
    tracing::info!(
        windows = summary.windows,
        done = summary.already_done,
        this_run = pending.len(),
        skipped_long = corpus.skipped_long,
        teacher = teacher.id(),
        "distilling"
    );

    let mut ledger = Ledger::open(&ledger_path(&out_dir))?;
    let mut failures = Ledger::open(&failures_path(&out_dir))?;
    let cache = Cache::new(&options.cache_dir);
    let prompts = Prompts::embedded()?;
    let config = recipe.generation.extract_config();
    progress.start(summary.windows as u64, summary.already_done as u64);
    let started = Instant::now();
    let mut failures_in_a_row = 0;
    for chunk in pending.chunks(teacher.parallel().max(1)) {
        let keys = chunk
            .iter()
            .map(|w| Ok(cache_key(teacher.id(), &messages(&prompts, &w.window, &config)?, &recipe.generation)))
            .collect::<Result<Vec<_>>>()?;
        let mut results: Vec<Option<(std::result::Result<Extraction, String>, bool)>> = Vec::with_capacity(chunk.len());
        for (w, key) in chunk.iter().zip(&keys) {
            results.push(cache.get(key)?.map(|e| (Ok(Extraction::from_output(&w.window, e.raw, e.usage)), true)));
        }
        let missing: Vec<usize> = (0..chunk.len()).filter(|&i| results[i].is_none()).collect();
        let asked = Instant::now();
        if !missing.is_empty() {
            let windows: Vec<Window> = missing.iter().map(|&i| chunk[i].window.clone()).collect();
            for (&i, result) in missing.iter().zip(teacher.label(&windows)) {
                if let Ok(extraction) = &result {
                    let entry = cache::Entry { model: teacher.id().to_owned(), raw: extraction.raw.clone(), usage: extraction.usage };
                    cache.put(&keys[i], &entry)?;
                }
                results[i] = Some((result, false));
            }
        }
        let wall_ms = (asked.elapsed().as_millis() as u64) / missing.len().max(1) as u64;
        for ((w, key), result) in chunk.iter().zip(keys).zip(results) {
            let (result, cached) = result.expect("every window has a result");
            let extraction = match result {
                Ok(extraction) => extraction,
                Err(reason) => {
                    tracing::warn!(window = %w.window.id, %reason, "teacher request failed; the window is retried next run");
                    failures.append(&Failure {
                        window_id: w.window.id.clone(),
                        model: teacher.id().to_owned(),
                        reason,
                        raw: String::new(),
                    })?;
                    summary.backend_failures += 1;
                    failures_in_a_row += 1;
                    if failures_in_a_row >= MAX_FAILURES_IN_A_ROW {
                        progress.finish();
                        return Err(Error::TeacherDown { failures: failures_in_a_row, teacher: teacher.id().to_owned() });
                    }
                    continue;
                }
            };
            failures_in_a_row = 0;
            let mut entry = Entry {
                window_id: w.window.id.clone(),
                source: w.source,
                model: teacher.id().to_owned(),
                key,
                status: Status::Ok,
                records: Vec::new(),
                dropped: Vec::new(),
                usage: extraction.usage,
                wall_ms: if cached { 0 } else { wall_ms },
                cached,
            };
            if let Some(reason) = unparsable(&extraction) {
                entry.status = Status::Unparsable;
                failures.append(&Failure { window_id: w.window.id.clone(), model: entry.model.clone(), reason, raw: extraction.raw })?;
                summary.unparsable += 1;
            } else {
                let validated = validate(&w.window, &extraction);
                entry.records = validated.records;
                entry.dropped = validated.dropped;
                summary.labelled += 1;
            }
            summary.from_cache += usize::from(cached);
            ledger.append(&entry)?;
        }
        let finished = summary.labelled + summary.unparsable;
        let per_window = started.elapsed().as_secs_f64() / finished.max(1) as f64;
        progress.advance(chunk.len() as u64, &format!("{finished} labelled, {:.0} s/window", per_window));
    }
    progress.finish();
    Ok((corpus, summary))
}
