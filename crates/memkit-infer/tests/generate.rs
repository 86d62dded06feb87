//! llama.cpp generation on the real SmolLM2-135M-Instruct (GGUF Q4_1, 98 MB): determinism,
//! batched decoding and prefix reuse against their sequential and split-prefill controls, stop
//! strings, `max_tokens`, JSON-schema constrained decoding, tokenisation and metadata.
//!
//! There is no golden completion from a reference implementation here: parity of llama-cpp-2
//! with llama-cpp-python (same greedy tokens, same speed) was measured once and is recorded in
//! `shared/STACK.md`. These tests check the engine's own equivalences instead, each of which
//! fails if sequences, positions, the KV-cache bookkeeping or the per-request state go wrong.
//!
//! The model comes from the models directory (`models::installed_for_tests`); the
//! tests are skipped when it is missing, unless `MEMKIT_REQUIRE_MODELS=1`.

#![cfg(feature = "llama")]

use std::path::PathBuf;

use memkit_infer::generate::{EngineOptions, FinishReason, GenerateError, GenerateRequest, Generation, LlamaEngine, Prompt, Sampling};
use memkit_infer::{Error, models};
use memkit_schema::{ExtractorSchemaOptions, extractor_json_schema};

/// The installed SmolLM2 GGUF, or `None` (test skipped); see [`models::installed_for_tests`].
fn smollm2() -> Option<PathBuf> {
    models::installed_for_tests(models::SMOLLM2_135M.name)
}

/// Tests run in parallel on a small machine: one llama.cpp thread each, so that they do not
/// contend for cores.
fn options() -> EngineOptions {
    EngineOptions { n_ctx: 2048, n_threads: 1, ..EngineOptions::default() }
}

const SYSTEM: &str = "<|im_start|>system\nYou are a helpful assistant. Answer briefly and \
                      plainly, in one or two sentences, without lists.<|im_end|>\n";

fn user_turn(text: &str) -> String {
    format!("<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n")
}

const QUESTIONS: [&str; 4] = [
    "What is the capital of France?",
    "Name three colours of the rainbow and say which one you like best and why.",
    "How many legs does a spider have?",
    "Write one sentence about the sea.",
];

/// Requests that finish at different times: different prompts and different caps.
fn requests() -> Vec<GenerateRequest> {
    QUESTIONS.iter().zip([12, 40, 20, 32]).map(|(q, max_tokens)| GenerateRequest::new(user_turn(q)).with_max_tokens(max_tokens)).collect()
}

/// What must agree between two runs that should be equivalent (timings differ).
fn outcome(g: &Generation) -> (String, usize, usize, FinishReason) {
    (g.text.clone(), g.prompt_tokens, g.completion_tokens, g.finish_reason)
}

#[test]
fn greedy_is_deterministic_and_counts_tokens() {
    let Some(path) = smollm2() else { return };
    let mut engine = LlamaEngine::load(&path, options()).unwrap();
    let prompt = format!("{SYSTEM}{}", user_turn(QUESTIONS[1]));
    let request = GenerateRequest::new(prompt.as_str()).with_max_tokens(48);

    let first = engine.generate(&request).unwrap();
    let second = engine.generate(&request).unwrap();
    assert_eq!(outcome(&first), outcome(&second));

    assert!(!first.text.trim().is_empty(), "{first:?}");
    assert_eq!(first.prompt_tokens, engine.tokenize(&prompt, true).len());
    assert!(first.completion_tokens >= 1 && first.completion_tokens <= 48);
    if first.finish_reason == FinishReason::Length {
        assert_eq!(first.completion_tokens, 48);
    }
    assert!(first.timings.prefill_ms > 0.0);
    // The text is the detokenised completion: it tokenises to about as many tokens.
    let retokenized = engine.tokenize(&first.text, false).len();
    assert!(retokenized.abs_diff(first.completion_tokens) <= 2, "{retokenized} vs {first:?}");

    // The same request as token ids gives the same result.
    let tokens = engine.tokenize(&prompt, true);
    let by_tokens = engine.generate(&GenerateRequest { prompt: Prompt::Tokens(tokens), ..request.clone() }).unwrap();
    assert_eq!(outcome(&by_tokens), outcome(&first));
}

