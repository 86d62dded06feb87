//! SFT throughput and peak memory of memkit's burn trainer next to PyTorch + Hugging Face
//! transformers, measured in the same run on the same model shape (`just bench-train`).
//!
//! One step = forward, causal-LM cross-entropy over every position, backward, AdamW, on a
//! SmolLM2-135M-shaped Llama with random weights (throughput does not depend on them). Burn
//! (flex; LibTorch's CPU and CUDA kernels when built with `--features tch`; CubeCL's CUDA with
//! `--features cuda`) and PyTorch alternate for `--rounds` rounds, each round in a fresh process,
//! so background load hits every engine alike and each one's peak RSS is its own. The table
//! gives tokens/s per round, the medians, their ratio, peak RSS, and each engine's loss after the
//! first step: every burn backend starts from the same random weights and ids, so their losses
//! agree.
//!
//! ```text
//! cargo run -p memkit-train --example sft_bench -- [--shapes 4x256,1x2048] [--steps 3]
//!     [--warmup 1] [--rounds 2] [--python PY] [--config config.json]
//!     [--backends flex,cuda] [--attention flash,materialised] [--torch-device cuda]
//!     [--checkpointing] [--json results.json]
//! ```
//!
//! `--shapes` lists batch × sequence-length shapes (default `4x256`); `BxSpL` packs examples of
//! L tokens into each row of S (positions restart and attention stays within each example: burn
//! passes the segments to its kernel, PyTorch a 4-D block-diagonal mask with `position_ids`, which
//! its SDPA reads as a dense mask), the shape of `[data] packing = true`. `--python` (or
//! `MEMKIT_BENCH_PYTHON`) is an interpreter with torch and transformers (`just bench-train`
//! passes the one `just venv` makes); without one only burn is measured. `--backends` picks among
//! the burn backends of this build (default: the CPU ones; `libtorch-cuda` and `cuda` need an
//! NVIDIA GPU); `--attention` how the CPU backends train attention: `flash` (the default: memkit's
//! kernel with its own backward on flex, torch's fused CPU attention and its backward on LibTorch)
//! and/or `materialised` (scores, mask, softmax and ·V as burn ops, each kept for backward: what
//! both trained with before); the GPU backends train the materialised ops.
//! `--torch-device` is where PyTorch runs (default `cpu`). `--checkpointing` turns
//! on burn's balanced gradient checkpointing and PyTorch's (less memory, more time). Steps are
//! timed to the device's end of work (`Device::sync`, `torch.cuda.synchronize`). Peak RSS is the
//! process's high-water mark (`VmHWM` for burn, `ru_maxrss` for PyTorch), model and optimizer
//! state included. `--json` also writes every figure to a file (`just bench-train` writes
//! `benches/results/sft.json`).

// A benchmark program: printing its table is its job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use burn::optim::{AdamWConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor, TensorData};
use memkit_train::Backend;
use memkit_train::model::{BuildOptions, Config, Model, Packing, random_weights};
use serde_json::json;

/// SmolLM2-135M-Instruct's `config.json` (the fields the model reads).
const SMOLLM2_135M: &str = r#"{
  "model_type": "llama", "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
  "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
  "max_position_embeddings": 8192, "rope_theta": 100000.0, "rms_norm_eps": 1e-05,
  "tie_word_embeddings": true, "attention_bias": false
}"#;

/// A bench shape: rows × tokens, optionally packed with examples of `pack` tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    batch: usize,
    seq: usize,
    pack: Option<usize>,
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.batch, self.seq)?;
        self.pack.map_or(Ok(()), |l| write!(f, "p{l}"))
    }
}

struct Args {
    shapes: Vec<Shape>,
    steps: usize,
    warmup: usize,
    rounds: usize,
    python: Option<PathBuf>,
    config: Option<PathBuf>,
    backends: Vec<Backend>,
    /// The CPU backends' attention kernels (`MEMKIT_ATTENTION` in each worker).
    attention: Vec<String>,
    torch_device: String,
    checkpointing: bool,
    json: Option<PathBuf>,
    /// Internal: run one burn round of `shapes[0]` with this backend and seed, print its JSON line.
    worker: Option<(Backend, u64)>,
}

