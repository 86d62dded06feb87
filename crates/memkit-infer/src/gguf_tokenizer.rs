//! Rebuilds a Hugging Face `tokenizer.json` and `tokenizer_config.json` from the tokenizer a
//! GGUF file embeds (`tokenizer.ggml.*`, `tokenizer.chat_template`), so that the GGUF-only model
//! packages can be tokenised, templated and trained on without their original HF files.
//!
//! Only llama.cpp's `gpt2` (byte-level BPE) tokenizer model is supported, with the
//! pre-tokenizers of the families memkit runs ([`PRE_TOKENIZERS`]). The rebuilt tokenizer gives
//! the ids llama.cpp gives (tests/gguf_tokenizer.rs checks this against llama.cpp itself).

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};
use serde_json::{Value as Json, json};

use crate::{Error, Result};

/// llama.cpp token types (`llama_token_type`, gguf-py `TokenType`).
pub(crate) mod token_type {
    pub(crate) const NORMAL: i32 = 1;
    pub(crate) const CONTROL: i32 = 3;
    pub(crate) const USER_DEFINED: i32 = 4;
    pub(crate) const UNUSED: i32 = 5;
}

/// The Qwen2 pre-tokenizer regex (Qwen2/2.5/3 `tokenizer.json`, llama.cpp `LLAMA_VOCAB_PRE_TYPE_QWEN2`).
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// The Llama 3 pre-tokenizer regex (llama.cpp `LLAMA_VOCAB_PRE_TYPE_LLAMA3`): digits in runs of
/// up to three.
const LLAMA3_REGEX: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A `tokenizer.ggml.pre` value and the HF pieces that implement it.
#[derive(Debug, Clone, Copy)]
pub struct PreTokenizer {
    /// The `tokenizer.ggml.pre` name.
    pub name: &'static str,
    /// Split regex before the byte-level step; `None` splits digits one by one and lets
    /// ByteLevel apply the GPT-2 regex (SmolLM/StarCoder style).
    regex: Option<&'static str>,
    /// NFC-normalise the text first (Qwen2).
    nfc: bool,
    /// A word that is itself a vocabulary entry is emitted whole (llama.cpp `ignore_merges`).
    ignore_merges: bool,
}

/// The pre-tokenizers supported, by `tokenizer.ggml.pre` name.
pub const PRE_TOKENIZERS: &[PreTokenizer] = &[
    PreTokenizer { name: "qwen2", regex: Some(QWEN2_REGEX), nfc: true, ignore_merges: false },
    PreTokenizer { name: "smollm", regex: None, nfc: false, ignore_merges: false },
    PreTokenizer { name: "llama-bpe", regex: Some(LLAMA3_REGEX), nfc: false, ignore_merges: true },
];

impl PreTokenizer {
    fn by_name(name: &str) -> Option<&'static Self> {
        PRE_TOKENIZERS.iter().find(|p| p.name == name)
    }

    /// Recognises the pre-tokenizer of an HF `tokenizer.json` by its structure (what
    /// convert_hf_to_gguf.py identifies by hashing a tokenisation): the split regex, or digits
    /// split one by one followed by a regex-applying ByteLevel.
    pub(crate) fn detect(tokenizer: &Json) -> Option<&'static Self> {
        let steps = match &tokenizer["pre_tokenizer"] {
            p if p["type"] == "Sequence" => p["pretokenizers"].as_array()?.clone(),
            p => vec![p.clone()],
        };
        let nfc = tokenizer["normalizer"]["type"] == "NFC";
        let byte_level = steps.last().filter(|s| s["type"] == "ByteLevel")?;
        match &steps[..steps.len() - 1] {
            [split] if split["type"] == "Split" && byte_level["use_regex"] == false => {
                let regex = split["pattern"]["Regex"].as_str()?;
                PRE_TOKENIZERS.iter().find(|p| p.regex == Some(regex) && p.nfc == nfc)
            }
            [digits] if digits["type"] == "Digits" && digits["individual_digits"] == true && byte_level["use_regex"] == true && !nfc => {
                Self::by_name("smollm")
            }
            _ => None,
        }
    }

    fn normalizer(&self) -> Json {
        if self.nfc { json!({"type": "NFC"}) } else { Json::Null }
    }

    fn pre_tokenizer(&self) -> Json {
        match self.regex {
            Some(regex) => json!({"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
            ]}),
            None => json!({"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": true},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
            ]}),
        }
    }
}

