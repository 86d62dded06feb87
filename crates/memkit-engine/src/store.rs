//! Persistent memory: records, windows, source turns, assistant replies, embeddings, hyperedges.
//!
//! [`MemoryStore`] is the interface the rest of the engine uses, so a server database can replace
//! SQLite later; [`SqliteStore`] is the embedded implementation. Every write runs in one
//! transaction (a whole [`IngestBatch`] or [`ChangeSet`] is one), so a failure leaves the file as
//! it was. The schema version lives in `PRAGMA user_version`; a file written by a newer build is
//! refused instead of being silently misread.
//!
//! ```
//! use memkit_engine::store::{IngestBatch, MemoryStore, SqliteStore};
//! use memkit_schema::{MemoryRecord, MemoryType};
//!
//! let mut store = SqliteStore::open_in_memory().unwrap();
//! let record = MemoryRecord {
//!     id: "r1".into(),
//!     content: "Ann adopted a dog.".into(),
//!     memory_type: MemoryType::Episodic,
//!     dims: Default::default(),
//!     pointer: Default::default(),
//! };
//! store.ingest(&IngestBatch { records: vec![record.clone()], ..Default::default() }).unwrap();
//! assert_eq!(store.get_record("r1").unwrap(), Some(record));
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use chrono::NaiveDateTime;
use memkit_schema::{Dialogue, Dimensions, Hyperedge, MemoryRecord, MemoryType, Pointer, Role, Session, Turn};
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::{Deserialize, Serialize};

use crate::hinge::NodeKind;
use crate::{Error, Result};

/// The schema version this build reads and writes (`PRAGMA user_version`). 2: turns, replies
/// and record pointers are keyed by dialogue and turn id (version 1 keyed turns by turn id alone,
/// so two dialogues with the same turn ids, as LoCoMo's conversations have, overwrote each
/// other's turns).
pub const SCHEMA_VERSION: i64 = 2;

/// A rendered extraction window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredWindow {
    /// Window id (memkit-data's `Window::id`).
    pub id: String,
    /// Dialogue the window belongs to.
    pub dialogue_id: String,
    /// The window as the extractor saw it.
    pub text: String,
}

/// One source message, kept so a record's pointer can fetch the original turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceTurn {
    /// Dataset turn id (`D3:7`).
    pub turn_id: String,
    /// Dialogue the turn belongs to.
    pub dialogue_id: String,
    /// Speaker name.
    pub speaker: String,
    /// User or assistant.
    pub role: Role,
    /// Message text.
    pub text: String,
    /// Message time, when known.
    pub timestamp: Option<NaiveDateTime>,
}

/// The assistant reply that directly followed a user turn (for assistant recall).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssistantReply {
    /// The dialogue both turns belong to.
    pub dialogue_id: String,
    /// The user turn the reply answers.
    pub turn_id: String,
    /// The assistant turn's own id.
    pub reply_turn_id: String,
    /// The reply text.
    pub text: String,
}

impl AssistantReply {
    /// The assistant reply that directly follows each user turn of a dialogue, within a session
    /// (what the store keeps for assistant recall).
    pub fn of_dialogue(dialogue: &Dialogue) -> Vec<Self> {
        let mut out = Vec::new();
        for session in &dialogue.sessions {
            for pair in session.turns.windows(2) {
                if let [turn, next] = pair
                    && turn.role == Role::User
                    && next.role == Role::Assistant
                {
                    out.push(Self {
                        dialogue_id: dialogue.id.clone(),
                        turn_id: turn.id.clone(),
                        reply_turn_id: next.id.clone(),
                        text: next.text.clone(),
                    });
                }
            }
        }
        out
    }
}

/// A HingeMem element node with its salience.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredNode {
    /// Person, time, location or topic.
    pub kind: NodeKind,
    /// Node name (normalised as the index writes it).
    pub name: String,
    /// Salience in `[0, 1]`.
    pub salience: f32,
}

/// Everything one ingestion writes; stored in one transaction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IngestBatch {
    /// New records; an id that already exists fails the whole batch.
    pub records: Vec<MemoryRecord>,
    /// Windows (replaced when the id exists).
    pub windows: Vec<StoredWindow>,
    /// Source turns (replaced when the id exists).
    pub turns: Vec<SourceTurn>,
    /// Assistant replies keyed by the user turn (replaced when it exists).
    pub replies: Vec<AssistantReply>,
    /// Hyperedges (replaced when the id exists).
    pub hyperedges: Vec<Hyperedge>,
}

