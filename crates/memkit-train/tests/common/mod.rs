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
    recipe.data.dir = vec![fixtures()];
    recipe.run.out_dir = out_dir.to_path_buf();
    recipe
}

/// Largest absolute difference between two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// A tiny random model of one family (`llama`, `qwen2`, `qwen3`) with its HF `config.json`:
/// weights with std 0.2, norm gains around 1 and nonzero biases, so that logits are far from
/// uniform and every part of the block matters.
pub fn tiny_family(model_type: &str, class: &str) -> (serde_json::Value, memkit_train::Config, memkit_train::weights::Weights) {
    let config_json = tiny_config(model_type, class);
    let config = memkit_train::Config::from_json(&config_json, Path::new("config.json")).unwrap();
    let mut weights = memkit_train::model::random_weights(&config, 7);
    for (name, tensor) in weights.iter_mut() {
        let mut rng = memkit_train::rng::SplitMix64::new(name.len() as u64);
        for v in &mut tensor.data {
            *v = if name.ends_with("norm.weight") {
                1.0 + 0.3 * rng.next_normal()
            } else if name.ends_with(".bias") {
                0.2 * rng.next_normal()
            } else {
                10.0 * *v
            };
        }
    }
    (config_json, config, weights)
}

fn tiny_config(model_type: &str, class: &str) -> serde_json::Value {
    let mut config = serde_json::json!({
        "architectures": [class], "model_type": model_type, "vocab_size": 272, "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 128, "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
        "bos_token_id": 1, "eos_token_id": 2,
    });
    if model_type == "qwen3" {
        config["head_dim"] = serde_json::json!(32); // 4 heads × 32 ≠ hidden 64
        config["tie_word_embeddings"] = serde_json::json!(false);
    }
    config
}