/// The tokenizer metadata of a GGUF file.
struct GgufVocab {
    pre: &'static PreTokenizer,
    tokens: Vec<String>,
    types: Vec<i32>,
    merges: Vec<String>,
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    pad: Option<u32>,
    add_bos: Option<bool>,
    add_eos: Option<bool>,
    chat_template: Option<String>,
    context_length: Option<u32>,
}

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::Convert { path: path.to_path_buf(), reason: reason.into() }
}

/// Reads a GGUF file's header (metadata and tensor infos, no tensor data).
pub(crate) fn read_gguf(path: &Path) -> Result<Content> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    Content::read(&mut BufReader::new(file)).map_err(|source| Error::Weights { path: path.to_path_buf(), source })
}

fn string_array(path: &Path, content: &Content, key: &str) -> Result<Vec<String>> {
    let Some(Value::Array(items)) = content.metadata.get(key) else {
        return Err(bad(path, format!("metadata `{key}` is missing or not an array")));
    };
    items.iter().map(|v| v.to_string().cloned().map_err(|_| bad(path, format!("`{key}` holds a non-string")))).collect()
}

impl GgufVocab {
    fn read(path: &Path, content: &Content) -> Result<Self> {
        let meta = &content.metadata;
        let model = meta.get("tokenizer.ggml.model").and_then(|v| v.to_string().ok());
        if model.map(String::as_str) != Some("gpt2") {
            return Err(bad(path, format!("tokenizer.ggml.model is {model:?}; only `gpt2` (byte-level BPE) is supported")));
        }
        let pre_name = meta.get("tokenizer.ggml.pre").and_then(|v| v.to_string().ok()).cloned().unwrap_or_default();
        let pre = PreTokenizer::by_name(&pre_name).ok_or_else(|| {
            let known: Vec<_> = PRE_TOKENIZERS.iter().map(|p| p.name).collect();
            bad(path, format!("tokenizer.ggml.pre `{pre_name}` is not supported (known: {})", known.join(", ")))
        })?;
        let tokens = string_array(path, content, "tokenizer.ggml.tokens")?;
        let types = match meta.get("tokenizer.ggml.token_type") {
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.to_i32().map_err(|_| bad(path, "`tokenizer.ggml.token_type` holds a non-i32")))
                .collect::<Result<Vec<_>>>()?,
            _ => vec![token_type::NORMAL; tokens.len()],
        };
        if types.len() != tokens.len() {
            return Err(bad(path, format!("{} tokens but {} token types", tokens.len(), types.len())));
        }
        let id = |key: &str| meta.get(key).and_then(|v| v.to_u32().ok()).filter(|id| (*id as usize) < tokens.len());
        let flag = |key: &str| meta.get(key).and_then(|v| v.to_bool().ok());
        let arch = meta.get("general.architecture").and_then(|v| v.to_string().ok()).cloned().unwrap_or_default();
        Ok(Self {
            pre,
            merges: string_array(path, content, "tokenizer.ggml.merges")?,
            bos: id("tokenizer.ggml.bos_token_id"),
            eos: id("tokenizer.ggml.eos_token_id"),
            unk: id("tokenizer.ggml.unknown_token_id"),
            pad: id("tokenizer.ggml.padding_token_id"),
            add_bos: flag("tokenizer.ggml.add_bos_token"),
            add_eos: flag("tokenizer.ggml.add_eos_token"),
            chat_template: meta.get("tokenizer.chat_template").and_then(|v| v.to_string().ok()).cloned(),
            context_length: meta.get(&format!("{arch}.context_length")).and_then(|v| v.to_u32().ok()),
            tokens,
            types,
        })
    }

    /// `[PAD{i}]` fillers that convert_hf_to_gguf.py writes for ids the HF vocabulary lacks
    /// (up to `config.json`'s `vocab_size`) are not part of the HF tokenizer.
    fn is_filler(&self, id: usize) -> bool {
        self.types[id] == token_type::UNUSED && self.tokens[id] == format!("[PAD{id}]")
    }

    fn token(&self, id: Option<u32>) -> Json {
        id.map_or(Json::Null, |id| Json::String(self.tokens[id as usize].clone()))
    }

    fn tokenizer_json(&self) -> Json {
        let added: Vec<Json> = (0..self.tokens.len())
            .filter(|&id| matches!(self.types[id], token_type::CONTROL | token_type::USER_DEFINED))
            .map(|id| {
                json!({
                    "id": id, "content": self.tokens[id], "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": self.types[id] == token_type::CONTROL,
                })
            })
            .collect();
        let vocab: serde_json::Map<String, Json> =
            (0..self.tokens.len()).filter(|&id| !self.is_filler(id)).map(|id| (self.tokens[id].clone(), json!(id))).collect();
        // GGUF stores a merge as "left right"; byte-level symbols never contain a plain space.
        let merges: Vec<Json> = self.merges.iter().map(|m| m.split_once(' ').map_or_else(|| json!(m), |(a, b)| json!([a, b]))).collect();
        let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false});
        let post_processor = self.post_processor().unwrap_or(byte_level);
        json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": self.pre.normalizer(),
            "pre_tokenizer": self.pre.pre_tokenizer(),
            "post_processor": post_processor,
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {
                "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                "ignore_merges": self.pre.ignore_merges, "vocab": vocab, "merges": merges,
            },
        })
    }

    /// A `TemplateProcessing` that adds BOS and/or EOS when the GGUF says so (what
    /// convert_hf_to_gguf.py reads `add_bos_token` back from).
    fn post_processor(&self) -> Option<Json> {
        let bos = self.bos.filter(|_| self.add_bos == Some(true));
        let eos = self.eos.filter(|_| self.add_eos == Some(true));
        if bos.is_none() && eos.is_none() {
            return None;
        }
        let special = |id: u32| json!({"SpecialToken": {"id": self.tokens[id as usize], "type_id": 0}});
        let sequence = |name: &str| json!({"Sequence": {"id": name, "type_id": 0}});
        let mut single = Vec::new();
        let mut pair = Vec::new();
        let mut special_tokens = serde_json::Map::new();
        for id in [bos, eos].into_iter().flatten() {
            let content = self.tokens[id as usize].clone();
            special_tokens.insert(content.clone(), json!({"id": content, "ids": [id], "tokens": [content]}));
        }
        if let Some(bos) = bos {
            single.push(special(bos));
            pair.push(special(bos));
        }
        single.push(sequence("A"));
        pair.push(sequence("A"));
        if let Some(bos) = bos {
            pair.push(special(bos));
        }
        pair.push(sequence("B"));
        if let Some(eos) = eos {
            single.push(special(eos));
            pair.push(special(eos));
        }
        Some(json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": special_tokens}))
    }

    fn tokenizer_config(&self) -> Json {
        let mut config = serde_json::Map::new();
        if let Some(add_bos) = self.add_bos {
            config.insert("add_bos_token".into(), json!(add_bos));
        }
        if let Some(add_eos) = self.add_eos {
            config.insert("add_eos_token".into(), json!(add_eos));
        }
        config.insert("bos_token".into(), self.token(self.bos));
        config.insert("eos_token".into(), self.token(self.eos));
        config.insert("pad_token".into(), self.token(self.pad));
        config.insert("unk_token".into(), self.token(self.unk));
        config.insert("chat_template".into(), self.chat_template.clone().map_or(Json::Null, Json::String));
        config.insert("clean_up_tokenization_spaces".into(), json!(false));
        if let Some(n) = self.context_length {
            config.insert("model_max_length".into(), json!(n));
        }
        config.insert("tokenizer_class".into(), json!("PreTrainedTokenizerFast"));
        Json::Object(config)
    }
}

