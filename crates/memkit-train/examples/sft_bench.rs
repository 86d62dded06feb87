//! SFT throughput of memkit's burn trainer next to PyTorch + Hugging Face transformers, measured
//! in the same run on the same model shape (`just bench-train`).
//!
//! One step = forward, causal-LM cross-entropy over every position, backward, AdamW, on a
//! SmolLM2-135M-shaped Llama with random weights (throughput does not depend on them). Burn
//! (flex; LibTorch's CPU and CUDA kernels when built with `--features tch`; CubeCL's CUDA with
//! `--features cuda`) and PyTorch
//! alternate for `--rounds` rounds so background load hits both alike; the table gives tokens/s
//! per round, the medians and their ratio, and each engine's loss after the first step: every
//! engine starts from the same random weights and ids, so the burn backends' losses agree.
//!
//! ```text
//! cargo run -p memkit-train --example sft_bench -- [--batch 4] [--seq 256] [--steps 3]
//!     [--warmup 1] [--rounds 2] [--python PY] [--config config.json]
//!     [--backends flex,cuda] [--torch-device cuda]
//! ```
//!
//! `--python` (or `MEMKIT_BENCH_PYTHON`) is an interpreter with torch and transformers
//! (`just bench-train` passes the one `just venv` makes); without one only burn is measured. `--backends`
//! picks among the burn backends of this build (default: the CPU ones; `libtorch-cuda` and
//! `cuda` need an NVIDIA GPU); `--torch-device` is where PyTorch
//! runs (default `cpu`). Steps are timed to the device's end of work (`Device::sync`,
//! `torch.cuda.synchronize`).

// A benchmark program: printing its table is its job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use burn::optim::{AdamWConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor, TensorData};
use memkit_train::Backend;
use memkit_train::model::{BuildOptions, Config, Model, random_weights};

/// SmolLM2-135M-Instruct's `config.json` (the fields the model reads).
const SMOLLM2_135M: &str = r#"{
  "model_type": "llama", "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
  "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
  "max_position_embeddings": 8192, "rope_theta": 100000.0, "rms_norm_eps": 1e-05,
  "tie_word_embeddings": true, "attention_bias": false
}"#;

struct Args {
    batch: usize,
    seq: usize,
    steps: usize,
    warmup: usize,
    rounds: usize,
    python: Option<PathBuf>,
    config: Option<PathBuf>,
    backends: Vec<Backend>,
    torch_device: String,
}

fn parse_args() -> Result<Args, String> {
    let default_python = std::env::var_os("MEMKIT_BENCH_PYTHON").map(PathBuf::from);
    let mut args = Args {
        batch: 4,
        seq: 256,
        steps: 3,
        warmup: 1,
        rounds: 2,
        python: default_python,
        config: None,
        backends: Backend::all().into_iter().filter(|b| !b.needs_gpu()).collect(),
        torch_device: "cpu".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--batch" => args.batch = number(value()?)?,
            "--seq" => args.seq = number(value()?)?,
            "--steps" => args.steps = number(value()?)?,
            "--warmup" => args.warmup = number(value()?)?,
            "--rounds" => args.rounds = number(value()?)?,
            "--python" => args.python = Some(PathBuf::from(value()?)),
            "--config" => args.config = Some(PathBuf::from(value()?)),
            "--backends" => args.backends = value()?.split(',').map(str::parse).collect::<Result<_, _>>()?,
            "--torch-device" => args.torch_device = value()?,
            "-h" | "--help" => {
                println!(
                    "{}",
                    include_str!("sft_bench.rs")
                        .lines()
                        .take_while(|l| l.starts_with("//!"))
                        .map(|l| l.trim_start_matches("//! ").trim_start_matches("//!"))
                        .collect::<Vec<_>>()
                        .join("\n")
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    if args.batch == 0 || args.seq < 2 || args.steps == 0 || args.rounds == 0 {
        return Err("--batch, --steps and --rounds must be positive and --seq at least 2".into());
    }
    Ok(args)
}

/// Tokens per second of burn (autodiff) over `steps` timed steps, and the loss of the first step.
fn burn_round(backend: Backend, cfg: &Config, args: &Args, seed: u64) -> (f64, f32) {
    let device = backend.device().autodiff();
    let model = Model::new(cfg, &random_weights(cfg, seed), Path::new("random"), BuildOptions { lora: None, seed }, &device)
        .expect("random weights fit the config");
    let mut model = model;
    let mut optimizer: ModuleOptimizer = AdamWConfig::new().with_weight_decay(0.01).init();
    // Random ids from a fixed linear congruential sequence: [batch, seq + 1], inputs and targets shifted by one.
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let ids: Vec<i64> = (0..args.batch * (args.seq + 1))
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) % cfg.vocab_size as u64) as i64
        })
        .collect();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [args.batch, args.seq + 1]), &device);
    let inputs = ids.clone().slice([0..args.batch, 0..args.seq]);
    let targets = ids.slice([0..args.batch, 1..args.seq + 1]);
    let (mut seconds, mut first_loss) = (0.0, f32::NAN);
    for step in 0..args.warmup + args.steps {
        let started = Instant::now();
        let log_probs = log_softmax(model.forward(inputs.clone()), 2);
        let loss = log_probs.gather(2, targets.clone().unsqueeze_dim::<3>(2)).mean().neg();
        if step == 0 {
            first_loss = loss.clone().into_scalar::<f32>();
        }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optimizer.step(1e-4, model, grads);
        device.sync().expect("the device finishes the step");
        if step >= args.warmup {
            seconds += started.elapsed().as_secs_f64();
        }
    }
    ((args.batch * args.seq * args.steps) as f64 / seconds, first_loss)
}

