//! Training recipes: TOML files in `recipes/train/`, nested like burn's `TrainingConfig`.
//!
//! Every table denies unknown keys, so a typo fails loudly; each default sits on its field. The
//! resolved recipe (defaults filled in) is written into the run folder as `recipe.toml`.
//!
//! ```toml
//! [model]
//! kind = "package"                 # or "gguf" / "hf" (a path), or "random" (tests, smoke runs)
//! name = "smollm2-135m"
//! [data]
//! dir = "data/distilled/lme-filler"  # train.jsonl, valid.jsonl (or a list of such folders)
//! [optim]
//! kind = "adamw"
//! lr = 2e-5
//! [run]
//! out_dir = "checkpoints/smollm2-lme"
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::{LORA_TARGETS, LoraConfig};
use crate::{Error, Result};

/// A training recipe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// The base model.
    pub model: ModelSource,
    /// LoRA adapters; absent means full fine-tuning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraConfig>,
    /// The distilled data.
    pub data: DataConfig,
    /// The optimiser and its schedule.
    #[serde(default)]
    pub optim: Optimizer,
    /// Steps, batches, evaluation, checkpoints.
    pub run: RunConfig,
    /// Scoring by generation at every evaluation (`memkit train` extracts held-out windows with
    /// llama.cpp and keeps the best export); absent means no scoring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<ScoreConfig>,
}

/// How `memkit train` scores each evaluated model: it exports the model, converts it to GGUF
/// (f16), extracts the first `windows` rows of `valid.jsonl` greedily under the extractor schema,
/// and takes the record F1 against the teacher's records (`memkit compare`'s figures) as the
/// score; the best export is kept in `<run>/best/`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreConfig {
    /// Held-out windows extracted per evaluation (0: no scoring): the first ones of `valid.jsonl`,
    /// taken from the folders of `[data] dir` in turn (one from each, then the next of each).
    pub windows: usize,
    /// Records per window the schema allows (the distill recipe's `max_memories`).
    #[serde(default = "default_score_max_memories")]
    pub max_memories: usize,
    /// Most tokens per reply: room for `max_memories` records (~90 tokens each); a reply cut
    /// at the limit counts as invalid JSON.
    #[serde(default = "default_score_max_tokens")]
    pub max_tokens: usize,
    /// Windows decoded together.
    #[serde(default = "default_score_batch")]
    pub batch: usize,
    /// Score the base model too, before the first step (its held-out loss is always taken). A
    /// base that has not learnt the task writes to `max_tokens` on every window: SmolLM2-135M
    /// took 26 minutes for 94 messages on 2 cores and scored F1 0.
    #[serde(default = "default_score_base")]
    pub base: bool,
}

impl ScoreConfig {
    /// Scoring on `windows` held-out windows with the default caps.
    pub fn new(windows: usize) -> Self {
        ScoreConfig {
            windows,
            max_memories: default_score_max_memories(),
            max_tokens: default_score_max_tokens(),
            batch: default_score_batch(),
            base: default_score_base(),
        }
    }
}

fn default_score_max_memories() -> usize {
    12
}
fn default_score_max_tokens() -> usize {
    1536
}
fn default_score_batch() -> usize {
    4
}
fn default_score_base() -> bool {
    true
}

/// Where the base weights come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ModelSource {
    /// A Hugging Face checkpoint directory (`config.json`, `model.safetensors` or shards,
    /// `tokenizer.json`, `tokenizer_config.json` with the chat template).
    Hf {
        /// The directory.
        path: PathBuf,
    },
    /// A GGUF file (llama / qwen2 / qwen3), dequantised once into `<out_dir>/base-hf` by
    /// memkit-infer's converter.
    Gguf {
        /// The file.
        path: PathBuf,
    },
    /// A memkit model package (`memkit models fetch <name>`), found in the models directory;
    /// a GGUF package is dequantised like [`ModelSource::Gguf`].
    Package {
        /// The package name, e.g. `smollm2-135m`.
        name: String,
    },
    /// A randomly initialised model (tests and smoke runs).
    Random {
        /// A directory with `tokenizer.json` and `tokenizer_config.json`.
        tokenizer: PathBuf,
        /// The `config.json` fields (`model_type`, `hidden_size`, ...).
        config: serde_json::Map<String, serde_json::Value>,
    },
}

/// The data: `train.jsonl` and `valid.jsonl` in one directory, or in several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// The directory with `train.jsonl` and `valid.jsonl` (a `memkit distill` output or its
    /// `messages/`), or a list of them (`dir = ["a", "b"]`): their examples are trained on and
    /// held out together, in the order given, and they must carry the same prompt template and
    /// window (`extract_prompt.j2`, `extract_window.json`), since the model is asked one way.
    #[serde(deserialize_with = "one_or_many", serialize_with = "one_or_list")]
    pub dir: Vec<PathBuf>,
    /// Examples longer than this many tokens are cut (and counted).
    #[serde(default = "default_max_seq_len")]
    pub max_seq_len: usize,
    /// Pack several examples into each row of up to `max_seq_len` tokens (each attends only
    /// within itself; positions restart per example). `[run] batch_size` then counts rows, not
    /// examples. Off: one example per row, rows of similar length batched together.
    #[serde(default)]
    pub packing: bool,
}

