//! `memkit train`: fine-tune a student model from a train recipe.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;
use indicatif::ProgressBar;
use memkit_train::{EvalMetrics, Recipe, Reporter, StepMetrics, TrainOptions, TrainPlan};

use crate::progress::Bars;

/// Fine-tune a model on distilled data from a train recipe (TOML) and export it in Hugging Face
/// layout into the run folder, with metrics.jsonl, train.log and checkpoints.
///
/// Example: memkit train --recipe recipes/train/smoke.toml
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The train recipe (see recipes/train/ for examples; unknown keys are errors).
    #[arg(long, short)]
    recipe: PathBuf,
    /// Continue from the newest checkpoint in the run folder (weights, optimiser moments,
    /// schedule, data cursor and RNG: the run goes on as if it had never stopped).
    #[arg(long)]
    resume: bool,
    /// Stop once this many optimiser steps are done in all (counting resumed ones), with a
    /// checkpoint, so a long run can go in slices: `--stop-after 2`, later `--resume`.
    #[arg(long)]
    stop_after: Option<usize>,
    /// The run folder (overrides the recipe's `run.out_dir`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Overrides the recipe's `run.seed`.
    #[arg(long)]
    seed: Option<u64>,
    /// Overrides the recipe's `run.max_steps`; `--max-steps 0 --out DIR` evaluates the base
    /// model on the valid split and exports it as the run would (the "before" of a run).
    #[arg(long)]
    max_steps: Option<usize>,
    /// The backend: `flex` (burn's pure-Rust CPU kernels, always built), `libtorch` (LibTorch's
    /// CPU kernels, ~4× faster here) or `libtorch-cuda` (its CUDA kernels on GPU 0), both in a
    /// build with the `tch` feature (`just train` makes it in target/tch), or `cuda` (burn's CubeCL runtime on an
    /// NVIDIA GPU; a build with the `cuda` feature).
    #[arg(long, default_value = "flex")]
    backend: memkit_train::Backend,
    /// Held-out windows to extract at every evaluation, overriding the recipe's
    /// `[score] windows` (0: no scoring). Each evaluated model is exported, converted to GGUF and
    /// asked for the first N windows of `valid.jsonl` with llama.cpp; its record F1 against the
    /// teacher is logged (`metrics.jsonl`, type `score`; `learning_curve.svg`) and the best
    /// export is kept in `<run>/best/`.
    #[arg(long)]
    score_windows: Option<usize>,
    /// llama.cpp threads for scoring (default: the cores available).
    #[arg(long)]
    score_threads: Option<usize>,
}

pub fn run(args: Args, bars: &Bars) -> anyhow::Result<()> {
    let mut recipe = Recipe::from_file(&args.recipe)?;
    if let Some(out) = args.out {
        recipe.run.out_dir = out;
    }
    if let Some(seed) = args.seed {
        recipe.run.seed = seed;
    }
    if let Some(steps) = args.max_steps {
        recipe.run.max_steps = Some(steps);
    }
    if let Some(windows) = args.score_windows {
        let spec = recipe.score.get_or_insert_with(|| memkit_train::recipe::ScoreConfig::new(windows));
        spec.windows = windows;
    }
    let scorer = match &recipe.score {
        Some(spec) if spec.windows > 0 => {
            let mut held_out = Vec::new();
            for dir in &recipe.data.dir {
                held_out.push(super::compare::read_rows(&dir.join("valid.jsonl"), None).context("scoring needs held-out windows")?);
            }
            let rows = in_turn(held_out, spec.windows);
            let generation = super::GenerationArgs {
                max_memories: spec.max_memories,
                max_tokens: spec.max_tokens,
                batch: spec.batch,
                threads: args.score_threads,
            };
            Some(std::sync::Arc::new(AgreementScorer { rows, generation }) as std::sync::Arc<dyn memkit_train::Scorer>)
        }
        _ => None,
    };
    let options = TrainOptions { resume: args.resume, stop_after: args.stop_after, scorer };
    let reporter = TrainBar { bars, bar: Mutex::new(None) };
    tracing::info!(backend = args.backend.name(), "training");
    let summary = memkit_train::train(&recipe, &args.recipe, &options, &args.backend.device(), &reporter)
        .with_context(|| format!("training with recipe {}", args.recipe.display()))?;
    if let Some(bar) = reporter.take() {
        bar.finish_and_clear();
    }
    let curve = summary.run_dir.join("learning_curve.svg");
    match learning_curve(&summary.run_dir.join("metrics.jsonl")) {
        Ok(Some(svg)) => std::fs::write(&curve, svg).with_context(|| format!("cannot write {}", curve.display()))?,
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "no learning curve"),
    }
    #[allow(clippy::print_stdout)]
    {
        let loss = summary.last_loss.map_or("-".to_owned(), |l| format!("{l:.4}"));
        println!("steps: {}  last loss: {loss}  {:.0} tokens/s", summary.steps, summary.tokens_per_second);
        if let Some(eval) = &summary.last_eval {
            println!("valid: loss {:.4}  token accuracy {:.4}", eval.loss, eval.accuracy);
        }
        if let Some(best) = &summary.best {
            println!(
                "best: record F1 {:.4} against the teacher after step {} ({})",
                best.value,
                best.step,
                summary.run_dir.join("best").display()
            );
        }
        println!("model: {}", summary.run_dir.display());
    }
    Ok(())
}

