//! LoCoMo-10 (`locomo10.json`): ten long two-person conversations with QA and observations.
//!
//! Sessions are the keys matching `^session_\d+$`, sorted by number (conv-26 has orphan
//! `session_N_date_time` keys without a session). Both speakers are [`Role::User`]. Each turn's
//! timestamp is the session start plus [`TURN_STEP_SECONDS`] per turn index.
//!
//! Evidence ids in the release are not all clean: some strings hold several ids (`"D8:6; D9:17"`),
//! some are misspelt (`"D:11:26"`, `"D30:05"`) and a few name turns that do not exist. Ids are
//! split, repaired when the intent is unambiguous, and dropped when they match no turn; every
//! repair and drop is listed in [`LocomoSample::warnings`] rather than failing the load.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::LazyLock;

use chrono::NaiveDateTime;
use memkit_schema::{Dialogue, Dimensions, MemoryRecord, MemoryType, Pointer, Role, Session, Turn};
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tracing::instrument;

use crate::json::{self, At, Source};
use crate::{Question, Result, TURN_STEP_SECONDS, locomo_category_name};

/// One LoCoMo conversation with its questions and observations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocomoSample {
    /// `sample_id`, e.g. `conv-26`; also the dialogue id.
    pub id: String,
    /// `speaker_a` and `speaker_b`.
    pub speakers: [String; 2],
    /// The conversation: sessions `session_1`, `session_2`, ... with turn ids `D<session>:<n>`.
    pub dialogue: Dialogue,
    /// The `qa` list, in file order (ids `<sample>/q<index>`).
    pub questions: Vec<Question>,
    /// The generated `observation` facts, by session then speaker.
    pub observations: Vec<Observation>,
    /// Evidence ids that were repaired or dropped, with their JSON path.
    pub warnings: Vec<String>,
}

/// One generated observation fact of a LoCoMo session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// Whose observation it is.
    pub speaker: String,
    /// The fact.
    pub text: String,
    /// The session (`session_3`).
    pub session_id: String,
    /// Turn ids it rests on.
    pub evidence: Vec<String>,
}

impl LocomoSample {
    /// The conversation cut to its first `n` sessions: later sessions, their observations and
    /// every question whose evidence is not entirely in the kept sessions are dropped (so are
    /// questions without evidence, which no cut can be sure of). A named subset for slow
    /// extractors: recall over it compares systems on the same questions.
    pub fn first_sessions(mut self, n: usize) -> Self {
        self.dialogue.sessions.truncate(n);
        let kept: HashSet<String> = self.dialogue.sessions.iter().map(|s| s.id.clone()).collect();
        self.observations.retain(|o| kept.contains(&o.session_id));
        self.questions.retain(|q| !q.evidence_sessions.is_empty() && q.evidence_sessions.iter().all(|s| kept.contains(s)));
        self
    }

    /// LoCoMo's observations as memory records (type `fact`, no dimensions), each pointing at
    /// its evidence turns, speaker and session date: a reference extractor.
    pub fn observation_records(&self) -> Vec<MemoryRecord> {
        let session_dates: HashMap<&str, String> = self
            .dialogue
            .sessions
            .iter()
            .map(|s| (s.id.as_str(), s.date.map(|d| d.format("%Y-%m-%dT%H:%M:%S").to_string()).unwrap_or_default()))
            .collect();
        self.observations
            .iter()
            .enumerate()
            .map(|(i, o)| MemoryRecord {
                id: format!("{}/obs{i}", self.id),
                content: o.text.clone(),
                memory_type: MemoryType::Fact,
                dims: Dimensions::default(),
                pointer: Pointer {
                    window_id: format!("{}/{}", self.id, o.session_id),
                    turn_ids: o.evidence.clone(),
                    speaker: o.speaker.clone(),
                    timestamp: session_dates.get(o.session_id.as_str()).cloned().unwrap_or_default(),
                },
            })
            .collect()
    }
}

static SESSION_KEY: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^session_(\d+)$").expect("valid regex"));
static OBSERVATION_KEY: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^session_(\d+)_observation$").expect("valid regex"));
static EVIDENCE_ID: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^D:?(\d+):(\d+)$").expect("valid regex"));

/// Loads `locomo10.json`.
#[instrument]
pub fn load_locomo(path: &Path) -> Result<Vec<LocomoSample>> {
    let bytes = json::read(path)?;
    let source = Source { file: path, line: None };
    let root = At::root(source);
    let mut samples = Vec::new();
    json::for_each_entry(path, &bytes, |i, v| {
        samples.push(sample(&root.index(i), v)?);
        Ok(())
    })?;
    tracing::debug!(samples = samples.len(), "loaded LoCoMo");
    Ok(samples)
}

/// Parses `"1:56 pm on 8 May, 2023"`.
pub fn parse_locomo_date(text: &str) -> Option<NaiveDateTime> {
    NaiveDateTime::parse_from_str(text.trim(), "%I:%M %p on %d %B, %Y").ok()
}