fn parse_shape(text: &str) -> Result<Shape, String> {
    let (b, rest) =
        text.split_once('x').ok_or_else(|| format!("shape {text:?} is not BATCHxSEQ or BATCHxSEQpLEN (e.g. 4x256, 2x1024p400)"))?;
    let (s, pack) = match rest.split_once('p') {
        Some((s, l)) => (s, Some(l.parse::<usize>().map_err(|e| format!("shape {text:?}: packed example length: {e}"))?)),
        None => (rest, None),
    };
    let batch = b.parse::<usize>().map_err(|e| format!("shape {text:?}: batch: {e}"))?;
    let seq = s.parse::<usize>().map_err(|e| format!("shape {text:?}: sequence length: {e}"))?;
    if batch == 0 || seq < 2 || pack.is_some_and(|l| l == 0 || l > seq) {
        return Err(format!("shape {text:?}: batch must be positive, the sequence at least 2 tokens, a packed example 1 to SEQ"));
    }
    Ok(Shape { batch, seq, pack })
}

fn parse_args() -> Result<Args, String> {
    let default_python = std::env::var_os("MEMKIT_BENCH_PYTHON").map(PathBuf::from);
    let mut args = Args {
        shapes: vec![Shape { batch: 4, seq: 256, pack: None }],
        steps: 3,
        warmup: 1,
        rounds: 2,
        python: default_python,
        config: None,
        backends: Backend::all().into_iter().filter(|b| !b.needs_gpu()).collect(),
        attention: vec!["flash".into()],
        torch_device: "cpu".into(),
        checkpointing: false,
        json: None,
        worker: None,
    };
    let (mut worker, mut seed) = (None, 0u64);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--shapes" => args.shapes = value()?.split(',').map(parse_shape).collect::<Result<_, _>>()?,
            "--steps" => args.steps = number(value()?)?,
            "--warmup" => args.warmup = number(value()?)?,
            "--rounds" => args.rounds = number(value()?)?,
            "--python" => args.python = Some(PathBuf::from(value()?)),
            "--config" => args.config = Some(PathBuf::from(value()?)),
            "--backends" => args.backends = value()?.split(',').map(str::parse).collect::<Result<_, _>>()?,
            "--attention" => {
                args.attention = value()?.split(',').map(str::to_owned).collect();
                if let Some(bad) = args.attention.iter().find(|a| !["flash", "materialised"].contains(&a.as_str())) {
                    return Err(format!("--attention {bad:?}: flash or materialised"));
                }
            }
            "--torch-device" => args.torch_device = value()?,
            "--checkpointing" => args.checkpointing = true,
            "--json" => args.json = Some(PathBuf::from(value()?)),
            "--worker" => worker = Some(value()?.parse::<Backend>()?),
            "--seed" => seed = number(value()?)? as u64,
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
    args.worker = worker.map(|b| (b, seed));
    if args.steps == 0 || args.rounds == 0 || args.shapes.is_empty() {
        return Err("--steps and --rounds must be positive and --shapes non-empty".into());
    }
    Ok(args)
}

/// One engine's figures for one round.
struct Round {
    tokens_per_s: f64,
    loss: f64,
    peak_rss_mib: f64,
    /// Mean seconds per timed step in forward, backward and the optimizer.
    step_s: serde_json::Value,
}

impl Round {
    fn from_json(line: &str, who: &str) -> Result<Self, String> {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("{who}: not JSON ({e}): {line}"))?;
        let field = |k: &str| v[k].as_f64().ok_or_else(|| format!("{who}: no {k} in {line}"));
        let step_s = v["step_s"].clone();
        Ok(Round { tokens_per_s: field("tokens_per_s")?, loss: field("loss")?, peak_rss_mib: field("peak_rss_mib")?, step_s })
    }
}

