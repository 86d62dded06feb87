//! LongMemEval (oracle and S): one question per entry, each with its own user–assistant haystack.
//!
//! Entries are read by key, so the oracle and S key orders both work. The haystack becomes a
//! [`Dialogue`] whose id is the `question_id`; sessions keep the list order (S has days in order
//! but times of day out of order, and the list order is the chronology). Turn ids are
//! `<session_id>:<n>`, `n` 1-based over all turns of the session; turn timestamps are the
//! session date plus [`TURN_STEP_SECONDS`] per turn.
//!
//! Four S haystacks repeat an identical filler session under one id; the repeat gets `#2`
//! appended to its session id (and so to its turn ids) to keep turn ids unique, with a warning.

use std::collections::HashMap;
use std::path::Path;

use chrono::NaiveDateTime;
use memkit_schema::{Dialogue, Role, Session, Turn};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::instrument;

use crate::json::{self, At, Source};
use crate::{Question, Result, TURN_STEP_SECONDS};

/// One LongMemEval question with its haystack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LongMemEvalItem {
    /// The question; `evidence` holds the `has_answer` turns, `evidence_sessions` the
    /// `answer_session_ids`.
    pub question: Question,
    /// The haystack sessions in list order.
    pub dialogue: Dialogue,
    /// Repaired oddities (repeated session ids), with their JSON path.
    pub warnings: Vec<String>,
}

/// Loads `longmemeval_oracle.json` or `longmemeval_s_cleaned*.json`.
///
/// The file is read into memory once and parsed entry by entry, so only one entry's JSON tree
/// is alive at a time.
#[instrument]
pub fn load_longmemeval(path: &Path) -> Result<Vec<LongMemEvalItem>> {
    let bytes = json::read(path)?;
    let root = At::root(Source { file: path, line: None });
    let mut items = Vec::new();
    json::for_each_entry(path, &bytes, |i, v| {
        items.push(item(&root.index(i), v)?);
        Ok(())
    })?;
    tracing::debug!(items = items.len(), "loaded LongMemEval");
    Ok(items)
}

/// Parses `"2023/05/30 (Tue) 23:40"`. The weekday must agree with the date.
pub fn parse_longmemeval_date(text: &str) -> Option<NaiveDateTime> {
    NaiveDateTime::parse_from_str(text.trim(), "%Y/%m/%d (%a) %H:%M").ok()
}

fn date(at: &At, v: Value) -> Result<NaiveDateTime> {
    let text = at.string(v)?;
    parse_longmemeval_date(&text).ok_or_else(|| at.error(format!("cannot read date {text:?} (expected like \"2023/05/30 (Tue) 23:40\")")))
}

fn string_list(at: &At, v: Value) -> Result<Vec<String>> {
    at.array(v)?.into_iter().enumerate().map(|(i, s)| at.index(i).string(s)).collect()
}

fn item(at: &At, v: Value) -> Result<LongMemEvalItem> {
    let mut m = at.object(v)?;
    let mut field = |key: &str| at.required(&mut m, key);
    let id = at.key("question_id").string(field("question_id")?)?;
    let question_type = at.key("question_type").string(field("question_type")?)?;
    let question_text = at.key("question").string(field("question")?)?;
    let answer = at.key("answer").string_or_number(field("answer")?)?;
    let question_date = date(&at.key("question_date"), field("question_date")?)?;
    let dates_at = at.key("haystack_dates");
    let dates = dates_at.array(field("haystack_dates")?)?;
    let ids = string_list(&at.key("haystack_session_ids"), field("haystack_session_ids")?)?;
    let sessions_at = at.key("haystack_sessions");
    let raw_sessions = sessions_at.array(field("haystack_sessions")?)?;
    let answer_session_ids = string_list(&at.key("answer_session_ids"), field("answer_session_ids")?)?;
    if dates.len() != ids.len() || raw_sessions.len() != ids.len() {
        return Err(at.error(format!(
            "haystack_dates ({}), haystack_session_ids ({}) and haystack_sessions ({}) must have the same length",
            dates.len(),
            ids.len(),
            raw_sessions.len()
        )));
    }

    let mut warnings = Vec::new();
    let mut sessions: Vec<Session> = Vec::with_capacity(ids.len());
    let mut evidence = Vec::new();
    let mut times_seen: HashMap<String, usize> = HashMap::new();
    for (k, ((raw_date, raw_turns), dataset_id)) in dates.into_iter().zip(raw_sessions).zip(ids).enumerate() {
        let start = date(&dates_at.index(k), raw_date)?;
        let seen = times_seen.entry(dataset_id.clone()).or_insert(0usize);
        *seen += 1;
        let repeats = *seen - 1;
        let session_id = if repeats == 0 {
            dataset_id
        } else {
            let renamed = format!("{dataset_id}#{}", repeats + 1);
            warnings.push(format!(
                "{}: session id {dataset_id:?} repeats within the haystack; renamed {renamed:?}",
                at.key("haystack_session_ids").index(k).path()
            ));
            renamed
        };
        let s_at = sessions_at.index(k);
        let raw_turns = s_at.array(raw_turns)?;
        let mut turns = Vec::with_capacity(raw_turns.len());
        for (i, t) in raw_turns.into_iter().enumerate() {
            let t_at = s_at.index(i);
            let mut t = t_at.object(t)?;
            let role_at = t_at.key("role");
            let speaker = role_at.string(t_at.required(&mut t, "role")?)?;
            let role = match speaker.as_str() {
                "user" => Role::User,
                "assistant" => Role::Assistant,
                other => return Err(role_at.error(format!("expected \"user\" or \"assistant\", found {other:?}"))),
            };
            let text = t_at.key("content").string(t_at.required(&mut t, "content")?)?;
            let has_answer = match t.remove("has_answer") {
                None | Some(Value::Null) => false,
                Some(v) => t_at.key("has_answer").bool(v)?,
            };
            let turn_id = format!("{session_id}:{}", i + 1);
            if has_answer {
                evidence.push(turn_id.clone());
            }
            turns.push(Turn {
                id: turn_id,
                speaker,
                role,
                text,
                caption: None,
                timestamp: Some(start + chrono::Duration::seconds(TURN_STEP_SECONDS * i as i64)),
                has_answer,
            });
        }
        sessions.push(Session { id: session_id, date: Some(start), turns });
    }
    for w in &warnings {
        tracing::warn!(question = %id, "{w}");
    }

    let question = Question {
        abstention: id.ends_with("_abs"),
        id: id.clone(),
        question: question_text,
        answer,
        category: None,
        adversarial_answer: None,
        evidence,
        evidence_sessions: answer_session_ids,
        question_type: Some(question_type),
        question_date: Some(question_date),
    };
    Ok(LongMemEvalItem { question, dialogue: Dialogue { id, sessions }, warnings })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    #[test]
    fn dates_parse_and_check_the_weekday() {
        let d = NaiveDate::from_ymd_opt(2023, 5, 30).unwrap().and_hms_opt(23, 40, 0).unwrap();
        assert_eq!(parse_longmemeval_date("2023/05/30 (Tue) 23:40"), Some(d));
        assert_eq!(parse_longmemeval_date("2023/05/30 (Wed) 23:40"), None);
        assert_eq!(parse_longmemeval_date("2023-05-30 23:40"), None);
    }
}
