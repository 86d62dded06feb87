//! Helpers shared by the integration tests.
// Each test binary compiles this module and uses only some helpers.
#![allow(dead_code)]

use std::path::PathBuf;

/// A file under `tests/fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// Lines of a JSONL fixture, parsed.
pub fn jsonl(name: &str) -> Vec<serde_json::Value> {
    let path = fixture(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().enumerate().map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), i + 1))).collect()
}