impl IngestBatch {
    /// The source turns of a dialogue and, for each user turn directly followed by an assistant
    /// turn in the same session, that reply.
    pub fn from_dialogue(dialogue: &Dialogue) -> Self {
        let mut batch = IngestBatch { replies: AssistantReply::of_dialogue(dialogue), ..IngestBatch::default() };
        for turn in dialogue.turns() {
            batch.turns.push(SourceTurn {
                turn_id: turn.id.clone(),
                dialogue_id: dialogue.id.clone(),
                speaker: turn.speaker.clone(),
                role: turn.role,
                text: turn.text.clone(),
                timestamp: turn.timestamp,
            });
        }
        batch
    }
}

/// Record changes applied together in one transaction (what an update pass decides).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChangeSet {
    /// Ids of records to delete.
    pub deletes: Vec<String>,
    /// Existing records to overwrite (matched by id).
    pub updates: Vec<MemoryRecord>,
    /// New records to insert.
    pub inserts: Vec<MemoryRecord>,
}

impl ChangeSet {
    /// True when there is nothing to apply.
    pub fn is_empty(&self) -> bool {
        self.deletes.is_empty() && self.updates.is_empty() && self.inserts.is_empty()
    }
}

/// The storage interface of the engine.
///
/// Reads take `&self`, writes `&mut self`. Every write method is atomic. Records are listed in
/// insertion order.
pub trait MemoryStore {
    /// Writes a batch in one transaction; nothing is written when any part fails.
    fn ingest(&mut self, batch: &IngestBatch) -> Result<()>;
    /// One record by id.
    fn get_record(&self, id: &str) -> Result<Option<MemoryRecord>>;
    /// Records whose pointer names the given turn of the given dialogue.
    fn records_by_turn(&self, dialogue_id: &str, turn_id: &str) -> Result<Vec<MemoryRecord>>;
    /// Overwrites an existing record; `false` when no record has that id. Drops the record's
    /// cached embeddings because its text may have changed.
    fn update_record(&mut self, record: &MemoryRecord) -> Result<bool>;
    /// Deletes a record and its embeddings; `false` when no record has that id.
    fn delete_record(&mut self, id: &str) -> Result<bool>;
    /// All records in insertion order.
    fn list_records(&self) -> Result<Vec<MemoryRecord>>;
    /// Applies deletes, then updates, then inserts, in one transaction. Fails (writing nothing)
    /// when an update or delete names a missing record or an insert reuses an id.
    fn apply(&mut self, changes: &ChangeSet) -> Result<()>;
    /// One window by id.
    fn get_window(&self, id: &str) -> Result<Option<StoredWindow>>;
    /// The windows of a dialogue, in insertion order.
    fn windows(&self, dialogue_id: &str) -> Result<Vec<StoredWindow>>;
    /// One source turn by dialogue and dataset turn id (turn ids repeat across dialogues).
    fn get_turn(&self, dialogue_id: &str, turn_id: &str) -> Result<Option<SourceTurn>>;
    /// The turns of a dialogue, in insertion order.
    fn turns(&self, dialogue_id: &str) -> Result<Vec<SourceTurn>>;
    /// A dialogue as the store holds it: its turns in order, in one session (the store keeps
    /// neither session boundaries nor photo captions).
    fn dialogue(&self, dialogue_id: &str) -> Result<Dialogue> {
        let turns = self
            .turns(dialogue_id)?
            .into_iter()
            .map(|t| Turn { timestamp: t.timestamp, ..Turn::new(t.turn_id, t.speaker, t.role, t.text) })
            .collect();
        Ok(Dialogue { id: dialogue_id.to_string(), sessions: vec![Session { id: String::new(), date: None, turns }] })
    }
    /// The assistant reply that followed a user turn of a dialogue.
    fn assistant_reply(&self, dialogue_id: &str, turn_id: &str) -> Result<Option<AssistantReply>>;
    /// Caches embeddings of records for one model (replacing older vectors).
    fn put_embeddings(&mut self, model_id: &str, vectors: &[(String, Vec<f32>)]) -> Result<()>;
    /// Cached embeddings of the given records for one model; missing ids are absent.
    fn get_embeddings(&self, model_id: &str, record_ids: &[&str]) -> Result<HashMap<String, Vec<f32>>>;
    /// All hyperedges in insertion order.
    fn list_hyperedges(&self) -> Result<Vec<Hyperedge>>;
    /// Replaces the whole node table (salience is recomputed globally, so it is rewritten whole).
    fn put_nodes(&mut self, nodes: &[StoredNode]) -> Result<()>;
    /// All nodes, sorted by kind ([`NodeKind`] order) and name.
    fn list_nodes(&self) -> Result<Vec<StoredNode>>;
}