/// One bar over the optimiser steps, with loss, learning rate and tokens/s in its message.
struct TrainBar<'a> {
    bars: &'a Bars,
    bar: Mutex<Option<ProgressBar>>,
}

impl TrainBar<'_> {
    fn with_bar(&self, f: impl FnOnce(&ProgressBar)) {
        // A poisoned lock only means another thread panicked mid-update; the bar is still usable.
        let guard = self.bar.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bar) = guard.as_ref() {
            f(bar);
        }
    }

    fn take(&self) -> Option<ProgressBar> {
        self.bar.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl Reporter for TrainBar<'_> {
    fn on_start(&self, plan: &TrainPlan) {
        let bar = self.bars.bar(plan.total_steps as u64, "train");
        bar.set_position(plan.start_step as u64);
        bar.reset_eta();
        tracing::info!(
            examples = plan.train.examples,
            truncated = plan.train.truncated,
            dropped = plan.train.dropped,
            target_tokens = plan.train.target_tokens,
            length_p50 = plan.train.length_p50,
            length_p90 = plan.train.length_p90,
            length_max = plan.train.length_max,
            trainable = plan.trainable_parameters,
            "training data"
        );
        *self.bar.lock().unwrap_or_else(|e| e.into_inner()) = Some(bar);
    }

    fn on_step(&self, m: &StepMetrics) {
        self.with_bar(|bar| {
            bar.set_position(m.step as u64);
            bar.set_message(format!("loss {:.4} lr {:.1e} {:.0} tok/s", m.loss, m.lr, m.tokens_per_second));
        });
    }

    fn on_eval(&self, m: &EvalMetrics) {
        self.with_bar(|bar| bar.suspend(|| tracing::info!(step = m.step, loss = m.loss, accuracy = m.accuracy, "eval")));
    }

    fn on_checkpoint(&self, step: usize, path: &Path) {
        self.with_bar(|bar| bar.suspend(|| tracing::debug!(step, path = %path.display(), "checkpoint")));
    }
}

/// Scores an export by its agreement with the teacher on held-out windows (`memkit compare`):
/// the value is the record F1; the replies are written beside the export (`replies.jsonl`).
#[derive(Debug)]
struct AgreementScorer {
    rows: Vec<super::compare::Row>,
    generation: super::GenerationArgs,
}

