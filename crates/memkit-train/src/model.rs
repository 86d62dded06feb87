//! The Llama / Qwen2 / Qwen3 decoder in burn, with optional LoRA adapters.
//!
//! - Pre-norm blocks: RMSNorm → attention → residual, RMSNorm → SwiGLU MLP → residual.
//! - Grouped-query attention (`num_key_value_heads` ≤ `num_attention_heads`) with a causal mask.
//! - Rotary position embeddings in the Hugging Face layout: the two halves of each head are
//!   rotated together (`rotate_half`), not interleaved pairs.
//! - Qwen2: biases on q/k/v. Qwen3: an RMSNorm on every head of q and k before RoPE. Llama:
//!   biases on q/k/v/o when `attention_bias`.
//! - Tied embeddings when `tie_word_embeddings` (no `lm_head.weight`).
//!
//! Sequences are right-padded: with the causal mask a real token never attends to the padding
//! that follows it, so no separate padding mask is needed; padded positions carry no loss.
//! Packed rows ([`Packing`]) hold several examples each: a token attends only within its own
//! example, and positions restart at 0 for each.
//!
//! References: transformers `models/qwen2/modeling_qwen2.py`, `models/qwen3/modeling_qwen3.py`;
//! candle `candle-transformers/src/models/qwen2.rs`.

use std::collections::BTreeMap;
use std::path::Path;

use burn::backend::DispatchDevice;
use burn::module::{Module, Param, ParamId};
use burn::nn::{Dropout, DropoutConfig};
use burn::tensor::activation::{silu, softmax};
use burn::tensor::module::{attention, embedding, linear};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Device, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::weights::{HostTensor, Weights};
use crate::{Error, Result};

/// The model hyperparameters, read from a Hugging Face `config.json` (same field names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// `llama`, `qwen2` or `qwen3`.
    pub model_type: String,
    /// Vocabulary size (rows of the embedding).
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP.
    pub intermediate_size: usize,
    /// Number of decoder blocks.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention); defaults to `num_attention_heads`.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Width of a head; defaults to `hidden_size / num_attention_heads` (Qwen3 sets it).
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// Longest context the model was trained for.
    #[serde(default = "default_max_position_embeddings")]
    pub max_position_embeddings: usize,
    /// RoPE base frequency.
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Whether the output projection is the embedding matrix.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Llama/Qwen3: biases on q/k/v/o (Qwen2 always has q/k/v biases and no o bias).
    #[serde(default)]
    pub attention_bias: bool,
}

fn default_rope_theta() -> f64 {
    10_000.0
}

fn default_max_position_embeddings() -> usize {
    2048
}

impl Config {
    /// Parses a `config.json` value and checks the architecture is one this model implements.
    pub fn from_json(value: &serde_json::Value, path: &Path) -> Result<Self> {
        let config: Config =
            serde_json::from_value(value.clone()).map_err(|source| Error::Json { path: path.to_path_buf(), line: None, source })?;
        config.validate(path)?;
        Ok(config)
    }

    fn validate(&self, path: &Path) -> Result<()> {
        if !matches!(self.model_type.as_str(), "llama" | "qwen2" | "qwen3") {
            return Err(Error::invalid(path, format!("model_type `{}`: supported are llama, qwen2, qwen3", self.model_type)));
        }
        if self.num_attention_heads == 0 || !self.num_attention_heads.is_multiple_of(self.num_key_value_heads()) {
            return Err(Error::invalid(path, "num_attention_heads must be a positive multiple of num_key_value_heads"));
        }
        if !self.head_dim().is_multiple_of(2) {
            return Err(Error::invalid(path, format!("head_dim {} must be even for RoPE", self.head_dim())));
        }
        Ok(())
    }

    /// Key/value heads.
    pub fn num_key_value_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    fn qkv_bias(&self) -> bool {
        self.model_type == "qwen2" || self.attention_bias
    }

    fn o_bias(&self) -> bool {
        self.model_type != "qwen2" && self.attention_bias
    }

    fn qk_norm(&self) -> bool {
        self.model_type == "qwen3"
    }

    /// Every tensor of the checkpoint, with its Hugging Face name and shape (`[out, in]` for
    /// projections), in a stable order.
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (h, i, hd) = (self.hidden_size, self.intermediate_size, self.head_dim());
        let (q, kv) = (self.num_attention_heads * hd, self.num_key_value_heads() * hd);
        let mut shapes =
            vec![("model.embed_tokens.weight".to_owned(), vec![self.vocab_size, h]), ("model.norm.weight".to_owned(), vec![h])];
        if !self.tie_word_embeddings {
            shapes.push(("lm_head.weight".to_owned(), vec![self.vocab_size, h]));
        }
        for l in 0..self.num_hidden_layers {
            let p = format!("model.layers.{l}");
            shapes.push((format!("{p}.input_layernorm.weight"), vec![h]));
            shapes.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
            for (name, out) in [("q_proj", q), ("k_proj", kv), ("v_proj", kv)] {
                shapes.push((format!("{p}.self_attn.{name}.weight"), vec![out, h]));
                if self.qkv_bias() {
                    shapes.push((format!("{p}.self_attn.{name}.bias"), vec![out]));
                }
            }
            shapes.push((format!("{p}.self_attn.o_proj.weight"), vec![h, q]));
            if self.o_bias() {
                shapes.push((format!("{p}.self_attn.o_proj.bias"), vec![h]));
            }
            if self.qk_norm() {
                shapes.push((format!("{p}.self_attn.q_norm.weight"), vec![hd]));
                shapes.push((format!("{p}.self_attn.k_norm.weight"), vec![hd]));
            }
            shapes.push((format!("{p}.mlp.gate_proj.weight"), vec![i, h]));
            shapes.push((format!("{p}.mlp.up_proj.weight"), vec![i, h]));
            shapes.push((format!("{p}.mlp.down_proj.weight"), vec![h, i]));
        }
        shapes
    }
}

