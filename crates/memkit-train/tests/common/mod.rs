//! Helpers shared by the integration tests: the smoke recipe pointed at the tiny fixtures.

#![allow(dead_code)] // each test file uses a different subset

use std::path::{Path, PathBuf};

use memkit_train::Recipe;
use memkit_train::recipe::ModelSource;

/// `tests/fixtures/tiny`: tokenizer, chat template, train.jsonl, valid.jsonl.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny")
}

/// `recipes/train/smoke.toml`.
pub fn smoke_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../recipes/train/smoke.toml")
}

/// The smoke recipe with its paths resolved from this crate and its output in `out_dir`.
pub fn smoke_recipe(out_dir: &Path) -> Recipe {
    let mut recipe = Recipe::from_file(&smoke_path()).unwrap();
    if let ModelSource::Random { tokenizer, .. } = &mut recipe.model {
        *tokenizer = fixtures();
    }
    recipe.data.dir = fixtures();
    recipe.run.out_dir = out_dir.to_path_buf();
    recipe
}

/// Largest absolute difference between two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
