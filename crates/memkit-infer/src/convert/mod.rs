//! Conversion between the Hugging Face checkpoint layout and GGUF, for the Llama / Qwen2 /
//! Qwen3 families.
//!
//! - [`hf_to_gguf`] writes what llama.cpp's `convert_hf_to_gguf.py` writes: the `<arch>.*`
//!   hyperparameters, the tensors under their GGUF names (q/k rows permuted for the llama
//!   architecture), the tokenizer (`tokenizer.ggml.*`) and the chat template, as F32, F16 or
//!   Q8_0. Trained checkpoints reach llama.cpp this way, and it is the GGUF export. A
//!   checkpoint's extraction prompt (`extract_prompt.j2`) goes into `memkit.extract_prompt`, and
//!   its trained window (`extract_window.json`) into `memkit.extract_window.{size,overlap}`.
//! - [`gguf_to_hf`] goes back: it dequantises a GGUF file into an HF directory (f32
//!   `model.safetensors`, `config.json`, tokenizer files, `generation_config.json`). Training
//!   gets its base weights from the GGUF-only model packages this way. `memkit.extract_prompt`
//!   comes back as `extract_prompt.j2`, the window keys as `extract_window.json`.
//! - [`trained_window`] reads those keys alone, for `memkit extract`'s default window.
//! - [`delta`]: a fine-tuned checkpoint as a low-rank delta over its base (a published
//!   extractor's compact form) and back.
//!
//! Both stream one tensor at a time and write through a temporary file renamed at the end.

mod arch;
pub mod delta;
mod gguf;
mod vocab;

use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use candle_core::safetensors::SliceSafetensors;
use candle_core::{DType, Device, Tensor};
use memkit_prompt::{
    GGUF_PROMPT_KEY, GGUF_WINDOW_OVERLAP_KEY, GGUF_WINDOW_SIZE_KEY, TRAINED_PROMPT_FILE, TRAINED_WINDOW_FILE, TrainedWindow,
};
use serde_json::{Value as Json, json};

pub use arch::Arch;
use gguf::{MetaValue, Metadata, TensorDecl, TensorType};

use crate::gguf_tokenizer::{read_gguf, tokenizer_json_from_content};
use crate::{Error, Result};

/// The type the weight matrices are written as. Norms, biases and other 1-D tensors are always
/// F32, as in convert_hf_to_gguf.py.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutType {
    /// Everything in f32 (`general.file_type` 0): lossless.
    #[default]
    F32,
    /// Matrices in f16 (file type 1).
    F16,
    /// Matrices in Q8_0 (file type 7); a matrix whose rows are not a multiple of 32 falls back
    /// to f16.
    Q8_0,
}

impl OutType {
    /// `general.file_type` (llama.cpp `llama_ftype`).
    fn file_type(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q8_0 => 7,
        }
    }
}

/// Options of [`hf_to_gguf`].
#[derive(Debug, Clone, Default)]
pub struct ConvertOptions {
    /// What the weight matrices are written as.
    pub dtype: OutType,
    /// `general.name`; defaults to the name of the HF directory.
    pub name: Option<String>,
}

/// What a conversion wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertReport {
    /// The model family.
    pub arch: Arch,
    /// The file written.
    pub path: PathBuf,
    /// Tensors written.
    pub tensors: usize,
    /// Parameters (values in all tensors).
    pub parameters: u64,
    /// Size of the GGUF file ([`hf_to_gguf`]) or of `model.safetensors` ([`gguf_to_hf`]).
    pub bytes: u64,
}

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::Convert { path: path.to_path_buf(), reason: reason.into() }
}

fn read_json(path: &Path) -> Result<Json> {
    let text = fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|source| Error::Config { path: path.to_path_buf(), source })
}

fn read_json_if_exists(path: &Path) -> Result<Json> {
    if path.is_file() { read_json(path) } else { Ok(Json::Null) }
}

/// The safetensors files of a checkpoint: `model.safetensors`, or the shards listed in
/// `model.safetensors.index.json`.
fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index_path = dir.join("model.safetensors.index.json");
    if !index_path.is_file() {
        return Err(bad(dir, "neither model.safetensors nor model.safetensors.index.json exists"));
    }
    let index = read_json(&index_path)?;
    let map = index["weight_map"].as_object().ok_or_else(|| bad(&index_path, "no `weight_map` object"))?;
    let mut files: Vec<PathBuf> = map.values().filter_map(Json::as_str).map(|f| dir.join(f)).collect();
    files.sort();
    files.dedup();
    Ok(files)
}