/// LoRA settings: which projections get adapters, their rank, scale and dropout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraConfig {
    /// Rank of the `A·B` update.
    pub rank: usize,
    /// The update is scaled by `alpha / rank`.
    pub alpha: f64,
    /// Dropout on the adapter's input while training.
    #[serde(default)]
    pub dropout: f64,
    /// Projection names that get adapters (`q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`,
    /// `up_proj`, `down_proj`).
    #[serde(default = "default_lora_targets")]
    pub targets: Vec<String>,
}

fn default_lora_targets() -> Vec<String> {
    ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"].map(String::from).to_vec()
}

/// The projection names a LoRA target may be.
pub const LORA_TARGETS: [&str; 7] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];

/// A stable parameter id from the tensor's checkpoint name, so the optimiser state saved in a
/// checkpoint (keyed by id) finds its parameter again in a model rebuilt on resume (FNV-1a).
fn param_id(name: &str) -> ParamId {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    ParamId::from(hash)
}

/// Builds the modules from host tensors, like candle's `VarBuilder`: `pp` appends a name
/// segment, so the calls spell out the checkpoint names.
struct Builder<'a> {
    weights: &'a Weights,
    path: &'a Path,
    device: &'a Device,
    prefix: String,
    /// Base weights are frozen when LoRA is on.
    train_base: bool,
    lora: Option<&'a LoraConfig>,
    seed: u64,
}

impl Builder<'_> {
    fn pp(&self, name: impl std::fmt::Display) -> Self {
        let prefix = if self.prefix.is_empty() { name.to_string() } else { format!("{}.{name}", self.prefix) };
        Builder { prefix, ..*self }
    }

    fn name(&self, leaf: &str) -> String {
        format!("{}.{leaf}", self.prefix)
    }

    fn contains(&self, leaf: &str) -> bool {
        self.weights.contains_key(&self.name(leaf))
    }

    fn host(&self, leaf: &str, shape: &[usize]) -> Result<&HostTensor> {
        let name = self.name(leaf);
        let tensor = self
            .weights
            .get(&name)
            .ok_or_else(|| Error::Weights { path: self.path.to_path_buf(), reason: format!("missing tensor `{name}`") })?;
        if tensor.shape != shape {
            return Err(Error::Weights {
                path: self.path.to_path_buf(),
                reason: format!("tensor `{name}` has shape {:?}, the config says {shape:?}", tensor.shape),
            });
        }
        Ok(tensor)
    }

    fn param<const D: usize>(&self, name: String, tensor: &HostTensor, transpose: bool, trainable: bool) -> Param<Tensor<D>> {
        let mut value = Tensor::<D>::from_data(TensorData::new(tensor.data.clone(), tensor.shape.clone()), self.device);
        if transpose {
            value = value.swap_dims(0, 1);
        }
        let mut param = Param::from_tensor(value);
        param.id = param_id(&name);
        if trainable { param } else { param.set_require_grad(false) }
    }

    /// A 1-D tensor (norm weight, bias).
    fn vector(&self, leaf: &str, len: usize) -> Result<Param<Tensor<1>>> {
        Ok(self.param(self.name(leaf), self.host(leaf, &[len])?, false, self.train_base))
    }

    /// A projection `[out, in]` in the checkpoint, stored `[in, out]` for `x · W`.
    fn linear(&self, d_in: usize, d_out: usize, bias: bool) -> Result<Linear> {
        let weight = self.param(self.name("weight"), self.host("weight", &[d_out, d_in])?, true, self.train_base);
        let bias = if bias { Some(self.vector("bias", d_out)?) } else { None };
        let target = self.prefix.rsplit('.').next().unwrap_or_default();
        let lora = match self.lora {
            Some(cfg) if cfg.targets.iter().any(|t| t == target) => Some(self.lora_adapter(cfg, d_in, d_out)?),
            _ => None,
        };
        Ok(Linear { weight, bias, lora })
    }

    /// LoRA factors in PEFT's layout (`lora_A.weight` `[rank, in]`, `lora_B.weight`
    /// `[out, rank]`), from the weights when a checkpoint has them, else freshly initialised:
    /// A uniform in ±1/√in (PEFT's Kaiming-uniform bound with a = √5), B zero, so the model's
    /// output is unchanged until training moves B.
    fn lora_adapter(&self, cfg: &LoraConfig, d_in: usize, d_out: usize) -> Result<Lora> {
        let (a_name, b_name) = ("lora_A.weight", "lora_B.weight");
        let (a, b) = if self.contains(a_name) {
            (self.host(a_name, &[cfg.rank, d_in])?.clone(), self.host(b_name, &[d_out, cfg.rank])?.clone())
        } else {
            let bound = 1.0 / (d_in as f32).sqrt();
            let mut rng = crate::rng::SplitMix64::new(self.seed ^ param_id(&self.name(a_name)).val());
            let a = (0..cfg.rank * d_in).map(|_| (rng.next_f32() * 2.0 - 1.0) * bound).collect();
            (
                HostTensor { shape: vec![cfg.rank, d_in], data: a },
                HostTensor { shape: vec![d_out, cfg.rank], data: vec![0.0; d_out * cfg.rank] },
            )
        };
        Ok(Lora {
            a: self.param(self.name(a_name), &a, true, true),
            b: self.param(self.name(b_name), &b, true, true),
            dropout: DropoutConfig::new(cfg.dropout).init(),
            scale: cfg.alpha / cfg.rank as f64,
        })
    }
}

/// Low-rank adapter `x · A · B · scale`, on the dropped-out input.
#[derive(Module, Debug)]
struct Lora {
    /// `[in, rank]`.
    a: Param<Tensor<2>>,
    /// `[rank, out]`.
    b: Param<Tensor<2>>,
    dropout: Dropout,
    scale: f64,
}

