//! Host-side tensors in Hugging Face layout, and their safetensors files.
//!
//! Checkpoints are read whole into memory (no `unsafe` memory map) and converted to f32; they
//! are written as f32, through a temporary file renamed at the end so a crash never leaves a
//! half-written `model.safetensors`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use burn::tensor::Tensor;
use safetensors::{Dtype, SafeTensors};

use crate::{Error, Result};

/// A dense f32 tensor in host memory.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Row-major values.
    pub data: Vec<f32>,
}

impl HostTensor {
    /// Copies a burn tensor to the host.
    pub fn from_tensor<const D: usize>(tensor: Tensor<D>) -> Self {
        let shape = tensor.dims().to_vec();
        let data = tensor.into_data().convert::<f32>().try_into_vec::<f32>().expect("a float tensor converts to f32");
        HostTensor { shape, data }
    }
}

/// Tensors by checkpoint name (`model.layers.0.self_attn.q_proj.weight`), sorted.
pub type Weights = BTreeMap<String, HostTensor>;

/// Reads a safetensors file; F32, BF16 and F16 tensors are converted to f32.
pub fn read_safetensors(path: &Path) -> Result<Weights> {
    let bytes = fs::read(path).map_err(|e| Error::io(path, e))?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| Error::Weights { path: path.to_path_buf(), reason: e.to_string() })?;
    let mut weights = Weights::new();
    for (name, view) in file.iter() {
        let raw = view.data();
        let data: Vec<f32> = match view.dtype() {
            Dtype::F32 => raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            Dtype::BF16 => raw.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            Dtype::F16 => raw.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            other => {
                return Err(Error::Weights {
                    path: path.to_path_buf(),
                    reason: format!("tensor `{name}` has dtype {other:?}; supported: F32, BF16, F16"),
                });
            }
        };
        weights.insert(name.to_owned(), HostTensor { shape: view.shape().to_vec(), data });
    }
    Ok(weights)
}

/// Writes `weights` as an f32 safetensors file (through `<path>.tmp`, renamed at the end).
pub fn write_safetensors(path: &Path, weights: &Weights) -> Result<()> {
    let bytes: Vec<(&str, Vec<u8>)> =
        weights.iter().map(|(name, t)| (name.as_str(), t.data.iter().flat_map(|v| v.to_le_bytes()).collect())).collect();
    let views = bytes
        .iter()
        .zip(weights.values())
        .map(|((name, data), t)| {
            safetensors::tensor::TensorView::new(Dtype::F32, t.shape.clone(), data)
                .map(|view| (*name, view))
                .map_err(|e| Error::Weights { path: path.to_path_buf(), reason: format!("tensor `{name}`: {e}") })
        })
        .collect::<Result<Vec<_>>>()?;
    let tmp = tmp_path(path);
    safetensors::serialize_to_file(views, None, &tmp).map_err(|e| Error::Weights { path: tmp.clone(), reason: e.to_string() })?;
    // safetensors creates the file owner-only (0600); a published checkpoint is read by others.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644)).map_err(|e| Error::io(&tmp, e))?;
    }
    fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// Writes `contents` to `path` through `<path>.tmp`, renamed at the end.
pub(crate) fn write_atomic(path: &Path, contents: impl AsRef<[u8]>) -> Result<()> {
    let tmp = tmp_path(path);
    fs::write(&tmp, contents).map_err(|e| Error::io(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|source| Error::Json { path: path.to_path_buf(), line: None, source })
}

/// Reads the weights of a Hugging Face checkpoint directory: `model.safetensors`, or the shards
/// listed in `model.safetensors.index.json`.
pub fn read_hf_weights(dir: &Path) -> Result<Weights> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return read_safetensors(&single);
    }
    let index_path = dir.join("model.safetensors.index.json");
    if !index_path.is_file() {
        return Err(Error::invalid(dir, "neither model.safetensors nor model.safetensors.index.json exists"));
    }
    let index = read_json(&index_path)?;
    let map = index["weight_map"].as_object().ok_or_else(|| Error::invalid(&index_path, "no `weight_map` object"))?;
    let mut files: Vec<&str> = map.values().filter_map(serde_json::Value::as_str).collect();
    files.sort_unstable();
    files.dedup();
    let mut weights = Weights::new();
    for file in files {
        weights.extend(read_safetensors(&dir.join(file))?);
    }
    Ok(weights)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safetensors_round_trip_is_exact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.safetensors");
        let mut weights = Weights::new();
        weights.insert("a.weight".into(), HostTensor { shape: vec![2, 3], data: vec![1.0, -2.5, 3.0, 0.0, 1e-7, f32::MAX] });
        weights.insert("b.bias".into(), HostTensor { shape: vec![1], data: vec![0.25] });
        write_safetensors(&path, &weights).unwrap();
        assert_eq!(read_safetensors(&path).unwrap(), weights);
        assert!(!dir.path().join("w.safetensors.tmp").exists());
    }
}
