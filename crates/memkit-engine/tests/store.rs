//! The SQLite store: round trips, persistence (reopen and retrieve), schema-version refusal,
//! atomic writes.

use chrono::NaiveDate;
use memkit_engine::fusion::{TriPath, TriPathConfig};
use memkit_engine::hinge::NodeKind;
use memkit_engine::query::{QueryParser, RuleQueryParser};
use memkit_engine::store::{ChangeSet, IngestBatch, MemoryStore, SqliteStore, StoredNode, StoredWindow};
use memkit_engine::{Error, Retriever};
use memkit_schema::{Dialogue, Dimensions, Hyperedge, MemoryRecord, MemoryType, Pointer, Role, Session, Turn};

fn record(id: &str, content: &str, turns: &[&str]) -> MemoryRecord {
    MemoryRecord {
        id: id.into(),
        content: content.into(),
        memory_type: MemoryType::Episodic,
        dims: Dimensions {
            time: "2023-05-07".into(),
            location: "Paris".into(),
            reason: "a friend moved".into(),
            purpose: "to visit".into(),
            keywords: vec!["trip".into(), "Paris".into()],
        },
        pointer: Pointer {
            window_id: "d/w0".into(),
            turn_ids: turns.iter().map(|t| t.to_string()).collect(),
            speaker: "Ann".into(),
            timestamp: "2023-05-07T10:00:00".into(),
        },
    }
}

fn turn(id: &str, role: Role, text: &str, minute: u32) -> Turn {
    let speaker = if role == Role::User { "user" } else { "assistant" };
    Turn { timestamp: NaiveDate::from_ymd_opt(2023, 5, 7).unwrap().and_hms_opt(10, minute, 0), ..Turn::new(id, speaker, role, text) }
}

fn dialogue() -> Dialogue {
    Dialogue {
        id: "d".into(),
        sessions: vec![Session {
            id: "s1".into(),
            date: None,
            turns: vec![
                turn("s1:0", Role::User, "I am flying to Paris.", 0),
                turn("s1:1", Role::Assistant, "Visit the Louvre.", 1),
                turn("s1:2", Role::User, "Thanks!", 2),
            ],
        }],
    }
}

fn full_batch() -> IngestBatch {
    let mut batch = IngestBatch::from_dialogue(&dialogue());
    batch.records = vec![record("r1", "Ann flew to Paris.", &["s1:0"]), record("r2", "Ann thanked the assistant.", &["s1:2", "s1:0"])];
    batch.windows = vec![StoredWindow { id: "d/w0".into(), dialogue_id: "d".into(), text: "1.user: I am flying to Paris.".into() }];
    batch.hyperedges = vec![Hyperedge {
        id: "d/h0".into(),
        persons: vec!["user".into()],
        times: vec!["2023-05-07".into()],
        locations: vec!["Paris".into()],
        topics: vec!["trip".into()],
        description: "user: I am flying to Paris.".into(),
        boundary_reason: "start".into(),
        turn_ids: vec!["s1:0".into(), "s1:1".into(), "s1:2".into()],
        members: vec!["r1".into(), "r2".into()],
    }];
    batch
}

