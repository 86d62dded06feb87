//! Generation speed of memkit's llama.cpp engine on the packaged GGUF models, next to
//! llama-cpp-python from PyPI in the same run (`just bench-infer`).
//!
//! The workload is the teacher's real one: the extraction chat (embedded prompts, the model's
//! own chat template) of the first LoCoMo window of conv-26 (25 turns, overlap 5). Per model:
//!
//! 1. **Batch 1, side by side.** The whole prompt from an empty cache, then greedy decoding of
//!    up to `--decode` tokens, in memkit and in llama-cpp-python (`benches/llama_cpp_python.py`,
//!    a subprocess), alternating for `--rounds` rounds with the order swapped each round so
//!    that background load hits both alike. Prefill tok/s = prompt tokens / time to the first
//!    token; decode tok/s = the remaining tokens / their time. Medians and the ratio.
//! 2. **Prefix reuse** (memkit). The system turn is the shared prefix: the first call
//!    evaluates it, the next call with the same prefix starts from its cached cells. Prefill
//!    time of one window each way.
//! 3. **Batch 4 decode** (memkit). Four windows after the cached prefix, decoded together,
//!    against the same four one at a time: decode tokens per second of wall time.
//!
//! ```text
//! cargo bench -p memkit-infer --bench generate -- [--models smollm2-135m,qwen2.5-coder-0.5b-instruct]
//!     [--rounds 2] [--decode 64] [--threads N] [--python PY]
//!     [--data-dir ../shared/data]
//! ```
//!
//! Models default to every installed GGUF of the models step; `--python` (or
//! `MEMKIT_BENCH_PYTHON`; `just bench-infer` passes the one `just venv` makes) is an interpreter
//! with llama-cpp-python; without one only memkit is measured.

// A benchmark program: printing its table is its job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use memkit_data::{Window, WindowConfig, load_locomo, windows};
use memkit_infer::chat::{GgufChat, RenderedChat};
use memkit_infer::extract::ExtractConfig;
use memkit_infer::generate::{EngineOptions, GenerateRequest, Generation, LlamaEngine};
use memkit_infer::models;
use memkit_prompt::Prompts;

struct Args {
    models: Vec<String>,
    rounds: usize,
    decode: usize,
    threads: usize,
    python: Option<PathBuf>,
    data_dir: PathBuf,
}

fn parse_args() -> Result<Args, String> {
    let default_python = std::env::var_os("MEMKIT_BENCH_PYTHON").map(PathBuf::from);
    let gguf_models = [models::SMOLLM2_135M.name, models::QWEN2_5_CODER_0_5B.name, models::QWEN2_5_CODER_1_5B.name];
    let mut args = Args {
        models: gguf_models.iter().map(|m| (*m).to_owned()).collect(),
        rounds: 2,
        decode: 64,
        threads: EngineOptions::default().n_threads,
        python: default_python,
        data_dir: Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--models" => args.models = value()?.split(',').map(str::to_owned).collect(),
            "--rounds" => args.rounds = number(value()?)?.max(1),
            "--decode" => args.decode = number(value()?)?.max(2),
            "--threads" => args.threads = number(value()?)?.max(1),
            "--python" => args.python = Some(PathBuf::from(value()?)),
            "--data-dir" => args.data_dir = PathBuf::from(value()?),
            "--bench" => {} // added by `cargo bench`
            other => return Err(format!("unknown argument {other} (see the header of benches/generate.rs)")),
        }
    }
    Ok(args)
}

/// One batch-1 run: prompt and completion tokens, prefill and decode seconds.
#[derive(Debug, Clone, Copy)]
struct Run {
    prompt_tokens: usize,
    completion_tokens: usize,
    prefill_s: f64,
    decode_s: f64,
}

impl Run {
    fn from_generation(g: &Generation) -> Self {
        Self {
            prompt_tokens: g.prompt_tokens,
            completion_tokens: g.completion_tokens,
            prefill_s: g.timings.prefill_ms / 1e3,
            decode_s: g.timings.decode_ms / 1e3,
        }
    }

