//! Append-only JSONL ledgers of a run: `ledger.jsonl` holds every finished window (its
//! validated records, drops and usage), `failures.jsonl` every window that failed (with the
//! reason and the raw reply). A line is written and flushed as soon as its window is done, so
//! `kill -9` loses at most the windows in flight; a torn last line is cut off on reopening.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use memkit_clean::{Dropped, Grounded};
use memkit_infer::reply::Usage;
use memkit_schema::{ErrorKind, ExtractedMemory};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::corpus::SourceKind;
use crate::label::Repair;
use crate::recipe::Mode;
use crate::samples::Samples;
use crate::{Error, Result};

/// The ledger of finished windows in an output folder.
pub fn ledger_path(out_dir: &Path) -> PathBuf {
    out_dir.join("ledger.jsonl")
}

/// The failures ledger of an output folder.
pub fn failures_path(out_dir: &Path) -> PathBuf {
    out_dir.join("failures.jsonl")
}

/// How a finished window ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The reply parsed; `records` passed validation (possibly none).
    Ok,
    /// A reply was not whole: not JSON, broken JSON, or cut off (see failures.jsonl).
    Unparsable,
}

/// One finished window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// [`memkit_data::Window::id`].
    pub window_id: String,
    /// Where the window comes from.
    pub source: SourceKind,
    /// The teacher's model id.
    pub model: String,
    /// Cache key of the reply.
    pub key: String,
    /// How it ended.
    pub status: Status,
    /// For [`Status::Unparsable`]: what was wrong with the reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<ErrorKind>,
    /// Records that passed validation.
    pub records: Vec<ExtractedMemory>,
    /// Records that did not, with the reason.
    #[serde(default)]
    pub dropped: Vec<Dropped>,
    /// Tokens and time of the teacher's request (a local batch reports the batch's time for
    /// each of its windows).
    pub usage: Usage,
    /// Wall-clock milliseconds of this window's share of its batch (0: not recorded, or a reply
    /// came from the cache, so the time is not the window's cost).
    #[serde(default)]
    pub wall_ms: u64,
    /// Whether the reply came from the cache.
    #[serde(default)]
    pub cached: bool,
    /// How the teacher was asked (absent in entries written before decomposed labelling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// Requests made for the window, repairs included.
    #[serde(default)]
    pub requests: usize,
    /// New messages the prefilter skipped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<u32>,
    /// Re-asks and whether they fixed the reply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repairs: Vec<Repair>,
    /// Grounding of every parsed record: the model's `source_id`, the final one, the decision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grounding: Vec<Grounded>,
    /// Times rewritten to their one exact normal form.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub time_fixes: usize,
    /// Whether the records are the teacher's whole finding (no record lost to a fault of its
    /// form); only complete windows become training examples. Entries written before this field
    /// existed count as complete.
    #[serde(default = "yes")]
    pub complete: bool,
    /// The cleaning policy the records passed ([`memkit_clean::Cleaner::id`]: grounding's
    /// thresholds and embedder); empty in entries written before it was recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cleaner: String,
    /// Several replies per request and how they became one ([`crate::samples`]); absent for one
    /// greedy reply per request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<Samples>,
    /// Whether replies cleaning kept none of were re-asked (the recipe's `repair_dropped`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repair_dropped: bool,
}

fn yes() -> bool {
    true
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One failed window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The window.
    pub window_id: String,
    /// The teacher's model id.
    pub model: String,
    /// What kind of failure: a whole-reply error kind (`not_json`, `broken_json`, `truncated`),
    /// or none for a failed request (the backend's error is in `reason`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ErrorKind>,
    /// What went wrong.
    pub reason: String,
    /// The raw reply, when there was one.
    #[serde(default)]
    pub raw: String,
}

/// An append-only JSONL file.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    file: File,
}

impl Ledger {
    /// Opens `path` for appending, creating it and its folder, and cuts a torn last line.
    pub fn open(path: &Path) -> Result<Self> {
        let io = |source| Error::Io { path: path.to_owned(), source };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        if let Ok(bytes) = std::fs::read(path)
            && !bytes.is_empty()
            && !bytes.ends_with(b"\n")
        {
            let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            tracing::warn!(path = %path.display(), bytes = bytes.len() - keep, "cutting a torn last line (a run was killed mid-write)");
            let file = OpenOptions::new().write(true).open(path).map_err(io)?;
            file.set_len(keep as u64).map_err(io)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path).map_err(io)?;
        Ok(Self { path: path.to_owned(), file })
    }

    /// Appends one line and flushes it to the OS.
    pub fn append(&mut self, value: &impl Serialize) -> Result<()> {
        let mut line = serde_json::to_vec(value).expect("plain data serialises");
        line.push(b'\n');
        self.file.write_all(&line).and_then(|()| self.file.flush()).map_err(|source| Error::Io { path: self.path.clone(), source })
    }
}

/// Reads a ledger; a missing file is empty, a torn last line is skipped, any other bad line is
/// an error naming the file and line.
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(Error::Io { path: path.to_owned(), source }),
    };
    let lines: Vec<String> =
        BufReader::new(file).lines().collect::<std::io::Result<_>>().map_err(|source| Error::Io { path: path.to_owned(), source })?;
    let mut out = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(v) => out.push(v),
            Err(_) if i + 1 == lines.len() => tracing::warn!(path = %path.display(), line = i + 1, "skipping a torn last line"),
            Err(e) => return Err(Error::Ledger { path: path.to_owned(), line: i + 1, message: e.to_string() }),
        }
    }
    Ok(out)
}

/// The last entry per window id.
pub fn finished(entries: Vec<Entry>) -> BTreeMap<String, Entry> {
    entries.into_iter().map(|e| (e.window_id.clone(), e)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_last_line_is_cut_and_appending_continues() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/l.jsonl");
        let mut ledger = Ledger::open(&path).unwrap();
        ledger.append(&serde_json::json!({"a": 1})).unwrap();
        drop(ledger);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"a\": 2, \"b\"").unwrap();
        drop(f);
        assert_eq!(read::<serde_json::Value>(&path).unwrap().len(), 1);
        let mut ledger = Ledger::open(&path).unwrap();
        ledger.append(&serde_json::json!({"a": 3})).unwrap();
        let values: Vec<serde_json::Value> = read(&path).unwrap();
        assert_eq!(values, [serde_json::json!({"a": 1}), serde_json::json!({"a": 3})]);
    }

    #[test]
    fn a_bad_middle_line_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.jsonl");
        std::fs::write(&path, "{\"a\":1}\nnope\n{\"a\":2}\n").unwrap();
        let err = read::<serde_json::Value>(&path).unwrap_err().to_string();
        assert!(err.contains("l.jsonl:2:"), "{err}");
    }
}
