//! A lenient, per-record parser of extractor output.
//!
//! Models wrap JSON in code fences, write prose around it, leave trailing commas, drop the
//! `memories` key, write numbers as strings, keywords as one comma-separated string, or stop in
//! the middle of a record. This parser keeps every record it can read, reports each one it cannot
//! (with its index and the reason), and never panics.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{ExtractedDimension, ExtractedMemory, MemoryType};

/// Why one record (or the whole output, `index: None`) was dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordError {
    /// Position of the record in the `memories` array; `None` for the whole output.
    pub index: Option<usize>,
    /// What kind of problem it is (callers decide on this, never on `reason`'s text).
    #[serde(default)]
    pub kind: ErrorKind,
    /// What was wrong, for people.
    pub reason: String,
    /// The raw text of the record (cut to 300 characters).
    pub raw: String,
}

/// The kinds of [`RecordError`]. The first three concern the reply as a whole: a reply with one
/// of them is incomplete, whatever records could still be read from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// No JSON, or no records array, in the reply (`index: None`).
    NotJson,
    /// The reply's JSON is broken; the records before the break were read one by one
    /// (`index: None`; the unreadable records have errors of their own).
    BrokenJson,
    /// The reply stopped at its token limit (`index: None`), or a record is cut off mid-way.
    Truncated,
    /// A record that does not fit the schema (a field of the wrong type, a missing field).
    #[default]
    Schema,
    /// A record whose `content` is empty.
    EmptyContent,
    /// A record whose `source_id` is a context-only message of the window.
    ContextSource,
    /// A record whose `source_id` is past the window's messages.
    SourcePastWindow,
    /// A record that no message of the window supports (grounding).
    Unsupported,
    /// A record whose content nearly repeats an earlier record of the same reply.
    Duplicate,
}

impl ErrorKind {
    /// The snake-case name used in JSON, ledgers and stats.
    pub fn name(self) -> &'static str {
        match self {
            Self::NotJson => "not_json",
            Self::BrokenJson => "broken_json",
            Self::Truncated => "truncated",
            Self::Schema => "schema",
            Self::EmptyContent => "empty_content",
            Self::ContextSource => "context_source",
            Self::SourcePastWindow => "source_past_window",
            Self::Unsupported => "unsupported",
            Self::Duplicate => "duplicate",
        }
    }

    /// Whether the error makes the whole reply incomplete.
    pub fn is_whole_reply(self) -> bool {
        matches!(self, Self::NotJson | Self::BrokenJson | Self::Truncated)
    }
}

/// The good records and the per-record errors.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParseOutcome {
    /// Records that parsed.
    pub records: Vec<ExtractedMemory>,
    /// Records (or the whole output) that did not.
    pub errors: Vec<RecordError>,
}