/// A projection `x · W + b`, plus a LoRA update when adapted.
#[derive(Module, Debug)]
struct Linear {
    /// `[in, out]` (the checkpoint's `[out, in]`, transposed).
    weight: Param<Tensor<2>>,
    bias: Option<Param<Tensor<1>>>,
    lora: Option<Lora>,
}

impl Linear {
    /// # Shapes
    /// - input `[..., in]` → output `[..., out]`
    fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let base = linear(x.clone(), self.weight.val(), self.bias.as_ref().map(Param::val));
        match &self.lora {
            None => base,
            Some(lora) => {
                let update = linear(linear(lora.dropout.forward(x), lora.a.val(), None), lora.b.val(), None);
                base + update.mul_scalar(lora.scale)
            }
        }
    }

    /// The effective weight `[in, out]`, with the LoRA update merged in.
    fn merged_weight(&self) -> Tensor<2> {
        let weight = self.weight.val();
        match &self.lora {
            None => weight,
            Some(lora) => weight + lora.a.val().matmul(lora.b.val()).mul_scalar(lora.scale),
        }
    }
}

#[derive(Module, Debug)]
struct RmsNorm {
    weight: Param<Tensor<1>>,
    eps: f64,
}

impl RmsNorm {
    fn new(b: &Builder, size: usize, eps: f64) -> Result<Self> {
        Ok(RmsNorm { weight: b.vector("weight", size)?, eps })
    }

    /// Normalises over the last dimension.
    fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let rms = x.clone().powi_scalar(2).mean_dim(D - 1).add_scalar(self.eps).sqrt();
        x.div(rms).mul(self.weight.val().unsqueeze::<D>())
    }
}

/// How the examples of a batch sit in its rows when several share a row (packed sequences):
/// each token attends only to the tokens of its own example before it, and its rotary position
/// counts from its example's first token. Without one, a row holds one example from position 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Packing {
    /// `[rows, seq_len]`: each token's position within its example.
    pub positions: Vec<u32>,
    /// `[rows, seq_len]`: where each token's example starts in its row (the first key it sees).
    pub starts: Vec<u32>,
}

/// cos/sin tables per position, HF layout: `cat(freqs, freqs)`.
struct RotaryEmbedding {
    /// `[1, 1, seq_len, head_dim]`, or `[rows, 1, seq_len, head_dim]` for packed rows.
    cos: Tensor<4>,
    sin: Tensor<4>,
}

impl RotaryEmbedding {
    /// Tables for positions `0..seq_len`, or for each token's position in `packing`.
    fn new(cfg: &Config, seq_len: usize, packing: Option<&Packing>, device: &Device) -> Self {
        let (hd, half) = (cfg.head_dim(), cfg.head_dim() / 2);
        let plain: Vec<u32>;
        let positions = match packing {
            Some(p) => &p.positions,
            None => {
                plain = (0..seq_len as u32).collect();
                &plain
            }
        };
        let mut cos = Vec::with_capacity(positions.len() * hd);
        let mut sin = Vec::with_capacity(positions.len() * hd);
        for &position in positions {
            // Both halves of a head share the frequencies (`emb = cat(freqs, freqs)`).
            for j in 0..hd {
                let inv_freq = 1.0 / cfg.rope_theta.powf((2 * (j % half)) as f64 / hd as f64);
                let angle = f64::from(position) * inv_freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        let rows = positions.len() / seq_len.max(1);
        let table = |v: Vec<f32>| Tensor::<4>::from_data(TensorData::new(v, [rows, 1, seq_len, hd]), device);
        RotaryEmbedding { cos: table(cos), sin: table(sin) }
    }

    /// `x · cos + rotate_half(x) · sin`, where `rotate_half([x1, x2]) = [-x2, x1]`.
    ///
    /// # Shapes
    /// - x `[batch, heads, seq_len, head_dim]`
    fn apply(&self, x: Tensor<4>) -> Tensor<4> {
        let half = x.dims()[3] / 2;
        let x1 = x.clone().narrow(3, 0, half);
        let x2 = x.clone().narrow(3, half, half);
        let rotated = Tensor::cat(vec![x2.neg(), x1], 3);
        x.mul(self.cos.clone()) + rotated.mul(self.sin.clone())
    }
}

#[derive(Module, Debug)]
struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    fn new(cfg: &Config, b: &Builder) -> Result<Self> {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Mlp {
            gate_proj: b.pp("gate_proj").linear(h, i, false)?,
            up_proj: b.pp("up_proj").linear(h, i, false)?,
            down_proj: b.pp("down_proj").linear(i, h, false)?,
        })
    }

    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        self.down_proj.forward(silu(self.gate_proj.forward(x.clone())) * self.up_proj.forward(x))
    }
}

#[derive(Module, Debug)]
struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
}

impl Attention {
    fn new(cfg: &Config, b: &Builder) -> Result<Self> {
        let (h, hd) = (cfg.hidden_size, cfg.head_dim());
        let (q, kv) = (cfg.num_attention_heads * hd, cfg.num_key_value_heads() * hd);
        let norm = |name: &str| -> Result<Option<RmsNorm>> {
            if cfg.qk_norm() { Ok(Some(RmsNorm::new(&b.pp(name), hd, cfg.rms_norm_eps)?)) } else { Ok(None) }
        };
        Ok(Attention {
            q_proj: b.pp("q_proj").linear(h, q, cfg.qkv_bias())?,
            k_proj: b.pp("k_proj").linear(h, kv, cfg.qkv_bias())?,
            v_proj: b.pp("v_proj").linear(h, kv, cfg.qkv_bias())?,
            o_proj: b.pp("o_proj").linear(q, h, cfg.o_bias())?,
            q_norm: norm("q_norm")?,
            k_norm: norm("k_norm")?,
            num_heads: cfg.num_attention_heads,
            num_kv_heads: cfg.num_key_value_heads(),
            head_dim: hd,
        })
    }