#[test]
fn everything_round_trips() {
    let mut store = SqliteStore::open_in_memory().unwrap();
    let batch = full_batch();
    store.ingest(&batch).unwrap();

    assert_eq!(store.list_records().unwrap(), batch.records);
    assert_eq!(store.get_record("r2").unwrap().as_ref(), Some(&batch.records[1]));
    assert_eq!(store.get_record("nope").unwrap(), None);
    let by_turn: Vec<String> = store.records_by_turn("d", "s1:0").unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(by_turn, ["r1", "r2"]);
    assert!(store.records_by_turn("d", "s1:1").unwrap().is_empty());

    assert_eq!(store.get_window("d/w0").unwrap().as_ref(), Some(&batch.windows[0]));
    assert_eq!(store.windows("d").unwrap(), batch.windows);
    assert_eq!(store.turns("d").unwrap(), batch.turns);
    assert_eq!(store.get_turn("d", "s1:1").unwrap().unwrap().role, Role::Assistant);
    let reply = store.assistant_reply("d", "s1:0").unwrap().unwrap();
    assert_eq!((reply.reply_turn_id.as_str(), reply.text.as_str()), ("s1:1", "Visit the Louvre."));
    assert_eq!(store.assistant_reply("d", "s1:2").unwrap(), None, "no reply follows the last user turn");
    assert_eq!(store.list_hyperedges().unwrap(), batch.hyperedges);

    let nodes = vec![
        StoredNode { kind: NodeKind::Person, name: "user".into(), salience: 1.0 },
        StoredNode { kind: NodeKind::Location, name: "paris".into(), salience: 0.75 },
    ];
    store.put_nodes(&nodes).unwrap();
    store.put_nodes(&nodes).unwrap(); // replaces, does not duplicate
    assert_eq!(store.list_nodes().unwrap(), nodes);
}

#[test]
fn embeddings_are_cached_per_model_and_dropped_with_their_text() {
    let mut store = SqliteStore::open_in_memory().unwrap();
    store.ingest(&full_batch()).unwrap();
    store.put_embeddings("m1", &[("r1".into(), vec![0.6, 0.8]), ("r2".into(), vec![1.0, 0.0])]).unwrap();
    store.put_embeddings("m2", &[("r1".into(), vec![0.0, 1.0, 0.0])]).unwrap();
    let got = store.get_embeddings("m1", &["r1", "r2", "r9"]).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got["r1"], [0.6, 0.8]);
    assert_eq!(store.get_embeddings("m2", &["r1"]).unwrap()["r1"], [0.0, 1.0, 0.0]);

    let mut changed = store.get_record("r1").unwrap().unwrap();
    changed.content = "Ann flew to Paris in May.".into();
    changed.pointer.turn_ids = vec!["s1:2".into()];
    assert!(store.update_record(&changed).unwrap());
    assert_eq!(store.get_record("r1").unwrap().unwrap(), changed);
    assert!(store.get_embeddings("m1", &["r1"]).unwrap().is_empty(), "stale vector dropped");
    assert_eq!(store.records_by_turn("d", "s1:2").unwrap().len(), 2, "turn index follows the update");
    assert_eq!(store.records_by_turn("d", "s1:0").unwrap().len(), 1);

    assert!(store.delete_record("r2").unwrap());
    assert!(!store.delete_record("r2").unwrap());
    assert!(store.get_embeddings("m1", &["r2"]).unwrap().is_empty());
    assert!(!store.update_record(&record("ghost", "x", &[])).unwrap());
}

#[test]
fn reopening_a_file_keeps_everything_and_uses_wal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.sqlite");
    {
        let mut store = SqliteStore::open(&path).unwrap();
        store.ingest(&full_batch()).unwrap();
        store.put_embeddings("m", &[("r1".into(), vec![0.25, -0.5])]).unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.path(), path);
    assert_eq!(store.list_records().unwrap(), full_batch().records);
    assert_eq!(store.get_embeddings("m", &["r1"]).unwrap()["r1"], [0.25, -0.5]);
    assert_eq!(store.assistant_reply("d", "s1:0").unwrap().unwrap().text, "Visit the Louvre.");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, memkit_engine::store::SCHEMA_VERSION);

    // Retrieval over what the reopened file holds: the record about thanking ranks first for
    // a question about it, and its pointer leads back to the stored source turn.
    let records = store.list_records().unwrap();
    let tri = TriPath::new(&records, TriPathConfig::default()).unwrap();
    let query = RuleQueryParser::new().parse("Who did Ann thank?", None).unwrap();
    let hits = tri.search(&query, 5).unwrap();
    let best = &records[hits[0].doc];
    assert_eq!(best.id, "r2", "{hits:?}");
    assert_eq!(store.get_turn(best.pointer.dialogue_id(), &best.pointer.turn_ids[0]).unwrap().unwrap().text, "Thanks!");
}

