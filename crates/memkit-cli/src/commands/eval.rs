//! `memkit eval`: run an eval recipe and write its report.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use memkit_engine::dense::{CachedEmbedder, Embedder};
use memkit_eval::recipe::{BoundaryModelSpec, EvalRecipe, ModelSpec, QaSpec, QueryModelSpec, UpdateModelSpec};
use memkit_eval::runner::{self, QaModels, RunOptions};
use memkit_infer::chat::ChatModel;
use memkit_teacher::cache::{Cache, CachedChat};

use crate::progress::{Bars, StageReporter};

/// Run an eval recipe (TOML) and write reports/<name>/{report.md, metrics.json, *.svg}.
///
/// Example: memkit eval --recipe recipes/eval/locomo-baselines.toml
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The eval recipe (see recipes/eval/ for examples; unknown keys are errors).
    #[arg(long, short)]
    recipe: PathBuf,
    /// Where the benchmark files live; relative dataset paths in the recipe resolve against it.
    #[arg(long, env = "MEMKIT_SHARED_DATA", default_value = "../shared/data")]
    data_dir: PathBuf,
    /// Where report folders are written.
    #[arg(long, default_value = "reports")]
    reports_dir: PathBuf,
    /// all-MiniLM-L6-v2 directory for systems with the dense route (default: the installed one,
    /// see `memkit models fetch all-minilm-l6-v2`).
    #[arg(long)]
    embedder_dir: Option<PathBuf>,
    /// Skip the recipe's [qa] and measure retrieval only (minutes instead of hours with a local
    /// answer model); the report says so. A later run with QA reuses every cached reply.
    #[arg(long)]
    no_qa: bool,
    /// Where model replies are kept (answers, verdicts, query parses, update decisions,
    /// boundaries), one file per reply, so a re-run asks nothing again and a stopped run
    /// resumes; a folder in the repository makes an hours-long QA run resumable on another
    /// machine once committed (default: $MEMKIT_CACHE_DIR/qa or ~/.cache/memkit/qa).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
}

pub fn run(args: Args, bars: &Bars) -> anyhow::Result<()> {
    let mut recipe = EvalRecipe::from_file(&args.recipe)?;
    let mut command = format!("memkit eval --recipe {}", args.recipe.display());
    let skipped_qa = args.no_qa && recipe.qa.take().is_some();
    if args.no_qa {
        command.push_str(" --no-qa");
    }
    let needs_dense = recipe.systems.iter().any(|s| s.uses_dense());
    let embedder = if needs_dense {
        let e = super::load_embedder(args.embedder_dir.as_deref())?
            .context("the recipe has a system that needs the sentence embedder (the dense route, embedding topic shifts or the update), but it is not installed: run `memkit models fetch all-minilm-l6-v2`")?;
        // Every vector is kept for the next run: another recipe over the same dialogues, or
        // this one again, embeds only texts it has not seen.
        let path = Cache::default_dir().with_file_name("embeddings.sqlite");
        let fingerprint = e.fingerprint()?;
        let cached = CachedEmbedder::persistent(e as Arc<dyn Embedder>, &path, &fingerprint)?;
        Some(Arc::new(cached) as Arc<dyn Embedder>)
    } else {
        None
    };
    let mut cached =
        Cached { dir: args.cache_dir.clone().unwrap_or_else(|| Cache::default_dir().with_file_name("qa")), models: Vec::new() };
    let qa_models = recipe.qa.as_ref().map(|spec| qa_models(spec, &mut cached)).transpose()?;
    let query_model = recipe.query_model.as_ref().map(|spec| query_model(spec, &mut cached)).transpose()?;
    let update_model = recipe.update_model.as_ref().map(|spec| update_model(spec, &mut cached)).transpose()?;
    let boundary_model = recipe.boundary_model.as_ref().map(|spec| boundary_model(spec, &mut cached)).transpose()?;
    let options = RunOptions { data_dir: args.data_dir.clone(), command, embedder, qa_models, query_model, update_model, boundary_model };
    let reporter = StageReporter::new(bars);
    let mut report = runner::run(&recipe, &options, &reporter)
        .with_context(|| format!("running recipe {} (data dir {})", args.recipe.display(), args.data_dir.display()))?;
    if !cached.models.is_empty() {
        report.notes.push(cached.note());
    }
    if skipped_qa {
        report.notes.push("Question answering: the recipe's `[qa]` was skipped (`--no-qa`); retrieval figures only.".to_string());
    }
    let dir = report.write(&args.reports_dir)?;
    #[allow(clippy::print_stdout)]
    {
        print!("{}", summary(&report));
        println!("report: {}", dir.join("report.md").display());
    }
    Ok(())
}

