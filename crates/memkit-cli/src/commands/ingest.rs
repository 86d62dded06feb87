//! `memkit ingest`: dialogues (and records) into a SQLite memory database.

use std::path::PathBuf;

use anyhow::Context;
use memkit_engine::dense::{Embedder, HashingEmbedder};
use memkit_engine::rule_extractor::{RuleExtractor, raw_turn_records};
use memkit_engine::store::{IngestBatch, MemoryStore, SqliteStore};
use memkit_engine::update::{RuleConsolidator, UpdateConfig, update};

use super::DialogueArgs;
use super::extract::ExtractorKind;

/// Store dialogues and their memory records in a SQLite database.
///
/// Source turns and assistant replies are always stored (the engine fetches them through record
/// pointers). Records come from --records (JSONL of memory records, e.g. from `memkit extract`)
/// or from the rule extractor. With --update, new records are consolidated against stored ones
/// (dimension-aware update: same type → keyword Jaccard ≥ 0.3 → embed candidates → cosine ≥ 0.7
/// → merge / supersede / keep both).
///
/// Example: memkit ingest --db mem.sqlite --input ../shared/data/locomo/locomo10.json --format locomo --dialogue conv-26
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The memory database (created when missing).
    #[arg(long)]
    db: PathBuf,
    #[command(flatten)]
    dialogues: DialogueArgs,
    /// Records to store instead of running an extractor (JSONL, one memory record per line).
    #[arg(long)]
    records: Option<PathBuf>,
    /// The extractor used when --records is not given.
    #[arg(long, value_enum, default_value = "rule")]
    extractor: ExtractorKind,
    /// Consolidate new records against stored ones instead of appending them.
    #[arg(long)]
    update: bool,
    /// all-MiniLM-L6-v2 directory for --update (default: the installed one; without it, a
    /// lexical hashing embedder is used and a warning says so).
    #[arg(long)]
    embedder_dir: Option<PathBuf>,
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
    let bar = bars.bar(dialogues.len() as u64, "ingest");
    let rule = RuleExtractor::default();
    let (mut stored, mut stats_total) = (0usize, Vec::new());
    for d in &dialogues {
        let mut batch = IngestBatch::from_dialogue(d);
        let records = match (&given, args.extractor) {
            (Some(all), _) => all.iter().filter(|r| r.pointer.belongs_to(&d.id)).cloned().collect(),
            (None, ExtractorKind::Rule) => rule.extract(d),
            (None, ExtractorKind::RawTurns) => raw_turn_records(d),
            (None, ExtractorKind::Model | ExtractorKind::Observations) => anyhow::bail!(
                "ingest runs the rule baselines itself; for a model or LoCoMo's observations, run `memkit extract ... -o records.jsonl` and pass --records records.jsonl"
            ),
        };
        stored += records.len();
        if args.update {
            store.ingest(&batch).with_context(|| format!("ingesting dialogue {}", d.id))?;
            let stats = update(&mut store, records, &*embedder, &RuleConsolidator::default(), &UpdateConfig::default())
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
    }
    let total = store.list_records()?.len();
    tracing::info!(db = %args.db.display(), dialogues = dialogues.len(), new_records = stored, records_in_store = total, "ingested");
    Ok(())
}