/// Which type a tensor is written as (convert_hf_to_gguf.py `prepare_tensors`): 1-D tensors,
/// norms and anything not named `*.weight` stay F32.
fn tensor_type(out: OutType, gguf_name: &str, shape: &[usize]) -> TensorType {
    let matrix = shape.len() >= 2 && gguf_name.ends_with(".weight") && !gguf_name.ends_with("_norm.weight");
    match out {
        _ if !matrix => TensorType::F32,
        OutType::F32 => TensorType::F32,
        OutType::F16 => TensorType::F16,
        OutType::Q8_0 if shape.last().is_some_and(|n| n % gguf::QK8_0 == 0) => TensorType::Q8_0,
        OutType::Q8_0 => TensorType::F16,
    }
}

fn config_usize(config: &Json, key: &str, path: &Path) -> Result<usize> {
    config[key].as_u64().map(|v| v as usize).ok_or_else(|| bad(path, format!("missing integer `{key}`")))
}

/// Converts an HF checkpoint directory (`config.json`, `model.safetensors` or its shards,
/// `tokenizer.json`, `tokenizer_config.json` with the chat template) into a GGUF file.
///
/// The safetensors files are read into memory whole (no `unsafe` memory map); tensors are
/// converted and written one at a time. Only byte-level BPE tokenizers with the qwen2, smollm
/// or llama-bpe pre-tokenizer are supported, and no `rope_scaling`.
pub fn hf_to_gguf(hf_dir: impl AsRef<Path>, out_path: impl AsRef<Path>, options: &ConvertOptions) -> Result<ConvertReport> {
    let dir = hf_dir.as_ref();
    let out_path = out_path.as_ref();
    let config_path = dir.join("config.json");
    let config = read_json(&config_path)?;
    let class = config["architectures"][0].as_str().unwrap_or_default();
    let arch = Arch::from_hf_class(class).ok_or_else(|| {
        bad(
            &config_path,
            format!("`architectures` is {:?}; supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM", config["architectures"]),
        )
    })?;
    if !config["rope_scaling"].is_null() {
        return Err(bad(&config_path, format!("`rope_scaling` {} is not supported", config["rope_scaling"])));
    }
    let tokenizer_path = dir.join("tokenizer.json");
    let tokenizer = read_json(&tokenizer_path)?;
    let mut tokenizer_config = read_json_if_exists(&dir.join("tokenizer_config.json"))?;
    let jinja = dir.join("chat_template.jinja");
    if tokenizer_config["chat_template"].is_null() && jinja.is_file() {
        let template = fs::read_to_string(&jinja).map_err(|e| Error::io(&jinja, e))?;
        if let Json::Object(map) = &mut tokenizer_config {
            map.insert("chat_template".into(), Json::String(template));
        } else {
            tokenizer_config = json!({"chat_template": template});
        }
    }

    let n_head = config_usize(&config, "num_attention_heads", &config_path)?;
    let n_head_kv = config["num_key_value_heads"].as_u64().map_or(n_head, |v| v as usize);
    let tied = config["tie_word_embeddings"].as_bool().unwrap_or(false);

    // Metadata, in the order convert_hf_to_gguf.py writes it.
    let mut meta = Metadata::default();
    meta.set("general.architecture", MetaValue::String(arch.gguf_name().into()));
    meta.set("general.type", MetaValue::String("model".into()));
    let name = options.name.clone().or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()));
    if let Some(name) = name {
        meta.set("general.name", MetaValue::String(name));
    }
    arch::write_hparams(arch, &config, &mut meta).map_err(|reason| bad(&config_path, reason))?;
    meta.set("general.file_type", MetaValue::U32(options.dtype.file_type()));
    if arch == Arch::Llama {
        let vocab_size = config_usize(&config, "vocab_size", &config_path)?;
        meta.set("llama.vocab_size", MetaValue::U32(vocab_size as u32));
        let head_dim = match config["head_dim"].as_u64() {
            Some(d) => d as usize,
            None => config_usize(&config, "hidden_size", &config_path)? / n_head,
        };
        meta.set("llama.rope.dimension_count", MetaValue::U32(head_dim as u32));
    }
    vocab::write_vocab(&tokenizer, &tokenizer_config, &config, &mut meta).map_err(|reason| bad(&tokenizer_path, reason))?;
    // LlamaModel.set_vocab: "Apply to granite small models only" (the SmolLM vocabulary).
    if arch == Arch::Llama && config["vocab_size"].as_u64() == Some(49152) {
        meta.set("tokenizer.ggml.add_bos_token", MetaValue::Bool(false));
    }
    meta.set("general.quantization_version", MetaValue::U32(2));
    let prompt_path = dir.join(TRAINED_PROMPT_FILE);
    if prompt_path.is_file() {
        let prompt = fs::read_to_string(&prompt_path).map_err(|e| Error::io(&prompt_path, e))?;
        meta.set(GGUF_PROMPT_KEY, MetaValue::String(prompt));
    }
    if let Some(window) = TrainedWindow::read(dir)? {
        meta.set(GGUF_WINDOW_SIZE_KEY, MetaValue::U32(window.size as u32));
        meta.set(GGUF_WINDOW_OVERLAP_KEY, MetaValue::U32(window.overlap as u32));
    }

    // Tensors, sorted by HF name as gguf-py reads them from safetensors.
    let shards: Vec<(PathBuf, Vec<u8>)> = safetensors_files(dir)?
        .into_iter()
        .map(|p| fs::read(&p).map(|bytes| (p.clone(), bytes)).map_err(|e| Error::io(&p, e)))
        .collect::<Result<_>>()?;
    let parsed: Vec<SliceSafetensors<'_>> = shards
        .iter()
        .map(|(path, bytes)| SliceSafetensors::new(bytes).map_err(|source| Error::Weights { path: path.clone(), source }))
        .collect::<Result<_>>()?;
    let mut plan = Vec::new(); // (hf name, shard index, declaration)
    for (i, ((path, _), st)) in shards.iter().zip(&parsed).enumerate() {
        for (hf_name, view) in st.tensors() {
            if hf_name.ends_with(".rotary_emb.inv_freq") || (tied && hf_name == "lm_head.weight") {
                continue;
            }
            let gguf_name =
                arch::gguf_tensor_name(&hf_name).ok_or_else(|| bad(path, format!("cannot map tensor `{hf_name}` to a GGUF name")))?;
            let shape = view.shape().to_vec();
            let ty = tensor_type(options.dtype, &gguf_name, &shape);
            plan.push((hf_name, i, TensorDecl { name: gguf_name, shape, ty }));
        }
    }
    plan.sort_by(|a, b| a.0.cmp(&b.0));
    let decls: Vec<TensorDecl> = plan.iter().map(|(_, _, d)| d.clone()).collect();

    let partial = partial_path(out_path);
    let file = File::create(&partial).map_err(|e| Error::io(&partial, e))?;
    let mut data = gguf::write_header(BufWriter::new(file), &meta, &decls).map_err(|e| Error::io(&partial, e))?;
    let mut parameters = 0u64;
    for (hf_name, shard, decl) in &plan {
        let (path, st) = (&shards[*shard].0, &parsed[*shard]);
        let weights = |source| Error::Weights { path: path.clone(), source };
        let tensor = st.load(hf_name, &Device::Cpu).map_err(weights)?;
        let mut values = flat_f32(&tensor).map_err(weights)?;
        if arch.permutes_qk()
            && let Some(heads) = arch::qk_heads(&decl.name, n_head, n_head_kv)
        {
            let cols = decl.shape.get(1).copied().unwrap_or(1);
            values = arch::permute_rows(&values, heads, cols);
        }
        parameters += values.len() as u64;
        data.write_tensor(&decl.ty.encode(&values)).map_err(|e| Error::io(&partial, e))?;
    }
    let mut w = data.finish().map_err(|e| Error::io(&partial, e))?;
    w.flush().map_err(|e| Error::io(&partial, e))?;
    drop(w);
    fs::rename(&partial, out_path).map_err(|e| Error::io(out_path, e))?;
    let bytes = fs::metadata(out_path).map_err(|e| Error::io(out_path, e))?.len();
    tracing::info!(path = %out_path.display(), arch = arch.gguf_name(), tensors = decls.len(), parameters, bytes, "wrote GGUF");
    Ok(ConvertReport { arch, path: out_path.to_path_buf(), tensors: decls.len(), parameters, bytes })
}