    /// # Shapes
    /// - x `[batch, seq_len, hidden]`
    fn forward(&self, x: Tensor<3>, rope: &RotaryEmbedding, kernel: &AttentionKernel) -> Tensor<3> {
        let [batch, seq_len, _] = x.dims();
        let (heads, kv_heads, hd) = (self.num_heads, self.num_kv_heads, self.head_dim);
        let q = self.q_proj.forward(x.clone()).reshape([batch, seq_len, heads, hd]);
        let k = self.k_proj.forward(x.clone()).reshape([batch, seq_len, kv_heads, hd]);
        let v = self.v_proj.forward(x).reshape([batch, seq_len, kv_heads, hd]);
        let (q, k) = match (&self.q_norm, &self.k_norm) {
            (Some(q_norm), Some(k_norm)) => (q_norm.forward(q), k_norm.forward(k)),
            _ => (q, k),
        };
        let q = rope.apply(q.swap_dims(1, 2)); // [batch, heads, seq_len, hd]
        let k = rope.apply(k.swap_dims(1, 2)); // [batch, kv_heads, seq_len, hd]
        let v = v.swap_dims(1, 2);
        let out = kernel.attend(q, k, v); // [batch, heads, seq_len, hd]
        self.o_proj.forward(out.swap_dims(1, 2).reshape([batch, seq_len, heads * hd]))
    }
}

/// How a layer computes causal `softmax(QKᵀ/√d)·V`.
#[derive(Clone, Debug)]
enum AttentionKernel {
    /// burn's fused attention op with causal masking: tiled flash attention with an online
    /// softmax on flex (no `[seq, seq]` scores in memory), torch's SDPA on LibTorch. Forward
    /// only: burn-autodiff 0.22's `attention` is `attention_fallback`, the materialised ops.
    Fused,
    /// Causal attention with its own backward ([`crate::attention`]): memkit's kernel on flex,
    /// torch's fused CPU attention on LibTorch; no `[seq, seq]` tensor kept for backward. Used
    /// under autodiff, and for packed rows. Holds the packed rows' segment starts (empty: one
    /// causal sequence per row).
    Flash(Vec<u32>),
    /// Scores, an additive mask (`[1, 1, seq, seq]` causal, or `[rows, 1, seq, seq]` causal
    /// within each packed example; 0 or -inf, one for all layers), softmax and `·V` as separate
    /// ops: what training ran before [`AttentionKernel::Flash`], kept as its reference in tests
    /// and benches, and for backends without a flash kernel (LibTorch on CUDA, CubeCL).
    /// (Boxed: a tensor handle is a few hundred bytes.)
    Materialised(Box<Tensor<4>>),
}

impl AttentionKernel {
    /// burn's fused op for inference; under autodiff, and for packed rows (which burn's fused op
    /// cannot take), the flash kernels on flex and on LibTorch's CPU, the materialised ops
    /// elsewhere. `MEMKIT_ATTENTION=materialised` trains with the materialised ops everywhere:
    /// the benches' reference.
    fn for_device(device: &Device, seq_len: usize, packing: Option<&Packing>) -> Self {
        let starts = packing.map(|p| p.starts.clone()).unwrap_or_default();
        if !device.is_autodiff() && packing.is_none() {
            return AttentionKernel::Fused;
        }
        let reference = device.is_autodiff() && std::env::var("MEMKIT_ATTENTION").is_ok_and(|v| v == "materialised");
        if has_flash_kernel(device) && !reference { AttentionKernel::Flash(starts) } else { Self::materialised(device, seq_len, &starts) }
    }

    /// The materialised ops with their mask for `seq_len` positions: causal, or causal within
    /// each packed example for segment `starts` (`[rows, seq_len]`, as [`Packing::starts`]).
    fn materialised(device: &Device, seq_len: usize, starts: &[u32]) -> Self {
        let rows = (starts.len() / seq_len.max(1)).max(1);
        let mut mask = vec![f32::NEG_INFINITY; rows * seq_len * seq_len];
        for (row, block) in mask.chunks_mut(seq_len * seq_len).enumerate() {
            for (i, line) in block.chunks_mut(seq_len).enumerate() {
                let start = if starts.is_empty() { 0 } else { starts[row * seq_len + i] as usize };
                line[start..=i].fill(0.0);
            }
        }
        AttentionKernel::Materialised(Box::new(Tensor::from_data(TensorData::new(mask, [rows, 1, seq_len, seq_len]), device)))
    }

    /// # Shapes
    /// - q `[batch, heads, seq_len, hd]`, k and v `[batch, kv_heads, seq_len, hd]` →
    ///   `[batch, heads, seq_len, hd]`
    fn attend(&self, q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
        let scale = 1.0 / (q.dims()[3] as f64).sqrt();
        let n_rep = q.dims()[1] / k.dims()[1];
        match self {
            AttentionKernel::Flash(starts) => crate::attention::flash_causal_attention(q, k, v, starts, scale as f32),
            AttentionKernel::Fused => {
                let options = AttentionModuleOptions { scale: Some(scale), softcap: None, is_causal: true };
                attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), None, None, options)
            }
            AttentionKernel::Materialised(mask) => {
                let (k, v) = (repeat_kv(k, n_rep), repeat_kv(v, n_rep));
                // The scale goes on the queries ([.., seq_len, hd]) rather than on the scores
                // ([.., seq_len, seq_len]): the same product, with one op over seq_len/hd times
                // fewer elements, forward and backward.
                let scores = q.mul_scalar(scale).matmul(k.swap_dims(2, 3)) + (**mask).clone(); // [batch, heads, seq_len, seq_len]
                softmax(scores, 3).matmul(v)
            }
        }
    }
}

