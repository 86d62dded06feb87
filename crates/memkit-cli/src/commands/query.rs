//! `memkit query`: ask a memory database a question.

use std::path::PathBuf;

use anyhow::Context;
use chrono::NaiveDateTime;
use memkit_engine::Retriever;
use memkit_engine::dense::{DenseIndex, Embedder};
use memkit_engine::fusion::{TriPath, TriPathConfig};
use memkit_engine::llm::LlmQueryParser;
use memkit_engine::query::{QueryParser, RuleQueryParser};
use memkit_engine::recall::{RecallStats, attach_assistant_replies};
use memkit_engine::stopping::{StopConfig, adaptive_stop, classify_query};
use memkit_engine::store::{MemoryStore, SqliteStore};
use memkit_eval::recipe::ModelSpec;

/// Ask a memory database a question: the rule parser (or, with --parser-model, DimMem's
/// language-model parser) turns it into retrieval fields; BM25 and dense (all-MiniLM-L6-v2, when
/// installed; BM25 alone without it) retrieve, and a weighted fusion ranks the records (memkit's
/// retrieval, `TriPathConfig::recommended`: chosen in reports/longmemeval-oracle-heldout-routes/,
/// measured in reports/locomo-keys/).
/// Assistant replies are attached when the question asks what the assistant said. With --source,
/// each record's source turns are printed under it, each turn once: records are the keys, the
/// turns hold the details. The dense route's record vectors are cached in the database, so only
/// the first query after an ingest embeds records.
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
    /// Print each record's source turns under it (each turn once; a record whose turns were all
    /// printed is left out).
    #[arg(long)]
    source: bool,
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
    // With --source, the records whose turns an earlier record already showed are left out.
    let mut sources = Vec::new();
    if args.source {
        let mut shown = std::collections::HashSet::new();
        let mut kept = Vec::new();
        for h in hits {
            let pointer = &records[h.doc].pointer;
            let turns: Vec<&String> = pointer.turn_ids.iter().filter(|t| shown.insert((pointer.dialogue_id(), t.as_str()))).collect();
            if turns.is_empty() {
                continue;
            }
            let mut texts = Vec::new();
            for t in turns {
                if let Some(turn) = store.get_turn(pointer.dialogue_id(), t)? {
                    let day = turn.timestamp.map(|ts| format!("[{}] ", ts.format("%Y-%m-%d"))).unwrap_or_default();
                    texts.push(format!("{day}{}: {}", turn.speaker, turn.text));
                }
            }
            sources.push(texts);
            kept.push(h);
            if kept.len() == args.k {
                break;
            }
        }
        hits = kept;
    }
    hits.truncate(args.k);
    sources.resize(hits.len(), Vec::new());
    let found: Vec<_> = hits.iter().map(|h| records[h.doc].clone()).collect();
    let mut stats = RecallStats::default();
    let replies = attach_assistant_replies(&store, &parsed, &found, &mut stats)?;
    #[allow(clippy::print_stdout)]
    if args.json {
        let hits: Vec<_> = hits
            .iter()
            .zip(&found)
            .zip(&replies)
            .zip(&sources)
            .map(|(((h, r), rep), src)| {
                serde_json::json!({"score": h.score, "record": r, "source": src, "assistant_replies": rep.iter().map(|x| &x.text).collect::<Vec<_>>()})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({"query": parsed, "hits": hits}))?);
    } else {
        println!("query: {}", serde_json::to_string(&parsed)?);
        if found.is_empty() {
            println!("no memory matches ({} records in {})", records.len(), args.db.display());
        }
        for (i, (((h, r), rep), src)) in hits.iter().zip(&found).zip(&replies).zip(&sources).enumerate() {
            let time = if r.dims.time.is_empty() { String::new() } else { format!(" time={}", r.dims.time) };
            println!("{:>2}. [{:.3}] ({}{}) {}  ← {}", i + 1, h.score, r.memory_type, time, r.content, r.pointer.turn_ids.join(","));
            for text in src {
                println!("      {text}");
            }
            for x in rep {
                println!("      assistant replied: {}", x.text);
            }
        }
    }
    Ok(())
}
