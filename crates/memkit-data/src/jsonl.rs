//! A plain JSONL dialogue format for users' own data: one dialogue per line.
//!
//! ```json
//! {"id": "ann", "sessions": [{"id": "s1", "date": "2023-05-08T13:56:00", "turns": [
//!   {"speaker": "Ann", "role": "user", "text": "I adopted a dog last week."},
//!   {"speaker": "Bot", "role": "assistant", "text": "Congratulations!"}]}]}
//! ```
//!
//! | key | required | default |
//! |---|---|---|
//! | `id` | no | `dialogue-<line>` |
//! | `sessions[].id` | no | `S<k>` (`k` 1-based) |
//! | `sessions[].date` | no | none: turns get no timestamp unless they carry one |
//! | `turns[].id` | no | `<session id>:<n>` (`n` 1-based), e.g. `S1:3` |
//! | `turns[].speaker` | yes | |
//! | `turns[].role` | no | `user` (or `assistant`) |
//! | `turns[].text` | yes | |
//! | `turns[].caption` | no | none (an image caption, rendered as `[shares photo: …]`) |
//! | `turns[].timestamp` | no | session date + 30 s per turn index |
//! | `turns[].has_answer` | no | `false` |
//!
//! Dates and timestamps are `YYYY-MM-DDTHH:MM:SS` (a space instead of `T`, no seconds, or a
//! bare `YYYY-MM-DD` also work). Blank lines are skipped. Unknown keys are errors, so a typo
//! does not silently drop data. Writing a [`Dialogue`] with [`to_jsonl_line`] gives a line this
//! reader reads back unchanged.

use std::io::BufRead;
use std::path::Path;

use chrono::{NaiveDate, NaiveDateTime};
use memkit_schema::{Dialogue, Role, Session, Turn};
use serde_json::Value;
use tracing::instrument;

use crate::json::{At, Source};
use crate::{Error, Result, TURN_STEP_SECONDS};

const DIALOGUE_KEYS: &[&str] = &["id", "sessions"];
const SESSION_KEYS: &[&str] = &["id", "date", "turns"];
const TURN_KEYS: &[&str] = &["id", "speaker", "role", "text", "caption", "timestamp", "has_answer"];

/// Loads a JSONL dialogue file.
#[instrument]
pub fn load_jsonl(path: &Path) -> Result<Vec<Dialogue>> {
    let file = std::fs::File::open(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    read_jsonl(std::io::BufReader::new(file), path)
}

/// Reads JSONL dialogues from any reader; `name` is the file name used in errors.
pub fn read_jsonl(reader: impl BufRead, name: &Path) -> Result<Vec<Dialogue>> {
    let mut dialogues = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line_no = i + 1;
        let line = line.map_err(|source| Error::Io { path: name.to_path_buf(), source })?;
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(&line).map_err(|e| Error::json(name.to_path_buf(), line_no - 1, &e))?;
        let at = At::root(Source { file: name, line: Some(line_no) });
        dialogues.push(dialogue(&at, value, line_no)?);
    }
    Ok(dialogues)
}

/// One JSONL line (without the newline) for a dialogue.
pub fn to_jsonl_line(dialogue: &Dialogue) -> String {
    serde_json::to_string(dialogue).expect("a Dialogue always serialises")
}

/// Parses the date forms the format accepts.
pub fn parse_iso_datetime(text: &str) -> Option<NaiveDateTime> {
    let t = text.trim();
    t.parse::<NaiveDateTime>()
        .ok()
        .or_else(|| {
            ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"].iter().find_map(|f| NaiveDateTime::parse_from_str(t, f).ok())
        })
        .or_else(|| NaiveDate::parse_from_str(t, "%Y-%m-%d").ok().map(|d| d.and_time(chrono::NaiveTime::MIN)))
}

fn datetime(at: &At, v: Option<Value>) -> Result<Option<NaiveDateTime>> {
    match at.opt_string(v)? {
        None => Ok(None),
        Some(text) => parse_iso_datetime(&text)
            .map(Some)
            .ok_or_else(|| at.error(format!("cannot read date {text:?} (expected like \"2023-05-08T13:56:00\")"))),
    }
}

fn dialogue(at: &At, v: Value, line_no: usize) -> Result<Dialogue> {
    let mut m = at.object(v)?;
    let id = at.key("id").opt_string(m.remove("id"))?.unwrap_or_else(|| format!("dialogue-{line_no}"));
    let s_at = at.key("sessions");
    let raw = s_at.array(at.required(&mut m, "sessions")?)?;
    at.no_unknown_keys(&m, DIALOGUE_KEYS)?;
    let mut sessions = Vec::with_capacity(raw.len());
    for (k, s) in raw.into_iter().enumerate() {
        let at = s_at.index(k);
        let mut s = at.object(s)?;
        let id = at.key("id").opt_string(s.remove("id"))?.unwrap_or_else(|| format!("S{}", k + 1));
        let date = datetime(&at.key("date"), s.remove("date"))?;
        let t_at = at.key("turns");
        let raw_turns = t_at.array(at.required(&mut s, "turns")?)?;
        at.no_unknown_keys(&s, SESSION_KEYS)?;
        let mut turns = Vec::with_capacity(raw_turns.len());
        for (n, t) in raw_turns.into_iter().enumerate() {
            let at = t_at.index(n);
            let mut t = at.object(t)?;
            let speaker = at.key("speaker").string(at.required(&mut t, "speaker")?)?;
            let text = at.key("text").string(at.required(&mut t, "text")?)?;
            let role = match at.key("role").opt_string(t.remove("role"))?.as_deref() {
                None | Some("user") => Role::User,
                Some("assistant") => Role::Assistant,
                Some(other) => {
                    return Err(at.key("role").error(format!("expected \"user\" or \"assistant\", found {other:?}")));
                }
            };
            let turn_id = at.key("id").opt_string(t.remove("id"))?.unwrap_or_else(|| format!("{id}:{}", n + 1));
            let caption = at.key("caption").opt_string(t.remove("caption"))?;
            let timestamp = datetime(&at.key("timestamp"), t.remove("timestamp"))?
                .or_else(|| date.map(|d| d + chrono::Duration::seconds(TURN_STEP_SECONDS * n as i64)));
            let has_answer = match t.remove("has_answer") {
                None | Some(Value::Null) => false,
                Some(v) => at.key("has_answer").bool(v)?,
            };
            at.no_unknown_keys(&t, TURN_KEYS)?;
            turns.push(Turn { id: turn_id, speaker, role, text, caption, timestamp, has_answer });
        }
        sessions.push(Session { id, date, turns });
    }
    Ok(Dialogue { id, sessions })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_forms() {
        let want = NaiveDate::from_ymd_opt(2023, 5, 8).unwrap().and_hms_opt(13, 56, 0).unwrap();
        for text in ["2023-05-08T13:56:00", "2023-05-08 13:56:00", "2023-05-08T13:56", "2023-05-08 13:56"] {
            assert_eq!(parse_iso_datetime(text), Some(want), "{text}");
        }
        assert_eq!(parse_iso_datetime("2023-05-08"), Some(want.date().and_time(chrono::NaiveTime::MIN)));
        assert_eq!(parse_iso_datetime("8 May 2023"), None);
    }
}