#[test]
fn max_tokens_ends_with_length_and_is_a_prefix_of_the_longer_run() {
    let Some(path) = smollm2() else { return };
    let mut engine = LlamaEngine::load(&path, options()).unwrap();
    let prompt = format!("{SYSTEM}{}", user_turn("Tell me a long story about a dragon."));
    let long = engine.generate(&GenerateRequest::new(prompt.as_str()).with_max_tokens(24)).unwrap();
    let short = engine.generate(&GenerateRequest::new(prompt.as_str()).with_max_tokens(5)).unwrap();
    assert_eq!(short.finish_reason, FinishReason::Length);
    assert_eq!(short.completion_tokens, 5);
    assert!(long.completion_tokens > 5, "{long:?}");
    assert!(long.text.starts_with(&short.text), "{short:?} / {long:?}");
}

#[test]
fn stop_string_cuts_the_text_before_it() {
    let Some(path) = smollm2() else { return };
    let mut engine = LlamaEngine::load(&path, options()).unwrap();
    let prompt = format!("{SYSTEM}{}", user_turn(QUESTIONS[3]));
    let free = engine.generate(&GenerateRequest::new(prompt.as_str()).with_max_tokens(40)).unwrap();
    let chars: Vec<(usize, char)> = free.text.char_indices().collect();
    assert!(chars.len() >= 12, "completion too short to cut: {free:?}");
    // A stop string from the middle of the free completion, so it straddles tokens somewhere.
    let start = chars[chars.len() / 2].0;
    let end = chars[chars.len() / 2 + 3].0;
    let stop = &free.text[start..end];
    let cut = free.text.find(stop).unwrap();

    let stopped =
        engine.generate(&GenerateRequest::new(prompt.as_str()).with_max_tokens(40).with_stop(["never appears \u{2603}", stop])).unwrap();
    assert_eq!(stopped.finish_reason, FinishReason::StopString);
    assert_eq!(stopped.text, free.text[..cut]);
    assert!(stopped.completion_tokens <= free.completion_tokens);
}

#[test]
fn batched_outputs_equal_sequential_outputs() {
    let Some(path) = smollm2() else { return };
    let requests = requests();

    let mut engine = LlamaEngine::load(&path, options()).unwrap();
    let batched = engine.generate_batch(SYSTEM, &requests).unwrap();
    let sequential: Vec<Generation> = requests
        .iter()
        .map(|r| {
            let mut one = engine.generate_batch(SYSTEM, std::slice::from_ref(r)).unwrap();
            one.remove(0)
        })
        .collect();
    assert_eq!(batched.len(), requests.len());
    // The sequential calls start from the prefix cells the batched call left behind.
    let prefix_len = engine.tokenize(SYSTEM, true).len();
    for (b, s) in batched.iter().zip(&sequential) {
        assert_eq!(outcome(b), outcome(s));
        assert_eq!((b.cached_tokens, s.cached_tokens), (0, prefix_len));
    }
    // They really finished at different times.
    let lengths: Vec<usize> = batched.iter().map(|g| g.completion_tokens).collect();
    assert!(lengths.windows(2).any(|w| w[0] != w[1]), "{lengths:?}");

    // Chunks of two sequences (n_seq_max 3) and a context that cannot hold all four at once
    // give the same results again.
    let mut chunked = LlamaEngine::load(&path, EngineOptions { n_seq_max: 3, ..options() }).unwrap();
    let in_chunks = chunked.generate_batch(SYSTEM, &requests).unwrap();
    let mut small = LlamaEngine::load(&path, EngineOptions { n_ctx: 256, ..options() }).unwrap();
    let small_ctx = small.generate_batch(SYSTEM, &requests).unwrap();
    for ((b, c), s) in batched.iter().zip(&in_chunks).zip(&small_ctx) {
        assert_eq!(outcome(b), outcome(c));
        assert_eq!(outcome(b), outcome(s));
    }
}