fn cut(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// The text inside the first code fence, if the output has one.
fn inside_fence(text: &str) -> Option<&str> {
    let start = text.find("```")?;
    let after = &text[start + 3..];
    let body_start = after.find('\n').map(|i| i + 1).unwrap_or(0);
    let body = &after[body_start..];
    Some(match body.find("```") {
        Some(end) => &body[..end],
        None => body,
    })
}

/// Byte index just past the bracket that closes the one at `open`, scanning strings properly;
/// `None` when the text ends first (truncated output).
fn matching_close(bytes: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_str = false;
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Removes commas that directly precede `}` or `]` (outside strings).
fn strip_trailing_commas(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let (mut in_str, mut escaped) = (false, false);
    for (i, c) in s.char_indices() {
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            out.push(c);
            continue;
        }
        if c == '"' {
            in_str = true;
        } else if c == ',' {
            let next = bytes[i + 1..].iter().find(|b| !b.is_ascii_whitespace());
            if matches!(next, Some(b'}') | Some(b']')) {
                continue;
            }
        }
        out.push(c);
    }
    out
}

/// Parses model output into records, leniently and per record.
pub fn parse_extractor_output(text: &str) -> ParseOutcome {
    let mut out = ParseOutcome::default();
    let body = inside_fence(text).filter(|b| b.contains(['{', '['])).unwrap_or(text);
    let Some(open) = body.find(['{', '[']) else {
        out.errors.push(RecordError {
            index: None,
            kind: ErrorKind::NotJson,
            reason: "no JSON object or array in the output".into(),
            raw: cut(text, 300),
        });
        return out;
    };
    let end = matching_close(body.as_bytes(), open).unwrap_or(body.len());
    let json = strip_trailing_commas(&body[open..end]);
    let items: Vec<Item> = match serde_json::from_str::<Value>(&json) {
        Ok(v) => match top_level_items(v) {
            Ok(items) => items.into_iter().enumerate().map(|(i, v)| (i, Ok(v))).collect(),
            Err(reason) => {
                out.errors.push(RecordError { index: None, kind: ErrorKind::NotJson, reason, raw: cut(&json, 300) });
                return out;
            }
        },
        Err(e) => {
            let Some(items) = salvage_objects(&json) else {
                let reason = format!("output is not valid JSON: {e}");
                out.errors.push(RecordError { index: None, kind: ErrorKind::NotJson, reason, raw: cut(&json, 300) });
                return out;
            };
            let reason = format!("output is not valid JSON ({e}); the records before the break were read one by one");
            out.errors.push(RecordError { index: None, kind: ErrorKind::BrokenJson, reason, raw: cut(&json, 300) });
            items
        }
    };
    for (index, item) in items {
        let raw = item.as_ref().map(|v| cut(&v.to_string(), 300)).unwrap_or_default();
        match item.and_then(|v| record_from_value(&v)) {
            Ok(r) => out.records.push(r),
            Err((kind, reason)) => out.errors.push(RecordError { index: Some(index), kind, reason, raw }),
        }
    }
    out
}

/// The record values of a parsed output: `{"memories": [..]}`, a bare array, one bare record, or
/// an object whose only array holds the records.
fn top_level_items(v: Value) -> Result<Vec<Value>, String> {
    match v {
        Value::Array(items) => Ok(items),
        Value::Object(mut map) => {
            if let Some(m) = map.remove("memories") {
                return match m {
                    Value::Array(items) => Ok(items),
                    Value::Null => Ok(vec![]),
                    obj @ Value::Object(_) => Ok(vec![obj]),
                    other => Err(format!("`memories` is {}, not an array", json_kind(&other))),
                };
            }
            if map.contains_key("content") {
                return Ok(vec![Value::Object(map)]);
            }
            let arrays: Vec<Value> = map.into_iter().filter_map(|(_, v)| v.is_array().then_some(v)).collect();
            match <[Value; 1]>::try_from(arrays) {
                Ok([Value::Array(items)]) => Ok(items),
                _ => Err("no `memories` array in the output".into()),
            }
        }
        other => Err(format!("output is {}, not an object", json_kind(&other))),
    }
}

/// One object of the reply's array: its position and the value, or why it is unusable.
type Item = (usize, Result<Value, (ErrorKind, String)>);

/// When the whole text does not parse (truncated, or one broken record), read each balanced
/// `{...}` object inside the records array on its own; `None` when there is no records array
/// or nothing in it. A record that does not parse is an error of kind [`ErrorKind::Schema`]
/// (invalid JSON) or [`ErrorKind::Truncated`] (cut off).
fn salvage_objects(json: &str) -> Option<Vec<Item>> {
    let bytes = json.as_bytes();
    // Records live in the first array after `"memories"`, or in the top-level array.
    let array_start = match json.find("\"memories\"") {
        Some(k) => json[k..].find('[').map(|i| k + i),
        None => json.find('['),
    };
    let array_start = array_start?;
    let mut items = Vec::new();
    let mut i = array_start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'{' => {
                let index = items.len();
                match matching_close(bytes, i) {
                    Some(end) => {
                        let parsed = serde_json::from_str::<Value>(&json[i..end])
                            .map_err(|e| (ErrorKind::Schema, format!("record is not valid JSON: {e}")));
                        items.push((index, parsed));
                        i = end;
                    }
                    None => {
                        items.push((
                            index,
                            Err((ErrorKind::Truncated, format!("record is cut off (output truncated): {}", cut(&json[i..], 120)))),
                        ));
                        break;
                    }
                }
            }
            b']' => break,
            _ => i += 1,
        }
    }
    (!items.is_empty()).then_some(items)
}

