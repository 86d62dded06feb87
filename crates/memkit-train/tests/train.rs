//! End-to-end training on the tiny fixtures with the smoke recipe (a 2-layer random Qwen2-style
//! model): the loss falls, the run folder is complete and loads back, a stopped and resumed run
//! ends with the same weights as an uninterrupted one, and LoRA trains only its adapters and
//! merges them on export.

mod common;

use std::path::Path;

use burn::tensor::{Int, Tensor, TensorData};
use memkit_train::model::BuildOptions;
use memkit_train::train::BaseModel;
use memkit_train::weights::read_safetensors;
use memkit_train::{LoraConfig, Model, SilentReporter, TrainOptions, cpu_device, train};

use common::{max_abs_diff, smoke_path, smoke_recipe};

fn logits(model: &Model, ids: &[i64]) -> Vec<f32> {
    let input = Tensor::<2, Int>::from_data(TensorData::new(ids.to_vec(), [1, ids.len()]), &cpu_device());
    model.forward(input).into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

fn load(dir: &Path) -> Model {
    let base = BaseModel::from_hf_dir(dir).unwrap();
    Model::new(&base.config, &base.weights, dir, BuildOptions { lora: None, seed: 0 }, &cpu_device()).unwrap()
}

#[test]
fn smoke_run_learns_and_exports_a_loadable_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = smoke_recipe(dir.path());
    let summary = train(&recipe, &smoke_path(), &TrainOptions::default(), &cpu_device(), &SilentReporter).unwrap();
    assert!(summary.finished);
    assert_eq!(summary.steps, 12); // 24 examples / 4 per batch × 4 epochs / 2 accumulated
    let metrics = std::fs::read_to_string(dir.path().join("metrics.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = metrics.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let losses: Vec<f64> = rows.iter().filter(|r| r["type"] == "train").map(|r| r["loss"].as_f64().unwrap()).collect();
    let evals: Vec<f64> = rows.iter().filter(|r| r["type"] == "eval").map(|r| r["loss"].as_f64().unwrap()).collect();
    assert_eq!(losses.len(), 12);
    // ln(272) ≈ 5.6 at random init; the replies are templated, so a few steps cut it clearly.
    assert!(losses[0] > 5.0 && losses[11] < losses[0] - 1.0, "losses {losses:?}");
    assert!(evals.len() >= 2 && evals.last() < evals.first(), "eval losses {evals:?}");
    #[allow(clippy::print_stderr)]
    {
        eprintln!("smoke: losses {losses:?}, eval {evals:?}, {:.0} tokens/s", summary.tokens_per_second);
    }
    for file in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "recipe.toml",
        "train.log",
        "README.md",
    ] {
        assert!(dir.path().join(file).is_file(), "{file} missing");
    }
    // The export holds the trained weights: the final checkpoint has the same tensors.
    let exported = read_safetensors(&dir.path().join("model.safetensors")).unwrap();
    let checkpoint = read_safetensors(&dir.path().join("checkpoints/step-000012/model.safetensors")).unwrap();
    assert_eq!(exported, checkpoint);
    assert!(exported.contains_key("model.layers.1.self_attn.q_proj.bias") && !exported.contains_key("lm_head.weight"));
    // Checkpoints every 4 steps, the newest 2 kept.
    let kept: Vec<usize> = memkit_train::checkpoint::list_checkpoints(dir.path()).unwrap().into_iter().map(|(s, _)| s).collect();
    assert_eq!(kept, vec![8, 12]);
    // The export loads back and computes finite logits.
    let model = load(dir.path());
    assert!(logits(&model, &[1, 40, 41, 42]).iter().all(|v| v.is_finite()));
}

/// See: issue 42. Packed (several examples to a row of up to 1,024 tokens), one row a step, the
/// smoke run takes fewer steps than it has examples and learns as the unpacked run does.
#[test]
fn a_packed_smoke_run_learns_from_fewer_fuller_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut recipe = smoke_recipe(dir.path());
    (recipe.data.packing, recipe.data.max_seq_len) = (true, 1024);
    (recipe.run.batch_size, recipe.run.grad_accum, recipe.run.eval_every, recipe.run.checkpoint_every) = (1, 1, 0, 0);
    let summary = train(&recipe, &smoke_path(), &TrainOptions::default(), &cpu_device(), &SilentReporter).unwrap();
    // 24 examples over 4 epochs would be 96 one-row steps.
    assert!(summary.finished && summary.steps < 96 / 2, "{} steps", summary.steps);
    let metrics = std::fs::read_to_string(dir.path().join("metrics.jsonl")).unwrap();
    let losses: Vec<f64> = metrics
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["type"] == "train")
        .map(|r| r["loss"].as_f64().unwrap())
        .collect();
    assert!(losses[0] > 5.0 && *losses.last().unwrap() < losses[0] - 1.0, "losses {losses:?}");
}