#[test]
fn a_cached_prefix_serves_only_a_call_with_the_same_prefix() {
    let Some(path) = smollm2() else { return };
    let request = &requests()[1..2];
    let other = "<|im_start|>system\nYou are a terse assistant. Reply in at most ten words.<|im_end|>\n";
    let mut engine = LlamaEngine::load(&path, options()).unwrap();
    let prefix_len = engine.tokenize(SYSTEM, true).len();

    let first = engine.generate_batch(SYSTEM, request).unwrap().remove(0);
    let again = engine.generate_batch(SYSTEM, request).unwrap().remove(0);
    assert_eq!((first.cached_tokens, again.cached_tokens), (0, prefix_len));
    assert_eq!(outcome(&first), outcome(&again));

    // Another prefix, then no prefix: each clears the cache and is evaluated in full, with
    // the outputs of a fresh engine.
    let switched = engine.generate_batch(other, request).unwrap().remove(0);
    let mut fresh = LlamaEngine::load(&path, options()).unwrap();
    assert_eq!(switched.cached_tokens, 0);
    assert_eq!(outcome(&switched), outcome(&fresh.generate_batch(other, request).unwrap()[0]));
    let whole = GenerateRequest::new(format!("{SYSTEM}{}", user_turn(QUESTIONS[1]))).with_max_tokens(40);
    assert_eq!(engine.generate(&whole).unwrap().cached_tokens, 0);
    let back = engine.generate_batch(SYSTEM, request).unwrap().remove(0);
    assert_eq!(back.cached_tokens, 0, "a call without a prefix leaves none to reuse");
    assert_eq!(outcome(&back), outcome(&first));

    // A request refused before decoding leaves the cached prefix in place.
    let too_long = GenerateRequest::new(user_turn("hi")).with_max_tokens(100_000);
    assert!(engine.generate_batch(SYSTEM, &[too_long]).is_err());
    assert_eq!(engine.generate_batch(SYSTEM, request).unwrap()[0].cached_tokens, prefix_len);
}

#[test]
fn prefix_reuse_equals_split_prefill_control() {
    let Some(path) = smollm2() else { return };
    let requests = requests();
    let mut engine = LlamaEngine::load(&path, options()).unwrap();
    let reused = engine.generate_batch(SYSTEM, &requests).unwrap();

    // Control: the whole prompt in one sequence, no KV-cache copy, with n_batch equal to the
    // prefix length, so the prefix is evaluated in one llama_decode call and the question in
    // the next, as in prefix reuse. (Evaluating everything in one call may flip a near-tie
    // token: llama.cpp's numerics depend on how a prompt is split into calls.)
    let prefix = engine.tokenize(SYSTEM, true);
    let mut control = LlamaEngine::load(&path, EngineOptions { n_batch: u32::try_from(prefix.len()).unwrap(), ..options() }).unwrap();
    for (request, reused) in requests.iter().zip(&reused) {
        let Prompt::Text(question) = &request.prompt else { unreachable!() };
        let question = engine.tokenize(question, false);
        assert!(question.len() <= prefix.len(), "the question must fit one call");
        let whole = GenerateRequest { prompt: Prompt::Tokens([prefix.as_slice(), &question].concat()), ..request.clone() };
        let split = control.generate(&whole).unwrap();
        assert_eq!(outcome(reused), outcome(&split));
    }
}

/// Adds `maxLength` to every string schema in `schema` that has neither a length cap nor an
/// enum.
fn bound_strings(schema: &mut serde_json::Value, max_length: usize) {
    match schema {
        serde_json::Value::Object(map) => {
            if map.get("type").and_then(|t| t.as_str()) == Some("string") && !map.contains_key("maxLength") && !map.contains_key("enum") {
                map.insert("maxLength".into(), max_length.into());
            }
            map.values_mut().for_each(|v| bound_strings(v, max_length));
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| bound_strings(v, max_length)),
        _ => {}
    }
}

