//! Wall time of llama.cpp generation on SmolLM2-135M-Instruct (Q4_1): prefill and decode
//! throughput, and what prefix reuse and batched decoding save against running the same
//! requests one after another.
//!
//! Corpus: a fixed extraction-style system prompt (about 200 tokens) shared by four requests
//! of one short dialogue each (about 50 tokens); greedy decoding. Each figure is the best of
//! `MEMKIT_BENCH_REPEATS` runs (default 3), which is the least disturbed on a shared machine;
//! `MEMKIT_BENCH_THREADS` sets llama.cpp's threads (default: the available cores).
//!
//! Run with `cargo bench -p memkit-infer --bench generate` (or `--profile dev`, which builds
//! llama.cpp as RelWithDebInfo and reuses the test build). The model comes from
//! `MEMKIT_SMOLLM2_GGUF` or the models directory.

#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::time::Instant;

use memkit_infer::generate::{EngineOptions, GenerateRequest, Generation, LlamaEngine, Prompt};
use memkit_infer::models;

const SYSTEM: &str = "<|im_start|>system\nYou extract long-term memories from a dialogue \
between two people. A memory is a short third-person statement of a fact about a speaker, an \
event that happened to them, or a lasting trait or preference. For every memory, give the id \
of the turn it comes from, the speaker, the content, and its dimensions: the type (fact, \
episodic or profile), the time it refers to as written in the dialogue or an empty string, the \
location or an empty string, the reason and the purpose if the speaker states them, and up to \
six keywords. Do not invent anything that the dialogue does not say. Do not repeat a memory. \
Prefer few precise memories over many vague ones. Write dates exactly as the speakers do. If a \
turn only greets or thanks, it has no memory. Answer with a JSON object whose only key is \
memories, a list of objects, and nothing else.<|im_end|>\n";

const DIALOGUES: [&str; 4] = [
    "[1] Caroline: I went to a LGBTQ support group yesterday and it was so powerful.\n\
     [2] Melanie: Wow, that's cool, Caroline! What happened that was so awesome?",
    "[1] Melanie: I ran a charity race for mental health last Saturday.\n\
     [2] Caroline: That's amazing! How long was the race and how did it go for you?",
    "[1] Caroline: I'm thinking of going into counseling after I finish my degree.\n\
     [2] Melanie: You'd be great at that. What made you decide on counseling?",
    "[1] Melanie: We took the kids camping at the beach in July, they loved it.\n\
     [2] Caroline: Sounds so fun! Did you see any wildlife out there this time?",
];

fn user_turn(dialogue: &str) -> String {
    format!("<|im_start|>user\n{dialogue}<|im_end|>\n<|im_start|>assistant\n")
}

fn requests(max_tokens: usize) -> Vec<GenerateRequest> {
    DIALOGUES.iter().map(|d| GenerateRequest::new(user_turn(d)).with_max_tokens(max_tokens)).collect()
}

/// Best wall time of `repeats` runs, in seconds, and the generations of the last run.
fn best<T>(repeats: usize, mut run: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut last = None;
    for _ in 0..repeats {
        let start = Instant::now();
        let out = run();
        best = best.min(start.elapsed().as_secs_f64());
        last = Some(out);
    }
    (best, last.expect("at least one repeat"))
}

fn load(path: &PathBuf, n_seq_max: u32, n_threads: usize) -> LlamaEngine {
    LlamaEngine::load(path, EngineOptions { n_seq_max, n_threads, ..EngineOptions::default() }).expect("load SmolLM2")
}

fn tokens(generations: &[Generation]) -> usize {
    generations.iter().map(|g| g.completion_tokens).sum()
}

