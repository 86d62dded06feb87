//! The distillation loop: draw the windows, skip the finished ones, plan each window's requests
//! ([`crate::label`]), answer from the cache what it holds, ask the teacher for the rest (each
//! request several times where the recipe says, made one reply: [`crate::samples`]), re-ask
//! once the replies with first-person records (and, where the recipe says, those cleaning keeps
//! none of), assemble, clean ([`memkit_clean::Cleaner`]: ground, validate, one record per fact),
//! and append each finished window to the ledgers as soon as it is done.

use std::path::PathBuf;
use std::time::Instant;

use memkit_clean::{Cleaner, whole_failure};
use memkit_infer::chat::ChatRequest;
use memkit_infer::reply::Usage;
use memkit_prompt::Prompts;

use crate::cache::{Cache, request_key};
use crate::corpus::{Corpus, CorpusWindow};
use crate::label::{self, Plan, Repair};
use crate::ledger::{self, Entry, Failure, Ledger, Status, failures_path, ledger_path};
use crate::recipe::{DistillRecipe, GenerationSpec, LabellingSpec, Mode};
use crate::teacher::Teacher;
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
    /// Finished in this run with whole replies.
    pub labelled: usize,
    /// Finished in this run with a reply that was not whole (not JSON, broken, cut off).
    pub unparsable: usize,
    /// Of those finished in this run, answered from the cache alone.
    pub from_cache: usize,
    /// Windows whose requests failed in this run (not finished; retried next run).
    pub backend_failures: usize,
}

/// A reply with its usage, and whether it came from the cache.
type Answer = ((String, Usage), bool);

/// Replies to `requests` from the cache where it has them, from the teacher otherwise (a
/// local teacher batches them after their shared prefix; a server takes them `concurrency` at a
/// time), stored in the cache batch by batch ([`Cache::answer`]). `Err` per request is a backend
/// failure.
fn ask(teacher: &Teacher, cache: &Cache, requests: &[(&ChatRequest, &str)]) -> Result<Vec<std::result::Result<Answer, String>>> {
    Ok(cache
        .answer(teacher.model(), requests)?
        .into_iter()
        .map(|a| a.map(|(reply, cached)| ((reply.text, reply.usage), cached)).map_err(|e| e.to_string()))
        .collect())
}

/// One window on its way through [`label_windows`].
struct Labelling<'a> {
    window: &'a CorpusWindow,
    plan: Plan,
    replies: Vec<(String, Usage)>,
    all_cached: bool,
    /// Whether any reply came from the cache: the window's time is then not its cost.
    any_cached: bool,
    requests: usize,
    repairs: Vec<Repair>,
    /// A backend failure: the window stays unfinished.
    failed: Option<String>,
}

/// What labelling one window gave: its ledger entry (and its failure, for a reply that was not
/// whole), or `Err(reason)` when a request failed (the window stays unfinished).
pub type Labelled = (String, std::result::Result<(Entry, Option<Failure>), String>);