/// How an error message names a JSON value's type (`a string`, `an object`, `null`): the one
/// wording of the parser's and the dataset loaders' errors.
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A string field: strings as they are, numbers and booleans printed, null and missing empty.
fn text_field(obj: &Map<String, Value>, key: &str) -> Result<String, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.trim().to_string()),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(v.to_string()),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => Ok(a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")),
        Some(v) => Err(format!("`{key}` is {}, not a string", json_kind(v))),
    }
}

fn keywords_field(obj: &Map<String, Value>) -> Result<Vec<String>, String> {
    let words: Vec<String> = match obj.get("keywords") {
        None | Some(Value::Null) => vec![],
        Some(Value::String(s)) => s.split([',', ';']).map(str::to_string).collect(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                Value::Number(_) | Value::Bool(_) => Ok(v.to_string()),
                other => Err(format!("a keyword is {}, not a string", json_kind(other))),
            })
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(format!("`keywords` is {}, not a list", json_kind(v))),
    };
    Ok(words.into_iter().map(|w| w.trim().to_string()).filter(|w| !w.is_empty()).collect())
}

/// One record, or why not: [`ErrorKind::EmptyContent`], or [`ErrorKind::Schema`] for the rest.
fn record_from_value(v: &Value) -> Result<ExtractedMemory, (ErrorKind, String)> {
    let record = record_fields(v).map_err(|reason| (ErrorKind::Schema, reason))?;
    if record.content.is_empty() {
        return Err((ErrorKind::EmptyContent, "`content` is empty or missing".into()));
    }
    Ok(record)
}

