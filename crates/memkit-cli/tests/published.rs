//! Every published extractor in `checkpoints/` runs on a models directory that has only its base:
//! `memkit extract --model <name>` builds the model from base + delta on first use, and extracts
//! grounded records from a LoCoMo session (each points at a turn of that session and names that
//! turn's speaker).
//!
//! Uses the real binary, the committed extractors, the real SmolLM2-135M (skipped unless
//! installed, failing when `MEMKIT_REQUIRE_MODELS=1`) and the real LoCoMo file.

mod common;

use std::collections::HashMap;
use std::process::Command;

#[test]
fn published_extractors_build_from_their_base_and_extract_grounded_records() {
    let Some(gguf) = common::smollm2() else { return };
    let published = memkit_infer::published::list();
    assert!(!published.is_empty(), "{} holds no published extractor", memkit_infer::published::checkpoints_dir().display());
    let locomo = memkit_data::shared_data_dir().join("locomo/locomo10.json");
    let data: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&locomo).unwrap()).unwrap();
    let conversation = &data.as_array().unwrap().iter().find(|d| d["sample_id"] == "conv-26").unwrap()["conversation"];
    let speakers: HashMap<&str, &str> = conversation["session_1"]
        .as_array()
        .unwrap()
        .iter()
        .map(|turn| (turn["dia_id"].as_str().unwrap(), turn["speaker"].as_str().unwrap()))
        .collect();

    for extractor in published {
        assert_eq!(extractor.manifest.base, memkit_infer::models::SMOLLM2_135M.name, "CI fetches only this base");
        // A models directory with the base alone, as a fresh machine has after `memkit models fetch`.
        let models = tempfile::tempdir().unwrap();
        let base_dir = gguf.parent().unwrap();
        std::os::unix::fs::symlink(base_dir, models.path().join(memkit_infer::models::SMOLLM2_135M.name)).unwrap();
        let out = tempfile::tempdir().unwrap();
        let records = out.path().join("records.jsonl");
        let run = Command::new(env!("CARGO_BIN_EXE_memkit"))
            .env(memkit_infer::models::MODELS_DIR_ENV, models.path())
            .args(["--no-progress", "extract", "--format", "locomo", "--dialogue", "conv-26", "--sessions", "1"])
            .arg("--input")
            .arg(&locomo)
            .args(["--model", &extractor.name, "--limit", "12", "--threads", "2", "--output"])
            .arg(&records)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{}: {stderr}", extractor.name);
        assert!(stderr.contains("built the published extractor"), "{}: the first use builds it: {stderr}", extractor.name);
        let built = std::fs::read_dir(models.path().join("extractors")).unwrap().count();
        assert_eq!(built, 1, "one merged checkpoint in the models directory, no leftovers");

        let lines = common::ledger_lines(&records);
        assert!(!lines.is_empty(), "{} wrote no record from 12 windows of conv-26 session 1", extractor.name);
        for line in lines {
            let record: memkit_schema::MemoryRecord = serde_json::from_str(&line).unwrap();
            assert!(!record.content.trim().is_empty(), "{line}");
            assert!(!record.pointer.turn_ids.is_empty(), "a record points at its source turn: {line}");
            for turn in &record.pointer.turn_ids {
                let speaker = speakers.get(turn.as_str()).unwrap_or_else(|| panic!("{turn} is not a turn of session 1: {line}"));
                assert_eq!(&record.pointer.speaker, speaker, "the record names its turn's speaker: {line}");
            }
        }
    }
}
