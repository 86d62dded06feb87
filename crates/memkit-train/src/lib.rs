//! Supervised fine-tuning of Llama / Qwen2 / Qwen3 decoders in burn, for memkit's student
//! models.
//!
//! - [`model`]: the decoder ([`Model`], [`Config`] with Hugging Face `config.json` names), with
//!   optional LoRA adapters ([`LoraConfig`]) merged on export.
//! - [`attention`]: causal attention with its own backward, a burn backend extension: flex trains
//!   without a `[seq, seq]` tensor per layer.
//! - [`data`]: distilled JSONL → chat template (memkit-prompt) → token ids with an
//!   assistant-only loss mask → length-bucketed batches.
//! - [`train()`]: AdamW with warmup + cosine, gradient accumulation and clipping, evaluation,
//!   `metrics.jsonl` / `train.log`, checkpoints with resume, and the final export in Hugging
//!   Face layout. Progress goes to a [`Reporter`]; the library never prints.
//! - [`Recipe`]: the TOML recipe (`recipes/train/*.toml`).
//!
//! Training and generation meet at the Hugging Face checkpoint layout: a GGUF base model is
//! dequantised with memkit-infer's converter, and an exported run converts back to GGUF with
//! it (`memkit convert to-gguf`).
//!
//! ```no_run
//! use std::path::Path;
//! use burn::tensor::Device;
//! use memkit_train::{Recipe, SilentReporter, TrainOptions, train};
//!
//! let path = Path::new("recipes/train/smoke.toml");
//! let recipe = Recipe::from_file(path)?;
//! let summary = train(&recipe, path, &TrainOptions::default(), &Device::flex(), &SilentReporter)?;
//! assert!(summary.finished);
//! # Ok::<(), memkit_train::Error>(())
//! ```
//!
//! # Backend
//!
//! burn's pure-Rust `flex` CPU backend, with autodiff; the caller picks the [`Device`](burn::tensor::Device).

pub mod attention;
pub mod checkpoint;
pub mod data;
mod error;
pub mod model;
pub mod recipe;
pub mod rng;
pub mod train;
pub mod weights;

pub use error::{Error, Result};
pub use model::{Config, LoraConfig, Model};
pub use recipe::Recipe;
pub use train::{EvalMetrics, Reporter, Score, Scorer, SilentReporter, StepMetrics, TrainOptions, TrainPlan, TrainSummary, train};

/// The training device: burn's `flex` CPU backend (autodiff is switched on by [`train()`]).
pub fn cpu_device() -> burn::tensor::Device {
    burn::tensor::Device::flex()
}

/// The CPU backends this build has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// burn's pure-Rust `flex` (always built).
    Flex,
    /// LibTorch's CPU kernels through burn-tch (cargo feature `tch`).
    #[cfg(feature = "tch")]
    Libtorch,
    /// LibTorch's CUDA kernels on GPU 0 (cargo feature `tch`, with a CUDA build of torch and an
    /// NVIDIA GPU at run time).
    #[cfg(feature = "tch")]
    LibtorchCuda,
    /// burn's CubeCL CUDA runtime on GPU 0 (cargo feature `cuda`): kernels are compiled at run
    /// time through NVRTC, and the CUDA driver and libraries are found at run time, so the build
    /// needs no CUDA toolkit.
    #[cfg(feature = "cuda")]
    Cuda,
}

impl Backend {
    /// Every backend of this build.
    pub fn all() -> Vec<Backend> {
        #[allow(unused_mut)]
        let mut all = vec![Backend::Flex];
        #[cfg(feature = "tch")]
        all.extend([Backend::Libtorch, Backend::LibtorchCuda]);
        #[cfg(feature = "cuda")]
        all.push(Backend::Cuda);
        all
    }

    /// Whether it runs only with an NVIDIA GPU.
    pub fn needs_gpu(self) -> bool {
        self.name().ends_with("cuda")
    }

    /// Its name in reports and on the command line (`flex`, `libtorch`, `libtorch-cuda`, `cuda`).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Flex => "flex",
            #[cfg(feature = "tch")]
            Backend::Libtorch => "libtorch",
            #[cfg(feature = "tch")]
            Backend::LibtorchCuda => "libtorch-cuda",
            #[cfg(feature = "cuda")]
            Backend::Cuda => "cuda",
        }
    }

    /// The device (autodiff is switched on by [`train()`]).
    pub fn device(self) -> burn::tensor::Device {
        match self {
            Backend::Flex => burn::tensor::Device::flex(),
            #[cfg(feature = "tch")]
            #[allow(deprecated)] // burn-tch is deprecated in burn 0.22 and still the LibTorch path
            Backend::Libtorch => burn::tensor::Device::libtorch(),
            #[cfg(feature = "tch")]
            #[allow(deprecated)]
            Backend::LibtorchCuda => burn::tensor::Device::libtorch_cuda(0),
            #[cfg(feature = "cuda")]
            Backend::Cuda => burn::tensor::Device::cuda(0),
        }
    }
}

/// `flex`, `libtorch` in a build with the `tch` feature, `cuda` in one with the `cuda` feature;
/// other names (and a backend this build lacks) are errors that say what this build has.
impl std::str::FromStr for Backend {
    type Err = String;

    fn from_str(name: &str) -> std::result::Result<Self, String> {
        let all = Backend::all();
        all.iter().copied().find(|b| b.name() == name).ok_or_else(|| {
            let have = all.iter().map(|b| b.name()).collect::<Vec<_>>().join(", ");
            if name == "libtorch" || name == "libtorch-cuda" {
                format!(
                    "backend {name} needs a memkit built with the `tch` feature (cargo build -p memkit-cli --features tch, \
                     with LibTorch found as `just train` sets up); this build has: {have}"
                )
            } else if name == "cuda" {
                format!(
                    "backend cuda needs a memkit built with the `cuda` feature (cargo build --release -p memkit-cli --features cuda; \
                     an NVIDIA driver and CUDA 12 or 13 libraries at run time); this build has: {have}"
                )
            } else {
                format!("unknown backend {name:?}; this build has: {have}")
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_parse_by_name_and_explain_what_is_missing() {
        assert_eq!("flex".parse::<Backend>(), Ok(Backend::Flex));
        for b in Backend::all() {
            assert_eq!(b.name().parse::<Backend>(), Ok(b));
        }
        let err = "metal".parse::<Backend>().unwrap_err();
        assert!(err.contains("unknown backend \"metal\"") && err.contains("flex"), "{err}");
        #[cfg(not(feature = "tch"))]
        assert!("libtorch".parse::<Backend>().unwrap_err().contains("`tch` feature"));
        #[cfg(not(feature = "cuda"))]
        assert!("cuda".parse::<Backend>().unwrap_err().contains("`cuda` feature"));
    }
}
