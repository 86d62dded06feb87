//! The SFT dataset of a run: `train.jsonl` / `valid.jsonl` rows of `messages` (system, user,
//! assistant = the compact JSON of the validated records), split by dialogue so no dialogue is
//! in both, written from the ledger (the source of truth) after every run, with the template the
//! prompts were rendered from beside them (`extract_prompt.j2`; training copies it into the
//! checkpoint). Only windows whose
//! replies were whole and whose target is complete become examples: the student never learns to
//! leave out what the teacher found.

use std::collections::BTreeMap;
use std::path::Path;

use memkit_data::{Split, SplitRatios, assign_split};
use memkit_prompt::{ChatMessage, Prompts, TRAINED_PROMPT_FILE};
use memkit_schema::ExtractorOutput;
use serde::{Deserialize, Serialize};

use crate::corpus::{Corpus, SourceKind};
use crate::ledger::{self, Entry, Status};
use crate::recipe::DistillRecipe;
use crate::run::ledger_path;
use crate::validate::Validated;
use crate::{Result, write_atomic};

/// One training example.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Example {
    /// The window.
    pub window_id: String,
    /// Where it comes from.
    pub source: SourceKind,
    /// System, user and assistant messages: exactly what the recipe's prompt (`output.prompt`)
    /// renders, and the teacher's validated records as compact JSON.
    pub messages: Vec<ChatMessage>,
}

/// The examples of each split and the ledger entries they came from.
#[derive(Debug, Clone, Default)]
pub struct Dataset {
    /// Training examples, in draw order.
    pub train: Vec<Example>,
    /// Validation examples, in draw order.
    pub valid: Vec<Example>,
    /// Finished ledger entries of the drawn windows, in draw order.
    pub entries: Vec<Entry>,
    /// Ledger entries of windows the recipe no longer draws (left out of the dataset).
    pub stale: usize,
    /// Finished windows left out because a record the teacher found was dropped.
    pub incomplete: usize,
    /// The template source the examples' prompts were rendered from.
    pub prompt: String,
}

/// Builds the dataset from the ledger in `recipe`'s output folder.
pub fn build(recipe: &DistillRecipe, corpus: &Corpus) -> Result<Dataset> {
    let out_dir = recipe.out_dir();
    let mut done = ledger::finished(ledger::read(&ledger_path(&out_dir))?);
    let prompts = Prompts::embedded()?;
    let ratios = SplitRatios { train: 1.0 - recipe.output.valid_share, valid: recipe.output.valid_share, test: 0.0 };
    let mut dataset = Dataset { prompt: prompts.source(recipe.output.prompt).to_owned(), ..Dataset::default() };
    let options = recipe.generation.extract_config().prompt_options();
    for w in &corpus.windows {
        let Some(mut entry) = done.remove(&w.window.id) else { continue };
        // Checks added after a window was labelled apply to it too (they are idempotent).
        let mut checked =
            Validated { records: std::mem::take(&mut entry.records), dropped: std::mem::take(&mut entry.dropped), time_fixes: 0 };
        checked.drop_duplicates();
        (entry.records, entry.dropped) = (checked.records, checked.dropped);
        if entry.status == Status::Ok && !entry.complete {
            dataset.incomplete += 1;
        }
        if entry.status == Status::Ok && entry.complete {
            let mut chat = prompts.render_window(recipe.output.prompt, &w.window, &options)?.to_messages();
            let reply = ExtractorOutput { memories: entry.records.clone() };
            chat.push(ChatMessage::assistant(serde_json::to_string(&reply).expect("plain data")));
            let example = Example { window_id: w.window.id.clone(), source: w.source, messages: chat };
            match assign_split(&w.window.dialogue_id, recipe.output.split_seed, &ratios) {
                Split::Valid => dataset.valid.push(example),
                _ => dataset.train.push(example),
            }
        }
        dataset.entries.push(entry);
    }
    dataset.stale = done.len();
    Ok(dataset)
}

/// Writes `train.jsonl`, `valid.jsonl` and the prompt template ([`TRAINED_PROMPT_FILE`]) into
/// `out_dir` atomically.
pub fn write_jsonl(dataset: &Dataset, out_dir: &Path) -> Result<()> {
    write_atomic(&out_dir.join(TRAINED_PROMPT_FILE), dataset.prompt.as_bytes())?;
    for (name, rows) in [("train.jsonl", &dataset.train), ("valid.jsonl", &dataset.valid)] {
        let mut text = String::new();
        for row in rows {
            text.push_str(&serde_json::to_string(row).expect("plain data"));
            text.push('\n');
        }
        write_atomic(&out_dir.join(name), text.as_bytes())?;
    }
    Ok(())
}

/// Per-source counts of finished windows.
pub fn windows_per_source(entries: &[Entry]) -> BTreeMap<SourceKind, usize> {
    let mut counts = BTreeMap::new();
    for e in entries {
        *counts.entry(e.source).or_default() += 1;
    }
    counts
}