/// Rebuilds `(tokenizer.json, tokenizer_config.json)` from a GGUF file's tokenizer metadata.
///
/// Control tokens (type 3) become special added tokens and user-defined tokens (type 4) plain
/// added tokens, so that both are matched whole in text, as llama.cpp does when it parses
/// special tokens. `tokenizer_config.json` carries the chat template and the bos/eos/pad/unk
/// tokens.
pub fn tokenizer_json_from_gguf(gguf_path: impl AsRef<Path>) -> Result<(Json, Json)> {
    let path = gguf_path.as_ref();
    let content = read_gguf(path)?;
    tokenizer_json_from_content(path, &content)
}

pub(crate) fn tokenizer_json_from_content(path: &Path, content: &Content) -> Result<(Json, Json)> {
    let vocab = GgufVocab::read(path, content)?;
    Ok((vocab.tokenizer_json(), vocab.tokenizer_config()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_the_pre_tokenizers_it_writes() {
        for pre in PRE_TOKENIZERS {
            let tokenizer = json!({"normalizer": pre.normalizer(), "pre_tokenizer": pre.pre_tokenizer()});
            assert_eq!(PreTokenizer::detect(&tokenizer).map(|p| p.name), Some(pre.name));
        }
        let bert = json!({"normalizer": null, "pre_tokenizer": {"type": "BertPreTokenizer"}});
        assert!(PreTokenizer::detect(&bert).is_none());
    }
}
