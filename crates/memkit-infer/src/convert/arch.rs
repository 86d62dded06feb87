//! The Llama / Qwen2 / Qwen3 families: their `config.json` hyperparameters as GGUF keys, the
//! tensor names on both sides, and the q/k row permutation of the llama architecture.

use super::gguf::{MetaValue, Metadata};

/// A supported architecture, named as in GGUF's `general.architecture`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// `LlamaForCausalLM` (SmolLM2, Llama): q/k rows permuted for llama.cpp's RoPE.
    Llama,
    /// `Qwen2ForCausalLM` (Qwen2, Qwen2.5): q/k/v biases, no permutation.
    Qwen2,
    /// `Qwen3ForCausalLM`: per-head q/k RMS norms, explicit `head_dim`, no permutation.
    Qwen3,
}

impl Arch {
    /// The HF class name in `config.json`'s `architectures`.
    pub(crate) fn from_hf_class(class: &str) -> Option<Self> {
        match class {
            "LlamaForCausalLM" => Some(Self::Llama),
            "Qwen2ForCausalLM" => Some(Self::Qwen2),
            "Qwen3ForCausalLM" => Some(Self::Qwen3),
            _ => None,
        }
    }

    pub(crate) fn from_gguf(name: &str) -> Option<Self> {
        match name {
            "llama" => Some(Self::Llama),
            "qwen2" => Some(Self::Qwen2),
            "qwen3" => Some(Self::Qwen3),
            _ => None,
        }
    }

    /// `general.architecture`, also the prefix of the hyperparameter keys.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
        }
    }

    pub(crate) fn hf_class(self) -> &'static str {
        match self {
            Self::Llama => "LlamaForCausalLM",
            Self::Qwen2 => "Qwen2ForCausalLM",
            Self::Qwen3 => "Qwen3ForCausalLM",
        }
    }

    /// Only llama permutes q/k (convert_hf_to_gguf.py `LlamaModel.modify_tensors`): llama.cpp
    /// applies RoPE to adjacent pairs there, HF to the two halves of each head.
    pub(crate) fn permutes_qk(self) -> bool {
        self == Self::Llama
    }
}