/// Two dialogues with the same turn ids (LoCoMo's conversations all start at `D1:1`) keep their
/// own turns, replies and record pointers; schema 1 overwrote the first dialogue's turns.
#[test]
fn dialogues_with_the_same_turn_ids_keep_their_own_turns() {
    let mut store = SqliteStore::open_in_memory().unwrap();
    store.ingest(&full_batch()).unwrap();
    let mut other = dialogue();
    other.id = "e".into();
    other.sessions[0].turns[0].text = "I am flying to Rome.".into();
    other.sessions[0].turns[1].text = "See the Colosseum.".into();
    let mut batch = IngestBatch::from_dialogue(&other);
    let mut r = record("r3", "Ann flew to Rome.", &["s1:0"]);
    r.pointer.window_id = "e/w0".into();
    batch.records = vec![r];
    store.ingest(&batch).unwrap();

    assert_eq!(store.get_turn("d", "s1:0").unwrap().unwrap().text, "I am flying to Paris.");
    assert_eq!(store.get_turn("e", "s1:0").unwrap().unwrap().text, "I am flying to Rome.");
    assert_eq!(store.assistant_reply("d", "s1:0").unwrap().unwrap().text, "Visit the Louvre.");
    assert_eq!(store.assistant_reply("e", "s1:0").unwrap().unwrap().text, "See the Colosseum.");
    let ids = |dialogue: &str| -> Vec<String> { store.records_by_turn(dialogue, "s1:0").unwrap().into_iter().map(|r| r.id).collect() };
    assert_eq!(ids("d"), ["r1", "r2"]);
    assert_eq!(ids("e"), ["r3"]);
    assert_eq!(store.turns("d").unwrap().len(), 3);
    assert_eq!(store.turns("e").unwrap().len(), 3);
}

#[test]
fn a_newer_schema_is_refused_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.sqlite");
    SqliteStore::open(&path).unwrap();
    rusqlite::Connection::open(&path).unwrap().pragma_update(None, "user_version", 99).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, Error::SchemaVersion { found: 99, expected: memkit_engine::store::SCHEMA_VERSION, .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("future.sqlite") && msg.contains("99"), "{msg}");
}

#[test]
fn a_failed_batch_writes_nothing() {
    let mut store = SqliteStore::open_in_memory().unwrap();
    let mut batch = full_batch();
    // The duplicate id fails the last insert, after turns, windows and one record would have
    // been written without a transaction.
    batch.records.push(record("r1", "duplicate", &["s1:0"]));
    let err = store.ingest(&batch).unwrap_err();
    assert!(matches!(err, Error::Store { .. }), "{err:?}");
    assert!(err.to_string().contains(":memory:"), "{err}");
    assert!(store.list_records().unwrap().is_empty());
    assert!(store.turns("d").unwrap().is_empty());
    assert!(store.get_window("d/w0").unwrap().is_none());
    assert!(store.list_hyperedges().unwrap().is_empty());

    store.ingest(&full_batch()).unwrap();
    let before = store.list_records().unwrap();
    let changes = ChangeSet {
        deletes: vec!["r1".into()],
        updates: vec![],
        inserts: vec![record("r3", "new", &[]), record("r2", "clashes with an existing id", &[])],
    };
    assert!(store.apply(&changes).is_err());
    assert_eq!(store.list_records().unwrap(), before, "the delete was rolled back too");
    let missing = ChangeSet { updates: vec![record("ghost", "x", &[])], ..Default::default() };
    let err = store.apply(&missing).unwrap_err();
    assert!(err.to_string().contains("ghost"), "{err}");
}

#[test]
fn a_corrupt_vector_is_reported_with_its_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.sqlite");
    let mut store = SqliteStore::open(&path).unwrap();
    store.ingest(&full_batch()).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("INSERT INTO embeddings (record_id, model_id, vector) VALUES ('r1', 'm', x'0102')", []).unwrap();
    let err = store.get_embeddings("m", &["r1"]).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("m.sqlite") && err.to_string().contains("r1"), "{err}");
}