/// A compact table for the terminal: recall per budget and context tokens per query.
fn summary(report: &memkit_eval::Report) -> String {
    use std::fmt::Write;
    let budgets: Vec<&String> = report.systems.first().map(|s| s.evidence_recall_at.keys().collect()).unwrap_or_default();
    let mut budgets = budgets;
    budgets.sort_by_key(|b| b.parse::<usize>().unwrap_or(usize::MAX));
    let width = report.systems.iter().map(|s| s.name.len()).max().unwrap_or(6).max(6);
    let mut out = String::new();
    let _ = write!(out, "{:width$}", "system");
    for b in &budgets {
        let _ = write!(out, " {:>6}", format!("@{b}"));
    }
    let _ = writeln!(out, " {:>9}", "tokens/q");
    for s in &report.systems {
        let _ = write!(out, "{:width$}", s.name);
        for b in &budgets {
            let _ = write!(out, " {:>6.3}", s.evidence_recall_at.get(*b).copied().unwrap_or(f64::NAN));
        }
        let _ = writeln!(out, " {:>9.0}", s.mean_context_tokens);
    }
    out
}

/// A recipe's models, each behind the one reply cache in `dir` with its role ("answer model",
/// …), so that a re-run asks nothing again and an interrupted run resumes.
struct Cached {
    dir: PathBuf,
    models: Vec<(&'static str, Arc<CachedChat>)>,
}

impl Cached {
    /// A recipe's model (see [`super::chat_model`]) behind the reply cache, kept under `role`.
    fn chat(
        &mut self,
        role: &'static str,
        model: &ModelSpec,
        batch: usize,
        n_ctx: u32,
        max_tokens: usize,
    ) -> anyhow::Result<Arc<CachedChat>> {
        let chat = Arc::new(CachedChat::new(super::chat_model(model, batch, n_ctx, max_tokens)?, Cache::new(self.dir.clone())));
        self.models.push((role, Arc::clone(&chat)));
        Ok(chat)
    }

    /// The report's line on the reply cache: requests and hits per model role in this run.
    fn note(&self) -> String {
        let parts: Vec<String> = self
            .models
            .iter()
            .map(|(role, chat)| {
                let s = chat.stats();
                format!("{role} {} of {} ({:.1}%)", s.hits, s.requests, 100.0 * s.hit_rate())
            })
            .collect();
        format!(
            "Model replies from the reply cache ({}) in this run, by role: {}. A hit is a reply an earlier run with the same model, prompt and parameters wrote; a re-run of this recipe asks nothing again.",
            self.dir.display(),
            parts.join("; ")
        )
    }
}

/// The answer model and judge of `[qa]`, each behind the reply cache.
fn qa_models(spec: &QaSpec, cached: &mut Cached) -> anyhow::Result<QaModels> {
    // Prompts are at most the budget plus the instructions; the judge's are short.
    let n_ctx = (2048 + spec.chunk * (spec.budget.max() + 1024 + spec.max_tokens)) as u32;
    let max_tokens = spec.max_tokens.max(160);
    let answer = cached.chat("answer model", &spec.answer, spec.chunk, n_ctx, max_tokens)?;
    let judge: Option<Arc<dyn ChatModel>> = match (&spec.judge, spec.judged) {
        (Some(judge), true) if *judge != spec.answer => Some(cached.chat("judge", judge, spec.chunk, n_ctx, max_tokens)?),
        (_, true) => Some(answer.clone()),
        (_, false) => None,
    };
    Ok(QaModels { answer, judge })
}

/// The query parser's model of `[query_model]`, behind the reply cache.
fn query_model(spec: &QueryModelSpec, cached: &mut Cached) -> anyhow::Result<Arc<dyn ChatModel>> {
    // A question and its date after the shared instructions, and the reply.
    let n_ctx = (2048 + spec.chunk * (256 + spec.max_tokens)) as u32;
    Ok(cached.chat("query parser", &spec.model, spec.chunk, n_ctx, spec.max_tokens)?)
}

/// The update consolidator's model of `[update_model]`, behind the reply cache: one pair at a
/// time (each decision changes the next pair's candidates).
fn update_model(spec: &UpdateModelSpec, cached: &mut Cached) -> anyhow::Result<Arc<dyn ChatModel>> {
    // Two records after the shared instructions, and the reply.
    Ok(cached.chat("update consolidator", &spec.model, 1, (2048 + spec.max_tokens) as u32, spec.max_tokens)?)
}

/// HingeMem's segmenter model of `[boundary_model]`, behind the reply cache.
fn boundary_model(spec: &BoundaryModelSpec, cached: &mut Cached) -> anyhow::Result<Arc<dyn ChatModel>> {
    // A piece of messages (shown cut to 600 characters) after the shared instructions, and the reply.
    let n_ctx = (1024 + spec.chunk * (spec.messages * 200 + spec.max_tokens)) as u32;
    Ok(cached.chat("boundary segmenter", &spec.model, spec.chunk, n_ctx, spec.max_tokens)?)
}
