//! `memkit eval`: run an eval recipe and write its report.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use memkit_eval::qa::ChatModel;
use memkit_eval::recipe::{EvalRecipe, QaModel, QaSpec};
use memkit_eval::runner::{self, QaModels, RunOptions};
use memkit_infer::openai::{ChatCompletionRequest, JsonSchemaFormat, OpenAiClient, OpenAiConfig, ResponseFormat};
use memkit_prompt::ChatMessage;
use memkit_teacher::cache::{Cache, Entry};

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
            .context("the recipe has a system that needs the sentence embedder (the dense route or embedding topic shifts), but it is not installed: run `memkit models fetch all-minilm-l6-v2`")?;
        Some(e as std::sync::Arc<dyn memkit_engine::dense::Embedder>)
    } else {
        None
    };
    let qa_models = recipe.qa.as_ref().map(qa_models).transpose()?;
    let options = RunOptions { data_dir: args.data_dir.clone(), command, embedder, qa_models };
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

/// The answer model and judge of `[qa]`, each behind the reply cache
/// (`$MEMKIT_CACHE_DIR/qa`, default `~/.cache/memkit/qa`): a re-run asks nothing again and an
/// interrupted run resumes.
fn qa_models(spec: &QaSpec) -> anyhow::Result<QaModels> {
    let cache = Cache::new(Cache::default_dir().with_file_name("qa"));
    let answer: Arc<dyn ChatModel> = Arc::new(Cached { model: build(&spec.answer, spec)?, cache: cache.clone() });
    let judge = match (&spec.judge, spec.judged) {
        (Some(judge), true) if *judge != spec.answer => Some(Arc::new(Cached { model: build(judge, spec)?, cache }) as Arc<dyn ChatModel>),
        (_, true) => Some(Arc::clone(&answer)),
        (_, false) => None,
    };
    Ok(QaModels { answer, judge })
}

fn build(model: &QaModel, spec: &QaSpec) -> anyhow::Result<Box<dyn ChatModel>> {
    Ok(match model {
        QaModel::Local { model, threads, n_ctx } => {
            let gguf = memkit_teacher::teacher::resolve_model(model)?;
            // Prompts are at most the budget plus the instructions; the judge's are short.
            let n_ctx = n_ctx.unwrap_or_else(|| (2048 + spec.chunk * (spec.budget + 1024 + spec.max_tokens)) as u32);
            let chat = memkit_infer::extract::LocalChat::load(&gguf, spec.chunk, *threads, Some(n_ctx), spec.max_tokens.max(160))
                .with_context(|| format!("loading {}", gguf.display()))?;
            Box::new(LocalModel(chat))
        }
        QaModel::Openai { base_url, model, api_key_env, timeout_s } => {
            let config = OpenAiConfig {
                api_key_env: api_key_env.clone(),
                timeout: std::time::Duration::from_secs(*timeout_s),
                ..OpenAiConfig::new(base_url.clone(), model.clone())
            };
            Box::new(EndpointModel(OpenAiClient::new(config)))
        }
    })
}

struct LocalModel(memkit_infer::extract::LocalChat);

impl ChatModel for LocalModel {
    fn id(&self) -> String {
        self.0.id().to_owned()
    }
    fn complete(
        &self,
        chats: &[Vec<ChatMessage>],
        max_tokens: usize,
        schema: Option<&serde_json::Value>,
    ) -> memkit_eval::Result<Vec<String>> {
        let requests: Vec<memkit_infer::chat::ChatRequest> = chats
            .iter()
            .map(|c| memkit_infer::chat::ChatRequest {
                schema: schema.cloned(),
                ..memkit_infer::chat::ChatRequest::new(c.clone(), max_tokens)
            })
            .collect();
        let generations = self.0.complete(&requests).map_err(|e| memkit_eval::Error::Qa(e.to_string()))?;
        Ok(generations.into_iter().map(|g| g.text).collect())
    }
}

struct EndpointModel(OpenAiClient);

impl ChatModel for EndpointModel {
    fn id(&self) -> String {
        format!("openai:{}@{}", self.0.config().model, self.0.config().base_url)
    }
    fn complete(
        &self,
        chats: &[Vec<ChatMessage>],
        max_tokens: usize,
        schema: Option<&serde_json::Value>,
    ) -> memkit_eval::Result<Vec<String>> {
        chats
            .iter()
            .map(|messages| {
                let mut request = ChatCompletionRequest::new("", messages.clone());
                request.max_tokens = Some(max_tokens);
                request.temperature = Some(0.0);
                request.response_format = schema.map(|schema| ResponseFormat::JsonSchema {
                    json_schema: JsonSchemaFormat { name: "verdict".into(), schema: Some(schema.clone()), strict: Some(true) },
                });
                let response = self.0.chat(&request).map_err(|e| memkit_eval::Error::Qa(e.to_string()))?;
                Ok(response.content().unwrap_or_default().to_owned())
            })
            .collect()
    }
}

/// A model whose replies are kept in the content-addressed cache, keyed by the model id, the
/// messages, `max_tokens` and the schema.
struct Cached {
    model: Box<dyn ChatModel>,
    cache: Cache,
}

impl ChatModel for Cached {
    fn id(&self) -> String {
        self.model.id()
    }
    fn complete(
        &self,
        chats: &[Vec<ChatMessage>],
        max_tokens: usize,
        schema: Option<&serde_json::Value>,
    ) -> memkit_eval::Result<Vec<String>> {
        let id = self.model.id();
        let params = serde_json::json!({ "max_tokens": max_tokens, "schema": schema, "temperature": 0 });
        let keys: Vec<String> = chats.iter().map(|c| memkit_teacher::cache::key(&id, c, &params)).collect();
        let cache_err = |e: memkit_teacher::Error| memkit_eval::Error::Qa(format!("reply cache {}: {e}", self.cache.dir().display()));
        let mut replies: Vec<Option<String>> =
            keys.iter().map(|k| Ok(self.cache.get(k).map_err(cache_err)?.map(|e| e.raw))).collect::<memkit_eval::Result<_>>()?;
        let missing: Vec<usize> = (0..chats.len()).filter(|&i| replies[i].is_none()).collect();
        if !missing.is_empty() {
            let asked: Vec<Vec<ChatMessage>> = missing.iter().map(|&i| chats[i].clone()).collect();
            for (&i, raw) in missing.iter().zip(self.model.complete(&asked, max_tokens, schema)?) {
                self.cache.put(&keys[i], &Entry { model: id.clone(), raw: raw.clone(), usage: Default::default() }).map_err(cache_err)?;
                replies[i] = Some(raw);
            }
        }
        Ok(replies.into_iter().map(|r| r.expect("every reply filled")).collect())
    }
}
