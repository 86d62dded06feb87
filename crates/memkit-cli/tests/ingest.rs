//! `memkit ingest` and `memkit query` on the real binary, the real LoCoMo file and a real SQLite
//! database: records of dialogues that are not loaded are counted, and a query runs the dense
//! route when the embedder is installed.

use std::path::Path;
use std::process::{Command, Output};

fn memkit(args: &[&str], db: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memkit")).arg("--no-progress").args(args).arg("--db").arg(db).output().unwrap()
}

#[test]
fn query_runs_the_dense_route_when_the_embedder_is_installed() {
    let Some(minilm) = memkit_infer::models::installed_for_tests(memkit_infer::models::ALL_MINILM_L6_V2.name) else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.sqlite");
    let locomo = memkit_data::shared_data_dir().join("locomo/locomo10.json");
    let out =
        memkit(&["ingest", "--format", "locomo", "--dialogue", "conv-26", "--sessions", "1", "--input", locomo.to_str().unwrap()], &db);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let question = "When did Caroline go to the LGBTQ support group?";
    let query = |extra: &[&str]| {
        let mut args = vec!["query", question, "--json", "--embedder-dir", minilm.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = memkit(&args, &db);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let contents: Vec<String> =
            json["hits"].as_array().unwrap().iter().map(|h| h["record"]["content"].as_str().unwrap().to_owned()).collect();
        (contents, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (dense, stderr) = query(&[]);
    assert!(!stderr.contains("dense route off"), "{stderr}");
    assert!(dense.iter().any(|c| c.contains("support group")), "{dense:?}");
    // The dense route embedded every record and cached the vectors in the database.
    use memkit_engine::dense::document_cache_key;
    use memkit_engine::store::{MemoryStore, SqliteStore};
    let store = SqliteStore::open(&db).unwrap();
    let records = store.list_records().unwrap();
    let ids: Vec<&str> = records.iter().map(|r| r.id.as_str()).collect();
    let model_id = memkit_infer::SentenceEmbedder::load(&minilm).unwrap().model_id().to_owned();
    assert_eq!(store.get_embeddings(&document_cache_key(&model_id), &ids).unwrap().len(), records.len());
    // The second query reads the record vectors the first one cached: the same answer.
    assert_eq!(query(&[]).0, dense);
    let (_, stderr) = query(&["--no-dense"]);
    assert!(!stderr.contains("dense route off"), "--no-dense says nothing: {stderr}");
}

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
        .arg("--records-only")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("2 of 3 records belong to no dialogue loaded here"), "{stderr}");
    assert!(stderr.contains("first_window=\"conv-30/w0\"") || stderr.contains("first_window=conv-30/w0"), "{stderr}");
    assert!(stderr.contains("new_records=1"), "{stderr}");
}

/// By default the given records go in beside the rule sentences, so every turn keeps keys; the
/// query finds the extractor's record, and by default (--read sentence) prints under it the
/// turn's sentence it shares most words with, once; with --read source its source turn, once;
/// with --read record nothing more.
#[test]
fn given_records_are_stored_beside_the_rule_sentences_and_read_with_their_source() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    let locomo = memkit_data::shared_data_dir().join("locomo/locomo10.json");
    // D1:3 of conv-26 is Caroline's "I went to a LGBTQ support group yesterday and it was so powerful."
    let record = serde_json::json!({
        "id": "x", "content": "Caroline attended an LGBTQ support group on 7 May 2023.", "type": "episodic",
        "dims": {"time": "2023-05-07", "keywords": ["LGBTQ", "support group"]},
        "pointer": {"window_id": "conv-26/w1", "turn_ids": ["D1:3"], "speaker": "Caroline"}
    });
    std::fs::write(&records, format!("{record}\n")).unwrap();
    let ingest = |extra: &[&str]| {
        let db = dir.path().join(format!("m{}.sqlite", extra.len()));
        let mut args =
            vec!["ingest", "--format", "locomo", "--dialogue", "conv-26", "--sessions", "1", "--input", locomo.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = memkit(&args, &db);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        use memkit_engine::store::{MemoryStore, SqliteStore};
        (SqliteStore::open(&db).unwrap().list_records().unwrap().len(), db)
    };
    let (sentences, _) = ingest(&[]);
    let (both, both_db) = ingest(&["--records", records.to_str().unwrap()]);
    assert_eq!(both, sentences + 1);

    let query = |read: &[&str]| {
        let question = "When did Caroline go to the LGBTQ support group?";
        let mut args = vec!["query", question, "--json", "--no-dense"];
        args.extend_from_slice(read);
        let out = memkit(&args, &both_db);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let json = query(&["--read", "source"]);
    let hits = json["hits"].as_array().unwrap();
    let turns: Vec<&str> =
        hits.iter().flat_map(|h| h["record"]["pointer"]["turn_ids"].as_array().unwrap()).map(|t| t.as_str().unwrap()).collect();
    assert_eq!(turns.iter().filter(|&&t| t == "D1:3").count(), 1, "each turn once: {turns:?}");
    let hit = hits.iter().find(|h| h["record"]["pointer"]["turn_ids"][0] == "D1:3").unwrap();
    let source = hit["read"][0].as_str().unwrap();
    assert!(source.starts_with("[2023-05-08] Caroline: I went to a LGBTQ support group yesterday"), "{source}");

    // The default reading.
    let json = query(&[]);
    let hits = json["hits"].as_array().unwrap();
    let read: Vec<&str> = hits.iter().map(|h| h["read"][0].as_str().unwrap()).collect();
    let unique: std::collections::HashSet<&&str> = read.iter().collect();
    assert_eq!(unique.len(), read.len(), "each sentence once: {read:?}");
    // The extractor's record and the rule sentence of D1:3 read the same sentence: one hit.
    let d13: Vec<&serde_json::Value> = hits.iter().filter(|h| h["record"]["pointer"]["turn_ids"][0] == "D1:3").collect();
    assert_eq!(d13.len(), 1, "{read:?}");
    let sentence = d13[0]["read"][0].as_str().unwrap();
    assert!(sentence.starts_with("[2023-05-08] Caroline said: I went to a LGBTQ support group yesterday"), "{sentence}");
    assert_eq!(query(&["--read", "sentence"]), json);

    let json = query(&["--read", "record"]);
    let hits = json["hits"].as_array().unwrap();
    assert!(hits.iter().any(|h| h["record"]["content"] == "Caroline attended an LGBTQ support group on 7 May 2023."), "{json}");
    assert!(hits.iter().all(|h| h["read"].as_array().unwrap().is_empty()), "{json}");
}
