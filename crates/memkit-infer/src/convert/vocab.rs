//! HF tokenizer files → GGUF tokenizer metadata, as convert_hf_to_gguf.py's `_set_vocab_gpt2`
//! and gguf-py's `SpecialVocab` do it.

use std::collections::HashMap;

use serde_json::Value as Json;

use super::gguf::{MetaArray, MetaValue, Metadata};
use crate::gguf_tokenizer::{PreTokenizer, token_type};

/// The special-token kinds gguf-py's `SpecialVocab` looks up, and their GGUF key stems
/// (`seperator` is spelled as llama.cpp spells it).
const SPECIAL_TYPES: &[(&str, &str)] =
    &[("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("sep", "seperator"), ("pad", "padding"), ("cls", "cls"), ("mask", "mask")];

/// convert_hf_to_gguf.py `does_token_look_special`: added tokens that ought to be control
/// tokens even when not marked special.
fn looks_special(token: &str) -> bool {
    matches!(token, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (token.starts_with("<|") && token.ends_with("|>"))
        || (token.starts_with("<｜") && token.ends_with("｜>"))
        || (token.starts_with("<unused") && token.ends_with('>'))
}

/// Writes `tokenizer.*` metadata. `tokenizer_config` and `config` are the parsed JSON files
/// (`Null` when absent); errors are reasons naming the key to fix.
pub(crate) fn write_vocab(tokenizer: &Json, tokenizer_config: &Json, config: &Json, meta: &mut Metadata) -> Result<(), String> {
    if tokenizer["model"]["type"] != "BPE" {
        return Err(format!("tokenizer.json model type is {}; only byte-level BPE is supported", tokenizer["model"]["type"]));
    }
    let pre = PreTokenizer::detect(tokenizer)
        .ok_or("tokenizer.json `normalizer`/`pre_tokenizer` match no supported pre-tokenizer (qwen2, smollm, llama-bpe)")?;

    let mut by_id: HashMap<u64, String> = HashMap::new();
    for (token, id) in tokenizer["model"]["vocab"].as_object().ok_or("tokenizer.json has no `model.vocab` object")? {
        by_id.insert(id.as_u64().ok_or_else(|| format!("vocab id of {token:?} is not an integer"))?, token.clone());
    }
    // (special, content) of added tokens by id: they override the model vocabulary, as in
    // transformers' `tokenizer.vocab`.
    let mut added: HashMap<u64, bool> = HashMap::new();
    let added_tokens = tokenizer["added_tokens"].as_array().cloned().unwrap_or_default();
    for t in &added_tokens {
        let id = t["id"].as_u64().ok_or("an added token has no integer `id`")?;
        let content = t["content"].as_str().ok_or("an added token has no `content`")?;
        by_id.insert(id, content.to_owned());
        added.insert(id, t["special"] == true);
    }
    let max_id = by_id.keys().max().copied().unwrap_or(0);
    let vocab_size = config["vocab_size"].as_u64().unwrap_or(max_id + 1);
    if max_id >= vocab_size {
        return Err(format!("token id {max_id} is not below config.json `vocab_size` {vocab_size}"));
    }

    let mut tokens = Vec::with_capacity(vocab_size as usize);
    let mut types = Vec::with_capacity(vocab_size as usize);
    for id in 0..vocab_size {
        match (by_id.get(&id), added.get(&id)) {
            (None, _) => {
                tokens.push(format!("[PAD{id}]"));
                types.push(token_type::UNUSED);
            }
            (Some(token), Some(&special)) => {
                if special || looks_special(token) {
                    tokens.push(token.clone());
                    types.push(token_type::CONTROL);
                } else {
                    // llama.cpp expects user-defined tokens pre-normalised (Gemma's `▁`).
                    tokens.push(token.replace('\u{2581}', " "));
                    types.push(token_type::USER_DEFINED);
                }
            }
            (Some(token), None) => {
                tokens.push(token.clone());
                types.push(token_type::NORMAL);
            }
        }
    }

    meta.set("tokenizer.ggml.model", MetaValue::String("gpt2".into()));
    meta.set("tokenizer.ggml.pre", MetaValue::String(pre.name.into()));
    meta.set("tokenizer.ggml.tokens", MetaValue::Array(MetaArray::String(tokens)));
    meta.set("tokenizer.ggml.token_type", MetaValue::Array(MetaArray::I32(types)));

    // SpecialVocab.add_to_gguf: merges, special ids, add_* flags, chat template.
    let merges = merges(&tokenizer["model"]["merges"])?;
    if !merges.is_empty() {
        meta.set("tokenizer.ggml.merges", MetaValue::Array(MetaArray::String(merges)));
    }
    let special = special_vocab(tokenizer, &added_tokens, tokenizer_config, config, vocab_size);
    for (typ, id) in &special.ids {
        let stem = SPECIAL_TYPES.iter().find(|(t, _)| t == typ).map_or(*typ, |(_, s)| s);
        meta.set(format!("tokenizer.ggml.{stem}_token_id"), MetaValue::U32(*id));
    }
    for (typ, add) in &special.add {
        meta.set(format!("tokenizer.ggml.add_{typ}_token"), MetaValue::Bool(*add));
    }
    if let Some(template) = tokenizer_config["chat_template"].as_str() {
        meta.set("tokenizer.chat_template", MetaValue::String(template.to_owned()));
    }
    Ok(())
}

/// Merges as "left right" strings; the list-of-pairs format (transformers ≥ 4.45) may contain
/// spaces, which gguf-py encodes as U+0120 as the byte-level alphabet does.
fn merges(merges: &Json) -> Result<Vec<String>, String> {
    let Some(items) = merges.as_array() else { return Ok(Vec::new()) };
    items
        .iter()
        .map(|m| match m {
            Json::String(s) => Ok(s.clone()),
            Json::Array(pair) if pair.len() == 2 => {
                let part = |v: &Json| v.as_str().map(|s| s.replace(' ', "\u{120}"));
                match (part(&pair[0]), part(&pair[1])) {
                    (Some(a), Some(b)) => Ok(format!("{a} {b}")),
                    _ => Err(format!("merge {m} is not a pair of strings")),
                }
            }
            _ => Err(format!("merge {m} is neither a string nor a pair")),
        })
        .collect()
}

struct SpecialVocab {
    /// (type, id) in the order gguf-py sets them.
    ids: Vec<(&'static str, u32)>,
    add: Vec<(&'static str, bool)>,
}

/// gguf-py `SpecialVocab._try_load_from_tokenizer_json` + `_try_load_from_config_json`, for
/// the simple post-processors of these families: a `TemplateProcessing` whose single template
/// starts with BOS and/or ends with EOS sets `add_bos`/`add_eos`; `tokenizer_config.json`'s
/// `add_*_token` and `*_token` (looked up by content among the added tokens) come next;
/// `config.json`'s `*_token_id` fill what is still unset.
fn special_vocab(tokenizer: &Json, added_tokens: &[Json], tokenizer_config: &Json, config: &Json, vocab_size: u64) -> SpecialVocab {
    let mut out = SpecialVocab { ids: Vec::new(), add: Vec::new() };
    let set_add = |out: &mut SpecialVocab, typ: &'static str, value: bool| match out.add.iter_mut().find(|(t, _)| *t == typ) {
        Some(slot) => slot.1 = value,
        None => out.add.push((typ, value)),
    };
    let set_id = |out: &mut SpecialVocab, typ: &'static str, id: Option<u64>| {
        if let Some(id) = id.filter(|id| *id < vocab_size)
            && !out.ids.iter().any(|(t, _)| *t == typ)
        {
            out.ids.push((typ, id as u32));
        }
    };
    let content = |v: &Json| v.as_str().or_else(|| v["content"].as_str()).map(str::to_owned);
    let bos = content(&tokenizer_config["bos_token"]);
    let eos = content(&tokenizer_config["eos_token"]);

    let post = &tokenizer["post_processor"];
    let processors = post["processors"].as_array().cloned().unwrap_or_else(|| vec![post.clone()]);
    for p in processors.iter().filter(|p| p["type"] == "TemplateProcessing") {
        let single = p["single"].as_array().cloned().unwrap_or_default();
        if single.len() > 1 {
            if let Some(first) = single[0]["SpecialToken"]["id"].as_str() {
                set_add(&mut out, "bos", bos.as_deref() == Some(first));
            }
            if let Some(last) = single[single.len() - 1]["SpecialToken"]["id"].as_str() {
                set_add(&mut out, "eos", eos.as_deref() == Some(last));
            }
        }
    }
    for (typ, _) in SPECIAL_TYPES {
        if let Some(add) = tokenizer_config[format!("add_{typ}_token")].as_bool() {
            set_add(&mut out, typ, add);
        }
        if let Some(text) = content(&tokenizer_config[format!("{typ}_token")]) {
            let id = added_tokens.iter().find(|t| t["content"].as_str() == Some(text.as_str())).and_then(|t| t["id"].as_u64());
            set_id(&mut out, typ, id);
        }
    }
    for (typ, _) in SPECIAL_TYPES {
        set_id(&mut out, typ, config[format!("{typ}_token_id")].as_u64());
    }
    out
}