    fn prefill_tps(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill_s
    }

    /// The first token is sampled from the prefill's logits.
    fn decode_tps(&self) -> f64 {
        self.completion_tokens.saturating_sub(1) as f64 / self.decode_s
    }
}

fn python_run(python: &Path, model: &Path, prompt_file: &Path, args: &Args) -> Result<(Run, String), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/llama_cpp_python.py");
    let out = Command::new(python)
        .arg(&script)
        .arg("--model")
        .arg(model)
        .arg("--prompt-file")
        .arg(prompt_file)
        .args(["--decode", &args.decode.to_string(), "--threads", &args.threads.to_string()])
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr).trim()));
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim()).map_err(|e| format!("{e}: {line}"))?;
    let field = |k: &str| v[k].as_f64().ok_or_else(|| format!("no {k} in {line}"));
    let run = Run {
        prompt_tokens: field("prompt_tokens")? as usize,
        completion_tokens: field("completion_tokens")? as usize,
        prefill_s: field("prefill_s")?,
        decode_s: field("decode_s")?,
    };
    Ok((run, v["engine"].as_str().unwrap_or("llama-cpp-python").to_owned()))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// The extraction chats of `n` LoCoMo windows, rendered for `engine`'s template.
fn chats(engine: &LlamaEngine, windows: &[Window]) -> Vec<RenderedChat> {
    let prompts = Prompts::embedded().expect("embedded prompts");
    let chat = GgufChat::from_engine(engine).expect("a chat template");
    let options = ExtractConfig::default().prompt_options();
    windows
        .iter()
        .map(|w| chat.render(&prompts.render_extract(w, &options).expect("extract prompt").to_messages()).expect("render"))
        .collect()
}

