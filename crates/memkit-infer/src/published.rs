//! Published extractors: trained extractors that ship with memkit in `checkpoints/<name>/`, in a
//! form git carries (tens of MB, not hundreds).
//!
//! A published extractor's folder holds a low-rank delta over a registry base model
//! ([`convert::delta`]), the checkpoint's config, tokenizer, extraction prompt and trained window,
//! its model card, and [`MANIFEST`]:
//!
//! ```text
//! checkpoints/memkit-extractor-135m/
//!   extractor.json        base model, the sha256 of its dequantised weights, rank, energy kept
//!   delta.safetensors     f16 factors of every matrix's change, f32 norms
//!   config.json, generation_config.json, tokenizer.json, tokenizer_config.json,
//!   extract_prompt.j2, extract_window.json, README.md (the card), recipe.toml, score.json, ...
//! ```
//!
//! On first use [`Published::hf_dir`] fetches the base when it is missing, dequantises it
//! ([`convert::gguf_to_hf`], the same start the training had), checks its weights are the ones
//! the delta was taken against, adds the delta and caches the merged HF checkpoint under
//! `<models dir>/extractors/<name>-<delta hash>/`; a changed delta is a new folder.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::convert::{self, delta};
use crate::models::{self, FetchOptions, Reporter};
use crate::{Error, Result};

/// A published extractor's manifest, in its folder.
pub const MANIFEST: &str = "extractor.json";

/// Environment variable naming the folder of published extractors.
pub const CHECKPOINTS_DIR_ENV: &str = "MEMKIT_CHECKPOINTS_DIR";

/// The files of the HF checkpoint besides its weights that a published folder carries and the
/// merged checkpoint gets ([`publish`] copies them).
pub const CHECKPOINT_FILES: [&str; 6] = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    memkit_prompt::TRAINED_PROMPT_FILE,
    memkit_prompt::TRAINED_WINDOW_FILE,
];

/// What [`MANIFEST`] says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The registry model the delta applies to (`memkit models list`).
    pub base: String,
    /// sha256 of the base's dequantised weights (the `model.safetensors` that
    /// [`convert::gguf_to_hf`] writes from the registry GGUF), which the delta was taken against.
    pub base_weights_sha256: String,
    /// Rank of the delta's factors.
    pub rank: usize,
    /// Share of the fine-tune's change (Σ‖ΔW‖²_F over the matrices) the factors keep.
    pub retained: f64,
}

/// A published extractor.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// Its name: the folder's name, what `--model` takes.
    pub name: String,
    /// Its folder.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
}

/// Where published extractors live: `$MEMKIT_CHECKPOINTS_DIR`, else the `checkpoints/` folder of
/// the workspace memkit was built from.
pub fn checkpoints_dir() -> PathBuf {
    std::env::var_os(CHECKPOINTS_DIR_ENV)
        .filter(|v| !v.is_empty())
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../checkpoints"), PathBuf::from)
}

/// The published extractors in [`checkpoints_dir`], by name; a folder whose manifest does not
/// read is reported in the log and left out.
pub fn list() -> Vec<Published> {
    let Ok(entries) = std::fs::read_dir(checkpoints_dir()) else { return Vec::new() };
    let mut found: Vec<Published> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|dir| dir.join(MANIFEST).is_file())
        .filter_map(|dir| Published::read(&dir).map_err(|e| tracing::warn!("{e}")).ok())
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

impl Published {
    /// The published extractor `model` names: a folder with a [`MANIFEST`], or the name of one
    /// in [`checkpoints_dir`]; `None` when it is neither.
    pub fn find(model: &str) -> Result<Option<Self>> {
        let path = Path::new(model);
        if path.join(MANIFEST).is_file() {
            return Self::read(path).map(Some);
        }
        let named = checkpoints_dir().join(model);
        if !model.contains(['/', '\\']) && named.join(MANIFEST).is_file() {
            return Self::read(&named).map(Some);
        }
        Ok(None)
    }