/// This process's peak resident set (`VmHWM`), in MiB; 0 where /proc is missing.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// The worker: one burn round (autodiff) of `batch × seq` over `steps` timed steps; prints
/// tokens/s, the first step's loss and the peak RSS as one JSON line.
fn burn_worker(backend: Backend, cfg: &Config, args: &Args, seed: u64) {
    let Shape { batch, seq, pack } = args.shapes[0];
    // Packed rows: examples of `pack` tokens one after the other (the last one cut at the row's end).
    let packing = pack.map(|l| Packing {
        positions: (0..batch * seq).map(|t| (t % seq % l) as u32).collect(),
        starts: (0..batch * seq).map(|t| (t % seq / l * l) as u32).collect(),
    });
    let device = backend.device().autodiff();
    let device = if args.checkpointing { device.gradient_checkpointing() } else { device };
    let mut model = Model::new(cfg, &random_weights(cfg, seed), Path::new("random"), BuildOptions { lora: None, seed }, &device)
        .expect("random weights fit the config");
    let mut optimizer: ModuleOptimizer = AdamWConfig::new().with_weight_decay(0.01).init();
    // Random ids from a fixed linear congruential sequence: [batch, seq + 1], inputs and targets shifted by one.
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let ids: Vec<i64> = (0..batch * (seq + 1))
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) % cfg.vocab_size as u64) as i64
        })
        .collect();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [batch, seq + 1]), &device);
    let inputs = ids.clone().slice([0..batch, 0..seq]);
    let targets = ids.slice([0..batch, 1..seq + 1]);
    // Seconds of the timed steps in forward (to the loss), backward and the optimizer, each
    // phase timed to the device's end of work.
    let (mut phases, mut first_loss) = ([0.0f64; 3], f32::NAN);
    for step in 0..args.warmup + args.steps {
        let mut mark = Instant::now();
        let mut lap = |phase: usize, device: &burn::tensor::Device| {
            device.sync().expect("the device finishes the phase");
            if step >= args.warmup {
                phases[phase] += mark.elapsed().as_secs_f64();
            }
            mark = Instant::now();
        };
        let log_probs = log_softmax(model.logits(model.hidden_packed(inputs.clone(), packing.as_ref())), 2);
        let loss = log_probs.gather(2, targets.clone().unsqueeze_dim::<3>(2)).mean().neg();
        if step == 0 {
            first_loss = loss.clone().into_scalar::<f32>();
        }
        lap(0, &device);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        lap(1, &device);
        model = optimizer.step(1e-4, model, grads);
        lap(2, &device);
    }
    let seconds: f64 = phases.iter().sum();
    let tokens_per_s = (batch * seq * args.steps) as f64 / seconds;
    let [forward, backward, optimizer] = phases.map(|p| p / args.steps as f64);
    println!(
        "{}",
        json!({
            "tokens_per_s": tokens_per_s, "loss": first_loss, "peak_rss_mib": peak_rss_mib(),
            "step_s": { "forward": forward, "backward": backward, "optimizer": optimizer },
        })
    );
}

