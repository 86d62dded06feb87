//! MemoryBank / SiliconFriend (`memory_bank_en.json`, `memory_bank_cn.json`): 15 simulated users,
//! ten dated days of user–assistant chat each. Used as training corpus, never as a benchmark
//! (it has no reference answers).
//!
//! Each user becomes a [`Dialogue`] with id `memorybank/<name>`; each day a session whose id is
//! the date (`2023-04-27`) starting at midnight; each `query`/`response` pair a user turn (speaker:
//! the user's name) and an assistant turn (speaker `assistant`). Turn ids are `<date>:<n>`, `n`
//! 1-based over the session's turns, as in LongMemEval.

use std::path::Path;

use chrono::NaiveDate;
use memkit_schema::{Dialogue, Role, Session, Turn};
use serde_json::Value;
use tracing::instrument;

use crate::json::{self, At, Source};
use crate::{Result, TURN_STEP_SECONDS};

/// Loads a MemoryBank file into one dialogue per user, in file order, sessions sorted by date.
#[instrument]
pub fn load_memorybank(path: &Path) -> Result<Vec<Dialogue>> {
    let bytes = json::read(path)?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| crate::Error::json(path.to_path_buf(), 0, &e))?;
    let root = At::root(Source { file: path, line: None });
    let users = root.object(value)?;
    let mut dialogues = Vec::with_capacity(users.len());
    for (key, user) in users {
        let u_at = root.key(&key);
        let mut user = u_at.object(user)?;
        let name = match user.remove("name") {
            None | Some(Value::Null) => key.clone(),
            Some(v) => u_at.key("name").string(v)?,
        };
        let h_at = u_at.key("history");
        let history = h_at.object(u_at.required(&mut user, "history")?)?;
        let mut sessions = Vec::with_capacity(history.len());
        for (day, pairs) in history {
            let d_at = h_at.key(&day);
            let start = NaiveDate::parse_from_str(&day, "%Y-%m-%d")
                .map_err(|_| d_at.error(format!("cannot read date key {day:?} (expected YYYY-MM-DD)")))?
                .and_time(chrono::NaiveTime::MIN);
            let mut turns = Vec::new();
            for (i, pair) in d_at.array(pairs)?.into_iter().enumerate() {
                let p_at = d_at.index(i);
                let mut pair = p_at.object(pair)?;
                let query = p_at.key("query").string(p_at.required(&mut pair, "query")?)?;
                let response = p_at.key("response").string(p_at.required(&mut pair, "response")?)?;
                for (speaker, role, text) in [(name.as_str(), Role::User, query), ("assistant", Role::Assistant, response)] {
                    let n = turns.len();
                    turns.push(Turn {
                        timestamp: Some(start + chrono::Duration::seconds(TURN_STEP_SECONDS * n as i64)),
                        ..Turn::new(format!("{day}:{}", n + 1), speaker, role, text)
                    });
                }
            }
            sessions.push(Session { id: day, date: Some(start), turns });
        }
        sessions.sort_by_key(|s| s.date);
        dialogues.push(Dialogue { id: format!("memorybank/{name}"), sessions });
    }
    tracing::debug!(users = dialogues.len(), "loaded MemoryBank");
    Ok(dialogues)
}