const SCHEMA: &str = r#"
CREATE TABLE records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    content TEXT NOT NULL,
    memory_type TEXT NOT NULL,
    time TEXT NOT NULL,
    location TEXT NOT NULL,
    reason TEXT NOT NULL,
    purpose TEXT NOT NULL,
    keywords TEXT NOT NULL,
    window_id TEXT NOT NULL,
    turn_ids TEXT NOT NULL,
    speaker TEXT NOT NULL,
    timestamp TEXT NOT NULL
);
CREATE TABLE record_turns (
    record_id TEXT NOT NULL REFERENCES records(id) ON DELETE CASCADE,
    dialogue_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    PRIMARY KEY (record_id, turn_id)
);
CREATE INDEX record_turns_turn ON record_turns(dialogue_id, turn_id);
CREATE TABLE windows (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    dialogue_id TEXT NOT NULL,
    text TEXT NOT NULL
);
CREATE INDEX windows_dialogue ON windows(dialogue_id);
CREATE TABLE turns (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    turn_id TEXT NOT NULL,
    dialogue_id TEXT NOT NULL,
    speaker TEXT NOT NULL,
    role TEXT NOT NULL,
    text TEXT NOT NULL,
    timestamp TEXT,
    UNIQUE (dialogue_id, turn_id)
);
CREATE INDEX turns_dialogue ON turns(dialogue_id);
CREATE TABLE replies (
    dialogue_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    reply_turn_id TEXT NOT NULL,
    text TEXT NOT NULL,
    PRIMARY KEY (dialogue_id, turn_id)
);
CREATE TABLE embeddings (
    record_id TEXT NOT NULL REFERENCES records(id) ON DELETE CASCADE,
    model_id TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (record_id, model_id)
);
CREATE TABLE hyperedges (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL
);
CREATE TABLE nodes (
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    salience REAL NOT NULL,
    PRIMARY KEY (kind, name)
);
"#;

const RECORD_COLUMNS: &str = "id, content, memory_type, time, location, reason, purpose, keywords, window_id, turn_ids, speaker, timestamp";

