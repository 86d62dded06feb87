//! Distillation (`memkit distill`): teacher-labelled dimensional memory records from dialogue
//! windows, as SFT data for a compact extractor.
//!
//! A [`recipe::DistillRecipe`] names the corpus (LongMemEval-S filler sessions and MemoryBank;
//! never LoCoMo), the teacher (a local GGUF through memkit-infer, or any OpenAI-compatible
//! server), how it is asked ([`label`]: a whole window, or a few messages at a time, the default
//! for a local teacher) and the output folder. [`corpus::select`] draws the windows in a seeded
//! order; [`run::run`] labels those the ledger does not hold yet: it answers what it can from a
//! content-addressed [`cache`], asks the [`teacher`] for the rest, re-asks replies with
//! first-person records once, assembles the group replies into one window target, cleans its
//! records (memkit-clean: grounded in the window, validated, one record per fact) and appends
//! each finished window to `ledger.jsonl` (failures to `failures.jsonl`). [`dataset`],
//! [`frames`] and [`stats`] then write `train.jsonl`, `valid.jsonl` (complete windows only), their
//! parquet copies, `records.parquet`, `stats.md` and `stats.json` from the ledger.

use std::path::{Path, PathBuf};

pub mod batch;
pub mod cache;
pub mod corpus;
pub mod dataset;
pub mod frames;
pub mod label;
pub mod ledger;
pub mod recipe;
pub mod run;
pub mod samples;
pub mod stats;
pub mod teacher;

pub use recipe::DistillRecipe;
pub use run::{Progress, RunOptions, RunSummary, pending, run};
pub use teacher::Teacher;

/// Errors of distillation, each naming the file, line or window at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A recipe did not parse or made no sense.
    #[error("recipe {path}: {message}")]
    Recipe {
        /// The recipe file (empty for recipe text).
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A ledger line (not the last) did not parse.
    #[error("{path}:{line}: not a ledger entry: {message}")]
    Ledger {
        /// The ledger.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// The JSON error.
        message: String,
    },
    /// A batch-API result line did not parse or named no known window.
    #[error("{path}:{line}: {message}")]
    BatchResult {
        /// The results file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A corpus section names no file and its packaged dataset is not installed.
    #[error("[corpus.{section}] names no path and {name} is not installed: run `memkit models fetch {name}`")]
    DatasetMissing {
        /// The corpus section.
        section: &'static str,
        /// The packaged dataset.
        name: String,
    },
    /// The teacher model is not installed.
    #[error("teacher model {model:?} is not installed: run `memkit models fetch {model}` (or give a .gguf path)")]
    ModelMissing {
        /// The name or path.
        model: String,
    },
    /// Too many requests failed in a row.
    #[error("{failures} teacher requests in a row failed ({teacher}); finished windows are kept, see failures.jsonl")]
    TeacherDown {
        /// Failures in a row.
        failures: usize,
        /// The teacher.
        teacher: String,
    },
    /// A polars frame (a parquet copy, the stats' record table) could not be built or written.
    #[error("{what}: {source}")]
    Frame {
        /// The file or table.
        what: String,
        /// Why.
        source: polars::error::PolarsError,
    },
    /// Data loading failed.
    #[error(transparent)]
    Data(#[from] memkit_data::Error),
    /// Prompt rendering failed.
    #[error(transparent)]
    Prompt(#[from] memkit_prompt::Error),
    /// Record cleaning failed (its embedder).
    #[error(transparent)]
    Clean(#[from] memkit_clean::Error),
    /// The inference backend failed to start (boxed: its errors are large).
    #[error(transparent)]
    Infer(Box<memkit_infer::Error>),
}

impl From<memkit_infer::Error> for Error {
    fn from(e: memkit_infer::Error) -> Self {
        Error::Infer(Box::new(e))
    }
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Writes `bytes` to `path` through a temp file in the same folder and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |source| Error::Io { path: path.to_owned(), source };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}
