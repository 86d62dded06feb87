//! An exported checkpoint loads in Hugging Face transformers and computes the burn model's logits.
//!
//! Needs a Python with torch and transformers in `MEMKIT_TRANSFORMERS_PYTHON` (`just venv` makes
//! one outside the clone, and `just test` sets the variable when it exists; CI does both).
//! Skipped without one, failing when
//! `MEMKIT_REQUIRE_TRANSFORMERS=1`. A tiny random model of each family is exported with
//! [`export_hf`] (config.json, model.safetensors with HF names, tokenizer files with the chat
//! template) and loaded with `AutoModelForCausalLM` / `AutoTokenizer`; logits of every position
//! must agree with burn's to 1e-4 (both f32; measured 4.9e-6 to 6.4e-6 on the three families).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use burn::tensor::{Int, Tensor, TensorData};
use memkit_train::checkpoint::export_hf;
use memkit_train::model::BuildOptions;
use memkit_train::train::BaseModel;
use memkit_train::{Model, cpu_device};

const IDS: [i64; 10] = [1, 72, 101, 108, 108, 111, 44, 32, 119, 2];

fn python() -> Option<PathBuf> {
    let found = std::env::var_os("MEMKIT_TRANSFORMERS_PYTHON").map(PathBuf::from);
    if found.is_none() {
        assert!(
            std::env::var("MEMKIT_REQUIRE_TRANSFORMERS").as_deref() != Ok("1"),
            "MEMKIT_REQUIRE_TRANSFORMERS=1 but MEMKIT_TRANSFORMERS_PYTHON is not set (`just venv`, then `just test`)"
        );
        #[allow(clippy::print_stderr)]
        {
            eprintln!("skipped: no Python with transformers (`just venv` makes one; `just test` then sets MEMKIT_TRANSFORMERS_PYTHON)");
        }
    }
    found
}

#[test]
fn exported_checkpoints_load_in_transformers_with_the_same_logits() {
    let Some(python) = python() else { return };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf_logits.py");
    for (model_type, class) in [("llama", "LlamaForCausalLM"), ("qwen2", "Qwen2ForCausalLM"), ("qwen3", "Qwen3ForCausalLM")] {
        let dir = tempfile::tempdir().unwrap();
        let (config_json, _, weights) = common::tiny_family(model_type, class);
        export_hf(dir.path(), &config_json, &weights, &common::fixtures()).unwrap();

        let base = BaseModel::from_hf_dir(dir.path()).unwrap();
        let model = Model::new(&base.config, &base.weights, dir.path(), BuildOptions { lora: None, seed: 0 }, &cpu_device()).unwrap();
        let input = Tensor::<2, Int>::from_data(TensorData::new(IDS.to_vec(), [1, IDS.len()]), &cpu_device());
        let ours = model.forward(input).into_data().convert::<f32>().try_to_vec::<f32>().unwrap();

        let out = Command::new(&python).arg(&script).arg(dir.path()).arg(serde_json::to_string(&IDS).unwrap()).output().unwrap();
        assert!(out.status.success(), "{model_type}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(out.stdout.rsplit(|b| *b == b'\n').find(|l| !l.is_empty()).unwrap()).unwrap();
        assert_eq!(v["class"], class, "transformers picked another class");
        assert!(v["chat"].as_str().is_some_and(|c| c.contains("hi")), "{model_type}: the chat template did not render: {}", v["chat"]);
        let theirs: Vec<f32> = v["logits"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
        let diff = common::max_abs_diff(&ours, &theirs);
        #[allow(clippy::print_stderr)]
        {
            eprintln!("{model_type}: max abs diff burn vs transformers {diff:e}");
        }
        assert!(diff < 1e-4, "{model_type}: burn and transformers differ by {diff}");
    }
}
