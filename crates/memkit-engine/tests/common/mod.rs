//! The benchmark files the engine's integration tests read, through memkit-data's loaders.

#![allow(dead_code, reason = "each test binary uses part of this module")]

use std::path::PathBuf;

use memkit_data::{LocomoSample, LongMemEvalItem};

/// A file of the shared benchmark data (`$MEMKIT_SHARED_DATA` or `../shared/data`).
pub fn shared(relative: &str) -> PathBuf {
    let path = memkit_data::shared_data_dir().join(relative);
    assert!(path.exists(), "{} not found: check out shared/ beside the repository or set MEMKIT_SHARED_DATA", path.display());
    path
}

/// All ten LoCoMo conversations.
pub fn locomo() -> Vec<LocomoSample> {
    let path = shared("locomo/locomo10.json");
    memkit_data::load_locomo(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// One LoCoMo conversation by sample id (`conv-26`).
pub fn locomo_sample(id: &str) -> LocomoSample {
    locomo().into_iter().find(|s| s.id == id).unwrap_or_else(|| panic!("no LoCoMo sample {id}"))
}

/// The 500 LongMemEval oracle items.
pub fn longmemeval_oracle() -> Vec<LongMemEvalItem> {
    let path = shared("longmemeval/longmemeval_oracle.json");
    memkit_data::load_longmemeval(&path).unwrap_or_else(|e| panic!("{e}"))
}
