//! `memkit convert`: between the Hugging Face checkpoint layout and GGUF.

use std::path::PathBuf;

use anyhow::Context;
use memkit_infer::convert::{self, ConvertOptions, OutType};

/// Convert a model between the Hugging Face checkpoint layout (config.json, model.safetensors,
/// tokenizer.json, tokenizer_config.json with chat_template) and GGUF v3, as llama.cpp's own
/// converter does (Llama, Qwen2, Qwen3 families). This is how trained students run in llama.cpp
/// and Ollama, and how GGUF-only base models reach the trainer.
///
/// Examples:
///   memkit convert to-gguf checkpoints/run-1 student-q8.gguf --dtype q8_0
///   memkit convert to-hf ~/.cache/memkit/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf smollm2-hf
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    direction: Direction,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Dtype {
    /// Lossless.
    F32,
    /// Half precision matrices.
    F16,
    /// 8-bit blocks (llama.cpp Q8_0); matrices whose rows are not a multiple of 32 stay f16.
    #[value(name = "q8_0")]
    Q80,
}

#[derive(Debug, clap::Subcommand)]
enum Direction {
    /// HF checkpoint directory → GGUF file.
    ToGguf {
        /// The HF checkpoint directory.
        hf_dir: PathBuf,
        /// The GGUF file to write (written to a temp file, then renamed).
        out: PathBuf,
        /// Weight type of the matrices.
        #[arg(long, value_enum, default_value = "f16")]
        dtype: Dtype,
        /// `general.name` (default: the directory name).
        #[arg(long)]
        name: Option<String>,
    },
    /// GGUF file → HF checkpoint directory (weights dequantised to f32; tokenizer rebuilt from
    /// the GGUF metadata).
    ToHf {
        /// The GGUF file.
        gguf: PathBuf,
        /// The directory to write.
        out_dir: PathBuf,
    },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let report = match args.direction {
        Direction::ToGguf { hf_dir, out, dtype, name } => {
            let dtype = match dtype {
                Dtype::F32 => OutType::F32,
                Dtype::F16 => OutType::F16,
                Dtype::Q80 => OutType::Q8_0,
            };
            convert::hf_to_gguf(&hf_dir, &out, &ConvertOptions { dtype, name })
                .with_context(|| format!("converting {} to GGUF", hf_dir.display()))?
        }
        Direction::ToHf { gguf, out_dir } => {
            convert::gguf_to_hf(&gguf, &out_dir).with_context(|| format!("converting {} to the HF layout", gguf.display()))?
        }
    };
    tracing::info!(arch = ?report.arch, path = %report.path.display(), tensors = report.tensors, parameters = report.parameters, bytes = report.bytes, "converted");
    Ok(())
}
