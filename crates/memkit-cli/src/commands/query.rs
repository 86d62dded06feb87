//! `memkit query`: ask a memory database a question.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use anyhow::Context;
use chrono::NaiveDateTime;
use memkit_engine::Retriever;
use memkit_engine::dense::{DenseIndex, Embedder};
use memkit_engine::fusion::{TriPath, TriPathConfig};
use memkit_engine::llm::LlmQueryParser;
use memkit_engine::query::{QueryParser, RuleQueryParser};
use memkit_engine::reading::{Sentences, dated};
use memkit_engine::recall::{RecallStats, attach_assistant_replies};
use memkit_engine::rule_extractor::{RuleExtractorConfig, raw_turn_records};
use memkit_engine::stopping::{StopConfig, adaptive_stop, classify_query};
use memkit_engine::store::{MemoryStore, SqliteStore};
use memkit_eval::recipe::ModelSpec;
use memkit_schema::{Dialogue, MemoryRecord};

/// Ask a memory database a question: the rule parser (or, with --parser-model, DimMem's
/// language-model parser) turns it into retrieval fields; BM25 and dense (all-MiniLM-L6-v2, when
/// installed; BM25 alone without it) retrieve, and a weighted fusion ranks the records (memkit's
/// retrieval, `TriPathConfig::recommended`: chosen in reports/longmemeval-oracle-heldout-routes/,
/// measured in reports/locomo-keys/).
/// Assistant replies are attached when the question asks what the assistant said. Records are the
/// keys; the dialogue holds the details: under each hit is the rule sentence of its source turns
/// that it shares most words with (`--read sentence`, the default; what `read = "sentence"` in an
/// eval recipe reads), each sentence once: with an extractor's records beside the rule sentences,
/// the best reading measured (chosen on reports/locomo-keys-dev/; reports/locomo-e2e-full/ and
/// reports/longmemeval-s-e2e/ measure it against the others). `--read source` prints the source
/// turns instead, `--read record` nothing more. The dense route's record vectors are cached in the
/// database, so only the first query after an ingest embeds records.
///
/// Example: memkit query --db mem.sqlite "When did Caroline go to the LGBTQ support group?"
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The memory database (from `memkit ingest`).
    #[arg(long)]
    db: PathBuf,
    /// The question.
    question: String,
    /// Date the question is asked, for relative expressions ("last week"): YYYY-MM-DDTHH:MM:SS.
    #[arg(long)]
    date: Option<NaiveDateTime>,
    /// Most records to print.
    #[arg(long, short, default_value_t = 10)]
    k: usize,
    /// Cut the list with HingeMem's adaptive stop (its lists reach less evidence on held-out
    /// questions: reports/longmemeval-oracle-heldout-routes/).
    #[arg(long)]
    adaptive_stop: bool,
    /// What to print under each hit: the rule sentence of its source turns it shares most words
    /// with (`sentence`; a rule sentence reads itself), its source turns (`source`), or nothing
    /// more (`record`). With `sentence` and `source` each sentence or turn is printed once: a hit
    /// that would print only what an earlier hit printed is left out, and --k counts the hits
    /// printed.
    #[arg(long, value_enum, default_value_t = Read::Sentence)]
    read: Read,
    /// Print JSON (parsed query and hits) instead of text.
    #[arg(long)]
    json: bool,
    /// all-MiniLM-L6-v2 directory for the dense route (default: the installed one; without one
    /// the query runs BM25 and dimension match, and says so).
    #[arg(long)]
    embedder_dir: Option<PathBuf>,
    /// Leave the dense route out even when the embedder is installed.
    #[arg(long)]
    no_dense: bool,
    /// Parse the question with this chat model through prompts/query.j2 (DimMem's query parser)
    /// instead of the rules: a packaged model name (`memkit models list`) or a .gguf path, or
    /// with --parser-endpoint the model name the server knows. An unusable reply falls back to
    /// the rules, with a warning.
    #[arg(long)]
    parser_model: Option<String>,
    /// An OpenAI-compatible API root (with /v1) serving --parser-model, e.g. `memkit serve`'s.
    #[arg(long, requires = "parser_model")]
    parser_endpoint: Option<String>,
}

/// What a hit is read as (`read` in an eval recipe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Read {
    Record,
    Source,
    Sentence,
}

/// A stored dialogue's readings: its turns as raw-turn records by turn id, and its rule sentences.
struct Readings {
    turns: HashMap<String, MemoryRecord>,
    sentences: Sentences,
}

impl Readings {
    fn of(dialogue: &Dialogue) -> Self {
        let turns = raw_turn_records(dialogue).into_iter().map(|r| (r.pointer.turn_ids[0].clone(), r)).collect();
        Readings { turns, sentences: Sentences::of(dialogue, RuleExtractorConfig::default()) }
    }
}