/// Labels planned windows together (their requests in one call, their re-asks in a second):
/// asks, re-asks, assembles and cleans. Also what `memkit extract` runs for a teacher.
pub fn label_windows(
    chunk: Vec<(&CorpusWindow, Plan)>,
    labelling: &LabellingSpec,
    generation: &GenerationSpec,
    teacher: &Teacher,
    cache: &Cache,
    prompts: &Prompts,
    cleaner: &Cleaner,
) -> Result<Vec<Labelled>> {
    let started = Instant::now();
    let mut work: Vec<Labelling<'_>> = chunk
        .into_iter()
        .map(|(window, plan)| Labelling {
            window,
            requests: plan.asks.len(),
            plan,
            replies: Vec::new(),
            all_cached: true,
            any_cached: false,
            repairs: Vec::new(),
            failed: None,
        })
        .collect();
    // Each ask's request, then its draws (several replies per request; none by default).
    let requests: Vec<(&ChatRequest, &str)> = work
        .iter()
        .flat_map(|l| l.plan.asks.iter())
        .flat_map(|a| std::iter::once((&a.request, a.key.as_str())).chain(a.draws.iter().map(|(r, key)| (r, key.as_str()))))
        .collect();
    let mut answers = ask(teacher, cache, &requests)?.into_iter();
    for l in &mut work {
        for a in &l.plan.asks {
            let mut replies = Vec::with_capacity(1 + a.draws.len());
            for _ in 0..=a.draws.len() {
                match answers.next().expect("one answer per request") {
                    Ok((reply, cached)) => {
                        l.all_cached &= cached;
                        l.any_cached |= cached;
                        replies.push(reply);
                    }
                    Err(reason) => l.failed = Some(reason),
                }
            }
            l.requests += a.draws.len();
            if l.failed.is_none() {
                let reply = if a.draws.is_empty() {
                    replies.pop().expect("one reply")
                } else {
                    labelling.samples.choose(&l.window.window, &replies, cleaner)?
                };
                l.replies.push(reply);
            }
        }
    }

    // One re-ask of each reply whose records speak in the first person or about the other
    // speaker, and (with `repair_dropped`) of each reply cleaning keeps none of.
    if labelling.repair {
        let verifier = labelling.repair_dropped.then_some(cleaner);
        let mut follow_ups = Vec::new();
        for (i, l) in work.iter().enumerate().filter(|(_, l)| l.failed.is_none()) {
            for (k, ask) in l.plan.asks.iter().enumerate() {
                let problems = label::problems(&l.window.window, &l.replies[k].0, verifier)?;
                if !problems.lines.is_empty() {
                    let request = label::repair_request(ask, &l.replies[k].0, &problems.lines, prompts)?;
                    let key = request_key(teacher.id(), &request, generation);
                    follow_ups.push((i, k, request, key, problems));
                }
            }
        }
        let requests: Vec<(&ChatRequest, &str)> = follow_ups.iter().map(|(_, _, r, key, _)| (r, key.as_str())).collect();
        for ((i, k, _, _, problems), result) in follow_ups.iter().zip(ask(teacher, cache, &requests)?) {
            let l = &mut work[*i];
            let ((text, usage), cached) = match result {
                Ok(reply) => reply,
                Err(reason) => {
                    l.failed = Some(reason);
                    continue;
                }
            };
            l.all_cached &= cached;
            l.any_cached |= cached;
            l.requests += 1;
            let whole = whole_failure(&memkit_infer::Extraction::from_output(&l.window.window, text.clone(), usage).errors).is_none();
            let again = label::problems(&l.window.window, &text, verifier)?;
            // A reply that kept nothing is fixed only by one that keeps something.
            let fixed = whole && again.lines.is_empty() && !(problems.kept_nothing && again.kept_nothing);
            // Both replies' costs count; the second replaces the first only when it fixed it.
            let spent = l.replies[*k].1;
            if fixed {
                l.replies[*k] = (text, spent.plus(usage));
            } else {
                l.replies[*k].1 = spent.plus(Usage { hit_max_tokens: false, ..usage });
            }
            l.repairs.push(Repair {
                targets: l.plan.asks[*k].targets.clone(),
                problems: problems.lines.clone(),
                fixed,
                all_dropped: problems.kept_nothing,
            });
        }
    }

    let wall_ms = started.elapsed().as_millis() as u64 / work.len().max(1) as u64;
    let mut out = Vec::with_capacity(work.len());
    for l in work {
        let id = l.window.window.id.clone();
        if let Some(reason) = l.failed {
            out.push((id, Err(reason)));
            continue;
        }
        out.push((id, Ok(finish(l, wall_ms, labelling, teacher, cleaner)?)));
    }
    Ok(out)
}

/// Assembles and cleans one window's replies into its ledger entry (and its failure, for a
/// reply that was not whole).
fn finish(
    l: Labelling<'_>,
    wall_ms: u64,
    labelling: &LabellingSpec,
    teacher: &Teacher,
    cleaner: &Cleaner,
) -> Result<(Entry, Option<Failure>)> {
    let w = l.window;
    let plan = &l.plan;
    let extraction = label::assemble(&w.window, plan, &l.replies);
    let mut entry = Entry {
        window_id: w.window.id.clone(),
        source: w.source,
        model: teacher.id().to_owned(),
        key: plan.asks.first().map(|a| a.key.clone()).unwrap_or_default(),
        status: Status::Ok,
        failure: None,
        records: Vec::new(),
        dropped: Vec::new(),
        usage: extraction.usage,
        // A window partly answered from the cache took only its new requests' time.
        wall_ms: if l.any_cached { 0 } else { wall_ms },
        cached: l.all_cached,
        mode: Some(plan.mode),
        requests: l.requests,
        skipped: plan.skipped.clone(),
        repairs: l.repairs,
        grounding: Vec::new(),
        time_fixes: 0,
        complete: false,
        cleaner: cleaner.id(),
        samples: labelling.samples.several().then_some(labelling.samples),
        repair_dropped: labelling.repair && labelling.repair_dropped,
    };
    if let Some((kind, reason)) = whole_failure(&extraction.errors) {
        entry.status = Status::Unparsable;
        entry.failure = Some(kind);
        let failure =
            Failure { window_id: entry.window_id.clone(), model: entry.model.clone(), kind: Some(kind), reason, raw: extraction.raw };
        return Ok((entry, Some(failure)));
    }
    let cleaned = cleaner.clean(&w.window, &extraction.records, &extraction.errors)?;
    entry.complete = cleaned.complete();
    entry.time_fixes = cleaned.time_fixes;
    entry.records = cleaned.records;
    entry.dropped = cleaned.dropped;
    entry.grounding = cleaned.grounding;
    Ok((entry, None))
}

