//! One module per subcommand.

pub mod compare;
pub mod convert;
pub mod distill;
pub mod eval;
pub mod extract;
pub mod ingest;
pub mod models;
pub mod publish;
pub mod query;
pub mod serve;
pub mod train;

use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::Context;
use memkit_schema::{Dialogue, MemoryRecord};

/// Dialogue file formats the commands read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// LoCoMo-10 (`locomo10.json`).
    Locomo,
    /// LongMemEval oracle or S (one haystack per question).
    Longmemeval,
    /// One dialogue per line: {"id", "sessions": [{"id", "date", "turns": [{"speaker", "role", "text"}]}]}.
    Jsonl,
    /// The BYU chit-chat dataset (`chitchat_dataset/dataset.json` of the PyPI package
    /// `chitchat-dataset`): two people per dialogue, a session per conversation they had.
    Chitchat,
}

/// Where dialogues come from.
#[derive(Debug, clap::Args)]
pub struct DialogueArgs {
    /// The dialogue file.
    #[arg(long, short)]
    pub input: PathBuf,
    /// Its format.
    #[arg(long, value_enum, default_value = "jsonl")]
    pub format: Format,
    /// Keep only these dialogue ids (LoCoMo `conv-26`, LongMemEval question ids); repeatable.
    #[arg(long = "dialogue")]
    pub dialogues: Vec<String>,
    /// Keep only each dialogue's first N sessions (the subset an eval recipe's `sessions` names).
    #[arg(long)]
    pub sessions: Option<usize>,
    /// LongMemEval: take these haystack sessions (by session id), each as a dialogue of its own
    /// named `lme-s/<session id>`, instead of whole haystacks; repeatable.
    #[arg(long = "haystack-session", value_name = "ID")]
    pub haystack_sessions: Vec<String>,
}

impl DialogueArgs {
    pub fn load(&self) -> anyhow::Result<Vec<Dialogue>> {
        let path = &self.input;
        let mut dialogues: Vec<Dialogue> = match self.format {
            Format::Locomo => memkit_data::load_locomo(path)?.into_iter().map(|s| s.dialogue).collect(),
            Format::Longmemeval => memkit_data::load_longmemeval(path)?.into_iter().map(|i| i.dialogue).collect(),
            Format::Jsonl => memkit_data::load_jsonl(path)?,
            Format::Chitchat => memkit_data::load_chitchat(path)?,
        };
        if !self.haystack_sessions.is_empty() {
            anyhow::ensure!(self.format == Format::Longmemeval, "--haystack-session needs --format longmemeval");
            let mut picked = Vec::new();
            for id in &self.haystack_sessions {
                let session = dialogues
                    .iter()
                    .flat_map(|d| &d.sessions)
                    .find(|s| &s.id == id)
                    .with_context(|| format!("{}: no haystack session {id:?}", path.display()))?;
                picked.push(Dialogue { id: format!("lme-s/{id}"), sessions: vec![session.clone()] });
            }
            dialogues = picked;
        }
        if !self.dialogues.is_empty() {
            if let Some(missing) = self.dialogues.iter().find(|id| !dialogues.iter().any(|d| &d.id == *id)) {
                anyhow::bail!("{}: no dialogue {missing:?}", path.display());
            }
            dialogues.retain(|d| self.dialogues.contains(&d.id));
        }
        if let Some(n) = self.sessions {
            dialogues.iter_mut().for_each(|d| d.sessions.truncate(n));
        }
        Ok(dialogues)
    }
}

/// Reads a records JSONL file (one `MemoryRecord` per line); errors name the line.
pub fn read_records(path: &Path) -> anyhow::Result<Vec<MemoryRecord>> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open records file {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("{}:{}: cannot read", path.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: MemoryRecord =
            serde_json::from_str(&line).with_context(|| format!("{}:{}: not a memory record", path.display(), i + 1))?;
        out.push(record);
    }
    Ok(out)
}