fn sample(at: &At, v: Value) -> Result<LocomoSample> {
    let mut m = at.object(v)?;
    let id = at.key("sample_id").string(at.required(&mut m, "sample_id")?)?;
    let conv_at = at.key("conversation");
    let mut conv = conv_at.object(at.required(&mut m, "conversation")?)?;
    let speakers = [
        conv_at.key("speaker_a").string(conv_at.required(&mut conv, "speaker_a")?)?,
        conv_at.key("speaker_b").string(conv_at.required(&mut conv, "speaker_b")?)?,
    ];
    let dialogue = Dialogue { id: id.clone(), sessions: sessions(&conv_at, conv)? };

    let mut turn_session: HashMap<&str, &str> = HashMap::new();
    for s in &dialogue.sessions {
        for t in &s.turns {
            turn_session.insert(&t.id, &s.id);
        }
    }
    let known: HashSet<&str> = turn_session.keys().copied().collect();
    let mut warnings = Vec::new();

    let qa_at = at.key("qa");
    let mut questions = Vec::new();
    for (i, q) in qa_at.array(at.required(&mut m, "qa")?)?.into_iter().enumerate() {
        let q_at = qa_at.index(i);
        let mut q = q_at.object(q)?;
        let question = q_at.key("question").string(q_at.required(&mut q, "question")?)?;
        let answer = match q.remove("answer") {
            None | Some(Value::Null) => String::new(),
            Some(v) => q_at.key("answer").string_or_number(v)?,
        };
        let category = match q.remove("category") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let c_at = q_at.key("category");
                let c = c_at.u64(v)?;
                Some(u8::try_from(c).map_err(|_| c_at.error(format!("category {c} is out of range")))?)
            }
        };
        let adversarial_answer = match q.remove("adversarial_answer") {
            None | Some(Value::Null) => None,
            Some(v) => Some(q_at.key("adversarial_answer").string_or_number(v)?),
        };
        let e_at = q_at.key("evidence");
        let raw = evidence_strings(&e_at, q.remove("evidence").unwrap_or(Value::Array(Vec::new())))?;
        let evidence = clean_evidence(raw, &known, &mut warnings);
        let mut evidence_sessions: Vec<String> = Vec::new();
        for e in &evidence {
            let s = turn_session[e.as_str()];
            if !evidence_sessions.iter().any(|x| x == s) {
                evidence_sessions.push(s.to_string());
            }
        }
        questions.push(Question {
            id: format!("{id}/q{i}"),
            question,
            answer,
            category,
            adversarial_answer,
            evidence,
            evidence_sessions,
            question_type: category.and_then(locomo_category_name).map(str::to_string),
            question_date: None,
            abstention: category == Some(5),
        });
    }

    let observations = match m.remove("observation") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => observations(&at.key("observation"), v, &known, &mut warnings)?,
    };
    for w in &warnings {
        tracing::warn!(sample = %id, "{w}");
    }
    Ok(LocomoSample { id, speakers, dialogue, questions, observations, warnings })
}

fn sessions(conv_at: &At, mut conv: Map<String, Value>) -> Result<Vec<Session>> {
    let mut numbered: Vec<(u64, String)> =
        conv.keys().filter_map(|k| SESSION_KEY.captures(k).and_then(|c| c[1].parse().ok()).map(|n| (n, k.clone()))).collect();
    numbered.sort();
    let mut sessions = Vec::with_capacity(numbered.len());
    for (n, key) in numbered {
        let s_at = conv_at.key(&key);
        let date_key = format!("{key}_date_time");
        let date = match conv.remove(&date_key) {
            None | Some(Value::Null) => {
                tracing::warn!(session = %key, "LoCoMo session has no date");
                None
            }
            Some(v) => {
                let d_at = conv_at.key(&date_key);
                let text = d_at.string(v)?;
                Some(
                    parse_locomo_date(&text)
                        .ok_or_else(|| d_at.error(format!("cannot read date {text:?} (expected like \"1:56 pm on 8 May, 2023\")")))?,
                )
            }
        };
        let raw = s_at.array(conv.remove(&key).expect("key was listed"))?;
        let mut turns = Vec::with_capacity(raw.len());
        for (i, t) in raw.into_iter().enumerate() {
            let t_at = s_at.index(i);
            let mut t = t_at.object(t)?;
            let id = t_at.key("dia_id").string(t_at.required(&mut t, "dia_id")?)?;
            let speaker = t_at.key("speaker").string(t_at.required(&mut t, "speaker")?)?;
            let text = t_at.key("text").string(t_at.required(&mut t, "text")?)?;
            let caption = t_at.key("blip_caption").opt_string(t.remove("blip_caption"))?;
            let timestamp = date.map(|d| d + chrono::Duration::seconds(TURN_STEP_SECONDS * i as i64));
            turns.push(Turn { id, speaker, role: Role::User, text, caption, timestamp, has_answer: false });
        }
        tracing::trace!(session = n, turns = turns.len());
        sessions.push(Session { id: key, date, turns });
    }
    Ok(sessions)
}