/// The windows of `corpus` the recipe's ledger does not hold finished yet, in corpus order: with
/// none, a run has nothing to ask and the dataset can be written without the teacher.
pub fn pending<'c>(recipe: &DistillRecipe, corpus: &'c Corpus) -> Result<Vec<&'c CorpusWindow>> {
    let done = ledger::finished(ledger::read(&ledger_path(&recipe.out_dir()))?);
    Ok(corpus.windows.iter().filter(|w| !done.contains_key(&w.window.id)).collect())
}

/// Labels the windows of `corpus` (the recipe's selection, [`crate::corpus::select`]) that are not
/// finished yet.
pub fn run(
    recipe: &DistillRecipe,
    corpus: &Corpus,
    options: &RunOptions,
    teacher: &Teacher,
    cleaner: &Cleaner,
    progress: &dyn Progress,
) -> Result<RunSummary> {
    let out_dir = recipe.out_dir();
    let pending = pending(recipe, corpus)?;
    let mut summary =
        RunSummary { windows: corpus.windows.len(), already_done: corpus.windows.len() - pending.len(), ..RunSummary::default() };
    let pending = &pending[..options.limit.map_or(pending.len(), |l| l.min(pending.len()))];
    let mode = recipe.labelling.mode_for(&recipe.teacher);
    tracing::info!(
        windows = summary.windows,
        done = summary.already_done,
        this_run = pending.len(),
        skipped_long = corpus.skipped_long,
        teacher = teacher.id(),
        ?mode,
        cleaner = cleaner.id(),
        "distilling"
    );

    let mut ledger = Ledger::open(&ledger_path(&out_dir))?;
    let mut failures = Ledger::open(&failures_path(&out_dir))?;
    let cache = Cache::new(&options.cache_dir);
    let prompts = Prompts::embedded()?;
    progress.start(summary.windows as u64, summary.already_done as u64);
    let started = Instant::now();
    let mut failures_in_a_row = 0;
    // A decomposed window's requests share its conversation as one prefix, so windows go one
    // at a time; whole windows share only the system turn and go a batch at a time.
    let per_call = if mode == Mode::Decomposed { 1 } else { teacher.parallel() };
    for windows in pending.chunks(per_call) {
        let chunk = windows
            .iter()
            .map(|w| Ok((*w, label::plan(&w.window, mode, &recipe.labelling, &recipe.generation, &prompts, teacher.id())?)))
            .collect::<Result<Vec<_>>>()?;
        for (id, result) in label_windows(chunk, &recipe.labelling, &recipe.generation, teacher, &cache, &prompts, cleaner)? {
            let (entry, failure) = match result {
                Ok(done) => done,
                Err(reason) => {
                    tracing::warn!(window = %id, %reason, "teacher request failed; the window is retried next run");
                    failures.append(&Failure { window_id: id, model: teacher.id().to_owned(), kind: None, reason, raw: String::new() })?;
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
            if let Some(failure) = &failure {
                failures.append(failure)?;
                summary.unparsable += 1;
            } else {
                summary.labelled += 1;
            }
            summary.from_cache += usize::from(entry.cached);
            ledger.append(&entry)?;
        }
        let finished = summary.labelled + summary.unparsable;
        let per_window = started.elapsed().as_secs_f64() / finished.max(1) as f64;
        progress.advance(windows.len() as u64, &format!("{finished} labelled, {per_window:.0} s/window"));
    }
    progress.finish();
    Ok(summary)
}
