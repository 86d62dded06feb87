//! `memkit extract`: dialogues → memory records, one JSON object per line.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use memkit_clean::{Cleaner, Dropped, GroundingConfig, GroundingTally};
use memkit_data::{Window, WindowConfig, windows};
use memkit_engine::rule_extractor::{RuleExtractor, raw_turn_records};
use memkit_infer::chat::{ChatModel, OpenAiChat};
use memkit_infer::openai::{OpenAiClient, OpenAiConfig};
use memkit_infer::{ExtractConfig, Extraction, Extractor, OpenAiExtractor};
use memkit_prompt::TrainedWindow;
use memkit_schema::{MemoryRecord, RecordError};
use memkit_teacher::cache::Cache;
use memkit_teacher::corpus::{CorpusWindow, SourceKind};
use memkit_teacher::label::Repair;
use memkit_teacher::recipe::{GenerationSpec, LabellingSpec, Mode};
use memkit_teacher::samples::{Choose, Samples};
use memkit_teacher::teacher::Teacher;
use serde::{Deserialize, Serialize};

use super::{DialogueArgs, Format};

/// Which extractor turns turns into records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExtractorKind {
    /// The rule baseline: one record per user turn, type by cues, message date, keywords.
    Rule,
    /// One record per turn, no dimensions (the raw-turns baseline).
    RawTurns,
    /// LoCoMo's own `observation` facts, pointing at their evidence turns (LoCoMo only).
    Observations,
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
/// source message is in the window's non-overlap suffix. With --teach the model labels as the
/// distillation teacher does instead (decomposed: a few messages per request; re-asks of
/// first-person records; validation), its replies kept in the reply cache.
///
/// Every model's records are grounded in their window (unless --no-grounding): pointed at the
/// new message that best supports them, dropped when none does (term coverage, plus the
/// all-MiniLM-L6-v2 cosine when it is installed).
///
/// Examples:
///   memkit extract -i ../shared/data/locomo/locomo10.json --format locomo --model qwen2.5-coder-1.5b-instruct --limit 3
///   memkit extract -i dialogues.jsonl --model runs/student/model-q8_0.gguf -o records.jsonl
///   memkit extract -i dialogues.jsonl --endpoint http://127.0.0.1:8080/v1 --endpoint-model student
///   memkit extract -i ../shared/data/locomo/locomo10.json --format locomo --dialogue conv-30 --sessions 3 \
///       --model qwen2.5-coder-1.5b-instruct --teach decomposed -o teacher.jsonl
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
    /// Messages per window (default: the window a trained student's GGUF, or the server of
    /// --endpoint, names; else 25 for LoCoMo and JSONL, 15 user messages for LongMemEval).
    #[arg(long)]
    window: Option<usize>,
    /// Context messages shared with the previous window (default: the trained student's, else 5,
    /// LongMemEval 3).
    #[arg(long)]
    overlap: Option<usize>,
    /// Messages longer than this many characters are cut to head, middle and tail when rendered.
    #[arg(long, default_value_t = WindowConfig::DEFAULT_MAX_MESSAGE_CHARS)]
    max_message_chars: usize,
    /// Extract from at most this many windows (in dialogue order).
    #[arg(long)]
    limit: Option<usize>,
    /// Label as the distillation teacher does: `decomposed` (a few new messages per request,
    /// the window as context, source ids fixed by the schema, messages with nothing to remember
    /// skipped) or `window` (the whole window per request); first-person records re-asked once,
    /// records validated, replies cached (--cache-dir).
    #[arg(long, value_parser = parse_mode)]
    teach: Option<Mode>,
    /// New messages per request with --teach decomposed (1 to 3).
    #[arg(long, default_value_t = 1, requires = "teach")]
    group: usize,
    /// Messages before a request's first one shown as context, with --teach decomposed.
    #[arg(long, default_value_t = 2, requires = "teach")]
    context: usize,
    /// With --teach: replies per request, the greedy one and draws at --temperature, made one
    /// by --choose (1: the greedy reply alone).
    #[arg(long, default_value_t = 1, requires = "teach")]
    samples: usize,
    /// How --samples replies become one: `vote` (self-consistency: the records --agree of them
    /// hold) or `best` (best-of-n: the reply cleaning keeps most records of).
    #[arg(long, default_value = "vote", value_parser = parse_choose, requires = "teach")]
    choose: Choose,
    /// --choose vote: replies that must hold a record for it to be kept.
    #[arg(long, default_value_t = 1, requires = "teach")]
    agree: usize,
    /// Temperature of the draws of --samples.
    #[arg(long, default_value_t = Samples::default().temperature, requires = "teach")]
    temperature: f32,
    /// With --teach: also re-ask once a request whose records cleaning drops every one of,
    /// naming why each was dropped (first-person and other-speaker records are always re-asked).
    #[arg(long, requires = "teach")]
    repair_dropped: bool,
    /// The reply cache of --teach (default: $MEMKIT_CACHE_DIR/teacher or ~/.cache/memkit/teacher).
    #[arg(long, requires = "teach")]
    cache_dir: Option<PathBuf>,
    /// Keep the model's pointers as they are: no grounding.
    #[arg(long)]
    no_grounding: bool,
    /// Grounding: least support of the best message, below which a record is dropped (default
    /// chosen on the gold set, data/gold/README.md).
    #[arg(long, conflicts_with = "no_grounding")]
    min_support: Option<f64>,
    /// Grounding: how much better another message must support a record to take its pointer.
    #[arg(long, conflicts_with = "no_grounding")]
    margin: Option<f64>,
    #[command(flatten)]
    generation: super::GenerationArgs,
    /// Discard the window ledger of --output and extract every window again.
    #[arg(long, requires = "output")]
    restart: bool,
    /// Clean the replies kept in the window ledger of --output again under today's cleaning
    /// policy, without the model: each window's raw reply is parsed and cleaned anew, and the
    /// ledger and the records are rewritten. Give the windows the extraction used (the model, or
    /// --window/--overlap when its GGUF is not here). Not for a teacher's ledger (a window of
    /// several replies): run its extract again, its replies are cached.
    #[arg(long, requires = "output", conflicts_with_all = ["restart", "teach"])]
    reclean: bool,
    /// Write records here instead of stdout (written to a temp file, then renamed). With a
    /// model, finished windows also go to `<output>.windows.jsonl` as they finish: re-running
    /// the same command after a crash or kill skips them.
    #[arg(long, short)]
    output: Option<PathBuf>,
}

