//! `memkit train` with scoring on the real binary: the smoke recipe's tiny model is exported,
//! converted to GGUF and asked for held-out windows with llama.cpp at every evaluation; the
//! scores are logged, the best export is kept, and the learning curve is drawn.

use std::process::Command;

#[test]
fn scoring_logs_every_evaluation_keeps_the_best_export_and_draws_the_curve() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_memkit"))
        .current_dir(&root)
        .args(["--no-progress", "train", "--recipe", "recipes/train/smoke.toml", "--score-windows", "2", "--score-threads", "1"])
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).contains("best: record F1"));

    let metrics = std::fs::read_to_string(out.path().join("metrics.jsonl")).unwrap();
    let scores: Vec<serde_json::Value> =
        metrics.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).filter(|r| r["type"] == "score").collect();
    let steps: Vec<u64> = scores.iter().map(|s| s["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [0, 4, 8, 12], "the base, then every evaluation (eval_every = 4 of 12 steps)");
    for s in &scores {
        assert_eq!(s["metrics"]["windows"], 2);
        // Schema-constrained decoding: every reply parses, whatever the tiny model knows.
        assert_eq!(s["metrics"]["json_validity"], 1.0);
        assert!(s["value"].as_f64().unwrap() == s["metrics"]["f1"].as_f64().unwrap());
    }
    let best: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.path().join("best/score.json")).unwrap()).unwrap();
    let top = scores.iter().map(|s| s["value"].as_f64().unwrap()).fold(f64::MIN, f64::max);
    assert_eq!(best["value"].as_f64().unwrap(), top);
    assert_eq!(std::fs::read_to_string(out.path().join("best/replies.jsonl")).unwrap().lines().count(), 2);
    for file in ["config.json", "model.safetensors", "tokenizer.json", "model-f16.gguf"] {
        assert!(out.path().join("best").join(file).is_file(), "best/{file}");
    }
    let svg = std::fs::read_to_string(out.path().join("learning_curve.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("record F1 against the teacher"), "{}", &svg[..200.min(svg.len())]);
}
