//! `memkit extract`: dialogues → memory records, one JSON object per line.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use memkit_data::{Window, WindowConfig, windows};
use memkit_engine::rule_extractor::{RuleExtractor, raw_turn_records};
use memkit_infer::openai::{OpenAiClient, OpenAiConfig};
use memkit_infer::{ExtractConfig, Extraction, Extractor, OpenAiExtractor};
use memkit_schema::MemoryRecord;
use serde::{Deserialize, Serialize};

use super::{DialogueArgs, Format};

/// Which extractor turns turns into records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExtractorKind {
    /// The rule baseline: one record per user turn, type by cues, message date, keywords.
    Rule,
    /// One record per turn, no dimensions (the raw-turns baseline).
    RawTurns,
    /// A language model over windows: a GGUF in-process (--model) or an OpenAI-compatible
    /// endpoint (--endpoint). Chosen automatically when either is given.
    Model,
}

/// Turn dialogues into memory records (JSONL on stdout or --output).
///
/// The rule and raw-turns baselines work per turn. A model (a GGUF file or packaged model name
/// with --model, or an OpenAI-compatible server with --endpoint) reads overlapping windows
/// (LoCoMo: 25 messages with 5 of context; LongMemEval: 15 user messages with 3) with the
/// extraction prompt, decodes JSON constrained by the record schema, and keeps records whose
/// source message is in the window's non-overlap suffix.
///
/// Examples:
///   memkit extract -i ../shared/data/locomo/locomo10.json --format locomo --model qwen2.5-coder-1.5b-instruct --limit 3
///   memkit extract -i dialogues.jsonl --model runs/student/model-q8_0.gguf -o records.jsonl
///   memkit extract -i dialogues.jsonl --endpoint http://127.0.0.1:8080/v1 --endpoint-model student
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(flatten)]
    dialogues: DialogueArgs,
    /// The extractor (default: `model` when --model or --endpoint is given, else `rule`).
    #[arg(long, value_enum)]
    extractor: Option<ExtractorKind>,
    /// A GGUF file or a packaged model name (see `memkit models list`).
    #[arg(long, conflicts_with = "endpoint")]
    model: Option<String>,
    /// An OpenAI-compatible API root including /v1.
    #[arg(long)]
    endpoint: Option<String>,
    /// The model name sent to --endpoint.
    #[arg(long, default_value = "default")]
    endpoint_model: String,
    /// Messages per window (default: 25 for LoCoMo and JSONL, 15 user messages for LongMemEval).
    #[arg(long)]
    window: Option<usize>,
    /// Context messages shared with the previous window (default: 5, LongMemEval 3).
    #[arg(long)]
    overlap: Option<usize>,
    /// Extract from at most this many windows (in dialogue order).
    #[arg(long)]
    limit: Option<usize>,
    #[command(flatten)]
    generation: super::GenerationArgs,
    /// Discard the window ledger of --output and extract every window again.
    #[arg(long, requires = "output")]
    restart: bool,
    /// Write records here instead of stdout (written to a temp file, then renamed). With a
    /// model, finished windows also go to `<output>.windows.jsonl` as they finish: re-running
    /// the same command after a crash or kill skips them.
    #[arg(long, short)]
    output: Option<PathBuf>,
}