/// `<path>.partial`, renamed to `path` once complete.
fn partial_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    path.with_file_name(name)
}

/// A metadata number as JSON, written as the shortest decimal that reads back to the same f32
/// (`1e-5`, not `9.999999747378752e-6`).
fn f32_json(v: f32) -> Json {
    format!("{v}").parse::<f64>().map_or(Json::Null, |v| json!(v))
}

/// Dequantises a GGUF file (llama / qwen2 / qwen3) into an HF checkpoint directory:
/// `config.json`, `model.safetensors` (f32, HF names, q/k permutation undone for llama),
/// `tokenizer.json`, `tokenizer_config.json` (with the chat template) and
/// `generation_config.json`.
pub fn gguf_to_hf(gguf_path: impl AsRef<Path>, out_dir: impl AsRef<Path>) -> Result<ConvertReport> {
    let path = gguf_path.as_ref();
    let out_dir = out_dir.as_ref();
    let content = read_gguf(path)?;
    let meta = &content.metadata;
    let get = |key: &str| meta.get(key);
    let arch_name = get("general.architecture").and_then(|v| v.to_string().ok()).cloned().unwrap_or_default();
    let arch =
        Arch::from_gguf(&arch_name).ok_or_else(|| bad(path, format!("general.architecture `{arch_name}` is not llama, qwen2 or qwen3")))?;
    let p = arch.gguf_name();
    let u32_key = |suffix: &str| get(&format!("{p}.{suffix}")).and_then(|v| v.to_u32().ok());
    let f32_key = |suffix: &str| get(&format!("{p}.{suffix}")).and_then(|v| v.to_f32().ok());
    let required = |suffix: &str| u32_key(suffix).ok_or_else(|| bad(path, format!("metadata `{p}.{suffix}` is missing")));

    let n_head = required("attention.head_count")? as usize;
    let n_head_kv = u32_key("attention.head_count_kv").map_or(n_head, |v| v as usize);
    let embd = content.tensor_infos.get("token_embd.weight").ok_or_else(|| bad(path, "no tensor `token_embd.weight`"))?;
    let vocab_size = embd.shape.dims()[0];
    let tied = !content.tensor_infos.contains_key("output.weight");
    let token_id = |kind: &str| get(&format!("tokenizer.ggml.{kind}_token_id")).and_then(|v| v.to_u32().ok());

    let mut config = serde_json::Map::new();
    config.insert("architectures".into(), json!([arch.hf_class()]));
    config.insert("model_type".into(), json!(p));
    config.insert("hidden_size".into(), json!(required("embedding_length")?));
    config.insert("intermediate_size".into(), json!(required("feed_forward_length")?));
    config.insert("num_hidden_layers".into(), json!(required("block_count")?));
    config.insert("num_attention_heads".into(), json!(n_head));
    config.insert("num_key_value_heads".into(), json!(n_head_kv));
    if let Some(head_dim) = u32_key("attention.key_length") {
        config.insert("head_dim".into(), json!(head_dim));
    }
    if let Some(n) = u32_key("context_length") {
        config.insert("max_position_embeddings".into(), json!(n));
    }
    let eps = f32_key("attention.layer_norm_rms_epsilon")
        .ok_or_else(|| bad(path, format!("metadata `{p}.attention.layer_norm_rms_epsilon` is missing")))?;
    config.insert("rms_norm_eps".into(), f32_json(eps));
    if let Some(theta) = f32_key("rope.freq_base") {
        config.insert("rope_theta".into(), f32_json(theta));
    }
    config.insert("rope_scaling".into(), Json::Null);
    config.insert("vocab_size".into(), json!(vocab_size));
    config.insert("tie_word_embeddings".into(), json!(tied));
    config.insert("hidden_act".into(), json!("silu"));
    if arch == Arch::Llama {
        config.insert("attention_bias".into(), json!(content.tensor_infos.contains_key("blk.0.attn_q.bias")));
        config.insert("mlp_bias".into(), json!(false));
    }
    let mut generation = serde_json::Map::new();
    for (kind, key) in [("bos", "bos_token_id"), ("eos", "eos_token_id"), ("padding", "pad_token_id")] {
        if let Some(id) = token_id(kind) {
            config.insert(key.into(), json!(id));
            generation.insert(key.into(), json!(id));
        }
    }
    config.insert("torch_dtype".into(), json!("float32"));
    config.insert("use_cache".into(), json!(true));

    let (tokenizer, tokenizer_config) = tokenizer_json_from_content(path, &content)?;

    // Tensors by HF name; the safetensors header needs every offset before the data.
    let mut tensors: Vec<(String, &str, Vec<usize>)> = Vec::new();
    for (name, info) in &content.tensor_infos {
        let hf = arch::hf_tensor_name(name).ok_or_else(|| bad(path, format!("cannot map tensor `{name}` to an HF name")))?;
        tensors.push((hf, name.as_str(), info.shape.dims().to_vec()));
    }
    tensors.sort();

    fs::create_dir_all(out_dir).map_err(|e| Error::io(out_dir, e))?;
    let write_json = |name: &str, value: &Json| -> Result<()> {
        let target = out_dir.join(name);
        let partial = partial_path(&target);
        let text = serde_json::to_string_pretty(value).expect("JSON values serialise");
        fs::write(&partial, text + "\n").map_err(|e| Error::io(&partial, e))?;
        fs::rename(&partial, &target).map_err(|e| Error::io(&target, e))
    };

    let target = out_dir.join("model.safetensors");
    let partial = partial_path(&target);
    let io = |e| Error::io(&partial, e);
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut offset = 0usize;
    for (hf, _, shape) in &tensors {
        let n = shape.iter().product::<usize>() * 4;
        header.insert(hf.clone(), json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + n]}));
        offset += n;
    }
    let mut header = serde_json::to_vec(&Json::Object(header)).expect("JSON values serialise");
    // safetensors pads the header with spaces to 8 bytes, so the data starts aligned.
    header.resize(header.len().div_ceil(8) * 8, b' ');
    let mut w = BufWriter::new(File::create(&partial).map_err(io)?);
    w.write_all(&(header.len() as u64).to_le_bytes()).map_err(io)?;
    w.write_all(&header).map_err(io)?;
    let mut reader = BufReader::new(File::open(path).map_err(|e| Error::io(path, e))?);
    let mut parameters = 0u64;
    for (_, name, shape) in &tensors {
        let weights = |source| Error::Weights { path: path.to_path_buf(), source };
        let tensor = content.tensor(&mut reader, name, &Device::Cpu).and_then(|q| q.dequantize(&Device::Cpu)).map_err(weights)?;
        let mut values = flat_f32(&tensor).map_err(weights)?;
        if arch.permutes_qk()
            && let Some(heads) = arch::qk_heads(name, n_head, n_head_kv)
        {
            values = arch::unpermute_rows(&values, heads, shape.get(1).copied().unwrap_or(1));
        }
        parameters += values.len() as u64;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.write_all(&bytes).map_err(io)?;
    }
    w.flush().map_err(io)?;
    drop(w);
    fs::rename(&partial, &target).map_err(|e| Error::io(&target, e))?;

    write_json("config.json", &Json::Object(config))?;
    write_json("generation_config.json", &Json::Object(generation))?;
    write_json("tokenizer.json", &tokenizer)?;
    write_json("tokenizer_config.json", &tokenizer_config)?;
    if let Some(prompt) = get(GGUF_PROMPT_KEY).and_then(|v| v.to_string().ok()) {
        let prompt_path = out_dir.join(TRAINED_PROMPT_FILE);
        fs::write(&prompt_path, prompt).map_err(|e| Error::io(&prompt_path, e))?;
    }
    if let Some(window) = window_of(meta, path)? {
        let window_path = out_dir.join(TRAINED_WINDOW_FILE);
        fs::write(&window_path, window.to_json()).map_err(|e| Error::io(&window_path, e))?;
    }
    let bytes = fs::metadata(&target).map_err(|e| Error::io(&target, e))?.len();
    tracing::info!(path = %out_dir.display(), arch = p, tensors = tensors.len(), parameters, "wrote HF checkpoint");
    Ok(ConvertReport { arch, path: out_dir.to_path_buf(), tensors: tensors.len(), parameters, bytes })
}

/// The window a trained extractor learnt from (`memkit.extract_window.size` / `.overlap`), read
/// from the GGUF's header alone; `None` for a model without one.
pub fn trained_window(gguf_path: impl AsRef<Path>) -> Result<Option<TrainedWindow>> {
    let path = gguf_path.as_ref();
    window_of(&read_gguf(path)?.metadata, path)
}

fn window_of(
    meta: &std::collections::HashMap<String, candle_core::quantized::gguf_file::Value>,
    path: &Path,
) -> Result<Option<TrainedWindow>> {
    TrainedWindow::from_metadata(|key| meta.get(key).and_then(|v| v.to_u32().ok()).map(|v| v as usize)).map_err(|reason| bad(path, reason))
}

fn flat_f32(tensor: &Tensor) -> candle_core::Result<Vec<f32>> {
    tensor.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()
}