fn bench_model(name: &str, gguf: &Path, windows: &[Window], args: &Args) {
    let size_mb = std::fs::metadata(gguf).map_or(0, |m| m.len()) / 1_000_000;
    println!("\n## {name} ({size_mb} MB), {} threads\n", args.threads);
    let load = Instant::now();
    let mut engine =
        LlamaEngine::load(gguf, EngineOptions { n_ctx: 8192, n_threads: args.threads, ..EngineOptions::default() }).expect("load GGUF");
    println!("loaded in {:.1} s", load.elapsed().as_secs_f64());
    let chats = chats(&engine, windows);
    let whole = format!("{}{}", chats[0].prefix, chats[0].suffix);
    let prompt_file = std::env::temp_dir().join(format!("memkit-bench-prompt-{}.txt", std::process::id()));
    std::fs::write(&prompt_file, &whole).expect("write the prompt file");

    // 1. Batch 1, alternating with llama-cpp-python.
    let request = GenerateRequest::new(whole.as_str()).with_max_tokens(args.decode);
    let (mut ours, mut theirs, mut peer) = (Vec::new(), Vec::new(), None);
    for round in 0..args.rounds {
        let mut order = [true, false];
        if round % 2 == 1 {
            order.reverse();
        }
        for memkit_turn in order {
            if memkit_turn {
                let run = Run::from_generation(&engine.generate(&request).expect("generate"));
                println!("round {}: memkit        {run:?}", round + 1);
                ours.push(run);
            } else if let Some(python) = &args.python {
                match python_run(python, gguf, &prompt_file, args) {
                    Ok((run, engine_name)) => {
                        println!("round {}: python        {run:?}", round + 1);
                        theirs.push(run);
                        peer = Some(engine_name);
                    }
                    Err(e) => eprintln!("llama-cpp-python run failed: {e}"),
                }
            }
        }
    }
    let _ = std::fs::remove_file(&prompt_file);

    println!("\n| batch 1 | prompt tokens | prefill tok/s | completion tokens | decode tok/s |\n|---|---:|---:|---:|---:|");
    let row = |label: &str, runs: &[Run]| {
        let (p, d) = (median(runs.iter().map(Run::prefill_tps).collect()), median(runs.iter().map(Run::decode_tps).collect()));
        println!("| {label} | {} | {p:.1} | {} | {d:.1} |", runs[0].prompt_tokens, runs[0].completion_tokens);
        (p, d)
    };
    let (our_prefill, our_decode) = row("memkit (llama-cpp-2)", &ours);
    if let Some(peer) = &peer {
        let (p, d) = row(peer, &theirs);
        println!("| **ratio memkit / llama-cpp-python** | | **{:.2}×** | | **{:.2}×** |", our_prefill / p, our_decode / d);
    }

    // 2. Prefix reuse: the system turn evaluated by the first call, cached for the next.
    let suffix_request = |chat: &RenderedChat| GenerateRequest::new(chat.suffix.as_str()).with_max_tokens(1);
    let cold = engine.generate_batch(&chats[0].prefix, &[suffix_request(&chats[0])]).expect("generate").remove(0);
    let warm = engine.generate_batch(&chats[0].prefix, &[suffix_request(&chats[0])]).expect("generate").remove(0);
    println!(
        "\nprefix reuse, one window: {} prompt tokens of which {} are the system turn; prefill {:.2} s from an empty cache, \
         {:.2} s with the system turn cached: **{:.2}× cheaper**",
        cold.prompt_tokens,
        warm.cached_tokens,
        cold.timings.prefill_ms / 1e3,
        warm.timings.prefill_ms / 1e3,
        cold.timings.prefill_ms / warm.timings.prefill_ms
    );

    // 3. Batch 4 against one at a time, all after the cached system turn.
    let requests: Vec<GenerateRequest> =
        chats.iter().map(|c| GenerateRequest::new(c.suffix.as_str()).with_max_tokens(args.decode)).collect();
    let one_by_one: Vec<Generation> =
        requests.iter().map(|r| engine.generate_batch(&chats[0].prefix, std::slice::from_ref(r)).expect("generate").remove(0)).collect();
    let batched = engine.generate_batch(&chats[0].prefix, &requests).expect("generate");
    let decoded = |gs: &[Generation]| gs.iter().map(|g| g.completion_tokens.saturating_sub(1)).sum::<usize>() as f64;
    let single_tps = decoded(&one_by_one) / one_by_one.iter().map(|g| g.timings.decode_ms / 1e3).sum::<f64>();
    // The four decode in the same steps: the batch's decode wall time is the longest one's.
    let batch_tps = decoded(&batched) / batched.iter().map(|g| g.timings.decode_ms / 1e3).fold(0.0, f64::max);
    let same = one_by_one.iter().zip(&batched).filter(|(a, b)| a.text == b.text).count();
    println!(
        "batch 4 decode: {batch_tps:.1} tok/s against {single_tps:.1} tok/s one at a time: **{:.2}×** (same text {same}/4)",
        batch_tps / single_tps
    );
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let locomo = args.data_dir.join("locomo/locomo10.json");
    let samples = match load_locomo(&locomo) {
        Ok(samples) => samples,
        Err(e) => {
            eprintln!("cannot read the LoCoMo file (--data-dir): {e}");
            std::process::exit(2);
        }
    };
    let windows: Vec<Window> = windows(&samples[0].dialogue, &WindowConfig::locomo()).into_iter().take(4).collect();
    println!("# memkit generate bench: LoCoMo {} windows 1-4, greedy, up to {} tokens out", samples[0].id, args.decode);
    match &args.python {
        Some(p) => println!("peer: llama-cpp-python through {}", p.display()),
        None => println!("peer: none (no --python): memkit only"),
    }
    for name in &args.models {
        match models::locate(name) {
            Some(gguf) => bench_model(name, &gguf, &windows, &args),
            None => println!("\n## {name}: not installed (`just models`), skipped"),
        }
    }
}