fn default_max_seq_len() -> usize {
    2048
}

impl DataConfig {
    /// The directories, for messages: `a`, or `a`, `b`.
    pub fn dirs_display(&self) -> String {
        self.dir.iter().map(|d| format!("`{}`", d.display())).collect::<Vec<_>>().join(", ")
    }
}

/// `dir = "a"` or `dir = ["a", "b"]`; an empty list is an error.
fn one_or_many<'de, D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Vec<PathBuf>, D::Error> {
    struct Dirs;
    impl<'de> serde::de::Visitor<'de> for Dirs {
        type Value = Vec<PathBuf>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a directory or a list of directories")
        }
        fn visit_str<E: serde::de::Error>(self, dir: &str) -> std::result::Result<Self::Value, E> {
            Ok(vec![PathBuf::from(dir)])
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Value, A::Error> {
            let mut dirs = Vec::new();
            while let Some(dir) = seq.next_element::<PathBuf>()? {
                dirs.push(dir);
            }
            if dirs.is_empty() {
                return Err(serde::de::Error::custom("names no directory"));
            }
            Ok(dirs)
        }
    }
    deserializer.deserialize_any(Dirs)
}

/// One directory is written as a string, as recipes with one dataset read.
fn one_or_list<S: serde::Serializer>(dirs: &[PathBuf], serializer: S) -> std::result::Result<S::Ok, S::Error> {
    match dirs {
        [dir] => dir.serialize(serializer),
        _ => dirs.serialize(serializer),
    }
}

/// The optimiser (one kind for now; the tag keeps recipes forward compatible).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Optimizer {
    /// AdamW with linear warmup and cosine decay.
    AdamW(AdamW),
}

impl Default for Optimizer {
    fn default() -> Self {
        Optimizer::AdamW(toml::from_str("").expect("every AdamW field has a default"))
    }
}

/// AdamW settings and the learning-rate schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdamW {
    /// Peak learning rate.
    #[serde(default = "default_lr")]
    pub lr: f64,
    /// Decoupled weight decay.
    #[serde(default)]
    pub weight_decay: f32,
    /// First-moment decay.
    #[serde(default = "default_beta1")]
    pub beta1: f32,
    /// Second-moment decay.
    #[serde(default = "default_beta2")]
    pub beta2: f32,
    /// Denominator epsilon.
    #[serde(default = "default_epsilon")]
    pub epsilon: f32,
    /// Optimiser steps of linear warmup from 0 to `lr`.
    #[serde(default)]
    pub warmup_steps: usize,
    /// The cosine decays to `lr * min_lr_ratio`.
    #[serde(default = "default_min_lr_ratio")]
    pub min_lr_ratio: f64,
    /// Gradients are scaled down when their global L2 norm exceeds this (0 turns it off).
    #[serde(default = "default_max_grad_norm")]
    pub max_grad_norm: f64,
}

fn default_lr() -> f64 {
    2e-5
}
fn default_beta1() -> f32 {
    0.9
}
fn default_beta2() -> f32 {
    0.999
}
fn default_epsilon() -> f32 {
    1e-8
}
fn default_min_lr_ratio() -> f64 {
    0.1
}
fn default_max_grad_norm() -> f64 {
    1.0
}

/// Steps, batches, evaluation and checkpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// The run folder (metrics, logs, checkpoints, the exported model).
    pub out_dir: PathBuf,
    /// Passes over the training data (ignored when `max_steps` is set).
    #[serde(default = "default_epochs")]
    pub epochs: usize,
    /// Stop after this many optimiser steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<usize>,
    /// Examples per micro-batch.
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// Micro-batches per optimiser step.
    #[serde(default = "default_one")]
    pub grad_accum: usize,
    /// Seeds weight init, LoRA init, shuffling and dropout.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Evaluate on `valid.jsonl` every this many steps (0: only at the end); the base model is
    /// always evaluated once before the first step, so a run shows what training changed.
    #[serde(default)]
    pub eval_every: usize,
    /// Write a checkpoint every this many steps (0: only at the end).
    #[serde(default)]
    pub checkpoint_every: usize,
    /// Checkpoints kept; older ones are deleted.
    #[serde(default = "default_keep_last")]
    pub keep_last: usize,
    /// Log a training step every this many steps.
    #[serde(default = "default_one")]
    pub log_every: usize,
    /// Recompute memory-bound activations in the backward pass instead of keeping them
    /// (burn's balanced gradient checkpointing): less peak memory for long windows, more time.
    #[serde(default)]
    pub gradient_checkpointing: bool,
}

