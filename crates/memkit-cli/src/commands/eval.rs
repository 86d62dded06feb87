//! `memkit eval`: run an eval recipe and write its report.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
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
}

pub fn run(args: Args, bars: &Bars) -> anyhow::Result<()> {
    let recipe = EvalRecipe::from_file(&args.recipe)?;
    let command = format!("memkit eval --recipe {}", args.recipe.display());
    let needs_dense = recipe.systems.iter().any(|s| s.uses_dense());
    let embedder = if needs_dense {
        let e = super::load_embedder(args.embedder_dir.as_deref())?
            .context("the recipe has a system that needs the sentence embedder (the dense route, embedding topic shifts or the update), but it is not installed: run `memkit models fetch all-minilm-l6-v2`")?;
        Some(e as std::sync::Arc<dyn memkit_engine::dense::Embedder>)
    } else {
        None
    };
    let qa_models = recipe.qa.as_ref().map(qa_models).transpose()?;
    let query_model = recipe.query_model.as_ref().map(query_model).transpose()?;
    let update_model = recipe.update_model.as_ref().map(update_model).transpose()?;
    let boundary_model = recipe.boundary_model.as_ref().map(boundary_model).transpose()?;
    let options = RunOptions { data_dir: args.data_dir.clone(), command, embedder, qa_models, query_model, update_model, boundary_model };
    let reporter = StageReporter::new(bars);
    let report = runner::run(&recipe, &options, &reporter)
        .with_context(|| format!("running recipe {} (data dir {})", args.recipe.display(), args.data_dir.display()))?;
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

/// Where the eval keeps model replies: `$MEMKIT_CACHE_DIR/qa`, default `~/.cache/memkit/qa`
/// (answers, verdicts and query parses), so a re-run asks nothing again and an interrupted run
/// resumes.
fn reply_cache() -> Cache {
    Cache::new(Cache::default_dir().with_file_name("qa"))
}

/// The answer model and judge of `[qa]`, each behind the reply cache.
fn qa_models(spec: &QaSpec) -> anyhow::Result<QaModels> {
    // Prompts are at most the budget plus the instructions; the judge's are short.
    let n_ctx = (2048 + spec.chunk * (spec.budget + 1024 + spec.max_tokens)) as u32;
    let max_tokens = spec.max_tokens.max(160);
    let answer = chat_model(&spec.answer, spec.chunk, n_ctx, max_tokens)?;
    let judge = match (&spec.judge, spec.judged) {
        (Some(judge), true) if *judge != spec.answer => Some(chat_model(judge, spec.chunk, n_ctx, max_tokens)?),
        (_, true) => Some(Arc::clone(&answer)),
        (_, false) => None,
    };
    Ok(QaModels { answer, judge })
}

/// The query parser's model of `[query_model]`, behind the reply cache.
fn query_model(spec: &QueryModelSpec) -> anyhow::Result<Arc<dyn ChatModel>> {
    // A question and its date after the shared instructions, and the reply.
    let n_ctx = (2048 + spec.chunk * (256 + spec.max_tokens)) as u32;
    chat_model(&spec.model, spec.chunk, n_ctx, spec.max_tokens)
}

/// The update consolidator's model of `[update_model]`, behind the reply cache: one pair at a
/// time (each decision changes the next pair's candidates).
fn update_model(spec: &UpdateModelSpec) -> anyhow::Result<Arc<dyn ChatModel>> {
    // Two records after the shared instructions, and the reply.
    chat_model(&spec.model, 1, (2048 + spec.max_tokens) as u32, spec.max_tokens)
}

/// HingeMem's segmenter model of `[boundary_model]`, behind the reply cache.
fn boundary_model(spec: &BoundaryModelSpec) -> anyhow::Result<Arc<dyn ChatModel>> {
    // A piece of messages (shown cut to 600 characters) after the shared instructions, and the reply.
    let n_ctx = (1024 + spec.chunk * (spec.messages * 200 + spec.max_tokens)) as u32;
    chat_model(&spec.model, spec.chunk, n_ctx, spec.max_tokens)
}

/// A recipe's model (see [`super::chat_model`]) behind the reply cache.
fn chat_model(model: &ModelSpec, batch: usize, n_ctx: u32, max_tokens: usize) -> anyhow::Result<Arc<dyn ChatModel>> {
    Ok(Arc::new(CachedChat::new(super::chat_model(model, batch, n_ctx, max_tokens)?, reply_cache())))
}