/// A run stopped after 10 steps and resumed must end where an uninterrupted 20-step run ends:
/// weights, optimiser moments, schedule and data cursor are all restored.
#[test]
fn stopped_and_resumed_run_matches_an_uninterrupted_one() {
    let (straight_dir, resumed_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let with_steps = |dir: &Path| {
        let mut recipe = smoke_recipe(dir);
        recipe.run.max_steps = Some(20);
        recipe.run.eval_every = 0;
        recipe.run.checkpoint_every = 0;
        recipe
    };
    let straight =
        train(&with_steps(straight_dir.path()), &smoke_path(), &TrainOptions::default(), &cpu_device(), &SilentReporter).unwrap();
    assert_eq!((straight.steps, straight.finished), (20, true));

    let recipe = with_steps(resumed_dir.path());
    let stop = TrainOptions { resume: false, stop_after: Some(10), ..TrainOptions::default() };
    let first = train(&recipe, &smoke_path(), &stop, &cpu_device(), &SilentReporter).unwrap();
    assert_eq!((first.steps, first.finished), (10, false));
    assert!(!resumed_dir.path().join("model.safetensors").exists());
    let resume = TrainOptions { resume: true, ..TrainOptions::default() };
    let second = train(&recipe, &smoke_path(), &resume, &cpu_device(), &SilentReporter).unwrap();
    assert_eq!((second.steps, second.finished), (20, true));

    let a = read_safetensors(&straight_dir.path().join("model.safetensors")).unwrap();
    let b = read_safetensors(&resumed_dir.path().join("model.safetensors")).unwrap();
    let initial = memkit_train::model::random_weights(&load(straight_dir.path()).config().clone(), recipe.run.seed);
    let mut worst = 0.0f32;
    for (name, tensor) in &a {
        worst = worst.max(max_abs_diff(&tensor.data, &b[name].data));
        // Every tensor moved in training, so equal results are not equal by accident.
        assert!(max_abs_diff(&tensor.data, &initial[name].data) > 1e-4, "{name} did not train");
    }
    #[allow(clippy::print_stderr)]
    {
        eprintln!("resume: max abs weight difference {worst:e}");
    }
    assert!(worst < 1e-5, "max abs difference {worst}");
}

/// LoRA: the base weights stay frozen, the adapters train, and the exported (merged) model
/// computes what the adapted model computes.
#[test]
fn lora_trains_adapters_only_and_merges_on_export() {
    let dir = tempfile::tempdir().unwrap();
    let mut recipe = smoke_recipe(dir.path());
    recipe.lora =
        Some(LoraConfig { rank: 4, alpha: 8.0, dropout: 0.1, targets: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()] });
    recipe.optim = toml::from_str("kind = \"adamw\"\nlr = 1e-2\nwarmup_steps = 2").unwrap();
    let summary = train(&recipe, &smoke_path(), &TrainOptions::default(), &cpu_device(), &SilentReporter).unwrap();
    assert!(summary.finished);

    let adapters = read_safetensors(&dir.path().join("checkpoints/step-000012/adapter_model.safetensors")).unwrap();
    assert_eq!(adapters.len(), 2 * 3 * 2); // A and B × 3 targets × 2 layers
    assert_eq!(adapters["model.layers.0.self_attn.q_proj.lora_A.weight"].shape, vec![4, 32]);
    assert!(adapters["model.layers.0.mlp.down_proj.lora_B.weight"].data.iter().any(|v| *v != 0.0), "B never trained");

    let base = BaseModel::from_source(&recipe.model, dir.path(), recipe.run.seed, &smoke_path()).unwrap();
    let exported = read_safetensors(&dir.path().join("model.safetensors")).unwrap();
    // Untargeted weights are the base's, bit for bit; targeted ones changed.
    assert_eq!(exported["model.layers.0.self_attn.k_proj.weight"], base.weights["model.layers.0.self_attn.k_proj.weight"]);
    assert_eq!(exported["model.embed_tokens.weight"], base.weights["model.embed_tokens.weight"]);
    assert!(
        max_abs_diff(
            &exported["model.layers.0.self_attn.q_proj.weight"].data,
            &base.weights["model.layers.0.self_attn.q_proj.weight"].data
        ) > 1e-4
    );

    // Base + adapters (dropout is off outside training) against the merged export.
    let mut with_adapters = base.weights.clone();
    with_adapters.extend(adapters);
    let lora = recipe.lora.as_ref();
    let adapted = Model::new(&base.config, &with_adapters, dir.path(), BuildOptions { lora, seed: 0 }, &cpu_device()).unwrap();
    let ids = [1, 10, 20, 30, 40, 50, 60, 2];
    let diff = max_abs_diff(&logits(&adapted, &ids), &logits(&load(dir.path()), &ids));
    assert!(diff < 1e-4, "merged export differs from the adapted model by {diff}");
}