fn record_fields(v: &Value) -> Result<ExtractedMemory, String> {
    let Value::Object(rec) = v else {
        return Err(format!("record is {}, not an object", json_kind(v)));
    };
    let source_id = match rec.get("source_id") {
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0).map(|f| f as u64))
            .ok_or_else(|| format!("`source_id` {n} is not a message number"))?,
        Some(Value::String(s)) => {
            s.trim().trim_start_matches('#').parse::<u64>().map_err(|_| format!("`source_id` {s:?} is not a message number"))?
        }
        Some(other) => return Err(format!("`source_id` is {}, not a number", json_kind(other))),
        None => return Err("`source_id` is missing".into()),
    };
    let source_id = u32::try_from(source_id).map_err(|_| format!("`source_id` {source_id} is out of range"))?;
    let content = text_field(rec, "content")?;
    // Dimensions usually sit under `dimension`; some models put them on the record itself.
    let dim = match rec.get("dimension").or_else(|| rec.get("dimensions")) {
        Some(Value::Object(d)) => d,
        Some(other) => return Err(format!("`dimension` is {}, not an object", json_kind(other))),
        None => rec,
    };
    let type_text = match text_field(dim, "memory_type")? {
        t if t.is_empty() => text_field(dim, "type")?,
        t => t,
    };
    if type_text.is_empty() {
        return Err("`memory_type` is missing".into());
    }
    let memory_type: MemoryType = type_text.parse().map_err(|e: crate::Error| e.to_string())?;
    Ok(ExtractedMemory {
        source_id,
        source_speaker: text_field(rec, "source_speaker")?,
        content,
        dimension: ExtractedDimension {
            memory_type,
            time: text_field(dim, "time")?,
            location: text_field(dim, "location")?,
            reason: text_field(dim, "reason")?,
            purpose: text_field(dim, "purpose")?,
            keywords: keywords_field(dim)?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"source_id": 3, "source_speaker": "Ann", "content": "Ann likes tea.", "dimension": {"memory_type": "profile", "time": "", "location": "", "reason": "", "purpose": "", "keywords": ["tea"]}}"#;

    #[test]
    fn kind_names_are_the_serde_names() {
        use ErrorKind::*;
        for kind in [NotJson, BrokenJson, Truncated, Schema, EmptyContent, ContextSource, SourcePastWindow, Unsupported] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.name());
        }
    }

    #[test]
    fn plain_output_parses() {
        let p = parse_extractor_output(&format!(r#"{{"memories": [{GOOD}]}}"#));
        assert_eq!(p.records.len(), 1);
        assert!(p.errors.is_empty());
        assert_eq!(p.records[0].source_id, 3);
    }

    #[test]
    fn fences_prose_and_trailing_commas_are_tolerated() {
        let text = format!("Here are the memories:\n```json\n{{\"memories\": [{GOOD},\n],}}\n```\nHope this helps!");
        let p = parse_extractor_output(&text);
        assert_eq!(p.records.len(), 1, "{:?}", p.errors);
    }

    #[test]
    fn missing_memories_key_and_bare_arrays_work() {
        assert_eq!(parse_extractor_output(&format!("[{GOOD}, {GOOD}]")).records.len(), 2);
        assert_eq!(parse_extractor_output(GOOD).records.len(), 1);
        assert_eq!(parse_extractor_output(&format!(r#"{{"records": [{GOOD}]}}"#)).records.len(), 1);
        let empty = parse_extractor_output(r#"{"memories": []}"#);
        assert!(empty.records.is_empty() && empty.errors.is_empty());
    }

    #[test]
    fn wrong_types_are_coerced_or_reported_per_record() {
        let text = r#"{"memories": [
            {"source_id": "4", "content": "Bo moved to Oslo.", "dimension": {"memory_type": "Event", "time": 2021, "keywords": "move, Oslo"}},
            {"source_id": 5, "content": "", "dimension": {"memory_type": "fact"}},
            {"source_id": 6, "content": "Bo is tall.", "dimension": {"memory_type": "opinion"}},
            {"source_id": 7, "content": "Bo has a cat.", "memory_type": "fact"}
        ]}"#;
        let p = parse_extractor_output(text);
        assert_eq!(p.records.len(), 2, "{:?}", p.errors);
        assert_eq!(p.records[0].source_id, 4);
        assert_eq!(p.records[0].dimension.time, "2021");
        assert_eq!(p.records[0].dimension.keywords, ["move", "Oslo"]);
        assert_eq!(p.records[1].dimension.memory_type, MemoryType::Fact);
        let idx: Vec<_> = p.errors.iter().map(|e| (e.index, e.kind)).collect();
        assert_eq!(idx, [(Some(1), ErrorKind::EmptyContent), (Some(2), ErrorKind::Schema)]);
    }

    #[test]
    fn truncated_output_keeps_finished_records() {
        let text = format!(r#"{{"memories": [{GOOD}, {GOOD}, {{"source_id": 9, "content": "Ann wa"#);
        let p = parse_extractor_output(&text);
        assert_eq!(p.records.len(), 2);
        // The reply as a whole is broken, and its last record is cut off.
        let kinds: Vec<_> = p.errors.iter().map(|e| (e.index, e.kind)).collect();
        assert_eq!(kinds, [(None, ErrorKind::BrokenJson), (Some(2), ErrorKind::Truncated)]);
        assert!(p.errors.iter().any(|e| e.kind.is_whole_reply() && e.index.is_none()));
    }

    #[test]
    fn no_json_is_one_whole_output_error() {
        let p = parse_extractor_output("I cannot find any memories.");
        assert!(p.records.is_empty());
        assert_eq!((p.errors[0].index, p.errors[0].kind), (None, ErrorKind::NotJson));
        // Broken JSON with nothing to salvage is one whole-output error, not a record error.
        let p = parse_extractor_output(r#"{"memories": [oops"#);
        assert_eq!(p.errors.iter().map(|e| (e.index, e.kind)).collect::<Vec<_>>(), [(None, ErrorKind::NotJson)]);
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_any_text(s in "\\PC*") {
            let _ = parse_extractor_output(&s);
        }

        #[test]
        fn never_panics_on_json_like_noise(s in r#"[\{\}\[\],:"a-z0-9 \\\n`]{0,200}"#) {
            let _ = parse_extractor_output(&s);
        }

        #[test]
        fn any_prefix_of_good_output_never_panics_and_never_invents(n in 0usize..400) {
            let full = format!(r#"{{"memories": [{GOOD}, {GOOD}]}}"#);
            let cut_at = full.char_indices().map(|(i, _)| i).nth(n).unwrap_or(full.len());
            let p = parse_extractor_output(&full[..cut_at]);
            proptest::prop_assert!(p.records.len() <= 2);
            // A reply cut anywhere before its end is known to be incomplete.
            if cut_at < full.len() {
                proptest::prop_assert!(p.errors.iter().any(|e| e.index.is_none() && e.kind.is_whole_reply()), "{:?}", p.errors);
            }
            for r in &p.records {
                proptest::prop_assert_eq!(&r.content, "Ann likes tea.");
            }
        }
    }
}