impl memkit_train::Scorer for AgreementScorer {
    fn score(&self, dir: &Path, step: usize) -> Result<memkit_train::Score, String> {
        let started = std::time::Instant::now();
        let (agreement, cleaning) = (|| -> anyhow::Result<_> {
            let gguf = super::model_gguf(&dir.to_string_lossy())?;
            let extractor = self.generation.local_extractor(&gguf)?;
            let cleaner = memkit_infer::embed::installed_cleaner(memkit_clean::GroundingConfig::default())?;
            let (agreement, replies, cleaning) =
                super::compare::agreement_on(&extractor, &self.rows, self.generation.batch, &cleaner, &indicatif::ProgressBar::hidden())?;
            // The replies stay with the export they score (best/replies.jsonl), to be read.
            super::compare::write_replies(&self.rows, &replies, &dir.join("replies.jsonl"))?;
            Ok((agreement, cleaning))
        })()
        .map_err(|e| format!("{e:#}"))?;
        let metrics = serde_json::json!({
            "f1": agreement.f1,
            "f1_interval": agreement.f1_interval,
            "precision": agreement.precision,
            "recall": agreement.recall,
            "json_validity": agreement.json_validity,
            "records_per_window": agreement.candidate_records as f64 / agreement.windows.max(1) as f64,
            "teacher_records_per_window": agreement.reference_records as f64 / agreement.windows.max(1) as f64,
            "windows": agreement.windows,
            "teacher_empty_windows": agreement.reference_empty_windows,
            "records_where_teacher_empty": agreement.candidate_records_where_reference_empty,
            "windows_only_the_student_left_empty": agreement.candidate_empty_windows,
            "fields": agreement.fields,
            "dropped_by_cleaning": cleaning.dropped,
            "rows_without_window": cleaning.rows_without_window,
            "seconds": started.elapsed().as_secs_f64(),
        });
        Ok(memkit_train::Score { step, value: agreement.f1, metrics })
    }
}

/// The learning curve of a run from its `metrics.jsonl`: record F1 and JSON validity against
/// the teacher (the `score` rows) and the validation token accuracy, by step; `None` without
/// scores.
fn learning_curve(metrics: &Path) -> anyhow::Result<Option<String>> {
    let text = std::fs::read_to_string(metrics).with_context(|| format!("cannot read {}", metrics.display()))?;
    let rows: Vec<serde_json::Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let series = |kind: &str, key: &[&str]| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| r["type"] == kind)
            .filter_map(|r| {
                let value = key.iter().fold(r, |v, k| &v[*k]);
                Some((r["step"].as_f64()?, value.as_f64()?))
            })
            .collect()
    };
    let f1 = series("score", &["metrics", "f1"]);
    if f1.is_empty() {
        return Ok(None);
    }
    let lines = vec![
        ("record F1 against the teacher".to_owned(), f1),
        ("JSON validity".to_owned(), series("score", &["metrics", "json_validity"])),
        ("validation token accuracy".to_owned(), series("eval", &["accuracy"])),
    ];
    Ok(Some(memkit_eval::plot::lines(&lines, "learning curve", "optimiser step", "share").map_err(anyhow::Error::msg)?))
}

/// The first `n` items taken from the lists in turn: the first of each, then the second of each,
/// and so on, skipping lists that ran out.
fn in_turn<T>(lists: Vec<Vec<T>>, n: usize) -> Vec<T> {
    let mut iters: Vec<_> = lists.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::new();
    while out.len() < n {
        let round: Vec<T> = iters.iter_mut().filter_map(Iterator::next).collect();
        if round.is_empty() {
            break;
        }
        out.extend(round);
    }
    out.truncate(n);
    out
}

#[cfg(test)]
mod tests {
    use super::in_turn;

    /// Two data folders, the second with one held-out row: its row comes second, then the rest
    /// of the first folder's; one folder gives its first rows, as before.
    #[test]
    fn held_out_rows_are_taken_from_the_folders_in_turn() {
        let lists = || vec![vec!["a1", "a2", "a3"], vec!["b1"]];
        assert_eq!(in_turn(lists(), 3), ["a1", "b1", "a2"]);
        assert_eq!(in_turn(lists(), 10), ["a1", "b1", "a2", "a3"]);
        assert_eq!(in_turn(vec![vec![1, 2, 3]], 2), [1, 2]);
        assert!(in_turn(lists(), 0).is_empty());
    }
}