/// Three full fine-tuning steps of the packaged SmolLM2-135M (dequantised from its GGUF) on
/// the tiny fixtures; prints tokens/s. Opt-in: it converts and loads a real model (~1 GB f32).
#[test]
#[ignore = "slow: run with --ignored when smollm2-135m is installed"]
fn smollm2_trains_a_few_steps() {
    let Some(_) = memkit_infer::models::installed_for_tests(memkit_infer::models::SMOLLM2_135M.name) else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut recipe = smoke_recipe(dir.path());
    recipe.model = memkit_train::recipe::ModelSource::Package { name: "smollm2-135m".into() };
    recipe.optim = toml::from_str("kind = \"adamw\"\nlr = 5e-5").unwrap();
    recipe.run.max_steps = Some(3);
    recipe.run.batch_size = 2;
    recipe.run.grad_accum = 1;
    recipe.run.eval_every = 0;
    recipe.run.checkpoint_every = 0;
    let summary =
        train(&recipe, &smoke_path(), &TrainOptions { stop_after: Some(3), ..TrainOptions::default() }, &cpu_device(), &SilentReporter)
            .unwrap();
    let metrics = std::fs::read_to_string(dir.path().join("metrics.jsonl")).unwrap();
    #[allow(clippy::print_stderr)]
    {
        eprintln!("smollm2: {:.1} tokens/s over {} steps\n{metrics}", summary.tokens_per_second, summary.steps);
    }
    assert!(summary.last_loss.is_some_and(f64::is_finite));
}

