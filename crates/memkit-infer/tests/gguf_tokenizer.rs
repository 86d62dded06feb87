//! The `tokenizer.json` rebuilt from a GGUF file's tokenizer metadata gives llama.cpp's ids.
//!
//! The reference is llama.cpp itself (through [`LlamaEngine::tokenize`], which parses special
//! tokens as llama.cpp's server does), on the packaged models: SmolLM2-135M (`smollm`
//! pre-tokenizer) and Qwen2.5-Coder-0.5B (`qwen2`), whichever are installed. The strings cover
//! ASCII, accents, CJK, emoji, code, digit runs, whitespace runs, contractions and ChatML
//! markers. Tests are skipped when a model is missing, unless `MEMKIT_REQUIRE_MODELS=1`.

#![cfg(feature = "llama")]

use memkit_infer::generate::{EngineOptions, LlamaEngine};
use memkit_infer::gguf_tokenizer::tokenizer_json_from_gguf;
use memkit_infer::models;

const TEXTS: &[&str] = &[
    "Hello world",
    "  leading spaces and trailing   ",
    "I'm sure they'll say it's fine, won't they? YOU'RE RIGHT.",
    "naïve café, Zürich, São Paulo, Ångström",
    "東京は日本の首都です。北京欢迎你！서울",
    "emoji: 👋🏽 🎉🚀 ❤️‍🔥 👨‍👩‍👧",
    "fn main() {\n    let x: Vec<u32> = (0..10).collect();\n\tprintln!(\"{x:?}\");\n}\n",
    "digits 1234567890 and 3.14159, 1,000,000 and 2026-11-30",
    "\n\n\nmany\r\n newlines \n\n and\t\ttabs",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text after the end",
    "Καλημέρα κόσμε — привет мир — مرحبا بالعالم — שלום",
];

fn check(name: &str, expected_pre: &str) {
    let Some(path) = models::installed_for_tests(name) else { return };
    let (tokenizer_json, tokenizer_config) = tokenizer_json_from_gguf(&path).unwrap();
    assert!(tokenizer_config["chat_template"].as_str().is_some_and(|t| t.contains("<|im_start|>")));
    let tokenizer = tokenizers::Tokenizer::from_bytes(tokenizer_json.to_string()).unwrap();
    let engine = LlamaEngine::load(&path, EngineOptions { n_ctx: 64, n_threads: 1, ..EngineOptions::default() }).unwrap();
    assert_eq!(engine.model_meta().unwrap().metadata.get("tokenizer.ggml.pre").map(String::as_str), Some(expected_pre));
    for text in TEXTS {
        for add_special in [false, true] {
            let ours: Vec<i32> = tokenizer.encode(*text, add_special).unwrap().get_ids().iter().map(|&id| id as i32).collect();
            let llama = engine.tokenize(text, add_special);
            assert_eq!(ours, llama, "{name}, add_special {add_special}: {text:?}");
        }
        // Decoding gives the text back (the ByteLevel decoder is right).
        let ids = tokenizer.encode(*text, false).unwrap().get_ids().to_vec();
        assert_eq!(tokenizer.decode(&ids, false).unwrap(), *text);
    }
}

#[test]
fn smollm2_rebuilt_tokenizer_matches_llama_cpp() {
    check(models::SMOLLM2_135M.name, "smollm");
}

#[test]
fn qwen2_rebuilt_tokenizer_matches_llama_cpp() {
    check(models::QWEN2_5_CODER_0_5B.name, "qwen2");
}
