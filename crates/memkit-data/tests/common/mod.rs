//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::path::PathBuf;

/// A committed fixture.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// A file of the shared benchmark data (`MEMKIT_SHARED_DATA` or `<workspace>/../shared/data`).
pub fn shared(relative: &str) -> PathBuf {
    let path = memkit_data::shared_data_dir().join(relative);
    assert!(path.exists(), "{} not found: check out shared/ beside the repository or set MEMKIT_SHARED_DATA", path.display());
    path
}