/// Prompt distillation's round trip: the template a dataset was rendered with
/// (`extract_prompt.j2` beside `train.jsonl`) and the window it was cut into
/// (`extract_window.json`) go into the exported checkpoint, from there into the GGUF's metadata
/// and back out of it, and the extractor loaded from that GGUF asks with the template.
#[test]
fn the_data_prompt_and_window_travel_to_the_checkpoint_the_gguf_and_the_extractor() {
    use memkit_infer::convert::{ConvertOptions, OutType, gguf_to_hf, hf_to_gguf};
    use memkit_infer::extract::LocalExtractor;
    use memkit_infer::generate::EngineOptions;
    use memkit_infer::{ExtractConfig, LlamaEngine};
    use memkit_prompt::{PromptName, TRAINED_PROMPT_FILE, TRAINED_WINDOW_FILE, TrainedWindow};

    let data = tempfile::tempdir().unwrap();
    for file in ["train.jsonl", "valid.jsonl"] {
        std::fs::copy(common::fixtures().join(file), data.path().join(file)).unwrap();
    }
    let template = PromptName::Student.embedded_source();
    std::fs::write(data.path().join(TRAINED_PROMPT_FILE), template).unwrap();
    let window = TrainedWindow { size: 2, overlap: 1 };
    std::fs::write(data.path().join(TRAINED_WINDOW_FILE), window.to_json()).unwrap();
    let run = tempfile::tempdir().unwrap();
    let mut recipe = smoke_recipe(run.path());
    recipe.data.dir = vec![data.path().to_path_buf()];
    recipe.run.max_steps = Some(1);
    assert!(train(&recipe, &smoke_path(), &TrainOptions::default(), &cpu_device(), &SilentReporter).unwrap().finished);
    assert_eq!(std::fs::read_to_string(run.path().join(TRAINED_PROMPT_FILE)).unwrap(), template);
    assert_eq!(TrainedWindow::read(run.path()).unwrap(), Some(window));
    let card = std::fs::read_to_string(run.path().join("README.md")).unwrap();
    assert!(card.contains(TRAINED_PROMPT_FILE) && card.contains("--window 2 --overlap 1"), "{card}");

    let gguf = run.path().join("model.gguf");
    hf_to_gguf(run.path(), &gguf, &ConvertOptions { dtype: OutType::F32, name: None }).unwrap();
    let back = tempfile::tempdir().unwrap();
    gguf_to_hf(&gguf, back.path()).unwrap();
    assert_eq!(std::fs::read_to_string(back.path().join(TRAINED_PROMPT_FILE)).unwrap(), template);
    assert_eq!(memkit_infer::convert::trained_window(&gguf).unwrap(), Some(window));
    assert_eq!(TrainedWindow::read(back.path()).unwrap(), Some(window));

    let options = EngineOptions { n_ctx: 512, n_threads: 1, ..EngineOptions::default() };
    let extractor = LocalExtractor::new(LlamaEngine::load(&gguf, options).unwrap(), ExtractConfig::default()).unwrap();
    assert_eq!(extractor.trained_prompt(), Some(template));
}

/// `[data] dir` with two folders: their examples are trained on together (the card counts both
/// and names both folders), and folders whose windows differ are an error naming the one that
/// differs, before any step.
#[test]
fn several_data_folders_are_trained_on_together_and_must_agree() {
    use memkit_prompt::{PromptName, TRAINED_PROMPT_FILE, TRAINED_WINDOW_FILE, TrainedWindow};

    let folder = |window: TrainedWindow| {
        let data = tempfile::tempdir().unwrap();
        for file in ["train.jsonl", "valid.jsonl"] {
            std::fs::copy(common::fixtures().join(file), data.path().join(file)).unwrap();
        }
        std::fs::write(data.path().join(TRAINED_PROMPT_FILE), PromptName::Student.embedded_source()).unwrap();
        std::fs::write(data.path().join(TRAINED_WINDOW_FILE), window.to_json()).unwrap();
        data
    };
    let examples =
        std::fs::read_to_string(common::fixtures().join("train.jsonl")).unwrap().lines().filter(|l| !l.trim().is_empty()).count();
    let (a, b) = (folder(TrainedWindow { size: 2, overlap: 1 }), folder(TrainedWindow { size: 2, overlap: 1 }));
    let run = tempfile::tempdir().unwrap();
    let mut recipe = smoke_recipe(run.path());
    recipe.data.dir = vec![a.path().to_path_buf(), b.path().to_path_buf()];
    recipe.run.max_steps = Some(1);
    assert!(train(&recipe, &smoke_path(), &TrainOptions::default(), &cpu_device(), &SilentReporter).unwrap().finished);
    let card = std::fs::read_to_string(run.path().join("README.md")).unwrap();
    assert!(card.contains(&format!("on {} examples", 2 * examples)), "{card}");
    assert!(card.contains(&format!("`{}`, `{}`", a.path().display(), b.path().display())), "{card}");

    let other = folder(TrainedWindow { size: 3, overlap: 1 });
    let run = tempfile::tempdir().unwrap();
    let mut recipe = smoke_recipe(run.path());
    recipe.data.dir = vec![a.path().to_path_buf(), other.path().to_path_buf()];
    let error = train(&recipe, &smoke_path(), &TrainOptions::default(), &cpu_device(), &SilentReporter).unwrap_err().to_string();
    assert!(error.contains(&other.path().join(TRAINED_WINDOW_FILE).display().to_string()) && error.contains("differs from"), "{error}");
}