/// Whether [`crate::attention::FlashAttention`] runs on `device`: flex, and LibTorch on the CPU.
fn has_flash_kernel(device: &Device) -> bool {
    match device.clone().inner().as_dispatch() {
        DispatchDevice::Flex(_) => true,
        #[cfg(feature = "tch")]
        #[allow(deprecated)] // burn-tch is deprecated in burn 0.22 and still the LibTorch path
        DispatchDevice::LibTorch(burn::backend::libtorch::LibTorchDevice::Cpu) => true,
        _ => false,
    }
}

/// Repeats each key/value head `n_rep` times (head `i` of the queries reads kv head `i / n_rep`).
fn repeat_kv(x: Tensor<4>, n_rep: usize) -> Tensor<4> {
    if n_rep == 1 {
        return x;
    }
    let [batch, kv_heads, seq_len, hd] = x.dims();
    x.unsqueeze_dim::<5>(2).repeat_dim(2, n_rep).reshape([batch, kv_heads * n_rep, seq_len, hd])
}

#[derive(Module, Debug)]
struct DecoderLayer {
    self_attn: Attention,
    mlp: Mlp,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
}

impl DecoderLayer {
    fn new(cfg: &Config, b: &Builder) -> Result<Self> {
        Ok(DecoderLayer {
            self_attn: Attention::new(cfg, &b.pp("self_attn"))?,
            mlp: Mlp::new(cfg, &b.pp("mlp"))?,
            input_layernorm: RmsNorm::new(&b.pp("input_layernorm"), cfg.hidden_size, cfg.rms_norm_eps)?,
            post_attention_layernorm: RmsNorm::new(&b.pp("post_attention_layernorm"), cfg.hidden_size, cfg.rms_norm_eps)?,
        })
    }

    fn forward(&self, x: Tensor<3>, rope: &RotaryEmbedding, kernel: &AttentionKernel) -> Tensor<3> {
        let h = x.clone() + self.self_attn.forward(self.input_layernorm.forward(x), rope, kernel);
        h.clone() + self.mlp.forward(self.post_attention_layernorm.forward(h))
    }
}

/// The decoder with its language-model head.
#[derive(Module, Debug)]
pub struct Model {
    embed_tokens: Param<Tensor<2>>,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    /// `[hidden, vocab]`; `None` when tied to the embeddings.
    lm_head: Option<Param<Tensor<2>>>,
    #[module(skip)]
    config: Config,
}

/// How a [`Model`] is built from weights.
#[derive(Debug, Clone, Copy)]
pub struct BuildOptions<'a> {
    /// LoRA adapters to attach (their factors are read from the weights when present, as on
    /// resume); `None` trains or runs the full model.
    pub lora: Option<&'a LoraConfig>,
    /// Seed of fresh LoRA factors.
    pub seed: u64,
}

impl Model {
    /// Builds the model from host weights with Hugging Face names. `path` names the weights in
    /// errors. With LoRA, the base weights are frozen and only the adapters train.
    pub fn new(cfg: &Config, weights: &Weights, path: &Path, options: BuildOptions, device: &Device) -> Result<Self> {
        let root = Builder {
            weights,
            path,
            device,
            prefix: String::new(),
            train_base: options.lora.is_none(),
            lora: options.lora,
            seed: options.seed,
        };
        let m = root.pp("model");
        let embed = m.host("embed_tokens.weight", &[cfg.vocab_size, cfg.hidden_size])?;
        let embed_tokens = m.param(m.name("embed_tokens.weight"), embed, false, root.train_base);
        let layers = (0..cfg.num_hidden_layers).map(|l| DecoderLayer::new(cfg, &m.pp("layers").pp(l))).collect::<Result<Vec<_>>>()?;
        let norm = RmsNorm::new(&m.pp("norm"), cfg.hidden_size, cfg.rms_norm_eps)?;
        let lm_head = if cfg.tie_word_embeddings {
            None
        } else {
            let lm = root.pp("lm_head");
            Some(lm.param("lm_head.weight".into(), lm.host("weight", &[cfg.vocab_size, cfg.hidden_size])?, true, root.train_base))
        };
        Ok(Model { embed_tokens, layers, norm, lm_head, config: cfg.clone() })
    }

    /// The hyperparameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Logits for every position.
    ///
    /// # Shapes
    /// - input_ids `[batch, seq_len]` → `[batch, seq_len, vocab]`
    pub fn forward(&self, input_ids: Tensor<2, Int>) -> Tensor<3> {
        self.logits(self.hidden(input_ids))
    }

    /// The final (normed) hidden state of every position: what [`Model::logits`] projects.
    ///
    /// # Shapes
    /// - input_ids `[batch, seq_len]` → `[batch, seq_len, hidden]`
    pub fn hidden(&self, input_ids: Tensor<2, Int>) -> Tensor<3> {
        self.hidden_packed(input_ids, None)
    }

    /// [`Model::hidden`] of rows that may each hold several examples (`packing`, `[rows,
    /// seq_len]` as `input_ids`): every example's hidden states are those it has in a row of its
    /// own.
    ///
    /// # Shapes
    /// - input_ids `[batch, seq_len]` → `[batch, seq_len, hidden]`
    pub fn hidden_packed(&self, input_ids: Tensor<2, Int>, packing: Option<&Packing>) -> Tensor<3> {
        let kernel = AttentionKernel::for_device(&input_ids.device(), input_ids.dims()[1], packing);
        self.hidden_with(input_ids, &kernel, packing)
    }

    /// [`Model::hidden_packed`] with the given attention kernel.
    fn hidden_with(&self, input_ids: Tensor<2, Int>, kernel: &AttentionKernel, packing: Option<&Packing>) -> Tensor<3> {
        let device = input_ids.device();
        let seq_len = input_ids.dims()[1];
        let rope = RotaryEmbedding::new(&self.config, seq_len, packing, &device);
        let mut h = embedding(self.embed_tokens.val(), input_ids); // [batch, seq_len, hidden]
        for layer in &self.layers {
            h = layer.forward(h, &rope, kernel);
        }
        self.norm.forward(h)
    }

