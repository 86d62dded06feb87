//! `memkit ingest --records`: records of dialogues that are not loaded are not stored, and the
//! command says how many (real binary, real LoCoMo file, a real SQLite database).

use std::process::Command;

#[test]
fn records_of_dialogues_not_loaded_are_counted_not_dropped_silently() {
    let dir = tempfile::tempdir().unwrap();
    let (records, db) = (dir.path().join("records.jsonl"), dir.path().join("memory.sqlite"));
    let record = |id: &str, window: &str, turn: &str| {
        serde_json::json!({
            "id": id, "content": "Caroline went to a support group.", "type": "episodic",
            "pointer": {"window_id": window, "turn_ids": [turn], "speaker": "Caroline"}
        })
    };
    let lines = [record("a", "conv-26/w0", "D1:3"), record("b", "conv-30/w0", "D1:1"), record("c", "conv-30/w1", "D1:9")];
    std::fs::write(&records, lines.map(|l| l.to_string() + "\n").concat()).unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_memkit"))
        .args(["--no-progress", "ingest", "--format", "locomo", "--dialogue", "conv-26", "--sessions", "1"])
        .arg("--input")
        .arg(memkit_data::shared_data_dir().join("locomo/locomo10.json"))
        .arg("--db")
        .arg(&db)
        .arg("--records")
        .arg(&records)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("2 of 3 records belong to no dialogue loaded here"), "{stderr}");
    assert!(stderr.contains("first_window=\"conv-30/w0\"") || stderr.contains("first_window=conv-30/w0"), "{stderr}");
    assert!(stderr.contains("new_records=1"), "{stderr}");
}
