//! `memkit compare`: a student's records against its teacher's on held-out distilled windows.

use std::path::{Path, PathBuf};

use anyhow::Context;
use memkit_eval::agreement::{Agreement, WindowPair, agreement};
use memkit_infer::convert::{self, ConvertOptions, OutType};
use memkit_prompt::{ChatMessage, ChatRole};
use memkit_schema::parse_extractor_output;
use serde::Deserialize;

use crate::progress::Bars;

/// Compare a model's records with the teacher's on held-out windows of a distilled dataset.
///
/// Reads rows of a distilled `valid.jsonl` (system, user, assistant = the teacher's records),
/// asks the model for the same system and user messages with the same schema constraint, and
/// reports JSON validity, record precision / recall / F1 against the teacher (one-to-one matching
/// on content token F1 ≥ 0.5 and the same source message) and per-field agreement on matched
/// records. An HF checkpoint folder is converted to a GGUF (f16) first.
///
/// Example:
///   memkit compare --model checkpoints/student --data data/distilled/lme-filler/valid.jsonl --limit 20
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// A GGUF file, a packaged model name, or an HF checkpoint folder (e.g. a `memkit train` run).
    #[arg(long)]
    model: String,
    /// A distilled `valid.jsonl` (or `train.jsonl`).
    #[arg(long)]
    data: PathBuf,
    /// Compare on at most this many windows (the first ones).
    #[arg(long)]
    limit: Option<usize>,
    #[command(flatten)]
    generation: super::GenerationArgs,
    /// Also write the figures as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct Row {
    window_id: String,
    messages: Vec<ChatMessage>,
}

pub fn run(args: Args, bars: &Bars) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.data).with_context(|| format!("cannot read {}", args.data.display()))?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let row: Row = serde_json::from_str(line).with_context(|| format!("{}:{}: not a distilled row", args.data.display(), i + 1))?;
        anyhow::ensure!(
            row.messages.len() == 3 && row.messages[2].role == ChatRole::Assistant,
            "{}:{}: window {} needs [system, user, assistant] messages",
            args.data.display(),
            i + 1,
            row.window_id
        );
        rows.push(row);
    }
    rows.truncate(args.limit.unwrap_or(usize::MAX));
    anyhow::ensure!(!rows.is_empty(), "{} holds no rows", args.data.display());

    let gguf = model_gguf(&args.model)?;
    let extractor = args.generation.local_extractor(&gguf)?;

    let bar = bars.bar(rows.len() as u64, "compare");
    let mut outputs = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(args.generation.batch.max(1)) {
        let chats: Vec<Vec<ChatMessage>> = chunk.iter().map(|r| r.messages[..2].to_vec()).collect();
        outputs.extend(extractor.complete(&chats)?.into_iter().map(|g| g.text));
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();

    let teacher: Vec<_> = rows.iter().map(|r| parse_extractor_output(&r.messages[2].content).records).collect();
    let student: Vec<_> = outputs
        .iter()
        .map(|raw| {
            let parsed = parse_extractor_output(raw);
            let whole_failure = parsed.errors.iter().any(|e| e.index.is_none());
            (!whole_failure).then_some(parsed.records)
        })
        .collect();
    let pairs: Vec<WindowPair<'_>> =
        teacher.iter().zip(&student).map(|(t, s)| WindowPair { reference: t, candidate: s.as_deref() }).collect();
    let result = agreement(&pairs);
    print(&result, &args.model, &args.data);
    if let Some(out) = &args.out {
        let json = serde_json::json!({"model": args.model, "data": args.data, "agreement": result});
        std::fs::write(out, serde_json::to_string_pretty(&json)?).with_context(|| format!("cannot write {}", out.display()))?;
    }
    Ok(())
}

/// The GGUF to load: the file, a packaged model, or an HF folder converted to f16 beside it.
fn model_gguf(model: &str) -> anyhow::Result<PathBuf> {
    let path = Path::new(model);
    if path.is_dir() {
        let out = path.join("model-f16.gguf");
        if !out.is_file() {
            convert::hf_to_gguf(path, &out, &ConvertOptions { dtype: OutType::F16, ..ConvertOptions::default() })
                .with_context(|| format!("converting {} to GGUF", path.display()))?;
        }
        return Ok(out);
    }
    Ok(memkit_teacher::teacher::resolve_model(model)?)
}

#[allow(clippy::print_stdout)]
fn print(a: &Agreement, model: &str, data: &Path) {
    println!("{model} vs the teacher on {} windows of {}", a.windows, data.display());
    println!("JSON validity      {:.1}%", 100.0 * a.json_validity);
    println!("records            teacher {} / model {} / matched {}", a.reference_records, a.candidate_records, a.matched);
    println!("precision / recall / F1   {:.3} / {:.3} / {:.3}", a.precision, a.recall, a.f1);
    println!("content similarity {:.3} (token F1 of matched records)", a.content_similarity);
    for (field, v) in &a.fields {
        println!("  {field:<9} {:.3}", v);
    }
}