/// A chat model as a recipe names it: a local GGUF (a packaged name or a path) decoding `batch`
/// chats at once in `n_ctx` KV cells unless the spec sets them, or an OpenAI-compatible endpoint
/// with `batch` requests in flight.
pub fn chat_model(
    model: &memkit_eval::recipe::ModelSpec,
    batch: usize,
    n_ctx: u32,
    max_tokens: usize,
) -> anyhow::Result<Box<dyn memkit_infer::chat::ChatModel>> {
    use memkit_eval::recipe::ModelSpec;
    Ok(match model {
        ModelSpec::Local { model, threads, n_ctx: set } => {
            let gguf = model_gguf(model)?;
            let chat = memkit_infer::chat::LocalChat::load(&gguf, batch, *threads, Some(set.unwrap_or(n_ctx)), max_tokens)
                .with_context(|| format!("loading {}", gguf.display()))?;
            Box::new(chat)
        }
        ModelSpec::Openai { base_url, model, api_key_env, timeout_s } => {
            let config = memkit_infer::openai::OpenAiConfig {
                api_key_env: api_key_env.clone(),
                timeout: std::time::Duration::from_secs(*timeout_s),
                ..memkit_infer::openai::OpenAiConfig::new(base_url.clone(), model.clone())
            };
            Box::new(memkit_infer::chat::OpenAiChat::new(memkit_infer::openai::OpenAiClient::new(config), batch))
        }
    })
}

/// Loads all-MiniLM-L6-v2 from `dir`, or from the models directory when installed.
pub fn load_embedder(dir: Option<&Path>) -> anyhow::Result<Option<std::sync::Arc<memkit_infer::SentenceEmbedder>>> {
    let dir = match dir {
        Some(d) => Some(d.to_path_buf()),
        None => memkit_infer::models::locate(memkit_infer::models::ALL_MINILM_L6_V2.name),
    };
    let Some(dir) = dir else { return Ok(None) };
    let embedder = memkit_infer::SentenceEmbedder::load(&dir).with_context(|| format!("loading the embedder from {}", dir.display()))?;
    Ok(Some(std::sync::Arc::new(embedder)))
}

/// How a local or served model writes records: limits, batch and threads (`extract`, `compare`).
#[derive(Debug, Clone, clap::Args)]
pub struct GenerationArgs {
    /// Records per window the prompt and the schema allow (a distill recipe's `max_memories`).
    #[arg(long, default_value_t = 8)]
    pub max_memories: usize,
    /// Most tokens per reply.
    #[arg(long, default_value_t = 800)]
    pub max_tokens: usize,
    /// Windows decoded together (GGUF).
    #[arg(long, default_value_t = 4)]
    pub batch: usize,
    /// llama.cpp threads (GGUF; default: the cores available).
    #[arg(long)]
    pub threads: Option<usize>,
}

impl GenerationArgs {
    /// The extraction settings these flags give.
    pub fn extract_config(&self) -> memkit_infer::ExtractConfig {
        memkit_infer::ExtractConfig {
            schema: memkit_schema::ExtractorSchemaOptions { max_memories: self.max_memories, ..Default::default() },
            max_tokens: self.max_tokens,
            ..memkit_infer::ExtractConfig::default()
        }
    }

    /// A GGUF as a batched extractor with these settings.
    pub fn local_extractor(&self, gguf: &Path) -> anyhow::Result<memkit_infer::extract::LocalExtractor> {
        memkit_infer::extract::LocalExtractor::load(gguf, self.batch, self.threads, None, self.extract_config())
            .with_context(|| format!("loading {}", gguf.display()))
    }
}

/// The GGUF of `--model`: a packaged model's name, a published extractor (its name in
/// `checkpoints/`, or its folder: merged from base and delta on first use), a `.gguf` file, or a
/// trained checkpoint folder (HF layout; converted once to `model-f16.gguf` inside it, which
/// carries the checkpoint's extraction prompt and window).
pub fn model_gguf(model: &str) -> anyhow::Result<PathBuf> {
    if let Some(published) = memkit_infer::published::Published::find(model)? {
        let options = memkit_infer::models::FetchOptions::from_env()?;
        let dir = published
            .hf_dir(&options, &memkit_infer::models::SilentReporter)
            .with_context(|| format!("building the published extractor {}", published.dir.display()))?;
        return model_gguf(dir.to_str().context("the models directory's path is not UTF-8")?);
    }
    let path = Path::new(model);
    if path.is_dir() {
        let out = path.join("model-f16.gguf");
        // Converted again when the checkpoint is newer (a finished resume, a new prompt or window).
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let newest_input = ["model.safetensors", memkit_prompt::TRAINED_PROMPT_FILE, memkit_prompt::TRAINED_WINDOW_FILE]
            .iter()
            .filter_map(|f| modified(&path.join(f)))
            .max();
        if modified(&out).is_none_or(|built| newest_input.is_some_and(|input| input > built)) {
            use memkit_infer::convert::{self, ConvertOptions, OutType};
            convert::hf_to_gguf(path, &out, &ConvertOptions { dtype: OutType::F16, ..ConvertOptions::default() })
                .with_context(|| format!("converting {} to GGUF", path.display()))?;
        }
        return Ok(out);
    }
    Ok(memkit_teacher::teacher::resolve_model(model)?)
}