#[test]
fn json_schema_output_always_parses_and_respects_caps() {
    let Some(path) = smollm2() else { return };
    let caps = ExtractorSchemaOptions { max_memories: 2, max_keywords: 2, max_content_chars: 60 };
    // The extractor schema leaves most strings unbounded; SmolLM2 loops inside one until
    // max_tokens (seen: a "location" of 500 letters and colons). Bounding them keeps the
    // caps under test (maxItems, content's maxLength, the enum) and makes the output finite,
    // so every request must end with Stop.
    let mut schema = extractor_json_schema(caps);
    bound_strings(&mut schema, 40);
    let system = "<|im_start|>system\nExtract memories from the dialogue as JSON.<|im_end|>\n";
    let dialogue = user_turn(
        "[1] Caroline: I went to a support group yesterday in Boston.\n\
         [2] Melanie: That's great! I painted a sunrise last week.\n\
         [3] Caroline: I want to become a counselor next year.",
    );
    let samplings = [
        Sampling::Greedy,
        Sampling::Temperature { temperature: 0.8, top_p: 0.95, seed: 1 },
        Sampling::Temperature { temperature: 1.2, top_p: 1.0, seed: 2 },
        Sampling::Temperature { temperature: 1.0, top_p: 0.9, seed: 3 },
    ];
    let requests: Vec<GenerateRequest> = samplings
        .iter()
        .map(|&sampling| {
            GenerateRequest::new(dialogue.as_str()).with_max_tokens(600).with_sampling(sampling).with_json_schema(schema.clone())
        })
        .collect();
    let mut engine = LlamaEngine::load(&path, options()).unwrap();
    let generations = engine.generate_batch(system, &requests).unwrap();
    for g in &generations {
        assert_eq!(g.finish_reason, FinishReason::Stop, "{g:?}");
        let value: serde_json::Value =
            serde_json::from_str(&g.text).unwrap_or_else(|e| panic!("constrained output does not parse ({e}): {}", g.text));
        let memories = value["memories"].as_array().expect("memories array");
        assert!(memories.len() <= caps.max_memories, "{}", g.text);
        for memory in memories {
            assert!(memory["source_id"].as_i64().is_some_and(|id| id >= 1));
            let content = memory["content"].as_str().unwrap();
            assert!((1..=caps.max_content_chars).contains(&content.chars().count()));
            let dimension = &memory["dimension"];
            let kind = dimension["memory_type"].as_str().unwrap();
            assert!(["fact", "episodic", "profile"].contains(&kind), "{kind}");
            assert!(dimension["keywords"].as_array().unwrap().len() <= caps.max_keywords);
        }
    }

    // Sampling with a seed is reproducible, constrained or not.
    let again = engine.generate_batch(system, &requests[1..2]).unwrap();
    assert_eq!(again[0].text, generations[1].text);
}

#[test]
fn bad_requests_are_errors_that_name_the_request() {
    let Some(path) = smollm2() else { return };
    let mut engine = LlamaEngine::load(&path, options()).unwrap();
    let ok = GenerateRequest::new(user_turn("Hi")).with_max_tokens(4);

    let too_long = ok.clone().with_max_tokens(10_000);
    let err = engine.generate_batch(SYSTEM, &[ok.clone(), too_long]).unwrap_err();
    assert!(matches!(err, Error::Generate(GenerateError::ContextFull { index: 1, .. })), "{err}");

    let bad_schema = ok.clone().with_json_schema(serde_json::json!({"type": "no-such-type"}));
    let err = engine.generate(&bad_schema).unwrap_err();
    assert!(matches!(err, Error::Generate(GenerateError::JsonSchema { index: 0, .. })), "{err}");

    let out_of_vocab = GenerateRequest::new(vec![1, 2, 1_000_000]);
    let err = engine.generate(&out_of_vocab).unwrap_err();
    assert!(matches!(err, Error::Generate(GenerateError::TokenOutOfRange { token: 1_000_000, .. })), "{err}");

    let cold = ok.with_sampling(Sampling::Temperature { temperature: 0.0, top_p: 1.0, seed: 0 });
    let err = engine.generate(&cold).unwrap_err();
    assert!(matches!(err, Error::Generate(GenerateError::InvalidRequest { index: 0, .. })), "{err}");

    let missing = LlamaEngine::load(path.with_extension("missing"), options()).unwrap_err();
    assert!(matches!(missing, Error::Generate(GenerateError::ModelNotFound { .. })), "{missing}");
}

