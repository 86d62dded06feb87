//! Dataset loaders, timestamps, overlap-aware windowing and seeded splits.
//!
//! Every loader produces memkit-schema [`Dialogue`]s (sessions of timestamped turns) and, for the
//! benchmarks, [`Question`]s with gold evidence:
//!
//! - [`load_locomo`]: LoCoMo-10 (`locomo10.json`) → [`LocomoSample`] (dialogue, questions,
//!   observations, evidence-id warnings).
//! - [`load_longmemeval`]: LongMemEval oracle or S → [`LongMemEvalItem`] (question + haystack).
//! - [`load_memorybank`]: MemoryBank dialogues (training corpus only).
//! - [`load_chitchat`]: the BYU chit-chat dataset (PyPI `chitchat-dataset`): two people per
//!   dialogue, a session per conversation (training corpus only).
//! - [`load_jsonl`] / [`read_jsonl`]: a plain JSONL format for users' own dialogues, one
//!   dialogue per line (see the [`jsonl`] module for the keys and defaults).
//!
//! Turn timestamps are the session start plus [`TURN_STEP_SECONDS`] per turn index, so that
//! turns keep their order when only the session has a date. Errors name the file and the JSON
//! path, like `locomo10.json: [3].conversation.session_7[12].text: expected a string, found a
//! number`, plus the line for JSONL.
//!
//! [`windows`] cuts a dialogue into overlap-aware windows (SPEC §2), and [`Window::render`]
//! writes the lines the extractor reads:
//!
//! ```
//! use chrono::NaiveDate;
//! use memkit_data::{WindowConfig, windows};
//! use memkit_data::{Dialogue, Role, Session, Turn};
//!
//! let start = NaiveDate::from_ymd_opt(2023, 5, 8).unwrap().and_hms_opt(13, 56, 0).unwrap();
//! let turn = |n: usize, speaker: &str, text: &str| Turn {
//!     timestamp: Some(start + chrono::Duration::seconds(30 * (n as i64 - 1))),
//!     ..Turn::new(format!("D1:{n}"), speaker, Role::User, text)
//! };
//! let dialogue = Dialogue {
//!     id: "demo".into(),
//!     sessions: vec![Session {
//!         id: "session_1".into(),
//!         date: Some(start),
//!         turns: vec![
//!             turn(1, "Ann", "I adopted a dog."),
//!             turn(2, "Bo", "What's its name?"),
//!             turn(3, "Ann", "Rex."),
//!             turn(4, "Bo", "Cute!"),
//!             turn(5, "Ann", "He loves the beach."),
//!         ],
//!     }],
//! };
//! let config = WindowConfig { size: 3, overlap: 1, ..WindowConfig::locomo() };
//! let ws = windows(&dialogue, &config);
//! assert_eq!(ws.len(), 2); // starts 0 and 2; 2 + 3 ≥ 5 stops
//! assert_eq!(ws[1].id, "demo/w1");
//! assert_eq!(ws[1].context, 1); // "Rex." was already in window 0
//! assert_eq!(ws[1].suffix().len(), 2);
//! assert_eq!(
//!     ws[1].render(),
//!     "[2023-05-08T13:57:00, Mon] 1.Ann: Rex.\n\
//!      [2023-05-08T13:57:30, Mon] 2.Bo: Cute!\n\
//!      [2023-05-08T13:58:00, Mon] 3.Ann: He loves the beach."
//! );
//! ```
//!
//! [`split_by_id`] and [`assign_split`] give deterministic train/valid/test splits from an id
//! and a seed.
//!
//! # Features
//!
//! No optional features: the crate needs only serde_json, chrono and regex.

pub mod chitchat;
mod error;
mod json;
pub mod jsonl;
mod locomo;
mod longmemeval;
mod memorybank;
mod question;
mod split;
mod window;

use std::path::PathBuf;

pub use chitchat::load_chitchat;
pub use error::{Error, Result};
pub use jsonl::{load_jsonl, parse_iso_datetime, read_jsonl, to_jsonl_line};
pub use locomo::{LocomoSample, Observation, load_locomo, parse_locomo_date};
pub use longmemeval::{LongMemEvalItem, load_longmemeval, parse_longmemeval_date};
pub use memkit_schema::{Dialogue, Role, Session, Turn};
pub use memorybank::load_memorybank;
pub use question::{Question, locomo_category_name};
pub use split::{Split, SplitRatios, Splits, assign_split, split_by_id, stable_hash, unit_hash};
pub use window::{CUT_MARKER, Window, WindowConfig, WindowMessage, truncate_middle, windows};

/// Seconds between consecutive turns of a session when only the session start is known.
pub const TURN_STEP_SECONDS: i64 = 30;

/// The benchmark data folder: `$MEMKIT_SHARED_DATA` if set, else `<workspace root>/../shared/data`
/// (where CI checks out `shared/` beside the repository). For tests and development runs.
pub fn shared_data_dir() -> PathBuf {
    match std::env::var_os("MEMKIT_SHARED_DATA") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"),
    }
}