pub fn run(args: Args, bars: &crate::progress::Bars) -> anyhow::Result<()> {
    let dialogues = args.dialogues.load()?;
    let kind =
        args.extractor.unwrap_or(if args.model.is_some() || args.endpoint.is_some() { ExtractorKind::Model } else { ExtractorKind::Rule });
    let mut records: Vec<MemoryRecord> = Vec::new();
    match kind {
        ExtractorKind::Rule | ExtractorKind::RawTurns => {
            let bar = bars.bar(dialogues.len() as u64, "extract");
            let rule = RuleExtractor::default();
            for d in &dialogues {
                records.extend(if kind == ExtractorKind::Rule { rule.extract(d) } else { raw_turn_records(d) });
                bar.inc(1);
            }
            bar.finish_and_clear();
        }
        ExtractorKind::Model => {
            let mut config =
                if args.dialogues.format == Format::Longmemeval { WindowConfig::longmemeval() } else { WindowConfig::locomo() };
            config.size = args.window.unwrap_or(config.size);
            config.overlap = args.overlap.unwrap_or(config.overlap);
            config.validate()?;
            let mut all: Vec<Window> = dialogues.iter().flat_map(|d| windows(d, &config)).collect();
            all.truncate(args.limit.unwrap_or(usize::MAX));
            let extract = args.generation.extract_config();
            // Each finished window goes to a ledger next to --output, so a killed run resumes
            // where it stopped; windows already there (from the same extractor settings) are
            // not extracted again.
            let ledger_path = args.output.as_deref().map(memkit_schema::window_ledger_path);
            let key = extractor_key(&args)?;
            let mut done: HashMap<String, Extraction> = HashMap::new();
            let mut batch_of: HashMap<String, usize> = HashMap::new();
            if let (Some(path), true) = (&ledger_path, args.restart) {
                match std::fs::remove_file(path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(e).with_context(|| format!("cannot remove {}", path.display()));
                    }
                    _ => {}
                }
            }
            if let Some(path) = &ledger_path {
                for entry in memkit_teacher::ledger::read::<Finished>(path)? {
                    if entry.extractor != key {
                        anyhow::bail!(
                            "{} was written by another extractor ({:?}, this run is {key:?}); pass --restart to start over or choose another --output",
                            path.display(),
                            entry.extractor
                        );
                    }
                    batch_of.insert(entry.extraction.window_id.clone(), entry.batch.max(1));
                    done.insert(entry.extraction.window_id.clone(), entry.extraction);
                }
            }
            let todo: Vec<Window> = all.iter().filter(|w| !done.contains_key(&w.id)).cloned().collect();
            if !done.is_empty() {
                tracing::info!(finished = all.len() - todo.len(), left = todo.len(), "resuming from the window ledger");
            }
            if !todo.is_empty() {
                let (extractor, chunk) = extractor(&args, extract)?;
                let mut ledger = ledger_path.as_deref().map(memkit_teacher::ledger::Ledger::open).transpose()?;
                let bar = bars.bar(todo.len() as u64, "extract");
                for group in todo.chunks(chunk) {
                    let extractions = extractor.extract(group).with_context(|| format!("extracting window {}", group[0].id))?;
                    for extraction in extractions {
                        if let Some(ledger) = ledger.as_mut() {
                            ledger.append(&Finished { extractor: key.clone(), batch: group.len(), extraction: extraction.clone() })?;
                        }
                        batch_of.insert(extraction.window_id.clone(), group.len());
                        done.insert(extraction.window_id.clone(), extraction);
                    }
                    bar.inc(group.len() as u64);
                }
                bar.finish_and_clear();
            }
            let (mut bad, mut invalid, mut millis, mut completion) = (0usize, 0usize, 0u64, 0usize);
            for window in &all {
                let extraction = &done[&window.id];
                invalid += extraction.errors.len();
                bad += usize::from(extraction.records.is_empty() && !extraction.errors.is_empty());
                millis += extraction.usage.millis / batch_of[&window.id] as u64;
                completion += extraction.usage.completion_tokens;
                records.extend(extraction.to_records(window));
            }
            tracing::info!(
                extractor = key,
                windows = all.len(),
                unusable_windows = bad,
                dropped_records = invalid,
                seconds_per_window = millis as f64 / 1000.0 / all.len().max(1) as f64,
                completion_tokens = completion,
                "model extraction"
            );
        }
    }
    let mut lines = String::new();
    for r in &records {
        lines.push_str(&serde_json::to_string(r)?);
        lines.push('\n');
    }
    match &args.output {
        Some(path) => {
            let tmp = path.with_extension("jsonl.tmp");
            std::fs::write(&tmp, &lines).with_context(|| format!("cannot write {}", tmp.display()))?;
            std::fs::rename(&tmp, path).with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))?;
        }
        None => std::io::stdout().lock().write_all(lines.as_bytes())?,
    }
    tracing::info!(dialogues = dialogues.len(), records = records.len(), "extracted");
    Ok(())
}

/// One finished window in the extraction ledger (`<output>.windows.jsonl`).
#[derive(Debug, Serialize, Deserialize)]
struct Finished {
    /// [`extractor_key`] of the run that wrote it.
    extractor: String,
    /// Windows decoded together with this one: `extraction.usage.millis` is their shared wall
    /// time, so one window's share is `millis / batch`.
    #[serde(default = "one")]
    batch: usize,
    extraction: Extraction,
}

fn one() -> usize {
    1
}

/// What decides a window's records: the model (for a file: its size and a hash of its last MiB,
/// so a retrained model under the same name is a new extractor) or endpoint, and the limits.
fn extractor_key(args: &Args) -> anyhow::Result<String> {
    let model = match (&args.endpoint, &args.model) {
        (Some(endpoint), _) => format!("{endpoint} {}", args.endpoint_model),
        (None, Some(model)) => {
            let path = memkit_teacher::teacher::resolve_model(model)?;
            format!("{model} ({})", fingerprint(&path).with_context(|| format!("cannot read {}", path.display()))?)
        }
        (None, None) => String::new(),
    };
    Ok(format!("{model} max_memories={} max_tokens={}", args.generation.max_memories, args.generation.max_tokens))
}

/// `<bytes> bytes, tail <sha256 of the last MiB, 12 hex digits>`: cheap, and any retraining
/// changes the tensor data at the end of a GGUF.
fn fingerprint(path: &Path) -> std::io::Result<String> {
    use sha2::Digest;
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(1 << 20)))?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail)?;
    let digest = sha2::Sha256::digest(&tail);
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    Ok(format!("{len} bytes, tail {hex}"))
}

/// The model extractor the flags name, and how many windows to hand it at once.
fn extractor(args: &Args, config: ExtractConfig) -> anyhow::Result<(Box<dyn Extractor>, usize)> {
    if let Some(endpoint) = &args.endpoint {
        let client = OpenAiClient::new(OpenAiConfig::new(endpoint.clone(), args.endpoint_model.clone()));
        return Ok((Box::new(OpenAiExtractor::new(client, config)?), 1));
    }
    let model = args.model.as_deref().context("--extractor model needs --model or --endpoint")?;
    let path = memkit_teacher::teacher::resolve_model(model)?;
    Ok((Box::new(args.generation.local_extractor(&path)?), args.generation.batch.max(1)))
}