    /// The vocabulary projection (the LM head, or the tied embeddings) of hidden states; the
    /// trainer applies it only where the loss reads a target.
    ///
    /// # Shapes
    /// - h `[..., hidden]` → `[..., vocab]`
    pub fn logits<const D: usize>(&self, h: Tensor<D>) -> Tensor<D> {
        match &self.lm_head {
            Some(head) => linear(h, head.val(), None),
            None => linear(h, self.embed_tokens.val().transpose(), None),
        }
    }

    /// All weights with Hugging Face names and layout (`[out, in]`), LoRA updates merged: what
    /// `model.safetensors` of an exported checkpoint holds.
    pub fn merged_weights(&self) -> Weights {
        let mut out = Weights::new();
        let put1 = |out: &mut Weights, name: String, t: Tensor<1>| out.insert(name, HostTensor::from_tensor(t));
        let put2 = |out: &mut Weights, name: String, t: Tensor<2>| out.insert(name, HostTensor::from_tensor(t));
        let put_linear = |out: &mut Weights, name: &str, l: &Linear| {
            put2(out, format!("{name}.weight"), l.merged_weight().transpose());
            if let Some(bias) = &l.bias {
                put1(out, format!("{name}.bias"), bias.val());
            }
        };
        put2(&mut out, "model.embed_tokens.weight".into(), self.embed_tokens.val());
        put1(&mut out, "model.norm.weight".into(), self.norm.weight.val());
        if let Some(head) = &self.lm_head {
            put2(&mut out, "lm_head.weight".into(), head.val().transpose());
        }
        for (l, layer) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{l}");
            put1(&mut out, format!("{p}.input_layernorm.weight"), layer.input_layernorm.weight.val());
            put1(&mut out, format!("{p}.post_attention_layernorm.weight"), layer.post_attention_layernorm.weight.val());
            let a = &layer.self_attn;
            for (name, proj) in [("q_proj", &a.q_proj), ("k_proj", &a.k_proj), ("v_proj", &a.v_proj), ("o_proj", &a.o_proj)] {
                put_linear(&mut out, &format!("{p}.self_attn.{name}"), proj);
            }
            if let (Some(q), Some(k)) = (&a.q_norm, &a.k_norm) {
                put1(&mut out, format!("{p}.self_attn.q_norm.weight"), q.weight.val());
                put1(&mut out, format!("{p}.self_attn.k_norm.weight"), k.weight.val());
            }
            for (name, proj) in [("gate_proj", &layer.mlp.gate_proj), ("up_proj", &layer.mlp.up_proj), ("down_proj", &layer.mlp.down_proj)]
            {
                put_linear(&mut out, &format!("{p}.mlp.{name}"), proj);
            }
        }
        out
    }

    /// The LoRA factors in PEFT's names and layout (`…q_proj.lora_A.weight` `[rank, in]`,
    /// `…lora_B.weight` `[out, rank]`); empty without LoRA.
    pub fn adapter_weights(&self) -> Weights {
        let mut out = Weights::new();
        for (l, layer) in self.layers.iter().enumerate() {
            let a = &layer.self_attn;
            let projections = [
                ("self_attn.q_proj", &a.q_proj),
                ("self_attn.k_proj", &a.k_proj),
                ("self_attn.v_proj", &a.v_proj),
                ("self_attn.o_proj", &a.o_proj),
                ("mlp.gate_proj", &layer.mlp.gate_proj),
                ("mlp.up_proj", &layer.mlp.up_proj),
                ("mlp.down_proj", &layer.mlp.down_proj),
            ];
            for (name, proj) in projections {
                if let Some(lora) = &proj.lora {
                    let p = format!("model.layers.{l}.{name}");
                    out.insert(format!("{p}.lora_A.weight"), HostTensor::from_tensor(lora.a.val().transpose()));
                    out.insert(format!("{p}.lora_B.weight"), HostTensor::from_tensor(lora.b.val().transpose()));
                }
            }
        }
        out
    }
}

/// Weights of a randomly initialised model (normal, std 0.02, norms at 1, biases at 0), for
/// tests and smoke runs; the same `seed` gives the same weights.
pub fn random_weights(cfg: &Config, seed: u64) -> Weights {
    let mut weights = BTreeMap::new();
    for (name, shape) in cfg.tensor_shapes() {
        let n: usize = shape.iter().product();
        let data = if name.ends_with("norm.weight") {
            vec![1.0; n]
        } else if name.ends_with(".bias") {
            vec![0.0; n]
        } else {
            let mut rng = crate::rng::SplitMix64::new(seed ^ param_id(&name).val());
            (0..n).map(|_| rng.next_normal() * 0.02).collect()
        };
        weights.insert(name, HostTensor { shape, data });
    }
    weights
}

