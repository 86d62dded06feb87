//! Metrics, reports and plots for memkit's benchmarks (SPEC §7).
//!
//! - [`tokens`]: one fixed token count for every report (o200k_base; words × 1.3 for comparison).
//! - [`retrieval`]: evidence recall at token budgets, and LongMemEval's recall_any / recall_all /
//!   nDCG@k ported from the official code.
//! - [`locomo_f1`]: the official LoCoMo QA score (normalisation, NLTK Porter stemming via
//!   [`porter`], per-category rules).
//! - [`cost`]: what an extraction cost, from the window ledger beside its records.
//! - [`qa`]: question answering on a seeded sample: an answer model reads each system's
//!   retrieved memories, scored with the official F1 and an LLM judge.
//! - [`report`] and [`plot`]: `reports/<name>/report.md`, `metrics.json` and SVG charts, written
//!   atomically and free of dates so re-runs diff cleanly.
//!
//! The metric functions take plain inputs (strings, turn ids, token counts), so runners over any
//! engine can use them. Golden fixtures computed with the official Python code live in
//! `tests/fixtures/` (see its README).
//!
//! ```
//! use memkit_eval::retrieval::{EvidenceRecall, BUDGETS};
//! use memkit_eval::TokenCounter;
//! let counter = TokenCounter::Words13;
//! let texts = [("Caroline went to a support group on 7 May 2023.", vec!["D1:3"])];
//! let units: Vec<(usize, &[&str])> =
//!     texts.iter().map(|(t, ids)| (counter.count(t), ids.as_slice())).collect();
//! let mut recall = EvidenceRecall::new(&BUDGETS);
//! recall.add(&units, &["D1:3"]);
//! assert_eq!(recall.recall_at()["250"], 1.0);
//! ```

pub mod agreement;
pub mod bootstrap;
pub mod cost;
mod error;
pub mod gold;
pub mod locomo_f1;
pub mod metrics;
pub mod plot;
pub mod pointers;
pub mod qa;
pub mod recipe;
pub mod report;
pub mod retrieval;
pub mod runner;
pub mod tokens;

pub use error::{Error, Result};
/// NLTK's Porter stemmer (memkit-text), as the official LoCoMo F1 uses it.
pub use memkit_text::porter;
pub use metrics::{CategoryMetrics, Difference, SystemMetrics};
pub use report::{MetricsFile, Report};
pub use tokens::TokenCounter;
