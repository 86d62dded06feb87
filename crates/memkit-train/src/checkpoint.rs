//! Checkpoints and exports in Hugging Face layout.
//!
//! - [`export_hf`] writes a loadable checkpoint directory: `model.safetensors` (f32, HF names,
//!   LoRA merged), `config.json`, `generation_config.json`, `tokenizer.json` and
//!   `tokenizer_config.json` (with the chat template) copied from the base.
//! - Training checkpoints (`<run>/checkpoints/step-NNNNNN/`) hold what resuming needs: the
//!   trained weights (`model.safetensors`, or `adapter_model.safetensors` with LoRA), the
//!   optimiser moments (`optimizer.bpk`) and [`TrainState`]. A checkpoint is written into a
//!   `.tmp` folder renamed at the end, so a crash never leaves a half-written one; only the
//!   newest `keep_last` are kept.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::weights::{Weights, read_json, write_atomic, write_safetensors};
use crate::{Error, Result};

/// Where training stands, saved with every checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// Optimiser steps done (the scheduler's position).
    pub step: usize,
    /// Micro-batches consumed (the data cursor): the epoch is `micro_batches / batches`, the
    /// position in the epoch's shuffled order `micro_batches % batches`.
    pub micro_batches: usize,
    /// Batches per epoch when the checkpoint was written (the cursor is only valid for them).
    pub batches_per_epoch: usize,
    /// The recipe seed; shuffling and dropout derive from it and the cursor.
    pub seed: u64,
    /// Non-padding tokens seen.
    pub tokens_seen: usize,
}

/// Copies `config.json` (as f32), the tokenizer files and `generation_config.json` next to
/// `weights` in `out_dir`. `config_json` is the base model's config; `tokenizer_dir` holds
/// `tokenizer.json` and `tokenizer_config.json` (and maybe `generation_config.json`).
pub fn export_hf(out_dir: &Path, config_json: &serde_json::Value, weights: &Weights, tokenizer_dir: &Path) -> Result<()> {
    fs::create_dir_all(out_dir).map_err(|e| Error::io(out_dir, e))?;
    let mut config = config_json.clone();
    config["torch_dtype"] = "float32".into();
    write_atomic(&out_dir.join("config.json"), pretty(&config))?;
    for name in ["tokenizer.json", "tokenizer_config.json"] {
        let from = tokenizer_dir.join(name);
        let bytes = fs::read(&from).map_err(|e| Error::io(&from, e))?;
        write_atomic(&out_dir.join(name), bytes)?;
    }
    let base_generation = tokenizer_dir.join("generation_config.json");
    let generation = if base_generation.is_file() {
        read_json(&base_generation)?
    } else {
        let mut generation = serde_json::Map::new();
        for key in ["bos_token_id", "eos_token_id", "pad_token_id"] {
            if let Some(id) = config.get(key).filter(|v| !v.is_null()) {
                generation.insert(key.into(), id.clone());
            }
        }
        serde_json::Value::Object(generation)
    };
    write_atomic(&out_dir.join("generation_config.json"), pretty(&generation))?;
    write_safetensors(&out_dir.join("model.safetensors"), weights)
}

fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).expect("JSON values serialise") + "\n"
}

/// The checkpoint folder of `step`.
pub fn checkpoint_dir(run_dir: &Path, step: usize) -> PathBuf {
    run_dir.join("checkpoints").join(format!("step-{step:06}"))
}

/// Checkpoint folders of a run, oldest first (`.tmp` leftovers of a crash are ignored).
pub fn list_checkpoints(run_dir: &Path) -> Result<Vec<(usize, PathBuf)>> {
    let dir = run_dir.join("checkpoints");
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut found = Vec::new();
    for entry in fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
        let path = entry.map_err(|e| Error::io(&dir, e))?.path();
        let step = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix("step-")).and_then(|n| n.parse::<usize>().ok());
        if let Some(step) = step {
            found.push((step, path));
        }
    }
    found.sort();
    Ok(found)
}

/// What a checkpoint holds besides the optimiser.
pub(crate) struct CheckpointData<'a> {
    pub state: TrainState,
    /// All weights (full fine-tuning) or the LoRA factors.
    pub weights: &'a Weights,
    pub lora: bool,
}

pub(crate) fn weights_file(lora: bool) -> &'static str {
    if lora { "adapter_model.safetensors" } else { "model.safetensors" }
}

/// Writes a checkpoint through a `.tmp` folder; `save_optimizer` writes `optimizer.bpk` into
/// the folder it is given. Then deletes all but the newest `keep_last`.
pub(crate) fn write_checkpoint(
    run_dir: &Path,
    data: &CheckpointData,
    keep_last: usize,
    save_optimizer: impl FnOnce(&Path) -> Result<()>,
) -> Result<PathBuf> {
    let final_dir = checkpoint_dir(run_dir, data.state.step);
    let tmp = final_dir.with_extension("tmp");
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    }
    fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    write_safetensors(&tmp.join(weights_file(data.lora)), data.weights)?;
    save_optimizer(&tmp.join("optimizer.bpk"))?;
    let state = serde_json::to_string_pretty(&data.state).expect("the state serialises");
    fs::write(tmp.join("state.json"), state).map_err(|e| Error::io(tmp.join("state.json"), e))?;
    if final_dir.exists() {
        fs::remove_dir_all(&final_dir).map_err(|e| Error::io(&final_dir, e))?;
    }
    fs::rename(&tmp, &final_dir).map_err(|e| Error::io(&final_dir, e))?;
    let all = list_checkpoints(run_dir)?;
    for (_, old) in &all[..all.len().saturating_sub(keep_last)] {
        fs::remove_dir_all(old).map_err(|e| Error::io(old, e))?;
    }
    Ok(final_dir)
}

/// Reads `state.json` of a checkpoint.
pub(crate) fn read_state(dir: &Path) -> Result<TrainState> {
    let path = dir.join("state.json");
    serde_json::from_value(read_json(&path)?).map_err(|source| Error::Json { path, line: None, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_checkpoints_and_ignores_tmp_leftovers() {
        let run = tempfile::tempdir().unwrap();
        let weights = Weights::new();
        fs::create_dir_all(run.path().join("checkpoints/step-000099.tmp")).unwrap();
        for step in [5, 10, 15] {
            let state = TrainState { step, micro_batches: step, batches_per_epoch: 3, seed: 1, tokens_seen: 0 };
            let data = CheckpointData { state, weights: &weights, lora: false };
            write_checkpoint(run.path(), &data, 2, |p| fs::write(p, b"x").map_err(|e| Error::io(p, e))).unwrap();
        }
        let kept: Vec<usize> = list_checkpoints(run.path()).unwrap().into_iter().map(|(s, _)| s).collect();
        assert_eq!(kept, vec![10, 15]);
        assert_eq!(read_state(&checkpoint_dir(run.path(), 15)).unwrap().step, 15);
    }
}