/// A 2-layer model of `model_type` over a 50-token vocabulary (4 query heads on 2 kv heads,
/// MLP twice `hidden_size`), for tests.
#[cfg(test)]
pub(crate) fn tiny_config(model_type: &str, hidden_size: usize, rms_norm_eps: f64) -> Config {
    let config = serde_json::json!({
        "model_type": model_type, "vocab_size": 50, "hidden_size": hidden_size, "intermediate_size": 2 * hidden_size,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 64, "rope_theta": 10000.0, "rms_norm_eps": rms_norm_eps, "tie_word_embeddings": true
    });
    Config::from_json(&config, Path::new("tiny")).expect("a valid tiny config")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// Standard-normal values (so the softmax is peaked, not near-uniform), seeded.
    fn normal(shape: [usize; 4], seed: u64, device: &Device) -> Tensor<4> {
        let mut rng = SplitMix64::new(seed);
        let data: Vec<f32> = (0..shape.iter().product()).map(|_| rng.next_normal()).collect();
        Tensor::from_data(TensorData::new(data, shape), device)
    }

    fn max_abs_diff(a: Tensor<4>, b: Tensor<4>) -> f32 {
        (a - b).abs().max().into_scalar::<f32>()
    }

    /// See: issue 42. burn's fused op (inference) and memkit's flash attention (training, its
    /// own backward) against the materialised ops, forward and dQ/dK/dV, with grouped-query
    /// attention (4 query heads over 2 kv heads).
    #[test]
    fn fused_flash_and_materialised_attention_agree_in_forward_and_gradients() {
        for device in flash_devices() {
            flash_and_materialised_attention_agree_on(device);
        }
    }

    /// The CPU devices with a flash kernel in this build: flex, and LibTorch with the `tch`
    /// feature (`just test-tch`).
    fn flash_devices() -> Vec<Device> {
        crate::Backend::all().into_iter().filter(|b| !b.needs_gpu()).map(|b| b.device()).collect()
    }

    fn flash_and_materialised_attention_agree_on(device: Device) {
        // 37 positions: not a multiple of any tile (flex's flash kernel, memkit's 32-row tiles),
        // so both run a ragged last tile.
        let (q_shape, kv_shape) = ([2, 4, 37, 16], [2, 2, 37, 16]);
        assert!(matches!(AttentionKernel::for_device(&device, 37, None), AttentionKernel::Fused));
        let q = normal(q_shape, 1, &device);
        let [k, v] = [2, 3].map(|seed| normal(kv_shape, seed, &device));
        let materialised = AttentionKernel::materialised(&device, 37, &[]);

        // Forward on flex.
        let reference = materialised.attend(q.clone(), k.clone(), v.clone());
        for kernel in [AttentionKernel::Fused, AttentionKernel::Flash(Vec::new())] {
            let out = kernel.attend(q.clone(), k.clone(), v.clone());
            let diff = max_abs_diff(out.clone(), reference.clone());
            assert!(diff < 1e-4, "{device:?} {kernel:?}: forward differs by {diff}");
            // Causal: the first position reads only itself, so each head returns its kv head's
            // value row.
            let first = |t: Tensor<4>, heads: usize| t.slice([0..2, 0..heads, 0..1, 0..16]);
            assert!(max_abs_diff(first(out, 4), repeat_kv(first(v.clone(), 2), 2)) < 1e-6, "{kernel:?}");
        }

        // Gradients under autodiff of a loss that weighs every output differently.
        let grads_of = |kernel: &AttentionKernel| {
            let ad = device.clone().autodiff();
            let [q, k, v] = [&q, &k, &v].map(|t| Tensor::from_data(t.to_data(), &ad).require_grad());
            let weight = normal(q_shape, 4, &ad);
            let grads = (kernel.attend(q.clone(), k.clone(), v.clone()) * weight).sum().backward();
            [q, k, v].map(|t| t.grad(&grads).expect("a gradient"))
        };
        let ad = device.clone().autodiff();
        assert!(matches!(AttentionKernel::for_device(&ad, 37, None), AttentionKernel::Flash(_)));
        let reference = grads_of(&AttentionKernel::materialised(&ad, 37, &[]));
        for kernel in [AttentionKernel::Fused, AttentionKernel::Flash(Vec::new())] {
            for (name, (a, b)) in ["q", "k", "v"].into_iter().zip(grads_of(&kernel).into_iter().zip(reference.clone())) {
                assert_eq!(a.dims(), b.dims(), "{device:?} {kernel:?}: d{name}");
                let diff = max_abs_diff(a.clone(), b);
                assert!(diff < 1e-4, "{device:?} {kernel:?}: d{name} differs by {diff}");
                assert!(a.abs().max().into_scalar::<f32>() > 1e-2, "d{name} is not trivially zero");
            }
        }
    }

    #[test]
    fn a_model_gives_the_same_hidden_states_with_the_fused_and_the_flash_kernel() {
        let cfg = tiny_config("qwen2", 32, 1e-6);
        let weights = random_weights(&cfg, 11);
        let ids: Vec<i64> = (0..2 * 21).map(|i| (i * 7 % 50) as i64).collect();
        let hidden = |device: &Device| {
            let model = Model::new(&cfg, &weights, Path::new("random"), BuildOptions { lora: None, seed: 11 }, device).unwrap();
            let ids = Tensor::<2, Int>::from_data(TensorData::new(ids.clone(), [2, 21]), device);
            Tensor::<3>::from_data(model.hidden(ids).to_data(), &crate::cpu_device())
        };
        let device = crate::cpu_device();
        let (fused, flash) = (hidden(&device), hidden(&device.clone().autodiff()));
        let diff = (fused - flash).abs().max().into_scalar::<f32>();
        assert!(diff < 1e-4, "hidden states differ by {diff}");
    }

    /// See: issue 42. Three examples (5, 3 and 6 tokens) packed into two rows of 8 give the
    /// hidden states and the gradients they give one to a row, with memkit's kernel and with
    /// the materialised ops: a token sees only its own example, at positions from 0.
    #[test]
    fn packed_rows_give_each_example_its_own_hidden_states_and_gradients() {
        for device in flash_devices() {
            packed_rows_give_each_example_its_own_hidden_states_and_gradients_on(device);
        }
    }

    fn packed_rows_give_each_example_its_own_hidden_states_and_gradients_on(plain: Device) {
        let cfg = tiny_config("qwen2", 32, 1e-6);
        let device = plain.clone().autodiff();
        let model = Model::new(&cfg, &random_weights(&cfg, 3), Path::new("random"), BuildOptions { lora: None, seed: 3 }, &device).unwrap();
        let examples: [Vec<i64>; 3] = [vec![3, 14, 15, 9, 26], vec![5, 35, 8], vec![9, 7, 9, 32, 38, 4]];
        let ids = |rows: Vec<Vec<i64>>, len: usize| {
            let n = rows.len();
            let flat: Vec<i64> =
                rows.into_iter().flat_map(|r| r.iter().copied().chain(std::iter::repeat(0)).take(len).collect::<Vec<_>>()).collect();
            Tensor::<2, Int>::from_data(TensorData::new(flat, [n, len]), &device)
        };
        // A loss weighing every real position's hidden state differently (seeded weights per
        // example and position, so the same in both layouts).
        let weights = |example: usize, t: usize| -> Tensor<1> {
            let mut rng = SplitMix64::new((example * 100 + t) as u64);
            Tensor::from_data(TensorData::new((0..32).map(|_| rng.next_normal()).collect::<Vec<f32>>(), [32]), &device)
        };
        let loss_at = |h: &Tensor<3>, row: usize, from: usize, example: usize| {
            (0..examples[example].len())
                .map(|t| (h.clone().slice([row..row + 1, from + t..from + t + 1, 0..32]).reshape([32]) * weights(example, t)).sum())
                .reduce(|a, b| a + b)
                .unwrap()
        };
        let grad = |loss: Tensor<1>| model.embed_tokens.val().grad(&loss.backward()).expect("the embedding's gradient");

        // One example to a row (causal, right-padded to 6).
        let h = model.hidden_with(ids(examples.to_vec(), 6), &AttentionKernel::Flash(Vec::new()), None);
        let host = |h: &Tensor<3>, row: usize, from: usize, len: usize| h.clone().slice([row..row + 1, from..from + len, 0..32]);
        let reference = [host(&h, 0, 0, 5), host(&h, 1, 0, 3), host(&h, 2, 0, 6)];
        let reference_grad = grad(loss_at(&h, 0, 0, 0) + loss_at(&h, 1, 0, 1) + loss_at(&h, 2, 0, 2));

        // Packed: row 0 holds examples 0 and 1, row 1 example 2 and two padding positions.
        let packing = Packing {
            positions: vec![0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3, 4, 5, 0, 1],
            starts: vec![0, 0, 0, 0, 0, 5, 5, 5, 0, 0, 0, 0, 0, 0, 6, 6],
        };
        let rows = vec![[examples[0].clone(), examples[1].clone()].concat(), examples[2].clone()];
        for kernel in [AttentionKernel::Flash(packing.starts.clone()), AttentionKernel::materialised(&device, 8, &packing.starts)] {
            let h = model.hidden_with(ids(rows.clone(), 8), &kernel, Some(&packing));
            for (name, (got, want)) in ["first", "second", "third"]
                .into_iter()
                .zip([host(&h, 0, 0, 5), host(&h, 0, 5, 3), host(&h, 1, 0, 6)].into_iter().zip(reference.clone()))
            {
                let diff = (got - want).abs().max().into_scalar::<f32>();
                assert!(diff < 1e-4, "{plain:?} {kernel:?}: the {name} example's hidden states differ by {diff}");
            }
            let g = grad(loss_at(&h, 0, 0, 0) + loss_at(&h, 0, 5, 1) + loss_at(&h, 1, 0, 2));
            let scale = reference_grad.clone().abs().max().into_scalar::<f32>();
            let diff = (g - reference_grad.clone()).abs().max().into_scalar::<f32>();
            assert!(scale > 1e-3 && diff < 1e-4 * scale.max(1.0), "{plain:?} {kernel:?}: the embedding's gradient differs by {diff}");
        }
        // Without autodiff, packed rows run the flash kernel too (burn's fused op takes no
        // segments).
        assert!(matches!(AttentionKernel::for_device(&plain, 8, Some(&packing)), AttentionKernel::Flash(s) if s == packing.starts));
    }

    /// See: issue 42. A training step's loss and the gradient that reaches the (tied) embedding
    /// through every layer are the same with flash attention as with the materialised ops it
    /// replaced (two layers, grouped-query attention, 45 positions: a ragged second tile).
    #[test]
    fn a_training_step_gives_the_same_loss_and_gradients_with_flash_and_materialised_attention() {
        for device in flash_devices() {
            a_training_step_is_the_same_with_flash_and_materialised_attention_on(device.autodiff());
        }
    }

    fn a_training_step_is_the_same_with_flash_and_materialised_attention_on(device: Device) {
        let cfg = tiny_config("llama", 32, 1e-5);
        let model = Model::new(&cfg, &random_weights(&cfg, 5), Path::new("random"), BuildOptions { lora: None, seed: 5 }, &device).unwrap();
        let (batch, len) = (2, 45);
        let ids: Vec<i64> = (0..batch * len).map(|i| ((i * 13 + i / 7) % 50) as i64).collect();
        // A loss reading every position: the mean log-probability of token (id + 1) mod 50.
        let targets: Vec<i64> = ids.iter().map(|id| (id + 1) % 50).collect();
        let step = |kernel: &AttentionKernel| {
            let ids = Tensor::<2, Int>::from_data(TensorData::new(ids.clone(), [batch, len]), &device);
            let targets = Tensor::<3, Int>::from_data(TensorData::new(targets.clone(), [batch, len, 1]), &device);
            let logits = model.logits(model.hidden_with(ids, kernel, None));
            let loss = -burn::tensor::activation::log_softmax(logits, 2).gather(2, targets).mean();
            let grads = loss.backward();
            let grad = model.embed_tokens.val().grad(&grads).expect("the embedding's gradient");
            (loss.into_scalar::<f32>(), grad)
        };
        let (flash_loss, flash_grad) = step(&AttentionKernel::Flash(Vec::new()));
        let (loss, grad) = step(&AttentionKernel::materialised(&device, len, &[]));
        assert!(loss > 3.0 && (flash_loss - loss).abs() < 1e-5, "{device:?}: loss {flash_loss} against {loss}");
        let scale = grad.clone().abs().max().into_scalar::<f32>();
        let diff = (flash_grad - grad).abs().max().into_scalar::<f32>();
        assert!(scale > 1e-3 && diff < 1e-4 * scale.max(1.0), "{device:?}: the embedding's gradient differs by {diff} (largest {scale})");
    }
}