fn main() {
    let Some(path) = std::env::var_os("MEMKIT_SMOLLM2_GGUF").map(PathBuf::from).or_else(|| models::locate(models::SMOLLM2_135M.name))
    else {
        println!("skipped: smollm2-135m is not installed (models fetch step or MEMKIT_SMOLLM2_GGUF)");
        return;
    };
    let repeats: usize = std::env::var("MEMKIT_BENCH_REPEATS").ok().and_then(|r| r.parse().ok()).unwrap_or(3).max(1);
    let threads = std::env::var("MEMKIT_BENCH_THREADS").ok().and_then(|t| t.parse().ok()).unwrap_or(EngineOptions::default().n_threads);
    println!("SmolLM2-135M-Instruct Q4_1, {threads} threads, best of {repeats}");

    let mut single = load(&path, 2, threads);
    let mut batched = load(&path, 5, threads);

    // Prefill: the whole prompt, one token out.
    let full_prompt = format!("{SYSTEM}{}", user_turn(DIALOGUES[0]));
    let g = (0..repeats)
        .map(|_| single.generate(&GenerateRequest::new(full_prompt.as_str()).with_max_tokens(1)).unwrap())
        .min_by(|a, b| a.timings.prefill_ms.total_cmp(&b.timings.prefill_ms))
        .expect("at least one repeat");
    println!(
        "prefill: {} tokens, {:.1} ms, {:.0} tok/s",
        g.prompt_tokens,
        g.timings.prefill_ms,
        g.prompt_tokens as f64 / (g.timings.prefill_ms / 1e3)
    );

    // Decode: one sequence, up to 64 tokens (the first is sampled from the prefill's logits).
    let g = (0..repeats)
        .map(|_| single.generate(&GenerateRequest::new(full_prompt.as_str()).with_max_tokens(64)).unwrap())
        .min_by(|a, b| a.timings.decode_ms.total_cmp(&b.timings.decode_ms))
        .expect("at least one repeat");
    println!(
        "decode: {} tokens, {:.1} ms, {:.1} tok/s (1 sequence)",
        g.completion_tokens,
        g.timings.decode_ms,
        g.completion_tokens.saturating_sub(1) as f64 / (g.timings.decode_ms / 1e3)
    );

    for max_tokens in [1, 32] {
        let reqs = requests(max_tokens);
        let full: Vec<GenerateRequest> = reqs
            .iter()
            .map(|r| {
                let mut r = r.clone();
                if let Prompt::Text(t) = &mut r.prompt {
                    *t = format!("{SYSTEM}{t}");
                }
                r
            })
            .collect();
        // 1. No reuse, no batching: each full prompt on its own.
        let (t_seq, g_seq) = best(repeats, || full.iter().map(|r| single.generate(r).unwrap()).collect::<Vec<_>>());
        // 2. Prefix reuse only: the prefix once, then the four requests one at a time.
        let (t_reuse, g_reuse) = best(repeats, || single.generate_batch(SYSTEM, &reqs).unwrap());
        // 3. Batching only: the four full prompts decoded together.
        let (t_batch, g_batch) = best(repeats, || batched.generate_batch("", &full).unwrap());
        // 4. Both.
        let (t_both, g_both) = best(repeats, || batched.generate_batch(SYSTEM, &reqs).unwrap());
        let same = |a: &[Generation], b: &[Generation]| a.iter().zip(b).filter(|(x, y)| x.text == y.text).count();
        println!(
            "4 requests, max_tokens {max_tokens} ({} / {} / {} / {} tokens out):",
            tokens(&g_seq),
            tokens(&g_reuse),
            tokens(&g_batch),
            tokens(&g_both)
        );
        println!("  sequential, full prompts  {:8.1} ms", t_seq * 1e3);
        println!("  prefix reuse             {:8.1} ms  {:.2}x  (same text {}/4)", t_reuse * 1e3, t_seq / t_reuse, same(&g_seq, &g_reuse));
        println!("  batched (4 sequences)    {:8.1} ms  {:.2}x  (same text {}/4)", t_batch * 1e3, t_seq / t_batch, same(&g_seq, &g_batch));
        println!("  prefix reuse + batched   {:8.1} ms  {:.2}x  (same text {}/4)", t_both * 1e3, t_seq / t_both, same(&g_seq, &g_both));
    }
}
