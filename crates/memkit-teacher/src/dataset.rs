//! The SFT dataset of a run: `train.jsonl` / `valid.jsonl` rows of `messages` (system, user,
//! assistant = the compact JSON of the validated records), split by dialogue so no dialogue is
//! in both, written from the ledger (the source of truth) after every run, with the template the
//! prompts were rendered from beside them (`extract_prompt.j2`; training copies it into the
//! checkpoint), and the window they were cut into (`extract_window.json`, which travels the same
//! way, so a trained student is asked in the windows it learnt). Only windows whose
//! replies were whole and whose target is complete become examples: the student never learns to
//! leave out what the teacher found.
//!
//! The same windows are also written one new message at a time into [`MESSAGES_DIR`]: each new
//! message with the `labelling.context` messages before it (as the decomposed teacher was asked),
//! and the teacher's records of that message as the target. A student trained there is asked
//! with windows of `context + 1` messages, `context` of them overlapping (`memkit extract
//! --window 2 --overlap 1` for one message of context): a small job, whose records are checked
//! one message at a time.
//!
//! A window left out as incomplete still gives its messages whose own records were all kept:
//! a dropped finding is tied to its message by its `source_id` (the record's, or the one a cut-off
//! record got as far as writing), and only that message is left out. Where a dropped finding
//! names no message, the whole window is. These salvaged examples follow the complete windows'
//! in each split, so the first rows of `valid.jsonl` (which training scores) do not move.
//!
//! A message the teacher wrote records for, none of which passed validation (every one
//! impersonal, unsupported, restating the context, ...), has no known target: "nothing to
//! remember" was not the teacher's answer but what was left of it. On the gold set, 17 of the 30
//! messages whose teacher records were all dropped hold a gold memory
//! (`reports/smollm2-135m-messages/failed_messages_gold.py`). Such a
//! message is no example, one message at a time or inside its window (the window's other
//! messages still are, in place).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use memkit_data::{Split, SplitRatios, Window, assign_split};
use memkit_prompt::{ChatMessage, Prompts, TRAINED_PROMPT_FILE, TRAINED_WINDOW_FILE, TrainedWindow};
use memkit_schema::{ExtractedMemory, ExtractorOutput};
use serde::{Deserialize, Serialize};

use crate::corpus::{Corpus, SourceKind};
use crate::ledger::ledger_path;
use crate::ledger::{self, Entry, Status};
use crate::recipe::DistillRecipe;
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
    /// The window the prompt renders, as cleaning reads it (the assistant replies that follow its
    /// messages are left out: cleaning does not read them and the prompt carries them), so a
    /// model's reply can be cleaned as the teacher's was (`memkit compare`, training's scoring);
    /// absent in datasets written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
}

/// The examples of each split and the ledger entries they came from.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Training examples, in draw order.
    pub train: Vec<Example>,
    /// Validation examples, in draw order.
    pub valid: Vec<Example>,
    /// The training windows one new message at a time ([`MESSAGES_DIR`]).
    pub train_messages: Vec<Example>,
    /// The validation windows one new message at a time.
    pub valid_messages: Vec<Example>,
    /// Finished ledger entries of the drawn windows, in draw order.
    pub entries: Vec<Entry>,
    /// Ledger entries of windows the recipe no longer draws (left out of the dataset).
    pub stale: usize,
    /// Finished windows left out because a record the teacher found was dropped.
    pub incomplete: usize,
    /// Examples one message at a time salvaged from those windows (train and valid): their
    /// messages whose own records were all kept.
    pub salvaged_messages: usize,
    /// Messages left out because every record the teacher wrote for them was dropped (no known
    /// target).
    pub failed_messages: usize,
    /// Complete windows that are no whole example for holding such a message.
    pub windows_with_failed_messages: usize,
    /// The template source the examples' prompts were rendered from.
    pub prompt: String,
    /// The window of the whole-window examples (the corpus's).
    pub window: TrainedWindow,
    /// The window of the examples one new message at a time (`labelling.context + 1` messages,
    /// `labelling.context` of them context).
    pub message_window: TrainedWindow,
}

