//! `memkit train` with scoring on the real binary: the smoke recipe's tiny model is exported,
//! converted to GGUF and asked for held-out windows with llama.cpp at every evaluation; the
//! scores are logged, the best export is kept, and the learning curve is drawn.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root: recipes name their data relative to it.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `memkit <args> --out <out>` from the repository root, which must succeed.
fn memkit(args: &[&str], out: &Path) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_memkit")).current_dir(root()).args(args).arg("--out").arg(out).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    output
}

#[test]
fn scoring_logs_every_evaluation_keeps_the_best_export_and_draws_the_curve() {
    let out = tempfile::tempdir().unwrap();
    let output = memkit(
        &["--no-progress", "train", "--recipe", "recipes/train/smoke.toml", "--score-windows", "2", "--score-threads", "1"],
        out.path(),
    );
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
        let interval: Vec<f64> = s["metrics"]["f1_interval"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert!(interval.len() == 2 && 0.0 <= interval[0] && interval[0] <= interval[1] && interval[1] <= 1.0, "{interval:?}");
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

    // The kept export publishes as it is: the run's recipe, metrics and curve come from the run
    // folder, and the card gives the score that chose it.
    let bundle = out.path().join("bundle");
    memkit(&["publish", out.path().join("best").to_str().unwrap()], &bundle);
    for file in ["recipe.toml", "metrics.jsonl", "learning_curve.svg", "score.json", "Modelfile", "bundle-q8_0.gguf"] {
        assert!(bundle.join(file).is_file(), "bundle/{file}");
    }
    let card = std::fs::read_to_string(bundle.join("README.md")).unwrap();
    assert!(card.contains("Agreement with the teacher when this export was chosen"), "{card}");
    assert!(card.contains(&format!("| {} | 2 | 1.000 |", best["step"])), "{card}");
    let (f1, lo, hi) = (&best["metrics"]["f1"], &best["metrics"]["f1_interval"][0], &best["metrics"]["f1_interval"][1]);
    let cell = format!("{:.3} ({:.3}–{:.3})", f1.as_f64().unwrap(), lo.as_f64().unwrap(), hi.as_f64().unwrap());
    assert!(card.contains(&cell), "the F1 with its interval, {cell}: {card}");
    assert!(card.contains("Data: `crates/memkit-train/tests/fixtures/tiny`"), "the recipe is read from the run folder: {card}");
    assert!(card.contains(&format!("Validation at step {}:", best["step"])), "the kept export's own evaluation: {card}");
}

/// Training raises agreement, not only the likelihood: a random 2-layer model trained on 24
/// templated windows writes records that match the labels of 6 held-out windows (other names),
/// where at step 0 it matches none; its held-out loss falls with it.
#[test]
fn a_tiny_model_learns_to_agree_with_held_out_labels() {
    let out = tempfile::tempdir().unwrap();
    memkit(&["--no-progress", "train", "--recipe", "recipes/train/smoke-records.toml", "--score-threads", "1"], out.path());
    let metrics = std::fs::read_to_string(out.path().join("metrics.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = metrics.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let of = |kind: &str, key: &str| -> Vec<f64> {
        rows.iter()
            .filter(|r| r["type"] == kind)
            .map(|r| if kind == "score" { r["metrics"][key].as_f64().unwrap() } else { r[key].as_f64().unwrap() })
            .collect()
    };
    let (f1, loss) = (of("score", "f1"), of("eval", "loss"));
    assert_eq!(f1.len(), 4, "scored at steps 0, 100, 200, 300: {f1:?}");
    assert_eq!(f1[0], 0.0, "a random model matches no held-out record: {f1:?}");
    let best = f1.iter().copied().fold(0.0, f64::max);
    assert!(best >= 0.5, "record F1 on held-out windows by step: {f1:?}");
    assert!(loss.last().unwrap() * 4.0 < loss[0], "held-out loss by step: {loss:?}");
    let kept: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.path().join("best/score.json")).unwrap()).unwrap();
    assert_eq!(kept["value"].as_f64().unwrap(), best);
}