/// A scorer that reads the export it is given: the score peaks at step 8 of the smoke run's
/// evaluations (0, 4, 8, 12), and it checks that each export is a whole model folder.
#[derive(Debug)]
struct PeakAtEight;

impl memkit_train::Scorer for PeakAtEight {
    fn score(&self, dir: &Path, step: usize) -> Result<memkit_train::Score, String> {
        let weights = read_safetensors(&dir.join("model.safetensors")).map_err(|e| e.to_string())?;
        if !dir.join("config.json").is_file() || weights.is_empty() {
            return Err(format!("{} is not a model folder", dir.display()));
        }
        let value = -(step as f64 - 8.0).powi(2);
        Ok(memkit_train::Score { step, value, metrics: serde_json::json!({ "value": value }) })
    }
}

/// The best-scoring export is kept in `best/`, every score is logged, and a resumed run still
/// knows the best score it had.
#[test]
fn the_best_scoring_export_is_kept_across_a_resume() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = smoke_recipe(dir.path());
    let scorer: std::sync::Arc<dyn memkit_train::Scorer> = std::sync::Arc::new(PeakAtEight);
    let stop = TrainOptions { stop_after: Some(10), scorer: Some(scorer.clone()), ..TrainOptions::default() };
    train(&recipe, &smoke_path(), &stop, &cpu_device(), &SilentReporter).unwrap();
    let best: memkit_train::Score = serde_json::from_str(&std::fs::read_to_string(dir.path().join("best/score.json")).unwrap()).unwrap();
    assert_eq!(best.step, 8);
    let at_eight = read_safetensors(&dir.path().join("best/model.safetensors")).unwrap();

    let resume = TrainOptions { resume: true, scorer: Some(scorer), ..TrainOptions::default() };
    let summary = train(&recipe, &smoke_path(), &resume, &cpu_device(), &SilentReporter).unwrap();
    assert_eq!(summary.best.as_ref().map(|b| b.step), Some(8), "step 12 scores lower than step 8");
    assert_eq!(read_safetensors(&dir.path().join("best/model.safetensors")).unwrap(), at_eight);
    assert!(!dir.path().join("scored").exists(), "a losing export is deleted");
    let metrics = std::fs::read_to_string(dir.path().join("metrics.jsonl")).unwrap();
    let scored: Vec<u64> = metrics
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["type"] == "score")
        .map(|r| r["step"].as_u64().unwrap())
        .collect();
    assert_eq!(scored, [0, 4, 8, 12]); // the base first
    // The final export is the last model, not the best one.
    assert_ne!(read_safetensors(&dir.path().join("model.safetensors")).unwrap(), at_eight);
    assert!(std::fs::read_to_string(dir.path().join("README.md")).unwrap().contains("after step 8"));
}

/// `score.base = false` skips the base model's score (slow for a model that has not learnt the
/// task), but not its held-out loss.
#[test]
fn the_base_model_is_scored_unless_the_recipe_says_not() {
    let dir = tempfile::tempdir().unwrap();
    let mut recipe = smoke_recipe(dir.path());
    recipe.score = Some(memkit_train::recipe::ScoreConfig { base: false, ..memkit_train::recipe::ScoreConfig::new(1) });
    recipe.run.max_steps = Some(4);
    let options = TrainOptions { scorer: Some(std::sync::Arc::new(PeakAtEight)), ..TrainOptions::default() };
    train(&recipe, &smoke_path(), &options, &cpu_device(), &SilentReporter).unwrap();
    let metrics = std::fs::read_to_string(dir.path().join("metrics.jsonl")).unwrap();
    let steps = |kind: &str| -> Vec<u64> {
        metrics
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|r| r["type"] == kind)
            .map(|r| r["step"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(steps("score"), [4]);
    assert_eq!(steps("eval").first(), Some(&0), "the base model's held-out loss is still taken");
}