/// The question's retrieval fields: from the rules, or from the parser model.
fn parse(args: &Args) -> anyhow::Result<memkit_schema::ParsedQuery> {
    let Some(model) = &args.parser_model else { return Ok(RuleQueryParser.parse(&args.question, args.date)?) };
    let spec = match &args.parser_endpoint {
        Some(url) => ModelSpec::openai(url.clone(), model.clone()),
        None => ModelSpec::local(model.clone()),
    };
    let max_tokens = LlmQueryParser::DEFAULT_MAX_TOKENS;
    let chat = super::chat_model(&spec, 1, 4096, max_tokens)?;
    let parser = LlmQueryParser::new(chat.into())?.with_max_tokens(max_tokens);
    let parsed = parser.parse(&args.question, args.date)?;
    if parser.stats().fallbacks > 0 {
        tracing::warn!(
            model = parser.model_id(),
            "the parser model's reply was cut off or did not parse: the rule parser's fields are used"
        );
    }
    Ok(parsed)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if !args.db.exists() {
        anyhow::bail!("memory database {} does not exist (create it with `memkit ingest`)", args.db.display());
    }
    let mut store = SqliteStore::open(&args.db)?;
    let records = store.list_records()?;
    let parsed = parse(&args)?;
    let embedder = if args.no_dense { None } else { super::load_embedder(args.embedder_dir.as_deref())? };
    let tri = match embedder {
        Some(embedder) => {
            let boxed: Box<dyn Embedder> = Box::new(embedder);
            let dense = DenseIndex::from_store(boxed, &mut store, &records, 64).context("embedding the records for the dense route")?;
            TriPath::new(&records, TriPathConfig::recommended(true))?.with_dense(dense)?
        }
        None => {
            if !args.no_dense {
                tracing::info!("dense route off: all-MiniLM-L6-v2 is not installed (`memkit models fetch all-minilm-l6-v2`)");
            }
            TriPath::new(&records, TriPathConfig::recommended(false))?
        }
    };
    let mut hits = tri.search(&parsed, tri.fusion().cap()).context("retrieval failed")?;
    if args.adaptive_stop {
        hits = adaptive_stop(&hits, classify_query(&args.question), &StopConfig::default());
    }
    // With --read source or sentence, the hits that would show only what an earlier hit showed
    // are left out.
    let mut reads = Vec::new();
    if args.read != Read::Record {
        let mut shown = HashSet::new();
        let mut readings: HashMap<String, Readings> = HashMap::new();
        let mut kept = Vec::new();
        for h in hits {
            let record = &records[h.doc];
            let dialogue = record.pointer.dialogue_id();
            if !readings.contains_key(dialogue) {
                readings.insert(dialogue.to_string(), Readings::of(&store.dialogue(dialogue)?));
            }
            let reading = &readings[dialogue];
            // Read as the eval reads (`reading::dated`): `[day] Speaker: text` for a turn.
            let texts: Vec<String> = match args.read {
                Read::Source => record.pointer.turn_ids.iter().filter_map(|t| reading.turns.get(t)).map(dated).collect(),
                _ => vec![dated(reading.sentences.sentence_for(record).unwrap_or(record))],
            };
            let texts: Vec<String> = texts.into_iter().filter(|text| shown.insert((dialogue, text.clone()))).collect();
            if texts.is_empty() {
                continue;
            }
            reads.push(texts);
            kept.push(h);
            if kept.len() == args.k {
                break;
            }
        }
        hits = kept;
    }
    hits.truncate(args.k);
    reads.resize(hits.len(), Vec::new());
    let found: Vec<_> = hits.iter().map(|h| records[h.doc].clone()).collect();
    let mut stats = RecallStats::default();
    let replies = attach_assistant_replies(&store, &parsed, &found, &mut stats)?;
    #[allow(clippy::print_stdout)]
    if args.json {
        let hits: Vec<_> = hits
            .iter()
            .zip(&found)
            .zip(&replies)
            .zip(&reads)
            .map(|(((h, r), rep), read)| {
                serde_json::json!({"score": h.score, "record": r, "read": read, "assistant_replies": rep.iter().map(|x| &x.text).collect::<Vec<_>>()})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({"query": parsed, "hits": hits}))?);
    } else {
        println!("query: {}", serde_json::to_string(&parsed)?);
        if found.is_empty() {
            println!("no memory matches ({} records in {})", records.len(), args.db.display());
        }
        for (i, (((h, r), rep), read)) in hits.iter().zip(&found).zip(&replies).zip(&reads).enumerate() {
            let time = if r.dims.time.is_empty() { String::new() } else { format!(" time={}", r.dims.time) };
            println!("{:>2}. [{:.3}] ({}{}) {}  ← {}", i + 1, h.score, r.memory_type, time, r.content, r.pointer.turn_ids.join(","));
            for text in read {
                println!("      {text}");
            }
            for x in rep {
                println!("      assistant replied: {}", x.text);
            }
        }
    }
    Ok(())
}
