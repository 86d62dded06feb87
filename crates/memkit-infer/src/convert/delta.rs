//! A fine-tuned checkpoint as a low-rank delta over the base it was trained from: small enough
//! to commit (a published extractor in `checkpoints/<name>/`), merged back into an HF
//! checkpoint on first use.
//!
//! - [`write_delta`]: each matrix's change `tuned − base` is factored by a truncated SVD into
//!   `up = U_r·diag(s_r)` (`[out, r]`) and `down = V_rᵀ` (`[r, in]`) (a randomized SVD), both stored as f16 under
//!   `<tensor>.delta_up` and `<tensor>.delta_down`. Vectors that changed (the norms) are stored
//!   whole, in f32, under their own name; unchanged tensors are left out.
//! - [`apply_delta`]: `base + up·down` (and the stored vectors) as an f32 `model.safetensors`.
//!
//! The factors come from a randomized SVD, close to the best rank-r approximation of each
//! change (Eckart–Young); the report says how much of the change's energy (squared Frobenius
//! norm) they keep, and a published
//! extractor's card gives its agreement with the full fine-tune, measured by generation.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use nalgebra::DMatrix;

use super::{bad, partial_path, safetensors_files};
use crate::{Error, Result};

/// The delta's file in a published extractor's folder.
pub const DELTA_FILE: &str = "delta.safetensors";
const UP: &str = ".delta_up";
const DOWN: &str = ".delta_down";

/// What [`write_delta`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaReport {
    /// Matrices stored as rank-r factors.
    pub factored: usize,
    /// Vectors stored whole.
    pub whole: usize,
    /// Tensors equal to the base's, left out.
    pub unchanged: usize,
    /// Share of the matrices' total change energy (Σ‖ΔW‖²_F) the factors keep.
    pub retained: f64,
    /// The matrix whose change the factors keep least of, and that share.
    pub least_retained: (String, f64),
    /// Size of the delta file.
    pub bytes: u64,
}

/// A checkpoint's weights by HF name, in f32 (the safetensors files are read whole; no memory
/// map).
pub fn load_weights(dir: &Path) -> Result<HashMap<String, Tensor>> {
    let mut weights = HashMap::new();
    for file in safetensors_files(dir)? {
        let bytes = fs::read(&file).map_err(|e| Error::io(&file, e))?;
        let tensors =
            candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).map_err(|source| Error::Weights { path: file.clone(), source })?;
        for (name, tensor) in tensors {
            let tensor = tensor.to_dtype(DType::F32).map_err(|source| Error::Weights { path: file.clone(), source })?;
            weights.insert(name, tensor);
        }
    }
    Ok(weights)
}