fn default_epochs() -> usize {
    1
}
fn default_batch_size() -> usize {
    4
}
fn default_one() -> usize {
    1
}
fn default_seed() -> u64 {
    42
}
fn default_keep_last() -> usize {
    2
}

impl Recipe {
    /// Reads and checks a recipe file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::from_toml(&text, path)
    }

    /// Parses and checks a recipe; `path` names it in errors.
    pub fn from_toml(text: &str, path: &Path) -> Result<Self> {
        let recipe: Recipe = toml::from_str(text).map_err(|source| Error::Recipe { path: path.to_path_buf(), source })?;
        recipe.validate(path)?;
        Ok(recipe)
    }

    /// The recipe with defaults filled in, as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a recipe serialises to TOML")
    }

    fn validate(&self, path: &Path) -> Result<()> {
        let run = &self.run;
        if let Some(score) = &self.score
            && (score.max_memories == 0 || score.max_tokens == 0 || score.batch == 0)
        {
            return Err(Error::invalid(path, "[score] max_memories, max_tokens and batch must be at least 1"));
        }
        if run.batch_size == 0 || run.grad_accum == 0 || run.keep_last == 0 || run.log_every == 0 {
            return Err(Error::invalid(path, "[run] batch_size, grad_accum, keep_last and log_every must be at least 1"));
        }
        if let Some(lora) = &self.lora {
            if lora.rank == 0 {
                return Err(Error::invalid(path, "[lora] rank must be at least 1"));
            }
            if !(0.0..1.0).contains(&lora.dropout) {
                return Err(Error::invalid(path, "[lora] dropout must be in [0, 1)"));
            }
            if let Some(bad) = lora.targets.iter().find(|t| !LORA_TARGETS.contains(&t.as_str())) {
                return Err(Error::invalid(path, format!("[lora] target `{bad}`: expected one of {}", LORA_TARGETS.join(", "))));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        [model]
        kind = "hf"
        path = "base"
        [data]
        dir = "data"
        [run]
        out_dir = "out"
    "#;

    #[test]
    fn defaults_fill_in_and_round_trip() {
        let recipe = Recipe::from_toml(MINIMAL, Path::new("r.toml")).unwrap();
        let Optimizer::AdamW(adamw) = &recipe.optim;
        assert_eq!((adamw.lr, adamw.max_grad_norm, recipe.run.batch_size, recipe.data.max_seq_len), (2e-5, 1.0, 4, 2048));
        assert_eq!(Recipe::from_toml(&recipe.to_toml(), Path::new("resolved.toml")).unwrap(), recipe);
    }

    #[test]
    fn every_shipped_recipe_parses_and_round_trips() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../recipes/train");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let recipe = Recipe::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(Recipe::from_toml(&recipe.to_toml(), &path).unwrap(), recipe, "{}", path.display());
            seen += 1;
        }
        assert!(seen >= 4, "{seen} recipes in {}", dir.display());
        // The scored ones keep the section through the round trip.
        let scored = Recipe::from_file(&dir.join("smollm2-135m-decomposed.toml")).unwrap();
        assert_eq!(scored.score.map(|s| s.windows), Some(24));
    }

    /// `dir` is one folder or a list; one is written back as a string, a list as a list, and an
    /// empty list or a number is an error naming the key.
    #[test]
    fn data_dir_is_one_folder_or_several() {
        let parse = |dir: &str| Recipe::from_toml(&MINIMAL.replace(r#"dir = "data""#, dir), Path::new("r.toml"));
        let one = parse(r#"dir = "a""#).unwrap();
        assert_eq!(one.data.dir, vec![PathBuf::from("a")]);
        assert!(one.to_toml().contains("dir = \"a\"\n"), "{}", one.to_toml());
        let two = parse(r#"dir = ["a", "b/messages"]"#).unwrap();
        assert_eq!(two.data.dir, vec![PathBuf::from("a"), PathBuf::from("b/messages")]);
        assert_eq!(two.data.dirs_display(), "`a`, `b/messages`");
        assert_eq!(Recipe::from_toml(&two.to_toml(), Path::new("resolved.toml")).unwrap(), two);
        for bad in ["dir = []", "dir = 3"] {
            let error = parse(bad).unwrap_err().to_string();
            assert!(error.contains("r.toml") && error.contains("dir"), "{bad}: {error}");
        }
    }

    #[test]
    fn typos_fail_loudly() {
        let typo = MINIMAL.replace("out_dir", "outdir");
        let error = Recipe::from_toml(&typo, Path::new("r.toml")).unwrap_err().to_string();
        assert!(error.contains("r.toml") && error.contains("outdir"), "{error}");
        let bad_target = format!("{MINIMAL}\n[lora]\nrank = 4\nalpha = 8.0\ntargets = [\"qproj\"]\n");
        let error = Recipe::from_toml(&bad_target, Path::new("r.toml")).unwrap_err().to_string();
        assert!(error.contains("qproj"), "{error}");
    }
}
