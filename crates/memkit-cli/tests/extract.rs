//! `memkit extract --output` with a model, killed with SIGKILL mid-run, then run again: every
//! window is in the window ledger exactly once, the windows finished before the kill are not
//! extracted again, and the records file holds every window's records.
//!
//! Uses the real binary, the real SmolLM2-135M (skipped unless installed, failing when
//! `MEMKIT_REQUIRE_MODELS=1`) and the real LoCoMo file.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn window_ids(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["extraction"]["window_id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn kill_9_mid_extraction_resumes_where_it_stopped() {
    let Some(gguf) = common::smollm2() else { return };
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("records.jsonl");
    let ledger = dir.path().join("records.jsonl.windows.jsonl");
    let windows = 3;
    let extract = |max_tokens: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_memkit"));
        command
            .args(["--no-progress", "--quiet", "extract", "--format", "locomo", "--dialogue", "conv-26", "--sessions", "1"])
            .arg("--input")
            .arg(memkit_data::shared_data_dir().join("locomo/locomo10.json"))
            .arg("--model")
            .arg(&gguf)
            .args(["--window", "6", "--overlap", "1", "--limit", &windows.to_string()])
            .args(["--batch", "1", "--threads", "1", "--max-tokens", max_tokens, "--max-memories", "3"])
            .arg("--output")
            .arg(&output)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command
    };

    let mut child = extract("160").spawn().unwrap();
    let started = Instant::now();
    while common::ledger_lines(&ledger).is_empty() {
        assert!(child.try_wait().unwrap().is_none(), "extract exited before finishing a window");
        assert!(started.elapsed() < Duration::from_secs(600), "no window finished in 10 minutes");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = window_ids(&common::ledger_lines(&ledger));
    assert!(!before.is_empty() && before.len() < windows, "killed after {} of {windows} windows", before.len());
    assert!(!output.exists(), "the records file is written only when every window is done");

    let run = extract("160").output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let after = window_ids(&common::ledger_lines(&ledger));
    assert_eq!(after.len(), windows, "each window exactly once: {after:?}");
    assert_eq!(&after[..before.len()], &before[..], "finished windows were kept, not redone");
    assert_eq!(after.iter().collect::<BTreeSet<_>>().len(), windows);

    // Every record points into one of the ledger's windows, and a third run (nothing left to
    // do, so no model is loaded) writes the same file.
    let records = std::fs::read_to_string(&output).unwrap();
    for line in records.lines() {
        let r: memkit_schema::MemoryRecord = serde_json::from_str(line).unwrap();
        assert!(after.contains(&r.pointer.window_id), "{} is not a ledger window", r.pointer.window_id);
    }
    let again = extract("160").output().unwrap();
    assert!(again.status.success());
    assert_eq!(std::fs::read_to_string(&output).unwrap(), records);
    assert_eq!(common::ledger_lines(&ledger).len(), windows);

    // Another model (here: other limits) may not append to this ledger.
    let other = extract("100").output().unwrap();
    assert!(!other.status.success());
    assert!(String::from_utf8_lossy(&other.stderr).contains("was written by another extractor"));
    assert_eq!(common::ledger_lines(&ledger).len(), windows, "a refused run leaves the ledger alone");
    // --restart starts the ledger over.
    let restarted = extract("100").arg("--restart").output().unwrap();
    assert!(restarted.status.success(), "{}", String::from_utf8_lossy(&restarted.stderr));
    let lines = common::ledger_lines(&ledger);
    assert_eq!(lines.len(), windows);
    assert!(lines.iter().all(|l| l.contains("max_tokens=100")), "{lines:?}");
}

/// `--reclean` cleans the replies a window ledger kept under today's policy, with no model: a
/// first-person record that grounding alone let through (the policy of an older ledger) is
/// dropped with its reason, the key names the new cleaning, and the records file is rewritten.
#[test]
fn reclean_cleans_the_kept_replies_again_without_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("records.jsonl");
    let ledger = dir.path().join("records.jsonl.windows.jsonl");
    // conv-26's first window; its message 2 is Melanie's "I'm swamped with the kids & work".
    let record = |content: &str| {
        serde_json::json!({"source_id": 2, "source_speaker": "Melanie", "content": content,
            "dimension": {"memory_type": "fact", "time": "", "location": "", "reason": "", "purpose": "", "keywords": []}})
    };
    let raw = serde_json::json!({"memories": [record("Melanie is swamped with the kids and work."), record("I am swamped with work.")]});
    let old = serde_json::json!({"extractor": "student.gguf (1 bytes, tail 0) max_memories=6 max_tokens=400 grounding=0.5/0.05/0.5/fields",
        "batch": 1, "extraction": {"window_id": "conv-26/w0", "records": [record("Melanie is swamped with the kids and work."),
        record("I am swamped with work.")], "errors": [], "raw": raw.to_string(),
        "usage": {"prompt_tokens": 10, "completion_tokens": 40, "millis": 900}}});
    std::fs::write(&ledger, format!("{old}\n")).unwrap();
    let reclean = |dialogue: &str| {
        Command::new(env!("CARGO_BIN_EXE_memkit"))
            .args(["--no-progress", "--quiet", "extract", "--format", "locomo", "--dialogue", dialogue, "--sessions", "1"])
            .arg("--input")
            .arg(memkit_data::shared_data_dir().join("locomo/locomo10.json"))
            .args(["--window", "6", "--overlap", "1", "--limit", "1", "--reclean", "--output"])
            .arg(&output)
            .output()
            .unwrap()
    };
    let run = reclean("conv-26");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let lines = common::ledger_lines(&ledger);
    assert_eq!(lines.len(), 1);
    let entry: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    let extractor = entry["extractor"].as_str().unwrap();
    assert!(extractor.starts_with("student.gguf (1 bytes, tail 0) max_memories=6 max_tokens=400 grounding="), "{extractor}");
    assert!(extractor.contains(" embedder="), "the key names the cleaning that ran: {extractor}");
    let reasons: Vec<&str> = entry["dropped"].as_array().unwrap().iter().map(|d| d["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons, ["first_person"]);
    let records = std::fs::read_to_string(&output).unwrap();
    assert_eq!(records.lines().count(), 1, "{records}");
    assert!(records.contains("Melanie is swamped"), "{records}");
    // Another dialogue: the ledger's conv-26 window is written back as it was, and the run's own
    // window, never extracted, is named.
    let other = reclean("conv-30");
    assert!(!other.status.success());
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(stderr.contains("not in the ledger (the first: conv-30/w0)"), "{stderr}");
    assert_eq!(common::ledger_lines(&ledger), lines);
}
