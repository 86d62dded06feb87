//! Sentence embeddings with [all-MiniLM-L6-v2] in candle's BERT.
//!
//! - 6 BERT encoder layers, hidden size 384, 12 heads, absolute positions, GELU (erf).
//! - Sentence vector: mean of the last hidden states over real tokens (attention mask), then L2
//!   normalised, as the model's sentence-transformers modules (`1_Pooling`, `2_Normalize`) do.
//! - Inputs are truncated to `max_seq_length` from `sentence_bert_config.json` (256 for this
//!   model), like sentence-transformers' `encode`. The `tokenizer.json` on the hub pads and
//!   truncates to a fixed 128; we ignore its padding and pad each batch to its longest text
//!   instead, which gives the same vectors (padding is masked out) at a fraction of the cost.
//!
//! [all-MiniLM-L6-v2]: https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2

use std::path::{Path, PathBuf};

use candle_core::{D, DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use serde::Deserialize;
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};
use tracing::instrument;

use crate::{Error, Result};

/// The hub id of the model [`SentenceEmbedder::load`] expects.
pub const MODEL_ID: &str = "sentence-transformers/all-MiniLM-L6-v2";

/// Default number of texts run through the encoder at once.
pub const DEFAULT_BATCH_SIZE: usize = 32;

/// The part of `sentence_bert_config.json` we use.
#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: usize,
}

/// A BERT sentence embedder on the CPU: texts in, L2-normalised vectors out.
///
/// Loads a sentence-transformers directory (`config.json`, `model.safetensors`, `tokenizer.json`,
/// optionally `sentence_bert_config.json`), such as the one `memkit models fetch
/// all-minilm-l6-v2` lays out (see [`crate::models::ALL_MINILM_L6_V2`]).
pub struct SentenceEmbedder {
    model: BertModel,
    tokenizer: Tokenizer,
    device: Device,
    model_id: String,
    dim: usize,
    max_seq_length: usize,
    pad_id: u32,
    batch_size: usize,
    /// The directory it was loaded from (its files make [`SentenceEmbedder::fingerprint`]).
    dir: std::path::PathBuf,
}

impl std::fmt::Debug for SentenceEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentenceEmbedder")
            .field("model_id", &self.model_id)
            .field("dim", &self.dim)
            .field("max_seq_length", &self.max_seq_length)
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}

impl SentenceEmbedder {
    /// Loads the model from `dir`, memory-mapping `model.safetensors`.
    ///
    /// The model id is [`MODEL_ID`]; name another BERT sentence model with
    /// [`with_model_id`](Self::with_model_id) so cached vectors are not mixed up.
    #[instrument(skip_all, fields(dir = %dir.as_ref().display()))]
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let device = Device::Cpu;

        let config_path = dir.join("config.json");
        let config: Config = read_json(&config_path)?;