/// Tokens per second of PyTorch + transformers (benches/sft_torch.py) and its engine string.
fn torch_round(python: &Path, config: &Path, args: &Args) -> Result<(f64, String), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/sft_torch.py");
    let out = Command::new(python)
        .arg(&script)
        .args(["--config", &config.to_string_lossy()])
        .args(["--batch", &args.batch.to_string(), "--seq", &args.seq.to_string()])
        .args(["--steps", &args.steps.to_string(), "--warmup", &args.warmup.to_string()])
        .args(["--device", &args.torch_device])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !out.status.success() {
        return Err(format!("{} {} failed:\n{}", python.display(), script.display(), String::from_utf8_lossy(&out.stderr)));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("{}: not JSON ({e}): {line}", script.display()))?;
    let tps = v["tokens_per_s"].as_f64().ok_or_else(|| format!("no tokens_per_s in {line}"))?;
    Ok((
        tps,
        format!(
            "{} (attention {}, {})",
            v["engine"].as_str().unwrap_or("?"),
            v["attention"].as_str().unwrap_or("?"),
            match v["device"].as_str() {
                Some("cpu") | None => format!("{} threads", v["threads"]),
                Some(device) => device.to_owned(),
            }
        ),
    ))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("sft_bench: {e}");
        std::process::exit(2);
    });
    let text = match &args.config {
        Some(p) => std::fs::read_to_string(p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display())),
        None => SMOLLM2_135M.to_string(),
    };
    let json: serde_json::Value = serde_json::from_str(&text).expect("config.json is JSON");
    let cfg = Config::from_json(&json, args.config.as_deref().unwrap_or(Path::new("SmolLM2-135M"))).expect("a Llama/Qwen config");
    let config_file = std::env::temp_dir().join(format!("memkit-sft-bench-{}.json", std::process::id()));
    std::fs::write(&config_file, &text).expect("temp dir is writable");
    println!(
        "SFT step (fwd + bwd + AdamW), {} layers × {} wide, vocab {}, batch {} × {} tokens, {} timed steps after {} warm-up, {} rounds",
        cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size, args.batch, args.seq, args.steps, args.warmup, args.rounds
    );
    let backends = args.backends.clone();
    let (mut burn, mut torch, mut engine) = (vec![Vec::new(); backends.len()], Vec::new(), None);
    for round in 0..args.rounds {
        for (i, backend) in backends.iter().enumerate() {
            let (b, loss) = burn_round(*backend, &cfg, &args, round as u64);
            println!("round {}: burn {:<8} {b:8.1} tokens/s (first-step loss {loss:.6})", round + 1, backend.name());
            burn[i].push(b);
        }
        match &args.python {
            Some(python) => match torch_round(python, &config_file, &args) {
                Ok((t, e)) => {
                    println!("round {}: pytorch       {t:8.1} tokens/s", round + 1);
                    torch.push(t);
                    engine = Some(e);
                }
                Err(e) => {
                    eprintln!("sft_bench: {e}");
                    std::process::exit(1);
                }
            },
            None if round == 0 => eprintln!("sft_bench: no Python with torch (--python or MEMKIT_BENCH_PYTHON): burn only"),
            None => {}
        }
    }
    let _ = std::fs::remove_file(&config_file);
    println!("\n| engine | tokens/s (median) | ratio to PyTorch |\n|---|---|---|");
    let t = (!torch.is_empty()).then(|| median(torch));
    for (backend, runs) in backends.iter().zip(burn) {
        let b = median(runs);
        let ratio = t.map_or_else(|| "n/a".to_string(), |t| format!("{:.2}×", b / t));
        println!("| burn 0.22.1 {} | {b:.1} | {ratio} |", backend.name());
    }
    if let Some(t) = t {
        println!("| {} | {t:.1} | 1.00× |", engine.unwrap_or_default());
    }
}