/// SQLite implementation of [`MemoryStore`] (WAL mode for files).
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.path).finish()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) a store file. Refuses files written by a newer schema.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let conn = Connection::open(&path).map_err(|source| Error::Store { path: path.clone(), source })?;
        Self::init(conn, path)
    }

    /// A fresh store in memory (tests, one-off evaluation runs).
    pub fn open_in_memory() -> Result<Self> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|source| Error::Store { path: path.clone(), source })?;
        Self::init(conn, path)
    }

    /// The database file (`:memory:` for in-memory stores).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn init(mut conn: Connection, path: PathBuf) -> Result<Self> {
        let wrap = |source| Error::Store { path: path.clone(), source };
        let found: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(wrap)?;
        if found != 0 && found != SCHEMA_VERSION {
            return Err(Error::SchemaVersion { path, found, expected: SCHEMA_VERSION });
        }
        // WAL lets readers (an eval run) proceed while an ingest writes; in-memory databases
        // answer "memory" and that is fine.
        let _mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)).map_err(wrap)?;
        conn.pragma_update(None, "foreign_keys", true).map_err(wrap)?;
        if found == 0 {
            let tx = conn.transaction().map_err(wrap)?;
            tx.execute_batch(SCHEMA).map_err(wrap)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(wrap)?;
            tx.commit().map_err(wrap)?;
            tracing::debug!(path = %path.display(), "created memory store");
        }
        Ok(SqliteStore { conn, path })
    }

    fn wrap(&self) -> impl Fn(rusqlite::Error) -> Error + '_ {
        |source| Error::Store { path: self.path.clone(), source }
    }

    fn corrupt(&self, key: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Corrupt { path: self.path.clone(), key: key.into(), message: message.into() }
    }

    /// Runs `f` inside one transaction; rolls back on any error.
    fn write<T>(&mut self, f: impl FnOnce(&Transaction<'_>, &Path) -> Result<T>) -> Result<T> {
        let path = self.path.clone();
        let wrap = |source| Error::Store { path: path.clone(), source };
        let tx = self.conn.transaction().map_err(wrap)?;
        // Dropping `tx` without commit rolls back, so an early return leaves nothing behind.
        let out = f(&tx, &path)?;
        tx.commit().map_err(wrap)?;
        Ok(out)
    }

    fn query_records(&self, sql: &str, param: Option<&str>) -> Result<Vec<MemoryRecord>> {
        match param {
            Some(p) => self.query_records_with(sql, [p]),
            None => self.query_records_with(sql, []),
        }
    }

    fn query_records_with(&self, sql: &str, params: impl rusqlite::Params) -> Result<Vec<MemoryRecord>> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(self.wrap())?;
        let rows = stmt.query_map(params, raw_record).map_err(self.wrap())?;
        let mut out = Vec::new();
        for row in rows {
            out.push(self.decode_record(row.map_err(self.wrap())?)?);
        }
        Ok(out)
    }

    fn decode_record(&self, raw: RawRecord) -> Result<MemoryRecord> {
        let memory_type: MemoryType = raw.memory_type.parse().map_err(|e| self.corrupt(format!("records/{}", raw.id), format!("{e}")))?;
        let list = |field: &str, text: &str| -> Result<Vec<String>> {
            serde_json::from_str(text).map_err(|e| self.corrupt(format!("records/{}", raw.id), format!("{field}: {e}")))
        };
        Ok(MemoryRecord {
            content: raw.content,
            memory_type,
            dims: Dimensions {
                time: raw.time,
                location: raw.location,
                reason: raw.reason,
                purpose: raw.purpose,
                keywords: list("keywords", &raw.keywords)?,
            },
            pointer: Pointer {
                window_id: raw.window_id,
                turn_ids: list("turn_ids", &raw.turn_ids)?,
                speaker: raw.speaker,
                timestamp: raw.timestamp,
            },
            id: raw.id,
        })
    }
}

struct RawRecord {
    id: String,
    content: String,
    memory_type: String,
    time: String,
    location: String,
    reason: String,
    purpose: String,
    keywords: String,
    window_id: String,
    turn_ids: String,
    speaker: String,
    timestamp: String,
}