/// The subfolder of a dataset with its examples one new message at a time.
pub const MESSAGES_DIR: &str = "messages";

/// Builds the dataset from the ledger in `recipe`'s output folder.
pub fn build(recipe: &DistillRecipe, corpus: &Corpus) -> Result<Dataset> {
    let out_dir = recipe.out_dir();
    let mut done = ledger::finished(ledger::read(&ledger_path(&out_dir))?);
    let prompts = Prompts::embedded()?;
    let ratios = SplitRatios { train: 1.0 - recipe.output.valid_share, valid: recipe.output.valid_share, test: 0.0 };
    let corpus_window = &recipe.corpus.window;
    let mut dataset = Dataset {
        train: Vec::new(),
        valid: Vec::new(),
        train_messages: Vec::new(),
        valid_messages: Vec::new(),
        entries: Vec::new(),
        stale: 0,
        incomplete: 0,
        salvaged_messages: 0,
        failed_messages: 0,
        windows_with_failed_messages: 0,
        prompt: prompts.source(recipe.output.prompt).to_owned(),
        window: TrainedWindow { size: corpus_window.size, overlap: corpus_window.overlap },
        message_window: TrainedWindow { size: recipe.labelling.context + 1, overlap: recipe.labelling.context },
    };
    let options = recipe.generation.extract_config().prompt_options();
    let (mut salvaged_train, mut salvaged_valid) = (Vec::new(), Vec::new());
    for w in &corpus.windows {
        let Some(mut entry) = done.remove(&w.window.id) else { continue };
        // Checks added after a window was labelled apply to it too (they are idempotent).
        let mut checked = memkit_clean::Cleaned {
            records: std::mem::take(&mut entry.records),
            dropped: std::mem::take(&mut entry.dropped),
            ..Default::default()
        };
        checked.drop_duplicates();
        (entry.records, entry.dropped) = (checked.records, checked.dropped);
        if entry.status == Status::Ok && !entry.complete {
            dataset.incomplete += 1;
        }
        // The messages the teacher wrote records for and kept none of (no known target).
        let failed: BTreeSet<u32> = entry
            .dropped
            .iter()
            .filter_map(|d| named_source(&d.raw))
            .filter(|&n| !entry.records.iter().any(|r| r.source_id == n))
            .collect();
        // The messages whose records a dropped finding may be missing from (`None`: unknown).
        let findings: Option<BTreeSet<u32>> = if entry.complete {
            Some(BTreeSet::new())
        } else {
            entry.dropped.iter().filter(|d| d.reason.loses_a_finding()).map(|d| named_source(&d.raw)).collect()
        };
        if entry.status == Status::Ok
            && let Some(findings) = findings
        {
            let left_out = w.window.suffix().iter().filter(|m| failed.contains(&m.number) && !findings.contains(&m.number)).count();
            dataset.failed_messages += left_out;
            let lost = &findings | &failed;
            let example = |window: &Window, memories: Vec<ExtractedMemory>| -> Result<Example> {
                let mut chat = prompts.render_window(recipe.output.prompt, window, &options)?.to_messages();
                chat.push(ChatMessage::assistant(serde_json::to_string(&ExtractorOutput { memories }).expect("plain data")));
                let mut cleaned_reads = window.clone();
                cleaned_reads.messages.iter_mut().for_each(|m| m.assistant_reply = None);
                Ok(Example { window_id: window.id.clone(), source: w.source, messages: chat, window: Some(cleaned_reads) })
            };
            let mut one_by_one = Vec::new();
            for m in w.window.suffix().iter().filter(|m| !lost.contains(&m.number)) {
                let around = w.window.around(m.number, recipe.labelling.context).expect("a message of the window");
                let renumbered = (around.context + 1) as u32;
                let records = entry
                    .records
                    .iter()
                    .filter(|r| r.source_id == m.number)
                    .map(|r| ExtractedMemory { source_id: renumbered, ..r.clone() })
                    .collect();
                one_by_one.push(example(&around, records)?);
            }
            let valid = assign_split(&w.window.dialogue_id, recipe.output.split_seed, &ratios) == Split::Valid;
            if entry.complete {
                let (windows, messages) = if valid {
                    (&mut dataset.valid, &mut dataset.valid_messages)
                } else {
                    (&mut dataset.train, &mut dataset.train_messages)
                };
                if left_out == 0 {
                    windows.push(example(&w.window, entry.records.clone())?);
                } else {
                    dataset.windows_with_failed_messages += 1;
                }
                messages.extend(one_by_one);
            } else {
                (if valid { &mut salvaged_valid } else { &mut salvaged_train }).extend(one_by_one);
            }
        }
        dataset.entries.push(entry);
    }
    dataset.stale = done.len();
    dataset.salvaged_messages = salvaged_train.len() + salvaged_valid.len();
    dataset.train_messages.append(&mut salvaged_train);
    dataset.valid_messages.append(&mut salvaged_valid);
    Ok(dataset)
}