    /// Reads the published extractor in `dir`.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let manifest = serde_json::from_str(&text).map_err(|source| Error::Config { path: path.clone(), source })?;
        let name = dir
            .canonicalize()
            .unwrap_or_else(|_| dir.to_path_buf())
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        Ok(Self { name, dir: dir.to_path_buf(), manifest })
    }

    /// The runnable HF checkpoint: base + delta, built on first use into the models directory
    /// (the base is fetched when missing) and reused after.
    pub fn hf_dir(&self, options: &FetchOptions, reporter: &dyn Reporter) -> Result<PathBuf> {
        let delta_file = self.dir.join(delta::DELTA_FILE);
        let digest = models::sha256_file(&delta_file)?;
        let extractors = options.models_dir.join("extractors");
        let out = extractors.join(format!("{}-{}", self.name, &digest[..12]));
        if out.join("model.safetensors").is_file() {
            return Ok(out);
        }
        let start = Instant::now();
        let work = extractors.join(format!(".{}-{}.partial", self.name, &digest[..12]));
        let (base, sha) = dequantised_base(&self.manifest.base, options, reporter, &work)?;
        if sha != self.manifest.base_weights_sha256 {
            return Err(Error::Convert {
                path: self.dir.join(MANIFEST),
                reason: format!(
                    "the delta was taken against {} weights with sha256 {}, but they dequantise to {sha} here: publish it again \
                     from a checkpoint trained on this base",
                    self.manifest.base, self.manifest.base_weights_sha256,
                ),
            });
        }
        let merged = work.join("merged");
        delta::apply_delta(&base, &delta_file, &merged.join("model.safetensors"))?;
        for file in CHECKPOINT_FILES {
            let from = self.dir.join(file);
            if from.is_file() {
                std::fs::copy(&from, merged.join(file)).map_err(|e| Error::io(&from, e))?;
            }
        }
        std::fs::rename(&merged, &out).map_err(|e| Error::io(&out, e))?;
        std::fs::remove_dir_all(&work).map_err(|e| Error::io(&work, e))?;
        tracing::info!(
            extractor = %self.name,
            base = %self.manifest.base,
            seconds = format!("{:.1}", start.elapsed().as_secs_f64()),
            path = %out.display(),
            "built the published extractor from its base and delta (once; reused after)"
        );
        Ok(out)
    }
}

/// Writes the published form of the fine-tuned HF checkpoint `tuned` (trained from the registry
/// model `base`, dequantised) into `out`: a rank-`rank` delta, the manifest and the checkpoint's
/// config, tokenizer, prompt and window files. The weights themselves are not copied.
pub fn publish(
    tuned: &Path,
    base: &str,
    rank: usize,
    out: &Path,
    options: &FetchOptions,
    reporter: &dyn Reporter,
) -> Result<(Manifest, delta::DeltaReport)> {
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let work = out.join(".base.partial");
    let (base_dir, base_weights_sha256) = dequantised_base(base, options, reporter, &work)?;
    let report = delta::write_delta(&base_dir, tuned, &out.join(delta::DELTA_FILE), rank)?;
    std::fs::remove_dir_all(&work).map_err(|e| Error::io(&work, e))?;
    for file in CHECKPOINT_FILES {
        let from = tuned.join(file);
        if from.is_file() {
            std::fs::copy(&from, out.join(file)).map_err(|e| Error::io(&from, e))?;
        }
    }
    let manifest = Manifest { base: base.to_owned(), base_weights_sha256, rank, retained: report.retained };
    let path = out.join(MANIFEST);
    let text = serde_json::to_string_pretty(&manifest).expect("the manifest serialises");
    std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))?;
    Ok((manifest, report))
}

/// The registry model `base` dequantised into `work/base` (fetched first when missing), as
/// training starts from it, and the sha256 of its weights.
fn dequantised_base(base: &str, options: &FetchOptions, reporter: &dyn Reporter, work: &Path) -> Result<(PathBuf, String)> {
    let spec = models::spec(base)?;
    let gguf = match models::locate_in(&options.models_dir, spec.name) {
        Some(path) => path,
        None => {
            tracing::info!(base = spec.name, "fetching the base model");
            models::fetch(spec, options, reporter)?
        }
    };
    if work.exists() {
        std::fs::remove_dir_all(work).map_err(|e| Error::io(work, e))?;
    }
    let dir = work.join("base");
    convert::gguf_to_hf(&gguf, &dir)?;
    let sha = models::sha256_file(&dir.join("model.safetensors"))?;
    Ok((dir, sha))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_with_an_unknown_key_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let good = r#"{"base": "smollm2-135m", "base_weights_sha256": "ab", "rank": 32, "retained": 0.5}"#;
        std::fs::write(dir.path().join(MANIFEST), good).unwrap();
        let published = Published::find(dir.path().to_str().unwrap()).unwrap().unwrap();
        assert_eq!(published.manifest.rank, 32);
        assert_eq!(published.name, dir.path().file_name().unwrap().to_string_lossy());
        std::fs::write(dir.path().join(MANIFEST), good.replace("\"rank\"", "\"rnak\"")).unwrap();
        let err = Published::find(dir.path().to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains(MANIFEST) && err.contains("rnak"), "{err}");
        assert!(Published::find("no-such-extractor").unwrap().is_none());
    }
}
