//! `memkit ingest`: dialogues (and records) into a SQLite memory database.

use std::path::PathBuf;

use anyhow::Context;
use memkit_engine::dense::{Embedder, HashingEmbedder};
use memkit_engine::llm::LlmConsolidator;
use memkit_engine::rule_extractor::{RuleExtractor, RuleExtractorConfig, raw_turn_records};
use memkit_engine::store::{IngestBatch, MemoryStore, SqliteStore};
use memkit_engine::update::{Consolidator, RuleConsolidator, UpdateConfig, update};
use memkit_eval::recipe::ModelSpec;

use super::DialogueArgs;
use super::extract::ExtractorKind;

/// Store dialogues and their memory records in a SQLite database.
///
/// Source turns and assistant replies are always stored (the engine fetches them through record
/// pointers). Records come from the rule extractor, one per sentence, so every turn has keys;
/// --records (JSONL of memory records, e.g. from `memkit extract`) are stored beside them, and
/// with --records-only instead of them (reports/locomo-keys/ measures both). With --update, new records are consolidated against stored ones
/// (dimension-aware update: same type → keyword Jaccard ≥ 0.3 → embed candidates → cosine ≥ 0.7
/// → merge / supersede / keep both). The rules decide each pair; with --update-model, DimMem's
/// language model decides it from prompts/update.j2 (the rules step in for a reply that is cut
/// off or does not parse).
///
/// Example: memkit ingest --db mem.sqlite --input ../shared/data/locomo/locomo10.json --format locomo --dialogue conv-26
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The memory database (created when missing).
    #[arg(long)]
    db: PathBuf,
    #[command(flatten)]
    dialogues: DialogueArgs,
    /// Records to store beside the --extractor's (JSONL, one memory record per line).
    #[arg(long)]
    records: Option<PathBuf>,
    /// Store only --records, without the --extractor's records beside them.
    #[arg(long, requires = "records")]
    records_only: bool,
    /// The baseline extractor that gives every turn keys: `rule` (one record per sentence) or
    /// `raw-turns`.
    #[arg(long, value_enum, default_value = "rule")]
    extractor: ExtractorKind,
    /// Consolidate new records against stored ones instead of appending them.
    #[arg(long)]
    update: bool,
    /// all-MiniLM-L6-v2 directory for --update (default: the installed one; without it, a
    /// lexical hashing embedder is used and a warning says so).
    #[arg(long)]
    embedder_dir: Option<PathBuf>,
    /// With --update: a chat model that decides merge / supersede / keep both (a packaged model
    /// name or a .gguf path, or the model name served at --update-endpoint).
    #[arg(long, requires = "update")]
    update_model: Option<String>,
    /// An OpenAI-compatible API root (with /v1) serving --update-model, e.g. `memkit serve`'s.
    #[arg(long, requires = "update_model")]
    update_endpoint: Option<String>,
}

pub fn run(args: Args, bars: &crate::progress::Bars) -> anyhow::Result<()> {
    let dialogues = args.dialogues.load()?;
    let mut store = SqliteStore::open(&args.db)?;
    let given = args.records.as_deref().map(super::read_records).transpose()?;
    let embedder: Box<dyn Embedder> = match (args.update, super::load_embedder(args.embedder_dir.as_deref())?) {
        (true, Some(e)) => Box::new(e),
        (true, None) => {
            tracing::warn!(
                "all-MiniLM-L6-v2 is not installed (`memkit models fetch all-minilm-l6-v2`): --update uses the lexical hashing embedder"
            );
            Box::new(HashingEmbedder::default())
        }
        (false, _) => Box::new(HashingEmbedder::default()),
    };
    if let (Some(all), Some(path)) = (&given, &args.records) {
        let outside: Vec<&str> =
            all.iter().filter(|r| !dialogues.iter().any(|d| r.pointer.belongs_to(&d.id))).map(|r| r.pointer.window_id.as_str()).collect();
        if !outside.is_empty() {
            tracing::warn!(
                records = outside.len(),
                first_window = outside[0],
                "{}: {} of {} records belong to no dialogue loaded here (another dataset, or dialogues filtered out): not ingested",
                path.display(),
                outside.len(),
                all.len()
            );
        }
    }
    let llm = match &args.update_model {
        Some(model) => {
            let spec = match &args.update_endpoint {
                Some(url) => ModelSpec::openai(url.clone(), model.clone()),
                None => ModelSpec::local(model.clone()),
            };
            let max_tokens = LlmConsolidator::DEFAULT_MAX_TOKENS;
            Some(LlmConsolidator::new(super::chat_model(&spec, 1, 4096, max_tokens)?.into())?.with_max_tokens(max_tokens))
        }
        None => None,
    };
    let rules = RuleConsolidator::default();
    let consolidator: &dyn Consolidator = match &llm {
        Some(c) => c,
        None => &rules,
    };
    let bar = bars.bar(dialogues.len() as u64, "ingest");
    let rule = RuleExtractor::new(RuleExtractorConfig { per_sentence: true, ..RuleExtractorConfig::default() });
    let (mut stored, mut stats_total) = (0usize, Vec::new());
    for d in &dialogues {
        let mut batch = IngestBatch::from_dialogue(d);
        let mut records = match (args.records_only, args.extractor) {
            (true, _) => Vec::new(),
            (false, ExtractorKind::Rule) => rule.extract(d),
            (false, ExtractorKind::RawTurns) => raw_turn_records(d),
            (false, ExtractorKind::Model | ExtractorKind::Observations) => anyhow::bail!(
                "ingest runs the rule baselines itself; for a model or LoCoMo's observations, run `memkit extract ... -o records.jsonl` and pass --records records.jsonl"
            ),
        };
        if let Some(all) = &given {
            records.extend(all.iter().filter(|r| r.pointer.belongs_to(&d.id)).cloned());
        }
        stored += records.len();
        if args.update {
            store.ingest(&batch).with_context(|| format!("ingesting dialogue {}", d.id))?;
            let stats = update(&mut store, records, &*embedder, consolidator, &UpdateConfig::default())
                .with_context(|| format!("updating memory with dialogue {}", d.id))?;
            stats_total.push(stats);
        } else {
            batch.records = records;
            store.ingest(&batch).with_context(|| format!("ingesting dialogue {}", d.id))?;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if args.update {
        let merges: usize = stats_total.iter().map(|s| s.merges).sum();
        let supersedes: usize = stats_total.iter().map(|s| s.supersedes).sum();
        let computed: usize = stats_total.iter().map(|s| s.embeddings_computed).sum();
        let baseline: usize = stats_total.iter().map(|s| s.embeddings_embed_all_baseline).sum();
        tracing::info!(merges, supersedes, embeddings = computed, embed_all_baseline = baseline, "update done");
        if let Some(c) = &llm {
            let s = c.stats();
            tracing::info!(
                model = c.model_id(),
                asked = s.asked,
                fallbacks = s.fallbacks,
                merged_text_rejected = s.merged_text_rejected,
                "update model"
            );
        }
    }
    let total = store.list_records()?.len();
    tracing::info!(db = %args.db.display(), dialogues = dialogues.len(), new_records = stored, records_in_store = total, "ingested");
    Ok(())
}