#[test]
fn tokenizer_template_and_metadata() {
    let Some(path) = smollm2() else { return };
    let engine = LlamaEngine::load(&path, options()).unwrap();

    // SmolLM2's control tokens (from its tokenizer.json): <|endoftext|> 0, <|im_start|> 1,
    // <|im_end|> 2; special tokens in the text are parsed, not spelled out.
    let text = "<|im_start|>user\nHello there<|im_end|>";
    let tokens = engine.tokenize(text, false);
    assert_eq!(tokens.first(), Some(&1));
    assert_eq!(tokens.last(), Some(&2));
    assert_eq!(engine.detokenize(&tokens).unwrap(), text);
    assert!(engine.detokenize(&[-1]).is_err());

    let template = engine.chat_template().expect("SmolLM2 has a chat template");
    assert!(template.contains("<|im_start|>"), "{template}");

    let meta = engine.model_meta().unwrap();
    assert_eq!(meta.architecture.as_deref(), Some("llama"));
    assert_eq!(meta.n_vocab, 49_152);
    assert_eq!(meta.n_layer, 30);
    assert_eq!(meta.n_embd, 576);
    assert!(meta.n_params > 130_000_000 && meta.n_params < 140_000_000, "{}", meta.n_params);
    assert_eq!(meta.metadata.get("general.architecture").map(String::as_str), Some("llama"));
    assert_eq!(meta.metadata.get("tokenizer.chat_template"), Some(&template), "the template is the GGUF metadata value");
    // With add_special, BOS is prepended only if the GGUF asks for it.
    let with_special = engine.tokenize("Hello", true);
    let plain = engine.tokenize("Hello", false);
    assert_eq!(with_special.len() - plain.len(), usize::from(meta.add_bos));
}

#[test]
fn dry_damps_a_reply_that_loops() {
    use memkit_infer::generate::Dry;
    let Some(path) = smollm2() else { return };
    let mut engine = LlamaEngine::load(&path, options()).unwrap();
    // Six sentences forced by the schema: greedy SmolLM2-135M writes one sentence over and over.
    // DRY sees only the reply, so it lets the first sentence through and penalises its repeats.
    let prompt = format!("{SYSTEM}{}", user_turn("Write six sentences about cats, as a JSON list of strings."));
    let schema = serde_json::json!({"type": "array", "minItems": 6, "maxItems": 6, "items": {"type": "string", "maxLength": 80}});
    let request = GenerateRequest::new(prompt.as_str()).with_max_tokens(160).with_json_schema(schema);
    let plain = engine.generate(&request).unwrap();
    let dry = engine.generate(&request.clone().with_dry(Dry::default())).unwrap();
    // The sentences written in full (a reply cut at max_tokens loses only its last one).
    let distinct = |text: &str| text.split('"').skip(1).step_by(2).collect::<std::collections::HashSet<_>>().len();
    assert!(distinct(&plain.text) < 6, "the control must repeat itself: {:?}", plain.text);
    assert!(distinct(&dry.text) > distinct(&plain.text), "DRY did not damp the loop:\n{:?}\n{:?}", plain.text, dry.text);
}

#[test]
fn a_reply_ends_at_its_first_repeated_item_as_the_free_reply_had_it() {
    use memkit_infer::generate::RepeatedItem;
    let Some(path) = smollm2() else { return };
    let mut engine = LlamaEngine::load(&path, options()).unwrap();
    let schema = serde_json::json!({"type": "object", "required": ["memories"], "additionalProperties": false,
        "properties": {"memories": {"type": "array", "maxItems": 8, "items": {"type": "object", "required": ["content"],
            "additionalProperties": false, "properties": {"content": {"type": "string", "maxLength": 60}}}}}});
    let prompt = format!(
        "{SYSTEM}{}",
        user_turn("List what Ann told you as JSON memories. Ann: I love tea. I love tea. I love tea. I love tea. I love tea.")
    );
    let request = GenerateRequest::new(prompt.as_str()).with_max_tokens(400).with_json_schema(schema);
    let free = engine.generate(&request).unwrap();
    let ended = engine.generate(&request.clone().with_end_at_repeat(RepeatedItem { field: "content".into(), min_f1: 0.8 })).unwrap();
    assert_eq!(ended.finish_reason, FinishReason::Repeat, "the model did not repeat an item: {free:?}");
    assert!(ended.completion_tokens < free.completion_tokens, "{ended:?} {free:?}");
    // The ended reply is JSON: the free reply's items up to the first repeat, closed.
    let items = |text: &str| -> Vec<String> {
        let value: serde_json::Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        value["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap().to_owned()).collect()
    };
    let kept = items(&ended.text);
    assert!(!kept.is_empty());
    let all = items(&free.text);
    assert!(all.len() > kept.len(), "{all:?}");
    assert_eq!(kept, all[..kept.len()]);
    assert!(kept.iter().any(|k| memkit_text::f1::f1_score(&all[kept.len()], k) >= 0.8), "{all:?}");
}
