//! Helpers shared by the CLI tests.

use std::path::{Path, PathBuf};

/// The packaged SmolLM2-135M GGUF; `None` (the test is skipped) unless installed, and a failure
/// when `MEMKIT_REQUIRE_MODELS=1`.
pub fn smollm2() -> Option<PathBuf> {
    let dir = std::env::var_os("MEMKIT_MODELS_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/memkit/models")))?;
    let path = dir.join("smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.is_file() {
        assert!(std::env::var("MEMKIT_REQUIRE_MODELS").as_deref() != Ok("1"), "MEMKIT_REQUIRE_MODELS=1 but {} is missing", path.display());
        #[allow(clippy::print_stderr)]
        {
            eprintln!("skipped: {} is not installed (memkit models fetch smollm2-135m)", path.display());
        }
        return None;
    }
    Some(path)
}

/// The lines of a JSONL ledger (none when it does not exist yet).
pub fn ledger_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect()
}