/// Evidence as found: a list of strings, or one string; each with its JSON path for warnings.
fn evidence_strings(at: &At, v: Value) -> Result<Vec<(String, String)>> {
    match v {
        Value::String(s) => Ok(vec![(s, at.path())]),
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                let item_at = at.index(i);
                Ok((item_at.string(item)?, item_at.path()))
            })
            .collect(),
        other => Err(at.error(format!("expected a list of turn ids or a string, found {}", memkit_schema::json_kind(&other)))),
    }
}

/// Splits strings holding several ids, repairs `D:11:26` and `D30:05`, drops ids that match no
/// turn, and records a warning for every repair or drop.
fn clean_evidence(raw: Vec<(String, String)>, known: &HashSet<&str>, warnings: &mut Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (text, path) in raw {
        let pieces: Vec<&str> = text.split([',', ';', ' ', '\t', '\n']).filter(|p| !p.is_empty()).collect();
        if pieces.is_empty() {
            warnings.push(format!("{path}: empty evidence id dropped"));
        }
        for piece in pieces {
            let Some(c) = EVIDENCE_ID.captures(piece) else {
                warnings.push(format!("{path}: malformed evidence id {piece:?} dropped"));
                continue;
            };
            let (Ok(session), Ok(turn)) = (c[1].parse::<u64>(), c[2].parse::<u64>()) else {
                warnings.push(format!("{path}: malformed evidence id {piece:?} dropped"));
                continue;
            };
            let id = format!("D{session}:{turn}");
            if !known.contains(id.as_str()) {
                warnings.push(format!("{path}: evidence id {piece:?} names no turn of the conversation; dropped"));
                continue;
            }
            if id != piece {
                warnings.push(format!("{path}: malformed evidence id {piece:?} read as {id:?}"));
            }
            if !out.contains(&id) {
                out.push(id);
            }
        }
    }
    out
}

fn observations(at: &At, v: Value, known: &HashSet<&str>, warnings: &mut Vec<String>) -> Result<Vec<Observation>> {
    let mut by_session = at.object(v)?;
    let mut numbered: Vec<(u64, String)> = Vec::new();
    for key in by_session.keys() {
        match OBSERVATION_KEY.captures(key).and_then(|c| c[1].parse().ok()) {
            Some(n) => numbered.push((n, key.clone())),
            None => warnings.push(format!("{}: unexpected key ignored", at.key(key).path())),
        }
    }
    numbered.sort();
    let mut out = Vec::new();
    for (n, key) in numbered {
        let s_at = at.key(&key);
        let speakers = s_at.object(by_session.remove(&key).expect("key was listed"))?;
        for (speaker, entries) in speakers {
            let sp_at = s_at.key(&speaker);
            for (i, entry) in sp_at.array(entries)?.into_iter().enumerate() {
                let e_at = sp_at.index(i);
                let mut pair = e_at.array(entry)?.into_iter();
                let (Some(text), Some(evidence), None) = (pair.next(), pair.next(), pair.next()) else {
                    return Err(e_at.error("expected [text, evidence]"));
                };
                let text = e_at.index(0).string(text)?;
                let raw = evidence_strings(&e_at.index(1), evidence)?;
                let evidence = clean_evidence(raw, known, warnings);
                out.push(Observation { speaker: speaker.clone(), text, session_id: format!("session_{n}"), evidence });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    #[test]
    fn dates_parse_in_both_halves_of_the_day() {
        let d = |y, m, day, h, min| NaiveDate::from_ymd_opt(y, m, day).unwrap().and_hms_opt(h, min, 0).unwrap();
        assert_eq!(parse_locomo_date("1:56 pm on 8 May, 2023"), Some(d(2023, 5, 8, 13, 56)));
        assert_eq!(parse_locomo_date("10:04 am on 19 December, 2023"), Some(d(2023, 12, 19, 10, 4)));
        assert_eq!(parse_locomo_date("12:09 am on 13 September, 2023"), Some(d(2023, 9, 13, 0, 9)));
        assert_eq!(parse_locomo_date("8 May 2023"), None);
    }

    #[test]
    fn evidence_is_split_repaired_and_filtered() {
        let known: HashSet<&str> = ["D1:3", "D8:6", "D9:17", "D11:26", "D30:5"].into_iter().collect();
        let mut warnings = Vec::new();
        let raw = ["D1:3", "D8:6; D9:17", "D:11:26", "D30:05", "D", "D4:36", "D1:3"]
            .iter()
            .enumerate()
            .map(|(i, s)| (s.to_string(), format!("e[{i}]")))
            .collect();
        let ids = clean_evidence(raw, &known, &mut warnings);
        assert_eq!(ids, ["D1:3", "D8:6", "D9:17", "D11:26", "D30:5"]);
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        assert!(warnings[0].starts_with("e[2]: malformed evidence id \"D:11:26\" read as \"D11:26\""));
        assert!(warnings[2].contains("\"D\" dropped"));
        assert!(warnings[3].contains("names no turn"));
    }
}