pub fn run(args: Args, bars: &crate::progress::Bars) -> anyhow::Result<()> {
    let dialogues = args.dialogues.load()?;
    let kind = args.extractor.unwrap_or(if args.model.is_some() || args.endpoint.is_some() || args.reclean {
        ExtractorKind::Model
    } else {
        ExtractorKind::Rule
    });
    let mut records: Vec<MemoryRecord> = Vec::new();
    match kind {
        ExtractorKind::Observations => {
            anyhow::ensure!(args.dialogues.format == Format::Locomo, "--extractor observations needs --format locomo");
            for sample in memkit_data::load_locomo(&args.dialogues.input)? {
                if dialogues.iter().any(|d| d.id == sample.id) {
                    let sample = match args.dialogues.sessions {
                        Some(n) => sample.first_sessions(n),
                        None => sample,
                    };
                    records.extend(sample.observation_records());
                }
            }
        }
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
            // The student's GGUF, found (and for a published extractor, built) once.
            let gguf = match (&args.model, &args.teach) {
                (Some(model), None) => Some(super::model_gguf(model)?),
                _ => None,
            };
            // A trained student is asked in the windows it learnt from, unless the flags say otherwise.
            let trained = match (&gguf, &args.endpoint, &args.teach) {
                (_, _, Some(_)) => None,
                (Some(gguf), _, None) => memkit_infer::convert::trained_window(gguf)?,
                (None, Some(endpoint), None) => {
                    OpenAiClient::new(OpenAiConfig::new(endpoint.clone(), args.endpoint_model.clone())).served_extract_window()
                }
                (None, None, None) => None,
            };
            if let Some(window) = trained {
                tracing::info!(size = window.size, overlap = window.overlap, "the model's trained window");
            }
            let config = window_config(&args, trained);
            config.validate()?;
            let mut all: Vec<Window> = dialogues.iter().flat_map(|d| windows(d, &config)).collect();
            all.truncate(args.limit.unwrap_or(usize::MAX));
            let extract = args.generation.extract_config();
            // Each finished window goes to a ledger next to --output, so a killed run resumes
            // where it stopped; windows already there (from the same extractor settings) are
            // not extracted again.
            let ledger_path = args.output.as_deref().map(memkit_schema::window_ledger_path);
            // Every extractor's records pass the one cleaning policy; which one ran (grounding's
            // thresholds and embedder) is part of the resume key.
            let cleaner = if args.no_grounding {
                Cleaner::new(GroundingConfig { enabled: false, ..GroundingConfig::default() })
            } else {
                memkit_infer::embed::installed_cleaner(grounding(&args))?
            };
            let mut done: HashMap<String, Finished> = HashMap::new();
            if let (true, Some(path)) = (args.reclean, &ledger_path) {
                for finished in reclean(path, &all, &cleaner)? {
                    done.insert(finished.extraction.window_id.clone(), finished);
                }
            }
            let key = if args.reclean { String::new() } else { extractor_key(&args, gguf.as_deref(), &cleaner)? };
            if let (Some(path), true) = (&ledger_path, args.restart) {
                match std::fs::remove_file(path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(e).with_context(|| format!("cannot remove {}", path.display()));
                    }
                    _ => {}
                }
            }
            if let (Some(path), false) = (&ledger_path, args.reclean) {
                for entry in memkit_teacher::ledger::read::<Finished>(path)? {
                    if entry.extractor != key {
                        anyhow::bail!(
                            "{} was written by another extractor ({:?}, this run is {key:?}); pass --restart to start over or choose another --output",
                            path.display(),
                            entry.extractor
                        );
                    }
                    done.insert(entry.extraction.window_id.clone(), entry);
                }
            }
            let todo: Vec<Window> = all.iter().filter(|w| !done.contains_key(&w.id)).cloned().collect();
            if !done.is_empty() {
                tracing::info!(finished = all.len() - todo.len(), left = todo.len(), "resuming from the window ledger");
            }
            if args.reclean && !todo.is_empty() {
                anyhow::bail!(
                    "--reclean: {} of this run's windows are not in the ledger (the first: {}); give the windows it was extracted with",
                    todo.len(),
                    todo[0].id
                );
            }
            if !todo.is_empty() {
                let model = model_of(&args, gguf.as_deref(), extract)?;
                let mut ledger = ledger_path.as_deref().map(memkit_teacher::ledger::Ledger::open).transpose()?;
                let bar = bars.bar(todo.len() as u64, "extract");
                for group in todo.chunks(model.chunk()) {
                    let extractions = model.extract(group, &cleaner).with_context(|| format!("extracting window {}", group[0].id))?;
                    for Extracted { extraction, dropped, repairs } in extractions {
                        let finished = Finished { extractor: key.clone(), batch: group.len(), extraction, dropped, repairs };
                        if let Some(ledger) = ledger.as_mut() {
                            ledger.append(&finished)?;
                        }
                        done.insert(finished.extraction.window_id.clone(), finished);
                    }
                    bar.inc(group.len() as u64);
                }
                bar.finish_and_clear();
            }
            let (mut bad, mut invalid, mut millis, mut completion) = (0usize, 0usize, 0u64, 0usize);
            let mut grounding = GroundingTally::default();
            for window in &all {
                let Finished { extraction, dropped, batch, .. } = &done[&window.id];
                grounding.add(GroundingTally::of(&extraction.grounding));
                invalid += dropped.len();
                bad += usize::from(extraction.records.is_empty() && !dropped.is_empty());
                millis += extraction.usage.millis / (*batch).max(1) as u64;
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
                grounding_kept = grounding.kept,
                grounding_repointed = grounding.repointed,
                grounding_unsupported = grounding.unsupported,
                grounding_context = grounding.context,
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

/// The window ledger at `path` cleaned again by `cleaner`: each window's raw reply parsed and
/// cleaned anew (no model), its key's cleaning part replaced by `cleaner`'s, and the ledger
/// rewritten in place (a temp file, then a rename). Windows of dialogues this run does not load
/// (`--dialogue` picked others) are written back as they were.
fn reclean(path: &Path, windows: &[Window], cleaner: &Cleaner) -> anyhow::Result<Vec<Finished>> {
    let by_id: HashMap<&str, &Window> = windows.iter().map(|w| (w.id.as_str(), w)).collect();
    let dialogue_of = |id: &str| id.rsplit_once('/').map_or("", |(d, _)| d).to_owned();
    let dialogues: std::collections::HashSet<String> = windows.iter().map(|w| dialogue_of(&w.id)).collect();
    let (mut out, mut lines, mut untouched) = (Vec::new(), String::new(), 0usize);
    for entry in memkit_teacher::ledger::read::<Finished>(path)? {
        let id = &entry.extraction.window_id;
        anyhow::ensure!(
            !entry.extractor.contains(" teach="),
            "{}: window {id} was labelled by a teacher (several replies a window): run its extract again instead, its replies are cached",
            path.display()
        );
        if !dialogues.contains(&dialogue_of(id)) {
            lines.push_str(&serde_json::to_string(&entry)?);
            lines.push('\n');
            untouched += 1;
            continue;
        }
        let window = by_id.get(id.as_str()).with_context(|| {
            format!("{}: window {id} is not among this run's windows: give the --window/--overlap it was extracted with", path.display())
        })?;
        let mut extraction = Extraction::from_output(window, entry.extraction.raw.clone(), entry.extraction.usage);
        let cleaned = cleaner.clean(window, &extraction.records, &extraction.errors)?;
        (extraction.records, extraction.grounding) = (cleaned.records, cleaned.grounding);
        let model = entry.extractor.split(" grounding=").next().unwrap_or_default();
        let model = model.strip_suffix(" no_grounding").unwrap_or(model);
        let finished = Finished {
            extractor: format!("{model} {}", cleaner.id()),
            batch: entry.batch,
            extraction,
            dropped: cleaned.dropped,
            repairs: entry.repairs,
        };
        lines.push_str(&serde_json::to_string(&finished)?);
        lines.push('\n');
        out.push(finished);
    }
    memkit_teacher::write_atomic(path, lines.as_bytes())?;
    tracing::info!(windows = out.len(), untouched, ledger = %path.display(), cleaner = cleaner.id(), "cleaned the kept replies again");
    Ok(out)
}

/// How dialogues are cut: `--window` / `--overlap` when given, else the model's trained window,
/// else the format's default.
fn window_config(args: &Args, trained: Option<TrainedWindow>) -> WindowConfig {
    let mut config = if args.dialogues.format == Format::Longmemeval { WindowConfig::longmemeval() } else { WindowConfig::locomo() };
    if let Some(window) = trained {
        (config.size, config.overlap) = (window.size, window.overlap);
    }
    config.size = args.window.unwrap_or(config.size);
    config.overlap = args.overlap.unwrap_or(config.overlap);
    config.max_message_chars = args.max_message_chars;
    config
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
    /// The reply as parsed, its records after cleaning (with grounding's decisions).
    extraction: Extraction,
    /// The records cleaning dropped, each with its reason (older ledgers: in `extraction.errors`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    dropped: Vec<Dropped>,
    /// A teacher's re-asks of the window's requests, with what they named and whether they fixed
    /// the reply (absent in older ledgers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    repairs: Vec<Repair>,
}

/// One window as a model extracted it and cleaning left it.
struct Extracted {
    extraction: Extraction,
    dropped: Vec<Dropped>,
    repairs: Vec<Repair>,
}

fn one() -> usize {
    1
}

/// What decides a window's records: the model (for a file: its size and a hash of its last MiB,
/// so a retrained model under the same name is a new extractor) or endpoint, the limits, how a
/// teacher labels, and the cleaning policy ([`Cleaner::id`]: grounding's thresholds and
/// embedder). `gguf`: the file `--model` names (a teacher's is resolved here).
fn extractor_key(args: &Args, gguf: Option<&Path>, cleaner: &Cleaner) -> anyhow::Result<String> {
    let model = match (&args.endpoint, &args.model) {
        (Some(endpoint), _) => format!("{endpoint} {}", args.endpoint_model),
        (None, Some(model)) => {
            let path = match gguf {
                Some(path) => path.to_path_buf(),
                None => memkit_teacher::teacher::resolve_model(model)?,
            };
            format!("{model} ({})", fingerprint(&path).with_context(|| format!("cannot read {}", path.display()))?)
        }
        (None, None) => String::new(),
    };
    let mut key = format!("{model} max_memories={} max_tokens={}", args.generation.max_memories, args.generation.max_tokens);
    if args.max_message_chars != WindowConfig::DEFAULT_MAX_MESSAGE_CHARS {
        key.push_str(&format!(" max_message_chars={}", args.max_message_chars));
    }
    match args.teach {
        Some(Mode::Decomposed) => key.push_str(&format!(" teach=decomposed group={} context={}", args.group, args.context)),
        Some(Mode::Window) => key.push_str(" teach=window"),
        None => {}
    }
    if args.teach.is_some() && args.samples > 1 {
        let samples =
            Samples { n: args.samples, choose: args.choose, agree: args.agree, temperature: args.temperature, ..Samples::default() };
        key.push_str(&format!(" samples={} temperature={}", samples.label(), args.temperature));
    }
    if args.teach.is_some() && args.repair_dropped {
        key.push_str(" repair_dropped");
    }
    key.push(' ');
    key.push_str(&cleaner.id());
    Ok(key)
}

/// The grounding thresholds: the defaults, or the flags.
fn grounding(args: &Args) -> GroundingConfig {
    let d = GroundingConfig::default();
    GroundingConfig { min_support: args.min_support.unwrap_or(d.min_support), margin: args.margin.unwrap_or(d.margin), ..d }
}

fn parse_choose(text: &str) -> Result<Choose, String> {
    match text {
        "vote" => Ok(Choose::Vote),
        "best" => Ok(Choose::Best),
        other => Err(format!("{other:?} is not a way to choose: vote or best")),
    }
}

fn parse_mode(text: &str) -> Result<Mode, String> {
    match text {
        "window" => Ok(Mode::Window),
        "decomposed" => Ok(Mode::Decomposed),
        other => Err(format!("{other:?} is not a mode: window or decomposed")),
    }
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

/// The model the flags name: an extractor, or a teacher that labels as distillation does.
enum Model {
    Extractor(Box<dyn Extractor>, usize),
    Teacher { teacher: Teacher, labelling: LabellingSpec, generation: GenerationSpec, cache: Cache },
}

impl Model {
    /// Windows to hand over at once.
    fn chunk(&self) -> usize {
        match self {
            Model::Extractor(_, chunk) => *chunk,
            // A decomposed window's requests share its conversation as one prefix.
            Model::Teacher { labelling, teacher, .. } => {
                if labelling.mode == Some(Mode::Decomposed) {
                    1
                } else {
                    teacher.parallel()
                }
            }
        }
    }

    /// The extractions of `windows`, their records cleaned by `cleaner`, with the records it
    /// dropped.
    fn extract(&self, windows: &[Window], cleaner: &Cleaner) -> anyhow::Result<Vec<Extracted>> {
        match self {
            Model::Extractor(extractor, _) => {
                let mut out = Vec::with_capacity(windows.len());
                for (window, mut extraction) in windows.iter().zip(extractor.extract(windows)?) {
                    let cleaned = cleaner.clean(window, &extraction.records, &extraction.errors)?;
                    (extraction.records, extraction.grounding) = (cleaned.records, cleaned.grounding);
                    out.push(Extracted { extraction, dropped: cleaned.dropped, repairs: Vec::new() });
                }
                Ok(out)
            }
            Model::Teacher { teacher, labelling, generation, cache } => {
                let prompts = memkit_prompt::Prompts::embedded()?;
                let mode = labelling.mode.unwrap_or(Mode::Decomposed);
                let items: Vec<CorpusWindow> =
                    windows.iter().map(|w| CorpusWindow { source: SourceKind::Other, window: w.clone() }).collect();
                let chunk = items
                    .iter()
                    .map(|w| Ok((w, memkit_teacher::label::plan(&w.window, mode, labelling, generation, &prompts, teacher.id())?)))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                let mut out = Vec::with_capacity(windows.len());
                for (id, result) in memkit_teacher::run::label_windows(chunk, labelling, generation, teacher, cache, &prompts, cleaner)? {
                    let (entry, failure) = result.map_err(|reason| anyhow::anyhow!("window {id}: the teacher failed: {reason}"))?;
                    // A reply that was not whole keeps its kind (the only error without a
                    // place in the reply); dropped records keep their reasons.
                    let errors: Vec<RecordError> = failure
                        .iter()
                        .map(|f| RecordError {
                            index: None,
                            kind: f.kind.unwrap_or_default(),
                            reason: f.reason.clone(),
                            raw: String::new(),
                        })
                        .collect();
                    let extraction = Extraction {
                        window_id: id,
                        records: entry.records,
                        errors,
                        raw: failure.map(|f| f.raw).unwrap_or_default(),
                        // The window's wall time (its requests share batches, so their own
                        // millis overlap).
                        usage: memkit_infer::reply::Usage { millis: entry.wall_ms, ..entry.usage },
                        grounding: entry.grounding,
                    };
                    out.push(Extracted { extraction, dropped: entry.dropped, repairs: entry.repairs });
                }
                Ok(out)
            }
        }
    }
}

/// The model the flags name (`gguf`: the student's file, found by the caller).
fn model_of(args: &Args, gguf: Option<&Path>, config: ExtractConfig) -> anyhow::Result<Model> {
    let chat: Option<Box<dyn ChatModel>> = match (&args.teach, &args.endpoint) {
        (None, _) => None,
        (Some(_), Some(endpoint)) => {
            Some(Box::new(OpenAiChat::new(OpenAiClient::new(OpenAiConfig::new(endpoint.clone(), args.endpoint_model.clone())), 4)))
        }
        (Some(_), None) => {
            let model = args.model.as_deref().context("--teach needs --model or --endpoint")?;
            let path = memkit_teacher::teacher::resolve_model(model)?;
            let chat =
                memkit_infer::chat::LocalChat::load(&path, args.generation.batch.max(1), args.generation.threads, None, config.max_tokens)
                    .with_context(|| format!("loading {}", path.display()))?;
            Some(Box::new(chat))
        }
    };
    if let Some(chat) = chat {
        let samples =
            Samples { n: args.samples, choose: args.choose, agree: args.agree, temperature: args.temperature, ..Samples::default() };
        let labelling = LabellingSpec {
            mode: args.teach,
            group: args.group,
            context: args.context,
            samples,
            repair_dropped: args.repair_dropped,
            ..LabellingSpec::default()
        };
        anyhow::ensure!((1..=3).contains(&args.group), "--group {} must be 1, 2 or 3", args.group);
        samples.check().map_err(|e| anyhow::anyhow!("--samples / --choose / --agree / --temperature: {e}"))?;
        let generation = GenerationSpec {
            max_memories: args.generation.max_memories,
            max_tokens: args.generation.max_tokens,
            ..GenerationSpec::default()
        };
        let cache = Cache::new(args.cache_dir.clone().unwrap_or_else(Cache::default_dir));
        return Ok(Model::Teacher { teacher: Teacher::new(chat, None), labelling, generation, cache });
    }
    if let Some(endpoint) = &args.endpoint {
        let client = OpenAiClient::new(OpenAiConfig::new(endpoint.clone(), args.endpoint_model.clone()));
        return Ok(Model::Extractor(Box::new(OpenAiExtractor::new(client, config)?), 1));
    }
    let path = gguf.context("--extractor model needs --model or --endpoint")?;
    Ok(Model::Extractor(Box::new(args.generation.local_extractor(path)?), args.generation.batch.max(1)))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn config(flags: &[&str], trained: Option<TrainedWindow>) -> (usize, usize) {
        let cli = Cli::parse_from(["extract", "--input", "d.json"].iter().chain(flags));
        let config = window_config(&cli.args, trained);
        (config.size, config.overlap)
    }

    #[test]
    fn the_flags_beat_the_trained_window_which_beats_the_format_default() {
        let trained = Some(TrainedWindow { size: 2, overlap: 1 });
        assert_eq!(config(&["--format", "locomo"], None), (25, 5));
        assert_eq!(config(&["--format", "longmemeval"], None), (15, 3));
        assert_eq!(config(&["--format", "locomo"], trained), (2, 1));
        assert_eq!(config(&["--format", "longmemeval"], trained), (2, 1));
        assert_eq!(config(&["--window", "4"], trained), (4, 1));
        assert_eq!(config(&["--window", "6", "--overlap", "2"], trained), (6, 2));
    }
}