/// Runs `command` and reads the last line of its stdout as a [`Round`], plus the rest of that JSON.
fn run_round(mut command: Command, who: &str) -> Result<(Round, serde_json::Value), String> {
    let out = command.output().map_err(|e| format!("cannot run {who}: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        // SIGKILL with no message of its own is the kernel's out-of-memory killer.
        let cause = match std::os::unix::process::ExitStatusExt::signal(&out.status) {
            Some(9) => ": out of memory (the kernel's OOM killer, unless killed by hand)",
            _ => "",
        };
        return Err(format!("{who} {}{cause}\n{stderr}", out.status));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let round = Round::from_json(line, who)?;
    Ok((round, serde_json::from_str(line).unwrap_or_default()))
}

/// The burn engines to measure: each CPU backend once per attention kernel (both have a flash
/// kernel: memkit's on flex, torch's on LibTorch); the GPU backends train the materialised ops.
fn burn_engines(args: &Args) -> Vec<(Backend, &str)> {
    let mut engines = Vec::new();
    for &backend in &args.backends {
        if backend.needs_gpu() {
            engines.push((backend, "materialised"));
        } else {
            engines.extend(args.attention.iter().map(|a| (backend, a.as_str())));
        }
    }
    engines
}

/// An engine's name in the table.
fn engine_name((backend, attention): (Backend, &str)) -> String {
    format!("{} ({attention} attention)", backend.name())
}

/// A burn round in a fresh process (this program with `--worker`).
fn burn_round((backend, attention): (Backend, &str), shape: Shape, config: &Path, args: &Args, seed: u64) -> Result<Round, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut command = Command::new(exe);
    command
        .env("MEMKIT_ATTENTION", attention)
        .args(["--worker", backend.name(), "--seed", &seed.to_string(), "--shapes", &shape.to_string()])
        .args(["--config", &config.to_string_lossy()])
        .args(["--steps", &args.steps.to_string(), "--warmup", &args.warmup.to_string()]);
    if args.checkpointing {
        command.arg("--checkpointing");
    }
    run_round(command, &format!("burn {} worker", engine_name((backend, attention)))).map(|(round, _)| round)
}

/// A PyTorch + transformers round (benches/sft_torch.py) and its engine string.
fn torch_round(python: &Path, Shape { batch, seq, pack }: Shape, config: &Path, args: &Args) -> Result<(Round, String), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/sft_torch.py");
    let mut command = Command::new(python);
    command
        .arg(&script)
        .args(["--config", &config.to_string_lossy()])
        .args(["--batch", &batch.to_string(), "--seq", &seq.to_string()])
        .args(["--steps", &args.steps.to_string(), "--warmup", &args.warmup.to_string()])
        .args(["--device", &args.torch_device]);
    if args.checkpointing {
        command.arg("--checkpointing");
    }
    if let Some(l) = pack {
        command.args(["--pack", &l.to_string()]);
    }
    let (round, v) = run_round(command, &format!("{} {}", python.display(), script.display()))?;
    let engine = format!(
        "{} (attention {}, {})",
        v["engine"].as_str().unwrap_or("?"),
        v["attention"].as_str().unwrap_or("?"),
        match v["device"].as_str() {
            Some("cpu") | None => format!("{} threads", v["threads"]),
            Some(device) => device.to_owned(),
        }
    );
    Ok((round, engine))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn fail(message: String) -> ! {
    eprintln!("sft_bench: {message}");
    std::process::exit(1);
}

/// Measures one shape: every engine, `rounds` times, alternating. Returns its JSON record.
fn bench_shape(shape: Shape, config: &Path, args: &Args) -> serde_json::Value {
    let Shape { batch, seq, pack } = shape;
    match pack {
        Some(l) => println!("\n## batch {batch} × {seq} tokens, packed with examples of {l}"),
        None => println!("\n## batch {batch} × {seq} tokens"),
    }
    let engines = burn_engines(args);
    let mut burn: Vec<Vec<Round>> = engines.iter().map(|_| Vec::new()).collect();
    // A burn round that fails (a shape that does not fit in memory gets the worker killed) is
    // recorded as that backend's result for the shape; the other engines still run.
    let mut failed: Vec<Option<String>> = engines.iter().map(|_| None).collect();
    let (mut torch, mut engine) = (Vec::new(), None);
    for round in 0..args.rounds {
        for (i, &engine) in engines.iter().enumerate() {
            if failed[i].is_some() {
                continue;
            }
            match burn_round(engine, shape, config, args, round as u64) {
                Ok(r) => {
                    println!(
                        "round {}: burn {:<28} {:8.1} tokens/s, peak RSS {:7.0} MiB (first-step loss {:.6})",
                        round + 1,
                        engine_name(engine),
                        r.tokens_per_s,
                        r.peak_rss_mib,
                        r.loss
                    );
                    burn[i].push(r);
                }
                Err(e) => {
                    println!("round {}: burn {:<28} failed: {e}", round + 1, engine_name(engine));
                    failed[i] = Some(e);
                }
            }
        }
        match &args.python {
            Some(python) => {
                let (r, e) = torch_round(python, shape, config, args).unwrap_or_else(|e| fail(e));
                println!("round {}: pytorch{:28} {:8.1} tokens/s, peak RSS {:7.0} MiB", round + 1, "", r.tokens_per_s, r.peak_rss_mib);
                torch.push(r);
                engine = Some(e);
            }
            None if round == 0 => eprintln!("sft_bench: no Python with torch (--python or MEMKIT_BENCH_PYTHON): burn only"),
            None => {}
        }
    }
    let summary = |name: String, rounds: &[Round], peer: Option<f64>| {
        let tps: Vec<f64> = rounds.iter().map(|r| r.tokens_per_s).collect();
        let m = median(tps.clone());
        let rss = rounds.iter().map(|r| r.peak_rss_mib).fold(0.0, f64::max);
        json!({
            "engine": name, "tokens_per_s": tps, "median_tokens_per_s": m,
            "ratio_to_pytorch": peer.map(|t| m / t), "peak_rss_mib": rss, "first_step_loss": rounds[0].loss,
            "step_s": rounds.iter().map(|r| r.step_s.clone()).collect::<Vec<_>>(),
        })
    };
    let t = (!torch.is_empty()).then(|| median(torch.iter().map(|r| r.tokens_per_s).collect()));
    let mut engines: Vec<serde_json::Value> = engines
        .iter()
        .zip(&burn)
        .zip(&failed)
        .map(|((&engine, rounds), error)| {
            let name = format!("burn 0.22.1 {}", engine_name(engine));
            match error {
                Some(error) if rounds.is_empty() => json!({ "engine": name, "error": error }),
                _ => summary(name, rounds, t),
            }
        })
        .collect();
    if let Some(e) = engine {
        engines.push(summary(e, &torch, t));
    }
    println!(
        "\n| engine | tokens/s (median) | ratio to PyTorch | peak RSS MiB | forward / backward / optimizer s (last round) |\n|---|---:|---:|---:|---|"
    );
    for e in &engines {
        if let Some(error) = e["error"].as_str() {
            println!("| {} | failed: {} | | | |", e["engine"].as_str().unwrap_or("?"), error.lines().next().unwrap_or_default());
            continue;
        }
        let ratio = e["ratio_to_pytorch"].as_f64().map_or_else(|| "n/a".to_string(), |r| format!("{r:.2}×"));
        let number = |k: &str| e[k].as_f64().unwrap_or(f64::NAN);
        let last = e["step_s"].as_array().and_then(|r| r.last()).cloned().unwrap_or_default();
        let phase = |k: &str| last[k].as_f64().map_or_else(|| "–".to_string(), |s| format!("{s:.2}"));
        println!(
            "| {} | {:.1} | {ratio} | {:.0} | {} / {} / {} |",
            e["engine"].as_str().unwrap_or("?"),
            number("median_tokens_per_s"),
            number("peak_rss_mib"),
            phase("forward"),
            phase("backward"),
            phase("optimizer")
        );
    }
    json!({ "batch": batch, "seq": seq, "packed_example_tokens": pack, "engines": engines })
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("sft_bench: {e}");
        std::process::exit(2);
    });
    let text = match &args.config {
        Some(p) => std::fs::read_to_string(p).unwrap_or_else(|e| fail(format!("cannot read {}: {e}", p.display()))),
        None => SMOLLM2_135M.to_string(),
    };
    let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| fail(format!("config.json: {e}")));
    let cfg = Config::from_json(&json, args.config.as_deref().unwrap_or(Path::new("SmolLM2-135M"))).expect("a Llama/Qwen config");
    if let Some((backend, seed)) = args.worker {
        return burn_worker(backend, &cfg, &args, seed);
    }
    let config_file = std::env::temp_dir().join(format!("memkit-sft-bench-{}.json", std::process::id()));
    std::fs::write(&config_file, &text).unwrap_or_else(|e| fail(format!("cannot write {}: {e}", config_file.display())));
    println!(
        "SFT step (fwd + bwd + AdamW{}), {} layers × {} wide, vocab {}, {} timed steps after {} warm-up, {} rounds",
        if args.checkpointing { ", gradient checkpointing" } else { "" },
        cfg.num_hidden_layers,
        cfg.hidden_size,
        cfg.vocab_size,
        args.steps,
        args.warmup,
        args.rounds
    );
    let shapes: Vec<serde_json::Value> = args.shapes.iter().map(|&shape| bench_shape(shape, &config_file, &args)).collect();
    let _ = std::fs::remove_file(&config_file);
    if let Some(path) = &args.json {
        let record = json!({
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            "model": args.config.as_ref().map_or("SmolLM2-135M shape".to_string(), |p| p.display().to_string()),
            "cpus": std::thread::available_parallelism().map_or(0, usize::from),
            "steps": args.steps, "warmup": args.warmup, "rounds": args.rounds,
            "gradient_checkpointing": args.checkpointing,
            "shapes": shapes,
        });
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| fail(format!("cannot create {}: {e}", dir.display())));
        }
        let text = serde_json::to_string_pretty(&record).expect("JSON") + "\n";
        std::fs::write(path, text).unwrap_or_else(|e| fail(format!("cannot write {}: {e}", path.display())));
        println!("\nwrote {}", path.display());
    }
}
