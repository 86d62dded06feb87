//! Helpers shared by the CLI tests.

use std::path::{Path, PathBuf};

/// The packaged SmolLM2-135M GGUF, or `None` (test skipped); see
/// [`memkit_infer::models::installed_for_tests`].
pub fn smollm2() -> Option<PathBuf> {
    memkit_infer::models::installed_for_tests(memkit_infer::models::SMOLLM2_135M.name)
}

/// The lines of a JSONL ledger (none when it does not exist yet).
pub fn ledger_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect()
}