/// Writes `tuned_dir`'s change from `base_dir` as a rank-`rank` delta to `out_file`.
///
/// Both are HF checkpoint folders with the same tensors (names and shapes); a tensor that only
/// one of them has is an error naming it.
pub fn write_delta(base_dir: &Path, tuned_dir: &Path, out_file: &Path, rank: usize) -> Result<DeltaReport> {
    if rank == 0 {
        return Err(bad(out_file, "the delta's rank must be at least 1"));
    }
    let base = load_weights(base_dir)?;
    let tuned = load_weights(tuned_dir)?;
    let mut names: Vec<&String> = tuned.keys().collect();
    names.sort();
    if let Some(missing) = base.keys().find(|name| !tuned.contains_key(*name)) {
        return Err(bad(tuned_dir, format!("has no tensor `{missing}`, which the base {} has", base_dir.display())));
    }
    let weights = |source| Error::Weights { path: tuned_dir.to_path_buf(), source };
    let mut out: HashMap<String, Tensor> = HashMap::new();
    let (mut factored, mut whole, mut unchanged) = (0, 0, 0);
    let (mut kept_total, mut energy_total) = (0.0f64, 0.0f64);
    let mut least_retained = (String::new(), 1.0f64);
    for name in names {
        let after = &tuned[name];
        let before = base
            .get(name)
            .ok_or_else(|| bad(base_dir, format!("has no tensor `{name}`, which the fine-tuned {} has", tuned_dir.display())))?;
        if before.dims() != after.dims() {
            return Err(bad(tuned_dir, format!("tensor `{name}` is {:?}, the base's is {:?}", after.dims(), before.dims())));
        }
        let change = after.sub(before).and_then(|d| d.flatten_all()).and_then(|d| d.to_vec1::<f32>()).map_err(weights)?;
        if change.iter().all(|v| *v == 0.0) {
            unchanged += 1;
            continue;
        }
        let &[rows, cols] = after.dims() else {
            out.insert(name.clone(), after.clone());
            whole += 1;
            continue;
        };
        let factors = low_rank(&change, rows, cols, rank).ok_or_else(|| {
            bad(tuned_dir, format!("the SVD of `{name}`'s change failed (its factors hold more than the change's energy)"))
        })?;
        tracing::debug!(tensor = %name, retained = factors.kept / factors.energy, "factored");
        if factors.kept / factors.energy < least_retained.1 {
            least_retained = (name.clone(), factors.kept / factors.energy);
        }
        kept_total += factors.kept;
        energy_total += factors.energy;
        let r = factors.rank;
        let up = Tensor::from_vec(factors.up, (rows, r), &Device::Cpu).and_then(|t| t.to_dtype(DType::F16)).map_err(weights)?;
        let down = Tensor::from_vec(factors.down, (r, cols), &Device::Cpu).and_then(|t| t.to_dtype(DType::F16)).map_err(weights)?;
        out.insert(format!("{name}{UP}"), up);
        out.insert(format!("{name}{DOWN}"), down);
        factored += 1;
    }
    if let Some(parent) = out_file.parent() {
        fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    let partial = partial_path(out_file);
    candle_core::safetensors::save(&out, &partial).map_err(|source| Error::Weights { path: partial.clone(), source })?;
    fs::rename(&partial, out_file).map_err(|e| Error::io(out_file, e))?;
    let bytes = fs::metadata(out_file).map_err(|e| Error::io(out_file, e))?.len();
    let retained = if energy_total > 0.0 { kept_total / energy_total } else { 1.0 };
    Ok(DeltaReport { factored, whole, unchanged, retained, least_retained, bytes })
}

/// Writes `base_dir`'s weights plus the delta in `delta_file` as `out_file` (an f32
/// `model.safetensors`). Every tensor of the delta must belong to a base tensor of its shape.
pub fn apply_delta(base_dir: &Path, delta_file: &Path, out_file: &Path) -> Result<()> {
    let mut weights = load_weights(base_dir)?;
    let bytes = fs::read(delta_file).map_err(|e| Error::io(delta_file, e))?;
    let delta = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu)
        .map_err(|source| Error::Weights { path: delta_file.to_path_buf(), source })?;
    let failed = |source| Error::Weights { path: delta_file.to_path_buf(), source };
    for (key, tensor) in &delta {
        if let Some(name) = key.strip_suffix(DOWN) {
            if !delta.contains_key(&format!("{name}{UP}")) {
                return Err(bad(delta_file, format!("`{key}` has no `{name}{UP}`")));
            }
            continue;
        }
        let (name, change) = match key.strip_suffix(UP) {
            Some(name) => {
                let down = delta.get(&format!("{name}{DOWN}")).ok_or_else(|| bad(delta_file, format!("`{key}` has no `{name}{DOWN}`")))?;
                let product = tensor.to_dtype(DType::F32).and_then(|up| up.matmul(&down.to_dtype(DType::F32)?)).map_err(failed)?;
                (name, Some(product))
            }
            None => (key.as_str(), None),
        };
        let base =
            weights.get(name).ok_or_else(|| bad(delta_file, format!("`{key}` belongs to no tensor of the base {}", base_dir.display())))?;
        let merged = match change {
            Some(product) if product.dims() == base.dims() => base.add(&product).map_err(failed)?,
            None if tensor.dims() == base.dims() => tensor.to_dtype(DType::F32).map_err(failed)?,
            _ => return Err(bad(delta_file, format!("`{key}` does not fit the base's `{name}` of shape {:?}", base.dims()))),
        };
        weights.insert(name.to_owned(), merged);
    }
    if let Some(parent) = out_file.parent() {
        fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    let partial = partial_path(out_file);
    candle_core::safetensors::save(&weights, &partial).map_err(|source| Error::Weights { path: partial.clone(), source })?;
    fs::rename(&partial, out_file).map_err(|e| Error::io(out_file, e))
}

/// A rank-r factorisation `up·down` of a row-major `[rows, cols]` matrix.
struct Factors {
    up: Vec<f32>,
    down: Vec<f32>,
    rank: usize,
    /// Σ s² over the kept singular values.
    kept: f64,
    /// Σ s² over all of them (the squared Frobenius norm).
    energy: f64,
}

/// Columns beyond the rank that the range finder samples, and its power iterations: Halko,
/// Martinsson and Tropp (2011), "Finding structure with randomness", algorithm 4.4, whose
/// error bounds hold for these values on slowly decaying spectra such as fine-tuning's.
const OVERSAMPLE: usize = 16;
const POWER_ITERATIONS: usize = 3;

/// A rank-`rank` approximation of the row-major `[rows, cols]` matrix `values` from a randomized
/// SVD (a seeded range finder, then nalgebra's QR and the SVD of the small projected matrix):
/// `O(rows · cols · rank)`, where nalgebra's full SVD of the 49,152 × 576 embedding change took
/// minutes. The kept energy is that of the factors themselves (`‖U_rᵀ·M‖²_F = Σ kept s²`, `U_r`
/// orthonormal), so the report is exact whatever the sampling found. `None` when the SVD fails.
fn low_rank(values: &[f32], rows: usize, cols: usize, rank: usize) -> Option<Factors> {
    use rand::{Rng, SeedableRng};
    let m = DMatrix::from_row_slice(rows, cols, values);
    let energy: f64 = values.iter().map(|v| f64::from(*v).powi(2)).sum();
    let k = (rank + OVERSAMPLE).min(rows.min(cols));
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6d656d6b6974);
    let omega = DMatrix::from_fn(cols, k, |_, _| rng.random_range(-1.0f32..1.0));
    let mut q = (&m * omega).qr().q();
    for _ in 0..POWER_ITERATIONS {
        let z = (m.transpose() * &q).qr().q();
        q = (&m * z).qr().q();
    }
    let b = q.transpose() * &m;
    let svd = b.try_svd_unordered(true, true, 5.0 * f32::EPSILON, 0)?;
    let (u_small, v_t, s) = (svd.u?, svd.v_t?, svd.singular_values);
    let u = q * u_small;
    let mut order: Vec<usize> = (0..s.len()).collect();
    order.sort_by(|&a, &b| s[b].total_cmp(&s[a]));
    order.truncate(rank);
    let r = order.len();
    let mut up = vec![0.0f32; rows * r];
    let mut down = vec![0.0f32; r * cols];
    for (k, &i) in order.iter().enumerate() {
        for row in 0..rows {
            up[row * r + k] = u[(row, i)] * s[i];
        }
        for col in 0..cols {
            down[k * cols + col] = v_t[(i, col)];
        }
    }
    // The projection keeps at most the matrix's energy: more means a failed decomposition
    // (nalgebra's SVD went wrong on a rank-1 2×3 matrix with a tolerance of 1 f32 epsilon; it
    // uses 5 by default, as here), which is refused rather than written.
    let kept: f64 = order.iter().map(|&i| f64::from(s[i]).powi(2)).sum();
    if kept > energy * (1.0 + 1e-3) {
        return None;
    }
    Some(Factors { up, down, rank: r, kept, energy })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkpoint folder with the given tensors (f32).
    fn checkpoint(dir: &Path, tensors: &[(&str, Vec<f32>, &[usize])]) {
        fs::create_dir_all(dir).unwrap();
        let map: HashMap<String, Tensor> = tensors
            .iter()
            .map(|(name, values, shape)| ((*name).to_owned(), Tensor::from_vec(values.clone(), *shape, &Device::Cpu).unwrap()))
            .collect();
        candle_core::safetensors::save(&map, dir.join("model.safetensors")).unwrap();
    }

    fn values(weights: &HashMap<String, Tensor>, name: &str) -> Vec<f32> {
        weights[name].flatten_all().unwrap().to_vec1().unwrap()
    }

    #[test]
    fn a_rank_one_change_comes_back_whole_and_unchanged_tensors_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let base = [0.5, -1.0, 2.0, 0.0, 1.0, 3.0];
        // The change is the outer product [1, 3]ᵀ · [0.3, -0.7, 1.1]: rank 1.
        let change = [0.3, -0.7, 1.1, 0.9, -2.1, 3.3];
        let tuned: Vec<f32> = base.iter().zip(change).map(|(b, c)| b + c).collect();
        checkpoint(&dir.path().join("base"), &[("w", base.to_vec(), &[2, 3]), ("norm", vec![1.0, 1.0], &[2]), ("same", vec![4.0], &[1])]);
        checkpoint(&dir.path().join("tuned"), &[("w", tuned.clone(), &[2, 3]), ("norm", vec![1.0, 0.75], &[2]), ("same", vec![4.0], &[1])]);
        let delta = dir.path().join("delta.safetensors");
        let report = write_delta(&dir.path().join("base"), &dir.path().join("tuned"), &delta, 1).unwrap();
        assert_eq!((report.factored, report.whole, report.unchanged), (1, 1, 1));
        assert!((report.retained - 1.0).abs() < 1e-6, "{report:?}");
        let stored = candle_core::safetensors::load(&delta, &Device::Cpu).unwrap();
        let mut keys: Vec<_> = stored.keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, ["norm", "w.delta_down", "w.delta_up"]);
        assert_eq!(stored["w.delta_up"].dims(), [2, 1]);
        assert_eq!(stored["w.delta_down"].dims(), [1, 3]);

        let merged = dir.path().join("merged/model.safetensors");
        apply_delta(&dir.path().join("base"), &delta, &merged).unwrap();
        let merged = load_weights(&dir.path().join("merged")).unwrap();
        // f16 factors: within f16's relative precision of the tuned weights.
        for (got, want) in values(&merged, "w").iter().zip(&tuned) {
            assert!((got - want).abs() < 2e-3, "{got} vs {want}");
        }
        assert_eq!(values(&merged, "norm"), [1.0, 0.75]);
        assert_eq!(values(&merged, "same"), [4.0]);
    }

    #[test]
    fn truncation_keeps_the_larger_singular_value_and_says_how_much_it_kept() {
        let dir = tempfile::tempdir().unwrap();
        // diag(3, 1): singular values 3 and 1, so rank 1 keeps 9 / (9 + 1) of the energy.
        checkpoint(&dir.path().join("base"), &[("w", vec![0.0; 4], &[2, 2])]);
        checkpoint(&dir.path().join("tuned"), &[("w", vec![3.0, 0.0, 0.0, 1.0], &[2, 2])]);
        let delta = dir.path().join("delta.safetensors");
        let report = write_delta(&dir.path().join("base"), &dir.path().join("tuned"), &delta, 1).unwrap();
        assert!((report.retained - 0.9).abs() < 1e-6, "{report:?}");
        assert_eq!(report.least_retained.0, "w");
        apply_delta(&dir.path().join("base"), &delta, &dir.path().join("merged/model.safetensors")).unwrap();
        let merged = values(&load_weights(&dir.path().join("merged")).unwrap(), "w");
        let want = [3.0, 0.0, 0.0, 0.0];
        assert!(merged.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-3), "{merged:?}");
    }

    #[test]
    fn a_delta_that_does_not_fit_its_base_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        checkpoint(&dir.path().join("base"), &[("w", vec![0.0; 4], &[2, 2])]);
        checkpoint(&dir.path().join("other"), &[("v", vec![0.0; 4], &[2, 2])]);
        checkpoint(&dir.path().join("tuned"), &[("w", vec![1.0, 0.0, 0.0, 1.0], &[2, 2])]);
        let delta = dir.path().join("delta.safetensors");
        write_delta(&dir.path().join("base"), &dir.path().join("tuned"), &delta, 2).unwrap();
        let err = apply_delta(&dir.path().join("other"), &delta, &dir.path().join("m/model.safetensors")).unwrap_err().to_string();
        assert!(err.contains("belongs to no tensor") && err.contains("w.delta_"), "{err}");
        let err = write_delta(&dir.path().join("other"), &dir.path().join("tuned"), &delta, 2).unwrap_err().to_string();
        assert!(err.contains("`v`"), "{err}");
    }
}