/// The message a dropped record names: the `source_id` of its JSON, or the one a record cut off
/// mid-way got as far as writing (`{"source_id":3,"source_speaker":"Jo`). `None` when it names
/// none.
fn named_source(raw: &str) -> Option<u32> {
    if let Ok(record) = serde_json::from_str::<serde_json::Value>(raw) {
        return record.get("source_id")?.as_u64()?.try_into().ok();
    }
    let after = raw.split_once("\"source_id\"")?.1.trim_start().strip_prefix(':')?.trim_start();
    let digits = &after[..after.find(|c: char| !c.is_ascii_digit()).unwrap_or(after.len())];
    // A number cut off by the end of the reply may be a prefix of the real one.
    if digits.len() == after.len() { None } else { digits.parse().ok() }
}

/// Writes `train.jsonl`, `valid.jsonl`, the prompt template ([`TRAINED_PROMPT_FILE`]) and the
/// window ([`TRAINED_WINDOW_FILE`]) into `out_dir` atomically, and the same for the examples one
/// message at a time in `out_dir/`[`MESSAGES_DIR`].
pub fn write_jsonl(dataset: &Dataset, out_dir: &Path) -> Result<()> {
    for (dir, train, valid, window) in [
        (out_dir.to_path_buf(), &dataset.train, &dataset.valid, dataset.window),
        (out_dir.join(MESSAGES_DIR), &dataset.train_messages, &dataset.valid_messages, dataset.message_window),
    ] {
        write_atomic(&dir.join(TRAINED_PROMPT_FILE), dataset.prompt.as_bytes())?;
        write_atomic(&dir.join(TRAINED_WINDOW_FILE), window.to_json().as_bytes())?;
        for (name, rows) in [("train.jsonl", train), ("valid.jsonl", valid)] {
            let mut text = String::new();
            for row in rows {
                text.push_str(&serde_json::to_string(row).expect("plain data"));
                text.push('\n');
            }
            write_atomic(&dir.join(name), text.as_bytes())?;
        }
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

#[cfg(test)]
mod tests {
    use super::named_source;

    #[test]
    fn a_dropped_record_names_its_message_if_it_got_that_far() {
        assert_eq!(named_source(r#"{"source_id":4,"source_speaker":"user","content":"I ran."}"#), Some(4));
        assert_eq!(named_source(r#"{"source_id": 12, "source_speaker":"Jo"#), Some(12));
        // Cut inside the number: "1" may have been "13".
        assert_eq!(named_source(r#"{"source_id":1"#), None);
        assert_eq!(named_source(r#"{"sour"#), None);
        assert_eq!(named_source(r#"{"source_speaker":"user","content":"x"}"#), None);
        assert_eq!(named_source("not json at all"), None);
    }
}
