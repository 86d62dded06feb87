//! `memkit extract`: dialogues → memory records, one JSON object per line.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use memkit_engine::rule_extractor::{RuleExtractor, raw_turn_records};

use super::DialogueArgs;

/// Which extractor turns turns into records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExtractorKind {
    /// The rule baseline: one record per user turn, type by cues, message date, keywords.
    Rule,
    /// One record per turn, no dimensions (the raw-turns baseline).
    RawTurns,
}

/// Turn dialogues into memory records (JSONL on stdout or --output).
///
/// Only the no-model extractors exist so far; the local GGUF student and teacher and
/// OpenAI-compatible endpoints come with the inference crate.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    dialogues: DialogueArgs,
    /// The extractor.
    #[arg(long, value_enum, default_value = "rule")]
    extractor: ExtractorKind,
    /// Write records here instead of stdout (written to a temp file, then renamed).
    #[arg(long, short)]
    output: Option<PathBuf>,
}

pub fn run(args: Args, bars: &crate::progress::Bars) -> anyhow::Result<()> {
    let dialogues = args.dialogues.load()?;
    let bar = bars.bar(dialogues.len() as u64, "extract");
    let mut lines = String::new();
    let mut count = 0usize;
    let rule = RuleExtractor::default();
    for d in &dialogues {
        let records = match args.extractor {
            ExtractorKind::Rule => rule.extract(d),
            ExtractorKind::RawTurns => raw_turn_records(d),
        };
        for r in &records {
            lines.push_str(&serde_json::to_string(r)?);
            lines.push('\n');
        }
        count += records.len();
        bar.inc(1);
    }
    bar.finish_and_clear();
    match &args.output {
        Some(path) => {
            let tmp = path.with_extension("jsonl.tmp");
            std::fs::write(&tmp, &lines).with_context(|| format!("cannot write {}", tmp.display()))?;
            std::fs::rename(&tmp, path).with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))?;
        }
        None => std::io::stdout().lock().write_all(lines.as_bytes())?,
    }
    tracing::info!(dialogues = dialogues.len(), records = count, "extracted");
    Ok(())
}