/// One `config.json` entry and the GGUF key it becomes.
pub(crate) enum HParam {
    U32(&'static str),
    F32(&'static str),
}

/// Hyperparameters in the order convert_hf_to_gguf.py's `TextModel.set_gguf_parameters`
/// writes them: (HF key, GGUF key after `<arch>.`, required).
pub(crate) const HPARAMS: &[(&str, HParam, bool)] = &[
    ("num_hidden_layers", HParam::U32("block_count"), true),
    ("max_position_embeddings", HParam::U32("context_length"), false),
    ("hidden_size", HParam::U32("embedding_length"), true),
    ("intermediate_size", HParam::U32("feed_forward_length"), true),
    ("num_attention_heads", HParam::U32("attention.head_count"), true),
    ("num_key_value_heads", HParam::U32("attention.head_count_kv"), false),
    ("rope_theta", HParam::F32("rope.freq_base"), false),
    ("rms_norm_eps", HParam::F32("attention.layer_norm_rms_epsilon"), true),
];

/// Writes `<arch>.*` keys from `config.json`; returns the name of a missing required key.
pub(crate) fn write_hparams(arch: Arch, config: &serde_json::Value, meta: &mut Metadata) -> Result<(), String> {
    let prefix = arch.gguf_name();
    for (hf_key, param, required) in HPARAMS {
        let Some(value) = config.get(hf_key).filter(|v| !v.is_null()) else {
            if *required {
                return Err(format!("missing `{hf_key}`"));
            }
            continue;
        };
        match param {
            HParam::U32(key) => {
                let v = value.as_u64().and_then(|v| u32::try_from(v).ok()).ok_or_else(|| format!("`{hf_key}` is not a u32: {value}"))?;
                meta.set(format!("{prefix}.{key}"), MetaValue::U32(v));
            }
            HParam::F32(key) => {
                let v = value.as_f64().ok_or_else(|| format!("`{hf_key}` is not a number: {value}"))?;
                meta.set(format!("{prefix}.{key}"), MetaValue::F32(v as f32));
            }
        }
    }
    if let Some(head_dim) = config.get("head_dim").and_then(serde_json::Value::as_u64) {
        let head_dim = u32::try_from(head_dim).map_err(|_| format!("`head_dim` is too large: {head_dim}"))?;
        meta.set(format!("{prefix}.attention.key_length"), MetaValue::U32(head_dim));
        meta.set(format!("{prefix}.attention.value_length"), MetaValue::U32(head_dim));
    }
    Ok(())
}

/// HF tensor name → GGUF name (gguf-py `tensor_mapping.py`); `None` for tensors llama.cpp does
/// not use (`rotary_emb.inv_freq`).
pub(crate) fn gguf_tensor_name(hf: &str) -> Option<String> {
    match hf {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.norm.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, kind) = rest.rsplit_once('.')?;
    let gguf = BLOCK_TENSORS.iter().find(|(h, _)| *h == module)?.1;
    Some(format!("blk.{layer}.{gguf}.{kind}"))
}

/// GGUF tensor name → HF name, the inverse of [`gguf_tensor_name`].
pub(crate) fn hf_tensor_name(gguf: &str) -> Option<String> {
    match gguf {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        _ => {}
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, kind) = rest.rsplit_once('.')?;
    let hf = BLOCK_TENSORS.iter().find(|(_, g)| *g == module)?.0;
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// Per-block modules, HF ↔ GGUF.
const BLOCK_TENSORS: &[(&str, &str)] = &[
    ("input_layernorm", "attn_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("self_attn.q_norm", "attn_q_norm"),
    ("self_attn.k_norm", "attn_k_norm"),
    ("post_attention_layernorm", "ffn_norm"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
];

/// Which head count permutes a tensor: `Some(n_head)` for q, `Some(n_head_kv)` for k.
pub(crate) fn qk_heads(gguf_name: &str, n_head: usize, n_head_kv: usize) -> Option<usize> {
    let module = gguf_name.rsplit_once('.')?.0.rsplit_once('.')?.1;
    match module {
        "attn_q" => Some(n_head),
        "attn_k" => Some(n_head_kv),
        _ => None,
    }
}

/// convert_hf_to_gguf.py `LlamaModel.permute`: rows viewed as `(n_head, 2, head_dim / 2)` and
/// the last two axes swapped, so that the two rotary halves of each head become interleaved
/// pairs. `cols` is 1 for a bias.
pub(crate) fn permute_rows(data: &[f32], n_head: usize, cols: usize) -> Vec<f32> {
    reorder_rows(data, n_head, cols, false)
}

/// The inverse of [`permute_rows`].
pub(crate) fn unpermute_rows(data: &[f32], n_head: usize, cols: usize) -> Vec<f32> {
    reorder_rows(data, n_head, cols, true)
}

fn reorder_rows(data: &[f32], n_head: usize, cols: usize, inverse: bool) -> Vec<f32> {
    let rows = data.len() / cols;
    let half = rows / n_head / 2;
    let mut out = vec![0.0; data.len()];
    for h in 0..n_head {
        for i in 0..2 {
            for j in 0..half {
                // HF row (h, i, j) holds rotary half i, element j; GGUF row (h, j, i).
                let hf = h * 2 * half + i * half + j;
                let gguf = h * 2 * half + j * 2 + i;
                let (src, dst) = if inverse { (gguf, hf) } else { (hf, gguf) };
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&data[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permute_matches_numpy() {
        // numpy, once: w = np.arange(8 * 2).reshape(8, 2); n_head = 2
        // w.reshape(2, 2, 2, 2).swapaxes(1, 2).reshape(8, 2)[:, 0] == [0, 4, 2, 6, 8, 12, 10, 14]
        let w: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let p = permute_rows(&w, 2, 2);
        let first_col: Vec<f32> = p.chunks(2).map(|r| r[0]).collect();
        assert_eq!(first_col, [0.0, 4.0, 2.0, 6.0, 8.0, 12.0, 10.0, 14.0]);
        assert_eq!(unpermute_rows(&p, 2, 2), w);
    }

    #[test]
    fn tensor_names_round_trip() {
        for (hf, gguf) in [
            ("model.embed_tokens.weight", "token_embd.weight"),
            ("model.layers.12.self_attn.q_proj.bias", "blk.12.attn_q.bias"),
            ("model.layers.0.self_attn.k_norm.weight", "blk.0.attn_k_norm.weight"),
            ("model.layers.3.mlp.down_proj.weight", "blk.3.ffn_down.weight"),
            ("model.layers.3.post_attention_layernorm.weight", "blk.3.ffn_norm.weight"),
            ("lm_head.weight", "output.weight"),
        ] {
            assert_eq!(gguf_tensor_name(hf).as_deref(), Some(gguf));
            assert_eq!(hf_tensor_name(gguf).as_deref(), Some(hf));
        }
        assert_eq!(gguf_tensor_name("model.layers.0.self_attn.rotary_emb.inv_freq"), None);
        assert_eq!(qk_heads("blk.1.attn_k.weight", 9, 3), Some(3));
        assert_eq!(qk_heads("blk.1.attn_output.weight", 9, 3), None);
    }
}