        let weights_path = dir.join("model.safetensors");
        // SAFETY: the file is mapped read-only and candle copies each tensor out of the map while
        // loading. Another process truncating or rewriting the file during `load` would be
        // undefined behaviour; the models directory is written only by atomic renames, which
        // replace the inode rather than changing the mapped one.
        #[allow(unsafe_code)]
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[&weights_path], DType::F32, &device) }
            .map_err(|source| Error::Weights { path: weights_path.clone(), source })?;
        let model = BertModel::load(vb, &config).map_err(|source| Error::Weights { path: weights_path.clone(), source })?;

        let tokenizer_path = dir.join("tokenizer.json");
        let mut tokenizer =
            Tokenizer::from_file(&tokenizer_path).map_err(|source| Error::Tokenizer { path: tokenizer_path.clone(), source })?;
        let max_seq_length = max_seq_length(dir, &tokenizer, &config)?;
        let pad_id = tokenizer.get_padding().map_or(config.pad_token_id as u32, |p| p.pad_id);
        // We pad per batch ourselves (see the module doc), so the fixed padding goes.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: max_seq_length,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|source| Error::Tokenizer { path: tokenizer_path.clone(), source })?;

        tracing::debug!(hidden = config.hidden_size, layers = config.num_hidden_layers, max_seq_length, "loaded sentence embedder");
        Ok(Self {
            model,
            tokenizer,
            device,
            model_id: MODEL_ID.to_owned(),
            dim: config.hidden_size,
            max_seq_length,
            pad_id,
            batch_size: DEFAULT_BATCH_SIZE,
            dir: dir.to_path_buf(),
        })
    }

    /// What its vectors depend on, for a cache kept across runs: the model id, the sha256 of
    /// the weights and of the tokenizer (first 16 hex digits each) and the token limit. Two
    /// directories with the same id but other weights get other fingerprints. Reads both files.
    pub fn fingerprint(&self) -> Result<String> {
        let weights = crate::models::sha256_file(&self.dir.join("model.safetensors"))?;
        let tokenizer = crate::models::sha256_file(&self.dir.join("tokenizer.json"))?;
        Ok(format!("{} weights:{} tokenizer:{} max_seq_length:{}", self.model_id, &weights[..16], &tokenizer[..16], self.max_seq_length))
    }

    /// Sets how many texts go through the encoder at once (at least 1).
    #[must_use]
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size.max(1);
        self
    }

    /// Sets the id reported by [`model_id`](Self::model_id).
    #[must_use]
    pub fn with_model_id(mut self, model_id: impl Into<String>) -> Self {
        self.model_id = model_id.into();
        self
    }

    /// The model id, for keying cached embeddings.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// Length of each vector (384 for all-MiniLM-L6-v2).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Tokens kept per text, special tokens included; longer texts are cut at the end.
    pub fn max_seq_length(&self) -> usize {
        self.max_seq_length
    }

    /// Texts per encoder batch.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Embeds `texts`: one L2-normalised vector of [`dim`](Self::dim) floats per text, in order.
    ///
    /// Texts are grouped by token length before batching so that little time is spent on
    /// padding; the output order is the input order.
    #[instrument(skip_all, fields(texts = texts.len()))]
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let encodings = self.tokenizer.encode_batch_fast(texts.to_vec(), true).map_err(Error::Tokenize)?;
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| encodings[i].get_ids().len());

        let mut out = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(self.batch_size) {
            let batch: Vec<&[u32]> = chunk.iter().map(|&i| encodings[i].get_ids()).collect();
            let vectors = self.embed_ids(&batch)?;
            for (&i, vector) in chunk.iter().zip(vectors) {
                out[i] = vector;
            }
        }
        Ok(out)
    }

    /// Runs one batch of token id sequences through the encoder, pooling and normalising.
    ///
    /// # Shapes
    /// - input: `batch` sequences of up to `max_seq_length` ids, padded here to the longest
    /// - output: `[batch, dim]`
    fn embed_ids(&self, batch: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let rows = batch.len();
        let width = batch.iter().map(|ids| ids.len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(rows * width);
        let mut mask = Vec::with_capacity(rows * width);
        for seq in batch {
            ids.extend_from_slice(seq);
            ids.extend(std::iter::repeat_n(self.pad_id, width - seq.len()));
            mask.extend(std::iter::repeat_n(1u32, seq.len()));
            mask.extend(std::iter::repeat_n(0u32, width - seq.len()));
        }
        let ids = Tensor::from_vec(ids, (rows, width), &self.device)?; // [batch, seq]
        let mask = Tensor::from_vec(mask, (rows, width), &self.device)?; // [batch, seq]
        let type_ids = ids.zeros_like()?;

        let hidden = self.model.forward(&ids, &type_ids, Some(&mask))?; // [batch, seq, dim]
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // [batch, seq, 1]
        let summed = hidden.broadcast_mul(&mask)?.sum(1)?; // [batch, dim]
        // sentence-transformers clamps the token count at 1e-9 and the norm at 1e-12.
        let counts = mask.sum(1)?.clamp(1e-9f32, f32::MAX)?; // [batch, 1]
        let mean = summed.broadcast_div(&counts)?;
        let norm = mean.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?.clamp(1e-12f32, f32::MAX)?; // [batch, 1]
        Ok(mean.broadcast_div(&norm)?.to_vec2::<f32>()?)
    }
}

/// The embedder of the engine's dense route and update step, and of grounding.
impl memkit_text::embed::Embedder for SentenceEmbedder {
    fn model_id(&self) -> &str {
        SentenceEmbedder::model_id(self)
    }
    fn dim(&self) -> usize {
        SentenceEmbedder::dim(self)
    }
    fn embed(&self, texts: &[&str]) -> std::result::Result<Vec<Vec<f32>>, memkit_text::embed::EmbedError> {
        SentenceEmbedder::embed(self, texts).map_err(|e| memkit_text::embed::EmbedError(e.to_string()))
    }
}

/// A record cleaner that grounds with all-MiniLM-L6-v2 when it is installed, by term coverage
/// alone when it is not (a log line says which; [`memkit_clean::Cleaner::id`] records it).
pub fn installed_cleaner(grounding: memkit_clean::GroundingConfig) -> Result<memkit_clean::Cleaner> {
    let cleaner = memkit_clean::Cleaner::new(grounding);
    if !grounding.enabled {
        return Ok(cleaner);
    }
    match crate::models::locate(crate::models::ALL_MINILM_L6_V2.name) {
        Some(dir) => {
            tracing::info!("grounding by term coverage and all-MiniLM-L6-v2 cosine");
            Ok(cleaner.with_embedder(Box::new(SentenceEmbedder::load(dir)?)))
        }
        None => {
            tracing::info!("grounding by term coverage only (all-MiniLM-L6-v2 is not installed: memkit models fetch all-minilm-l6-v2)");
            Ok(cleaner)
        }
    }
}

/// Token limit: `sentence_bert_config.json` when present (what sentence-transformers uses),
/// else the tokenizer's own truncation, else the model's position limit.
fn max_seq_length(dir: &Path, tokenizer: &Tokenizer, config: &Config) -> Result<usize> {
    let path = dir.join("sentence_bert_config.json");
    let limit = if path.is_file() {
        read_json::<SentenceBertConfig>(&path)?.max_seq_length
    } else if let Some(truncation) = tokenizer.get_truncation() {
        truncation.max_length
    } else {
        config.max_position_embeddings
    };
    Ok(limit.min(config.max_position_embeddings))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &PathBuf) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|source| Error::Config { path: path.clone(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedder_can_be_shared_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<SentenceEmbedder>();
    }
}