fn raw_record(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRecord> {
    Ok(RawRecord {
        id: r.get(0)?,
        content: r.get(1)?,
        memory_type: r.get(2)?,
        time: r.get(3)?,
        location: r.get(4)?,
        reason: r.get(5)?,
        purpose: r.get(6)?,
        keywords: r.get(7)?,
        window_id: r.get(8)?,
        turn_ids: r.get(9)?,
        speaker: r.get(10)?,
        timestamp: r.get(11)?,
    })
}

fn json_list(items: &[String]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".into())
}

/// Runs `stmt` with the record's values bound in [`RECORD_COLUMNS`] order (`?1` … `?12`).
fn execute_with_record(mut stmt: rusqlite::CachedStatement<'_>, r: &MemoryRecord) -> rusqlite::Result<usize> {
    stmt.execute(params![
        r.id,
        r.content,
        r.memory_type.as_str(),
        r.dims.time,
        r.dims.location,
        r.dims.reason,
        r.dims.purpose,
        json_list(&r.dims.keywords),
        r.pointer.window_id,
        json_list(&r.pointer.turn_ids),
        r.pointer.speaker,
        r.pointer.timestamp,
    ])
}

fn insert_record(tx: &Transaction<'_>, r: &MemoryRecord) -> rusqlite::Result<()> {
    let sql = format!("INSERT INTO records ({RECORD_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)");
    execute_with_record(tx.prepare_cached(&sql)?, r)?;
    insert_record_turns(tx, r)
}

fn insert_record_turns(tx: &Transaction<'_>, r: &MemoryRecord) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare_cached("INSERT OR IGNORE INTO record_turns (record_id, dialogue_id, turn_id) VALUES (?1, ?2, ?3)")?;
    for t in &r.pointer.turn_ids {
        stmt.execute(params![r.id, r.pointer.dialogue_id(), t])?;
    }
    Ok(())
}

/// Returns whether a row was updated.
fn update_record_tx(tx: &Transaction<'_>, r: &MemoryRecord) -> rusqlite::Result<bool> {
    let n = execute_with_record(
        tx.prepare_cached(
            "UPDATE records SET content = ?2, memory_type = ?3, time = ?4, location = ?5, reason = ?6, purpose = ?7, \
             keywords = ?8, window_id = ?9, turn_ids = ?10, speaker = ?11, timestamp = ?12 WHERE id = ?1",
        )?,
        r,
    )?;
    if n == 0 {
        return Ok(false);
    }
    tx.prepare_cached("DELETE FROM record_turns WHERE record_id = ?1")?.execute([&r.id])?;
    // The cached vectors describe the old text.
    tx.prepare_cached("DELETE FROM embeddings WHERE record_id = ?1")?.execute([&r.id])?;
    insert_record_turns(tx, r)?;
    Ok(true)
}

/// Returns whether a row was deleted (turn links and embeddings cascade).
fn delete_record_tx(tx: &Transaction<'_>, id: &str) -> rusqlite::Result<bool> {
    Ok(tx.prepare_cached("DELETE FROM records WHERE id = ?1")?.execute([id])? > 0)
}

fn role_str(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

const TIMESTAMP_FORMAT: &str = "%Y-%m-%dT%H:%M:%S";

/// Encodes a vector as a little-endian f32 blob.
pub fn encode_vector(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Decodes a little-endian f32 blob; `None` when its length is not a multiple of 4.
pub fn decode_vector(bytes: &[u8]) -> Option<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    Some(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

impl MemoryStore for SqliteStore {
    #[tracing::instrument(skip_all, fields(records = batch.records.len(), turns = batch.turns.len()))]
    fn ingest(&mut self, batch: &IngestBatch) -> Result<()> {
        self.write(|tx, path| {
            let wrap = |source| Error::Store { path: path.to_path_buf(), source };
            for r in &batch.records {
                insert_record(tx, r).map_err(wrap)?;
            }
            let mut w = tx
                .prepare_cached(
                    "INSERT INTO windows (id, dialogue_id, text) VALUES (?1, ?2, ?3) \
                     ON CONFLICT(id) DO UPDATE SET dialogue_id = excluded.dialogue_id, text = excluded.text",
                )
                .map_err(wrap)?;
            for win in &batch.windows {
                w.execute(params![win.id, win.dialogue_id, win.text]).map_err(wrap)?;
            }
            let mut t = tx
                .prepare_cached(
                    "INSERT INTO turns (turn_id, dialogue_id, speaker, role, text, timestamp) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                     ON CONFLICT(dialogue_id, turn_id) DO UPDATE SET speaker = excluded.speaker, \
                     role = excluded.role, text = excluded.text, timestamp = excluded.timestamp",
                )
                .map_err(wrap)?;
            for turn in &batch.turns {
                let ts = turn.timestamp.map(|t| t.format(TIMESTAMP_FORMAT).to_string());
                t.execute(params![turn.turn_id, turn.dialogue_id, turn.speaker, role_str(turn.role), turn.text, ts]).map_err(wrap)?;
            }
            let mut rp = tx
                .prepare_cached("INSERT OR REPLACE INTO replies (dialogue_id, turn_id, reply_turn_id, text) VALUES (?1, ?2, ?3, ?4)")
                .map_err(wrap)?;
            for r in &batch.replies {
                rp.execute(params![r.dialogue_id, r.turn_id, r.reply_turn_id, r.text]).map_err(wrap)?;
            }
            let mut h = tx
                .prepare_cached("INSERT INTO hyperedges (id, body) VALUES (?1, ?2) ON CONFLICT(id) DO UPDATE SET body = excluded.body")
                .map_err(wrap)?;
            for e in &batch.hyperedges {
                let body = serde_json::to_string(e).unwrap_or_default();
                h.execute(params![e.id, body]).map_err(wrap)?;
            }
            Ok(())
        })
    }

    fn get_record(&self, id: &str) -> Result<Option<MemoryRecord>> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM records WHERE id = ?1");
        Ok(self.query_records(&sql, Some(id))?.pop())
    }

    fn records_by_turn(&self, dialogue_id: &str, turn_id: &str) -> Result<Vec<MemoryRecord>> {
        let cols = RECORD_COLUMNS.split(", ").map(|c| format!("r.{c}")).collect::<Vec<_>>().join(", ");
        let sql = format!(
            "SELECT {cols} FROM records r JOIN record_turns t ON t.record_id = r.id WHERE t.dialogue_id = ?1 AND t.turn_id = ?2 ORDER BY r.seq"
        );
        self.query_records_with(&sql, params![dialogue_id, turn_id])
    }

    fn update_record(&mut self, record: &MemoryRecord) -> Result<bool> {
        self.write(|tx, path| update_record_tx(tx, record).map_err(|source| Error::Store { path: path.to_path_buf(), source }))
    }

    fn delete_record(&mut self, id: &str) -> Result<bool> {
        self.write(|tx, path| delete_record_tx(tx, id).map_err(|source| Error::Store { path: path.to_path_buf(), source }))
    }

    fn list_records(&self) -> Result<Vec<MemoryRecord>> {
        self.query_records(&format!("SELECT {RECORD_COLUMNS} FROM records ORDER BY seq"), None)
    }

    #[tracing::instrument(skip_all, fields(deletes = changes.deletes.len(), updates = changes.updates.len(), inserts = changes.inserts.len()))]
    fn apply(&mut self, changes: &ChangeSet) -> Result<()> {
        self.write(|tx, path| {
            let wrap = |source| Error::Store { path: path.to_path_buf(), source };
            let missing = |id: &str, what: &str| Error::Corrupt {
                path: path.to_path_buf(),
                key: format!("records/{id}"),
                message: format!("cannot {what}: no such record"),
            };
            for id in &changes.deletes {
                if !delete_record_tx(tx, id).map_err(wrap)? {
                    return Err(missing(id, "delete"));
                }
            }
            for r in &changes.updates {
                if !update_record_tx(tx, r).map_err(wrap)? {
                    return Err(missing(&r.id, "update"));
                }
            }
            for r in &changes.inserts {
                insert_record(tx, r).map_err(wrap)?;
            }
            Ok(())
        })
    }

    fn get_window(&self, id: &str) -> Result<Option<StoredWindow>> {
        self.conn
            .prepare_cached("SELECT id, dialogue_id, text FROM windows WHERE id = ?1")
            .and_then(|mut s| s.query_row([id], |r| Ok(StoredWindow { id: r.get(0)?, dialogue_id: r.get(1)?, text: r.get(2)? })).optional())
            .map_err(self.wrap())
    }

    fn windows(&self, dialogue_id: &str) -> Result<Vec<StoredWindow>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id, dialogue_id, text FROM windows WHERE dialogue_id = ?1 ORDER BY seq")
            .map_err(self.wrap())?;
        let rows = stmt
            .query_map([dialogue_id], |r| Ok(StoredWindow { id: r.get(0)?, dialogue_id: r.get(1)?, text: r.get(2)? }))
            .map_err(self.wrap())?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(self.wrap())
    }

    fn get_turn(&self, dialogue_id: &str, turn_id: &str) -> Result<Option<SourceTurn>> {
        let raw = self
            .conn
            .prepare_cached(
                "SELECT turn_id, dialogue_id, speaker, role, text, timestamp FROM turns WHERE dialogue_id = ?1 AND turn_id = ?2",
            )
            .and_then(|mut s| s.query_row([dialogue_id, turn_id], raw_turn).optional())
            .map_err(self.wrap())?;
        raw.map(|r| self.decode_turn(r)).transpose()
    }

    fn turns(&self, dialogue_id: &str) -> Result<Vec<SourceTurn>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT turn_id, dialogue_id, speaker, role, text, timestamp FROM turns WHERE dialogue_id = ?1 ORDER BY seq")
            .map_err(self.wrap())?;
        let rows = stmt.query_map([dialogue_id], raw_turn).map_err(self.wrap())?;
        let mut out = Vec::new();
        for row in rows {
            out.push(self.decode_turn(row.map_err(self.wrap())?)?);
        }
        Ok(out)
    }

    fn assistant_reply(&self, dialogue_id: &str, turn_id: &str) -> Result<Option<AssistantReply>> {
        self.conn
            .prepare_cached("SELECT dialogue_id, turn_id, reply_turn_id, text FROM replies WHERE dialogue_id = ?1 AND turn_id = ?2")
            .and_then(|mut s| {
                s.query_row([dialogue_id, turn_id], |r| {
                    Ok(AssistantReply { dialogue_id: r.get(0)?, turn_id: r.get(1)?, reply_turn_id: r.get(2)?, text: r.get(3)? })
                })
                .optional()
            })
            .map_err(self.wrap())
    }

    fn put_embeddings(&mut self, model_id: &str, vectors: &[(String, Vec<f32>)]) -> Result<()> {
        self.write(|tx, path| {
            let wrap = |source| Error::Store { path: path.to_path_buf(), source };
            let mut stmt =
                tx.prepare_cached("INSERT OR REPLACE INTO embeddings (record_id, model_id, vector) VALUES (?1, ?2, ?3)").map_err(wrap)?;
            for (id, v) in vectors {
                stmt.execute(params![id, model_id, encode_vector(v)]).map_err(wrap)?;
            }
            Ok(())
        })
    }

    fn get_embeddings(&self, model_id: &str, record_ids: &[&str]) -> Result<HashMap<String, Vec<f32>>> {
        let mut stmt =
            self.conn.prepare_cached("SELECT vector FROM embeddings WHERE record_id = ?1 AND model_id = ?2").map_err(self.wrap())?;
        let mut out = HashMap::new();
        for id in record_ids {
            let blob: Option<Vec<u8>> = stmt.query_row(params![id, model_id], |r| r.get(0)).optional().map_err(self.wrap())?;
            if let Some(blob) = blob {
                let v = decode_vector(&blob).ok_or_else(|| {
                    self.corrupt(format!("embeddings/{id}/{model_id}"), format!("blob of {} bytes is not f32s", blob.len()))
                })?;
                out.insert((*id).to_string(), v);
            }
        }
        Ok(out)
    }

    fn list_hyperedges(&self) -> Result<Vec<Hyperedge>> {
        let mut stmt = self.conn.prepare_cached("SELECT id, body FROM hyperedges ORDER BY seq").map_err(self.wrap())?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))).map_err(self.wrap())?;
        let mut out = Vec::new();
        for row in rows {
            let (id, body) = row.map_err(self.wrap())?;
            out.push(serde_json::from_str(&body).map_err(|e| self.corrupt(format!("hyperedges/{id}"), e.to_string()))?);
        }
        Ok(out)
    }

    fn put_nodes(&mut self, nodes: &[StoredNode]) -> Result<()> {
        self.write(|tx, path| {
            let wrap = |source| Error::Store { path: path.to_path_buf(), source };
            tx.execute("DELETE FROM nodes", []).map_err(wrap)?;
            let mut stmt = tx.prepare_cached("INSERT INTO nodes (kind, name, salience) VALUES (?1, ?2, ?3)").map_err(wrap)?;
            for n in nodes {
                stmt.execute(params![n.kind.as_str(), n.name, f64::from(n.salience)]).map_err(wrap)?;
            }
            Ok(())
        })
    }

    fn list_nodes(&self) -> Result<Vec<StoredNode>> {
        let mut stmt = self.conn.prepare_cached("SELECT kind, name, salience FROM nodes ORDER BY kind, name").map_err(self.wrap())?;
        let rows =
            stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, f64>(2)?))).map_err(self.wrap())?;
        let mut out = Vec::new();
        for row in rows {
            let (kind, name, salience) = row.map_err(self.wrap())?;
            let kind = NodeKind::parse(&kind)
                .ok_or_else(|| self.corrupt(format!("nodes/{kind}/{name}"), format!("unknown node kind {kind:?}")))?;
            out.push(StoredNode { kind, name, salience: salience as f32 });
        }
        // SQL sorts kinds by name; callers expect the enum order.
        out.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        Ok(out)
    }
}

type RawTurn = (String, String, String, String, String, Option<String>);

fn raw_turn(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawTurn> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
}

impl SqliteStore {
    fn decode_turn(&self, (turn_id, dialogue_id, speaker, role, text, ts): RawTurn) -> Result<SourceTurn> {
        let key = || format!("turns/{turn_id}");
        let role = match role.as_str() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => return Err(self.corrupt(key(), format!("unknown role {other:?}"))),
        };
        let timestamp = ts
            .map(|t| NaiveDateTime::parse_from_str(&t, TIMESTAMP_FORMAT).map_err(|e| self.corrupt(key(), format!("timestamp {t:?}: {e}"))))
            .transpose()?;
        Ok(SourceTurn { turn_id, dialogue_id, speaker, role, text, timestamp })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_little_endian() {
        let v = vec![1.0f32, -0.5, 3.25];
        let bytes = encode_vector(&v);
        assert_eq!(&bytes[..4], &1.0f32.to_le_bytes());
        assert_eq!(decode_vector(&bytes), Some(v));
        assert_eq!(decode_vector(&bytes[..5]), None);
    }
}
